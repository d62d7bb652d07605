/* Description: MS Manners sign test (§4.2, §6.1): thresholds against exact binomial tails (integer combinatorics and lgamma), eq. 1's m, and judgments on synthetic sequences. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "unit.h"
#include "manners/sign_test.h"

/* Exact tails as integers: numerator over 2^n (p = 1/2), exact for n <= 60. */
static uint64_t choose(int n, int k)
{
	uint64_t c = 1;
	for (int i = 1; i <= k; i++)
		c = c * (uint64_t)(n - k + i) / (uint64_t)i; /* exact at every step */
	return c;
}

/* P(R >= r | n, 1/2) <= limit, decided in integers: count <= limit * 2^n. */
static int upper_tail_at_most(int n, int r, double limit)
{
	uint64_t count = 0;
	for (int k = r; k <= n; k++)
		count += choose(n, k);
	return (long double)count <= (long double)limit * ldexpl(1.0L, n);
}

static int lower_tail_at_most(int n, int r, double limit)
{
	uint64_t count = 0;
	for (int k = 0; k <= r; k++)
		count += choose(n, k);
	return (long double)count <= (long double)limit * ldexpl(1.0L, n);
}

/* The table's thresholds are the least / greatest r that pass, n <= 60. */
static void check_exact_small(const struct manners_sign_table *t)
{
	for (int n = 1; n <= 60; n++) {
		int pm = t->poor_min[n], gm = t->good_max[n];
		if (pm <= n)
			CHECK(upper_tail_at_most(n, pm, t->alpha));
		if (pm - 1 >= 0)
			CHECK(!upper_tail_at_most(n, pm - 1, t->alpha));
		if (gm >= 0)
			CHECK(lower_tail_at_most(n, gm, t->beta));
		if (gm + 1 <= n)
			CHECK(!lower_tail_at_most(n, gm + 1, t->beta));
	}
}

/* log P(R = k | n, p) by lgamma: an independent route for large n. */
static double log_pmf(int n, int k, double p)
{
	return lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0) + k * log(p) +
	       (n - k) * log1p(-p);
}

static double tail_ge(int n, int r, double p)
{
	double s = 0;
	for (int k = r; k <= n; k++)
		s += exp(log_pmf(n, k, p));
	return s;
}

static double tail_le(int n, int r, double p)
{
	double s = 0;
	for (int k = 0; k <= r; k++)
		s += exp(log_pmf(n, k, p));
	return s;
}

/* Up to n_max, by lgamma, except where a tail is within 1e-9 of its limit. */
static void check_lgamma_large(const struct manners_sign_table *t)
{
	for (int n = 61; n <= t->n_max; n += (n < 200 ? 1 : 7)) {
		int pm = t->poor_min[n], gm = t->good_max[n];
		CHECK(pm >= 1 && pm <= n);
		CHECK(gm >= 0 && gm < n);
		double a_in = tail_ge(n, pm, 0.5), a_out = tail_ge(n, pm - 1, 0.5);
		CHECK(a_in <= t->alpha * (1 + 1e-9));
		CHECK(a_out > t->alpha * (1 - 1e-9));
		double b_in = tail_le(n, gm, t->p1), b_out = tail_le(n, gm + 1, t->p1);
		CHECK(b_in <= t->beta * (1 + 1e-9));
		CHECK(b_out > t->beta * (1 - 1e-9));
	}
}

static void test_known_values(void)
{
	struct manners_sign_table t;
	CHECK(manners_sign_table_init(&t, 0.05, 0.2, 0.5, MANNERS_SIGN_N_MAX) == 0);
	/* By hand from C(n, k) / 2^n: */
	CHECK(t.poor_min[4] == 5);  /* 1/16 > 0.05: never poor at n = 4 */
	CHECK(t.poor_min[5] == 5);  /* 1/32 */
	CHECK(t.poor_min[10] == 9); /* P(>=9) = 11/1024 = .0107, P(>=8) = 56/1024 = .0547 */
	CHECK(t.poor_min[20] == 15); /* P(>=15) = .0207, P(>=14) = .0577 */
	CHECK(t.good_max[2] == -1); /* 1/4 > 0.2 */
	CHECK(t.good_max[3] == 0);  /* 1/8 */
	CHECK(t.good_max[10] == 3); /* P(<=3) = 176/1024 = .172, P(<=4) = 386/1024 = .377 */
	CHECK(manners_sign_min_poor_samples(&t) == 5); /* eq. 1: ceil(-log2 .05) = 5 */
	check_exact_small(&t);
	check_lgamma_large(&t);
	/* The binomial at n = 1000 around its centre: poor needs about n/2 + 1.645 sqrt(n)/2. */
	CHECK(t.poor_min[1000] >= 525 && t.poor_min[1000] <= 528);
	CHECK(t.good_max[1000] >= 484 && t.good_max[1000] <= 487);
}

