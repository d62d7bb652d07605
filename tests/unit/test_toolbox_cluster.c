/* Description: 1-D 2-means (graybox-icl §4.2.4): the exact best cut, its means, boundary and separation; "not significant" for one-group samples (all equal, uniform, normal-like, n < 3) while two groups - also a small one among many - are found. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "unit.h"
#include "graybox/toolbox/cluster.h"

#define CHECK_NEAR(got, want, tol) do { \
	double g_ = (got), w_ = (want); \
	if (!(fabs(g_ - w_) <= (tol))) { \
		fprintf(stderr, "%s:%d: %s = %.9g, want %.9g +- %g\n", __FILE__, __LINE__, \
			#got, g_, w_, (double)(tol)); \
		exit(1); \
	} \
} while (0)

/* Brute force: the cut with the least within-group sum of squares. */
static size_t brute_best_cut(const double *s, size_t n)
{
	double best = INFINITY;
	size_t best_k = n;
	for (size_t k = 1; k < n; k++) {
		if (s[k] == s[k - 1])
			continue;
		double ml = 0, mh = 0, w = 0;
		for (size_t i = 0; i < k; i++) ml += s[i];
		for (size_t i = k; i < n; i++) mh += s[i];
		ml /= (double)k; mh /= (double)(n - k);
		for (size_t i = 0; i < k; i++) w += (s[i] - ml) * (s[i] - ml);
		for (size_t i = k; i < n; i++) w += (s[i] - mh) * (s[i] - mh);
		if (w < best - 1e-12) { best = w; best_k = k; }
	}
	return best_k;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static double uniform01(void)
{
	rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
	return (double)(rng_state >> 11) / 9007199254740992.0;
}

int main(void)
{
	struct cluster_split s;
	double scratch[4096];

	/* Empty, one value, all equal: one group, everything low. */
	CHECK(cluster_two_means(NULL, 0, NULL, &s) == 0);
	CHECK_EQ_U64(s.low_count, 0);
	CHECK(!s.significant);
	double one[] = { 7 };
	CHECK(cluster_two_means(one, 1, scratch, &s) == 0);
	CHECK_EQ_U64(s.low_count, 1);
	CHECK(!s.significant && isinf(s.boundary));
	CHECK_NEAR(s.low_mean, 7, 0);
	double same[] = { 3, 3, 3, 3, 3 };
	CHECK(cluster_two_means(same, 5, scratch, &s) == 0);
	CHECK_EQ_U64(s.low_count, 5);
	CHECK(!s.significant);
	CHECK_NEAR(s.explained, 0, 0);

	/* NaN and NULL are refused. */
	double bad[] = { 1, NAN, 2 };
	CHECK(cluster_two_means(bad, 3, scratch, &s) == -EINVAL);
	CHECK(cluster_two_means(NULL, 3, scratch, &s) == -EINVAL);

	/* Two clear groups, given out of order: hits ~1.5 us, misses ~90 us.
	 * Low {1.4, 1.5, 1.6}, mean 1.5; high {80, 90, 100}, mean 90;
	 * boundary (1.6 + 80) / 2 = 40.8.  Total SS about the mean 45.75:
	 * 3 * 44.25^2 + 0.02 + 3 * 44.25^2 + 200 = 11748.395; between =
	 * 6 * 44.25^2 = 11748.375 (well, up to the 0.02 + 200 within). */
	double two[] = { 90, 1.5, 100, 1.4, 80, 1.6 };
	CHECK(cluster_two_means(two, 6, scratch, &s) == 0);
	CHECK_EQ_U64(s.low_count, 3);
	CHECK_NEAR(s.low_mean, 1.5, 1e-12);
	CHECK_NEAR(s.high_mean, 90, 1e-12);
	CHECK_NEAR(s.boundary, 40.8, 1e-12);
	CHECK_NEAR(s.explained, 11748.375 / (11748.375 + 200.02), 1e-9);
	/* Pooled sd sqrt(200.02 / 4) = 7.0714; separation 88.5 / 7.0714. */
	CHECK_NEAR(s.separation, 88.5 / sqrt(200.02 / 4), 1e-9);
	CHECK(s.significant);
	/* scratch holds the sorted copy; the input is untouched. */
	CHECK_NEAR(scratch[0], 1.4, 0);
	CHECK_NEAR(scratch[5], 100, 0);
	CHECK_NEAR(two[0], 90, 0);

	/* A textbook case: {1, 2, 3, 10, 11, 12}: cut after 3, explained =
	 * between 6 * 4.5^2 = 121.5 over total 121.5 + 4 = 125.5. */
	double text[] = { 1, 2, 3, 10, 11, 12 };
	cluster_two_means_sorted(text, 6, &s);
	CHECK_EQ_U64(s.low_count, 3);
	CHECK_NEAR(s.explained, 121.5 / 125.5, 1e-12);
	CHECK_NEAR(s.boundary, 6.5, 0);
	CHECK_NEAR(s.separation, 9, 1e-12);   /* within SS 4, pooled sd 1 */
	CHECK(s.significant);
	/* Two values: no spread to measure, never significant. */
	double pair[] = { 1, 1000 };
	cluster_two_means_sorted(pair, 2, &s);
	CHECK_EQ_U64(s.low_count, 1);
	CHECK(!s.significant);
	/* Two constant groups: infinitely separated. */
	double flat[] = { 2, 2, 2, 9, 9 };
	cluster_two_means_sorted(flat, 5, &s);
	CHECK_EQ_U64(s.low_count, 3);
	CHECK(isinf(s.separation) && s.significant);

	/* Unequal groups: the cut is the exact optimum, as brute force finds. */
	for (int trial = 0; trial < 200; trial++) {
		size_t n = 2 + (size_t)(uniform01() * 60);
		double v[64];
		double shift = uniform01() * 10;
		for (size_t i = 0; i < n; i++)
			v[i] = (uniform01() < 0.3 ? shift : 0) + uniform01() * (1 + trial % 5);
		CHECK(cluster_two_means(v, n, scratch, &s) == 0);
		size_t want = brute_best_cut(scratch, n);
		if (want != n)
			CHECK_EQ_U64(s.low_count, want);
	}

	/* One group, with spread: not significant.  Uniform [0,1), 1000
	 * values: the best cut is near the middle, explains ~0.75, means
	 * 0.5 apart with within sd 0.5/sqrt(12): separation ~3.46. */
	for (size_t i = 0; i < 1000; i++)
		scratch[2000 + i] = uniform01();
	CHECK(cluster_two_means(scratch + 2000, 1000, scratch, &s) == 0);
	CHECK_NEAR(s.explained, 0.75, 0.02);
	CHECK_NEAR((double)s.low_count, 500, 40);
	CHECK_NEAR(s.separation, 0.5 / sqrt(1.0 / 48), 0.1);
	CHECK(!s.significant);
	/* Normal-like (sum of 12 uniforms): explains ~2/pi = 0.64, the means
	 * 2 * 0.798 sd apart, within sd sqrt(1 - 2/pi) = 0.603: 2.65. */
	for (size_t i = 0; i < 1000; i++) {
		double x = 0;
		for (int j = 0; j < 12; j++)
			x += uniform01();
		scratch[2000 + i] = x;
	}
	CHECK(cluster_two_means(scratch + 2000, 1000, scratch, &s) == 0);
	CHECK_NEAR(s.explained, 2 / M_PI, 0.03);
	CHECK_NEAR(s.separation, 2 * sqrt(2 / M_PI) / sqrt(1 - 2 / M_PI), 0.15);
	CHECK(!s.significant);
	/* All hits on a log scale (ln ns ~ 7.3 +- 0.1 sd, uniform) with a
	 * few misses among 100 at ln(60 us) = 11.0: three misses are a group
	 * 3.7 / 0.1 = 37 sd away, whatever the proportion. */
	for (size_t i = 0; i < 100; i++)
		scratch[2000 + i] = 7.3 + (uniform01() - 0.5) * 0.35;
	scratch[2000 + 57] = scratch[2000 + 12] = scratch[2000 + 90] = 11.0;
	CHECK(cluster_two_means(scratch + 2000, 100, scratch, &s) == 0);
	CHECK_EQ_U64(s.low_count, 97);
	CHECK(s.significant);
	scratch[2000 + 57] = scratch[2000 + 12] = scratch[2000 + 90] = 7.3;
	/* The same hits with as many misses (ln ns ~ 11.4 +- 0.5): two groups,
	 * cut exactly between them. */
	for (size_t i = 0; i < 100; i++)
		scratch[2100 + i] = 11.4 + (uniform01() - 0.5) * 1.7;
	scratch[2000 + 57] = 7.3;
	CHECK(cluster_two_means(scratch + 2000, 200, scratch, &s) == 0);
	CHECK_EQ_U64(s.low_count, 100);
	CHECK(s.significant);
	CHECK(s.boundary > 7.5 && s.boundary < 10.6);

	/* Large values with a small spread: centring keeps the precision. */
	double big[] = { 1e12, 1e12 + 1, 1e12 + 100, 1e12 + 101 };
	cluster_two_means_sorted(big, 4, &s);
	CHECK_EQ_U64(s.low_count, 2);
	CHECK_NEAR(s.boundary, 1e12 + 50.5, 1e-3);
	CHECK(s.significant);
	return 0;
}
