/*
 * sign_test.c - paired-sample sign test for MS Manners' rate comparator
 * (MS Manners §4.2, §6.1; the scheme and its choices are in sign_test.h).
 *
 * The binomial probabilities.  Row n of the pmf is built from row n - 1 in
 * place, P_n(k) = p P_{n-1}(k-1) + q P_{n-1}(k), going down in k so that
 * each P_{n-1}(k-1) is still the old value when it is read.  Every step is a
 * convex combination of non-negative numbers, so no cancellation and no
 * overflow; at p = 1/2 the smallest value, 2^-1000, is still a normal
 * double.  Nothing here needs libm, which matters: this file is linked into
 * the preloaded agent, built with -z defs and without -lm.
 *
 * Ties.  A tail that equals alpha (or beta) in exact arithmetic, such as
 * 2^-5 = 0.03125 for alpha = 0.03125, must count as "<=" whatever the
 * rounding of the sum, so the comparison allows a relative 1e-12.
 */
#include <errno.h>
#include <stddef.h>

#include "manners/sign_test.h"

#define TIE_SLACK (1.0 + 1e-12)

/* Advances the pmf row from n - 1 to n trials. */
static void binomial_row_step(double *row, int n, double p)
{
	double q = 1.0 - p;
	row[n] = p * row[n - 1];
	for (int k = n - 1; k >= 1; k--)
		row[k] = p * row[k - 1] + q * row[k];
	row[0] = q * row[0];
}

/* Least r with P(R >= r) <= limit; n + 1 if even r = n fails. */
static int upper_tail_threshold(const double *row, int n, double limit)
{
	double tail = 0.0;
	int r = n + 1;
	for (int k = n; k >= 0; k--) {
		tail += row[k];
		if (tail > limit * TIE_SLACK)
			break;
		r = k;
	}
	return r;
}

/* Greatest r with P(R <= r) <= limit; -1 if even r = 0 fails. */
static int lower_tail_threshold(const double *row, int n, double limit)
{
	double tail = 0.0;
	int r = -1;
	for (int k = 0; k <= n; k++) {
		tail += row[k];
		if (tail > limit * TIE_SLACK)
			break;
		r = k;
	}
	return r;
}

int manners_sign_table_init(struct manners_sign_table *table, double alpha, double beta,
			    double p1, int n_max)
{
	if (table == NULL)
		return -EINVAL;
	table->n_max = 0; /* unusable until filled */
	/* The negated forms also reject NaN. */
	if (!(alpha > 0.0 && alpha < 1.0) || !(beta > 0.0 && beta < 1.0) || !(alpha < beta))
		return -EINVAL;
	if (!(p1 >= 0.5 && p1 < 1.0))
		return -EINVAL;
	if (n_max < 1 || n_max > MANNERS_SIGN_N_MAX)
		return -EINVAL;

	/* 8 KiB of stack, once per table. */
	double row[MANNERS_SIGN_N_MAX + 1];

	row[0] = 1.0;
	table->poor_min[0] = 1; /* no data: never poor */
	for (int n = 1; n <= n_max; n++) {
		binomial_row_step(row, n, 0.5);
		table->poor_min[n] = (int16_t)upper_tail_threshold(row, n, alpha);
	}
	row[0] = 1.0;
	table->good_max[0] = -1; /* ... and never good */
	for (int n = 1; n <= n_max; n++) {
		binomial_row_step(row, n, p1);
		table->good_max[n] = (int16_t)lower_tail_threshold(row, n, beta);
	}
	table->alpha = alpha;
	table->beta = beta;
	table->p1 = p1;
	table->n_max = n_max;
	return 0;
}

void manners_sign_reset(struct manners_sign_test *test)
{
	if (test == NULL)
		return;
	test->n = 0;
	test->below = 0;
	test->last_n = 0;
}

int manners_sign_feed(struct manners_sign_test *test, const struct manners_sign_table *table,
		      int below)
{
	if (test == NULL || table == NULL || table->n_max < 1)
		return -EINVAL;
	/* A damaged sample (n out of the table) starts over rather than index out. */
	if (test->n < 0 || test->n >= table->n_max || test->below < 0 || test->below > test->n) {
		test->n = 0;
		test->below = 0;
	}
	test->n++;
	if (below)
		test->below++;

	int n = test->n, r = test->below;
	enum manners_judgment judgment = MANNERS_UNKNOWN;
	/*
	 * Poor first: with p1 > 1/2 both tests can pass at once for large n, and
	 * then deferring is the safe side (the background's job is to defer).
	 * At p1 = 1/2 they never both pass: the two tails at one r sum to more
	 * than 1 > alpha + beta.
	 */
	if (r >= table->poor_min[n])
		judgment = MANNERS_POOR;
	else if (r <= table->good_max[n])
		judgment = MANNERS_GOOD;

	if (judgment != MANNERS_UNKNOWN) {
		test->last_n = n;
		test->n = 0;
		test->below = 0;
	} else if (n >= table->n_max) {
		/* Undecided at the end of the table: begin a new sample. */
		test->n = 0;
		test->below = 0;
	}
	return (int)judgment;
}

int manners_sign_min_poor_samples(const struct manners_sign_table *table)
{
	if (table == NULL || table->n_max < 1)
		return -EINVAL;
	for (int n = 1; n <= table->n_max; n++)
		if (table->poor_min[n] <= n)
			return n;
	return -ERANGE;
}