/* Eq. 1: m = ceil(-log2 alpha), for several alpha, including an exact power of 2. */
static void test_eq1(void)
{
	const double alphas[] = { 0.05, 0.01, 0.1, 0.03125, 0.001, 0.2 };
	for (size_t i = 0; i < sizeof alphas / sizeof alphas[0]; i++) {
		struct manners_sign_table t;
		CHECK(manners_sign_table_init(&t, alphas[i], 0.5, 0.5, 200) == 0);
		int m = (int)ceil(-log2(alphas[i]));
		CHECK(manners_sign_min_poor_samples(&t) == m);
		check_exact_small(&t);
	}
}

/* A stated shift, p1 = 0.75: exact as integers over 4^n, n <= 30. */
static void test_shifted_alternative(void)
{
	struct manners_sign_table t;
	CHECK(manners_sign_table_init(&t, 0.05, 0.2, 0.75, 300) == 0);
	for (int n = 1; n <= 30; n++) {
		/* P(R <= r | n, 3/4) = sum C(n,k) 3^k / 4^n */
		uint64_t cum[31], pow3 = 1, total = (uint64_t)1 << (2 * n), acc = 0;
		for (int k = 0; k <= n; k++) {
			acc += choose(n, k) * pow3;
			cum[k] = acc;
			pow3 *= 3;
		}
		CHECK(acc == total);
		int gm = t.good_max[n];
		if (gm >= 0)
			CHECK((long double)cum[gm] <= 0.2L * (long double)total);
		if (gm + 1 <= n)
			CHECK((long double)cum[gm + 1] > 0.2L * (long double)total);
	}
	check_lgamma_large(&t);
	/* Against a real shift, good comes sooner than against a marginal one. */
	struct manners_sign_table marginal;
	CHECK(manners_sign_table_init(&marginal, 0.05, 0.2, 0.5, 300) == 0);
	for (int n = 1; n <= 300; n++)
		CHECK(t.good_max[n] >= marginal.good_max[n]);
	CHECK(t.good_max[10] > marginal.good_max[10]);
}

static void test_bad_input(void)
{
	struct manners_sign_table t;
	CHECK(manners_sign_table_init(NULL, 0.05, 0.2, 0.5, 100) == -EINVAL);
	CHECK(manners_sign_table_init(&t, 0.0, 0.2, 0.5, 100) == -EINVAL);
	CHECK(manners_sign_table_init(&t, 0.3, 0.2, 0.5, 100) == -EINVAL); /* alpha >= beta */
	CHECK(manners_sign_table_init(&t, 0.05, 1.0, 0.5, 100) == -EINVAL);
	CHECK(manners_sign_table_init(&t, NAN, 0.2, 0.5, 100) == -EINVAL);
	CHECK(manners_sign_table_init(&t, 0.05, 0.2, 0.4, 100) == -EINVAL);
	CHECK(manners_sign_table_init(&t, 0.05, 0.2, 0.5, 0) == -EINVAL);
	CHECK(manners_sign_table_init(&t, 0.05, 0.2, 0.5, MANNERS_SIGN_N_MAX + 1) == -EINVAL);
	struct manners_sign_test s;
	manners_sign_reset(&s);
	/* The failed init above left the table unusable, not half-filled. */
	CHECK(manners_sign_feed(&s, &t, 1) == -EINVAL);
	CHECK(manners_sign_feed(NULL, &t, 1) == -EINVAL);
	CHECK(manners_sign_min_poor_samples(&t) == -EINVAL);
}

