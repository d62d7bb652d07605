/*
 * sign_test.h - MS Manners' statistical rate comparator: a paired-sample
 * sign test (MS Manners §4.2, §6.1).
 *
 * Each testpoint gives one paired comparison: the measured progress rate
 * against its own target (the target of its phase, §4.4, or the target
 * duration of concurrent metrics, §4.4 and eq. 8).  The test sees only the
 * sign: "below" (rate under target, duration over target) or not.  With n
 * comparisons of which r were below, the paper judges (§6.1):
 *     poor     when r is above a threshold that depends on n and alpha,
 *     good     when r is under a threshold that depends on n and beta,
 *     unknown  in between: the process runs on to its next testpoint and
 *              the suspension time is kept (§4.2).
 *
 * The scheme, as the paper has it.  §4.2 keeps collecting measurements
 * "until it has enough data to confidently make a judgment", and §6.1 gives
 * fixed-n thresholds as functions of n.  So the comparator re-applies the
 * fixed-n sign test at n = 1, 2, 3, ... on the growing sample and stops at
 * the first n where it decides; after a judgment it starts a new sample.
 * This is a repeated fixed-sample test, not Wald's SPRT, and the paper makes
 * no correction for the repeated looks; neither do we.
 *
 * The proportions.  Under "progress exactly at target" each comparison is
 * below with probability 1/2: the sign test's null hypothesis.  The paper
 * pins this down with eq. 1: the least n that can ever judge poor is
 * m = ceil(-log2 alpha), which is the n where n below out of n has
 * probability 2^-n <= alpha under p = 1/2.  For beta the paper names no
 * alternative proportion: beta is "the probability that a marginally poor
 * progress rate will be judged incorrectly to be good" (§6.1), and a
 * marginally poor rate is p -> 1/2 from above.  So both thresholds come
 * from Binomial(n, 1/2):
 *     poor when  P(R >= r | n, 1/2) <= alpha     (upper tail)
 *     good when  P(R <= r | n, p1)  <= beta      (lower tail), p1 = 1/2
 * With alpha = 0.05 and beta = 0.2 the first possible poor judgment is at
 * n = 5 (5 of 5 below) and the first possible good one at n = 3 (0 of 3).
 * p1 is configurable (p1 > 1/2 tests against a stated shift of the
 * proportion instead of the marginal one); the default is the paper's.
 *
 * The thresholds are computed once, from exact binomial tail sums in
 * double, for every n up to n_max; they are never hand-tabulated.  A sample
 * that reaches n_max undecided is dropped and a new one begun (the paper
 * does not say; with p1 = 1/2 it takes a sample very close to 50/50 to get
 * there, and restarting keeps each sample's error rates those of the table).
 */
#ifndef DISCNICE_MANNERS_SIGN_TEST_H
#define DISCNICE_MANNERS_SIGN_TEST_H

#include <stdint.h>

/* Largest sample the thresholds are computed for. */
#define MANNERS_SIGN_N_MAX 1000

#define MANNERS_SIGN_ALPHA_DEFAULT 0.05 /* §6.1 */
#define MANNERS_SIGN_BETA_DEFAULT  0.2  /* §6.1 */
#define MANNERS_SIGN_P1_DEFAULT    0.5  /* "marginally poor", §6.1 */

enum manners_judgment {
	MANNERS_UNKNOWN = 0, /* not enough data yet: run on, keep the suspension */
	MANNERS_GOOD = 1,    /* at or above target: reset the suspension */
	MANNERS_POOR = 2,    /* below target: double the suspension and wait */
};

/*
 * The decision thresholds for n = 0 .. n_max, shared read-only by any number
 * of comparators (one per thread, §4.5).  For a sample of n:
 *     poor_min[n]  least r with P(R >= r | n, 1/2) <= alpha (n + 1: none)
 *     good_max[n]  greatest r with P(R <= r | n, p1) <= beta (-1: none)
 */
struct manners_sign_table {
	double alpha, beta, p1;
	int n_max;
	int16_t poor_min[MANNERS_SIGN_N_MAX + 1];
	int16_t good_max[MANNERS_SIGN_N_MAX + 1];
};

/* One comparator's sample so far. */
struct manners_sign_test {
	int n;      /* comparisons in the current sample */
	int below;  /* of which below target */
	int last_n; /* size of the sample that gave the last judgment */
};

/*
 * Computes the thresholds.  alpha and beta in (0, 1), alpha < beta (eq. 3:
 * the suspension state is unstable otherwise), p1 in [1/2, 1), n_max in
 * 1 .. MANNERS_SIGN_N_MAX.  Returns 0 or -EINVAL (table left unusable).
 */
int manners_sign_table_init(struct manners_sign_table *table, double alpha, double beta,
			    double p1, int n_max);

/* An empty sample. */
void manners_sign_reset(struct manners_sign_test *test);

/*
 * Adds one comparison (below != 0: this testpoint's rate was under its
 * target) and returns the judgment on the sample so far.  After GOOD or POOR
 * the sample is emptied, so the next comparison starts a new one (§4.2).
 * Returns -EINVAL for a NULL argument or an uninitialised table.
 */
int manners_sign_feed(struct manners_sign_test *test, const struct manners_sign_table *table,
		      int below);

/* Least n at which a judgment of poor is possible: eq. 1's m. */
int manners_sign_min_poor_samples(const struct manners_sign_table *table);

#endif