/* Deterministic xorshift64*, uniform in [0, 1). */
static uint64_t rng_state = 88172645463325252ULL;
static double uniform(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

struct tally {
	long feeds, unknown, good, poor, samples_to_judgment;
};

/* Feeds `feeds` comparisons, each below with probability p_below. */
static struct tally run(const struct manners_sign_table *t, double p_below, long feeds)
{
	struct manners_sign_test s;
	struct tally out = { 0, 0, 0, 0, 0 };
	manners_sign_reset(&s);
	for (long i = 0; i < feeds; i++) {
		int j = manners_sign_feed(&s, t, uniform() < p_below);
		CHECK(j >= 0);
		out.feeds++;
		if (j == MANNERS_UNKNOWN) {
			out.unknown++;
			continue;
		}
		CHECK(s.n == 0 && s.below == 0); /* reset after a judgment */
		out.samples_to_judgment += s.last_n;
		if (j == MANNERS_GOOD)
			out.good++;
		else
			out.poor++;
	}
	return out;
}

static void test_sequences(void)
{
	struct manners_sign_table t;
	CHECK(manners_sign_table_init(&t, 0.05, 0.2, 0.5, MANNERS_SIGN_N_MAX) == 0);

	/* All below: poor at exactly n = m = 5, every time. */
	struct manners_sign_test s;
	manners_sign_reset(&s);
	for (int round = 0; round < 3; round++) {
		for (int i = 1; i <= 4; i++)
			CHECK(manners_sign_feed(&s, &t, 1) == MANNERS_UNKNOWN);
		CHECK(manners_sign_feed(&s, &t, 1) == MANNERS_POOR);
		CHECK(s.last_n == 5);
	}
	/* All at or above: good at n = 3. */
	CHECK(manners_sign_feed(&s, &t, 0) == MANNERS_UNKNOWN);
	CHECK(manners_sign_feed(&s, &t, 0) == MANNERS_UNKNOWN);
	CHECK(manners_sign_feed(&s, &t, 0) == MANNERS_GOOD);
	CHECK(s.last_n == 3);
	/* One above among the belows delays poor: 4 of 5 is not enough, 6 of 7 is
	 * (P(>=6 | 7) = 8/128 = .0625 > .05, so 7 of 8: P(>=7 | 8) = 9/256 = .035). */
	manners_sign_reset(&s);
	CHECK(manners_sign_feed(&s, &t, 0) == MANNERS_UNKNOWN);
	for (int i = 2; i <= 7; i++)
		CHECK(manners_sign_feed(&s, &t, 1) == MANNERS_UNKNOWN);
	CHECK(manners_sign_feed(&s, &t, 1) == MANNERS_POOR);
	CHECK(s.last_n == 8);

	/* Clearly poor (90 % below): almost all judgments poor, within ~6 samples. */
	struct tally poor = run(&t, 0.9, 100000);
	CHECK(poor.poor > 0.97 * (double)(poor.poor + poor.good));
	CHECK((double)poor.samples_to_judgment / (double)(poor.poor + poor.good) < 7.0);
	/* Clearly good (10 % below): almost all good, within ~4. */
	struct tally good = run(&t, 0.1, 100000);
	CHECK(good.good > 0.99 * (double)(good.poor + good.good));
	CHECK((double)good.samples_to_judgment / (double)(good.poor + good.good) < 4.0);
	/* Exactly at target (50/50): most testpoints undecided, and poor judgments
	 * rare beside good ones, the birth-death system of eq. 2 and 3. */
	struct tally even = run(&t, 0.5, 200000);
	CHECK(even.unknown > 0.6 * (double)even.feeds);
	CHECK(even.poor < even.good);
	fprintf(stderr, "50/50: %.1f %% unknown, %ld good, %ld poor, %.1f samples per judgment\n",
		100.0 * (double)even.unknown / (double)even.feeds, even.good, even.poor,
		(double)even.samples_to_judgment / (double)(even.good + even.poor));
}

/* A sample that reaches n_max undecided starts over (n_max = 4 here). */
static void test_n_max_restart(void)
{
	struct manners_sign_table t;
	CHECK(manners_sign_table_init(&t, 0.05, 0.2, 0.5, 4) == 0);
	struct manners_sign_test s;
	manners_sign_reset(&s);
	/* 1,0,1,0: at n = 3 r = 2, at n = 4 r = 2: undecided throughout; n = 4 is n_max. */
	CHECK(manners_sign_feed(&s, &t, 1) == MANNERS_UNKNOWN);
	CHECK(manners_sign_feed(&s, &t, 0) == MANNERS_UNKNOWN);
	CHECK(manners_sign_feed(&s, &t, 1) == MANNERS_UNKNOWN);
	CHECK(manners_sign_feed(&s, &t, 0) == MANNERS_UNKNOWN);
	CHECK(s.n == 0 && s.below == 0);
	/* The next sample is fresh: three above is good. */
	CHECK(manners_sign_feed(&s, &t, 0) == MANNERS_UNKNOWN);
	CHECK(manners_sign_feed(&s, &t, 0) == MANNERS_UNKNOWN);
	CHECK(manners_sign_feed(&s, &t, 0) == MANNERS_GOOD);
}

int main(void)
{
	test_known_values();
	test_eq1();
	test_shifted_alternative();
	test_bad_input();
	test_sequences();
	test_n_max_restart();
	return 0;
}
