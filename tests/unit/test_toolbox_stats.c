/* Description: gray toolbox statistics (graybox-icl §5) - Welford mean/variance/min/max against hand-computed values and a cancellation-prone stream, nearest-rank percentiles, median, MAD, outlier rejection, and the fast/slow boundary with and without overlap. */
#include <math.h>
#include <string.h>

#include "graybox/toolbox/stats.h"
#include "graybox/toolbox/timer.h"
#include "unit.h"

static int close_to(double got, double want, double tolerance)
{
	return fabs(got - want) <= tolerance;
}

static void test_running(void)
{
	struct stats_running s;
	stats_running_init(&s);
	CHECK(s.count == 0 && stats_running_variance(&s) == 0.0);
	/* 2 4 4 4 5 5 7 9: mean 5, sum of squared deviations 32,
	 * sample variance 32/7. */
	const double values[] = { 2, 4, 4, 4, 5, 5, 7, 9 };
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
		stats_running_add(&s, values[i]);
	CHECK_EQ_U64(s.count, 8);
	CHECK(close_to(s.mean, 5.0, 1e-12));
	CHECK(close_to(stats_running_variance(&s), 32.0 / 7.0, 1e-12));
	CHECK(close_to(stats_running_stddev(&s), sqrt(32.0 / 7.0), 1e-12));
	CHECK(s.min == 2.0 && s.max == 9.0);
	for (double v = 1e-6; v < 1e12; v *= 7.3) {
		struct stats_running two;
		stats_running_init(&two);
		stats_running_add(&two, 0.0);
		stats_running_add(&two, sqrt(2.0 * v));   /* variance v */
		CHECK(close_to(stats_running_stddev(&two), sqrt(v), 1e-12 * sqrt(v) + 1e-15));
	}

	/* One value: variance 0, min = max = it. */
	stats_running_init(&s);
	stats_running_add(&s, -3.5);
	CHECK(s.min == -3.5 && s.max == -3.5 && stats_running_variance(&s) == 0.0);

	/* 1e9 + {0, 1, 2} a million times: the naive sum(x^2)/n - mean^2
	 * loses everything here (1e18 against a variance near 0.67);
	 * Welford keeps it. */
	stats_running_init(&s);
	for (int i = 0; i < 1000000; i++)
		stats_running_add(&s, 1e9 + (double)(i % 3));
	CHECK(close_to(s.mean, 1e9 + 1.0, 1e-3));
	CHECK(close_to(stats_running_variance(&s), 2.0 / 3.0, 1e-4));
}

static void test_order(void)
{
	uint64_t v[] = { 9, 1, 8, 2, 7, 3, 6, 4, 5, 10 };
	stats_sort_u64(v, 10);
	for (unsigned i = 0; i < 10; i++)
		CHECK_EQ_U64(v[i], i + 1);
	/* Nearest rank: ceil(n * p / 100)-th value. */
	CHECK_EQ_U64(stats_percentile_u64(v, 10, 0), 1);
	CHECK_EQ_U64(stats_percentile_u64(v, 10, 10), 1);
	CHECK_EQ_U64(stats_percentile_u64(v, 10, 11), 2);
	CHECK_EQ_U64(stats_percentile_u64(v, 10, 50), 5);
	CHECK_EQ_U64(stats_percentile_u64(v, 10, 90), 9);
	CHECK_EQ_U64(stats_percentile_u64(v, 10, 99), 10);
	CHECK_EQ_U64(stats_percentile_u64(v, 10, 100), 10);
	CHECK_EQ_U64(stats_percentile_u64(v, 10, 250), 10);
	CHECK_EQ_U64(stats_percentile_u64(v, 0, 50), 0);
	CHECK_EQ_U64(stats_median_u64(v, 10), 5);      /* (5 + 6) / 2 rounded down */
	CHECK_EQ_U64(stats_median_u64(v, 9), 5);
	CHECK_EQ_U64(stats_median_u64(v, 1), 1);
	CHECK_EQ_U64(stats_median_u64(v, 0), 0);
	uint64_t big[] = { UINT64_MAX - 2, UINT64_MAX };
	CHECK_EQ_U64(stats_median_u64(big, 2), UINT64_MAX - 1);   /* no overflow */
}

static void test_outliers(void)
{
	/* 1 2 3 4 100: median 3, deviations 2 1 0 1 97 -> sorted 0 1 1 2 97,
	 * MAD 1. */
	uint64_t a[] = { 1, 2, 3, 4, 100 };
	CHECK_EQ_U64(stats_mad_u64(a, 5), 1);
	/* With k = 3: keep [0, 6], so 100 goes. */
	CHECK_EQ_U64(stats_reject_outliers_u64(a, 5, 3.0), 4);
	CHECK(a[0] == 1 && a[1] == 2 && a[2] == 3 && a[3] == 4);

	/* Even count: 10 20 30 40 50 1000, median 35, deviations
	 * 25 15 5 5 15 965 -> 5 5 15 15 25 965, MAD (15 + 15) / 2 = 15. */
	uint64_t b[] = { 10, 20, 30, 40, 50, 1000 };
	CHECK_EQ_U64(stats_mad_u64(b, 6), 15);
	CHECK_EQ_U64(stats_reject_outliers_u64(b, 6, 2.0), 5);   /* keep 35 +- 30 */
	CHECK_EQ_U64(b[4], 50);

	/* A lopsided set: 1 1 1 1 2 50 60 70 80: median 2, deviations
	 * 1 1 1 1 0 48 58 68 78 -> MAD 1 (the merge must take four from
	 * below before any from above). */
	uint64_t c[] = { 1, 1, 1, 1, 2, 50, 60, 70, 80 };
	CHECK_EQ_U64(stats_mad_u64(c, 9), 1);

	/* All equal: MAD 0, still keeps them all (room at least 1). */
	uint64_t d[] = { 7, 7, 7, 7 };
	CHECK_EQ_U64(stats_mad_u64(d, 4), 0);
	CHECK_EQ_U64(stats_reject_outliers_u64(d, 4, 3.0), 4);

	/* Probe-like times: 200 hits near 1000 ns and three preempted
	 * ones at 5-9 ms: the outliers go, every hit stays. */
	uint64_t t[203];
	for (unsigned i = 0; i < 200; i++)
		t[i] = 950 + (i * 37) % 101;
	t[200] = 5000000;
	t[201] = 7000000;
	t[202] = 9000000;
	stats_sort_u64(t, 203);
	CHECK_EQ_U64(stats_reject_outliers_u64(t, 203, 5.0), 200);
	CHECK(t[199] <= 1050);
	CHECK_EQ_U64(stats_mad_u64(t, 0), 0);
	CHECK_EQ_U64(stats_reject_outliers_u64(t, 0, 3.0), 0);
}

static void test_threshold(void)
{
	/* Apart: fast p99 = 1000, slow p10 = 100000 -> sqrt(1e8) = 10000. */
	uint64_t fast[100], slow[100];
	for (unsigned i = 0; i < 100; i++) {
		fast[i] = 500 + 5 * i;          /* 500 .. 995 */
		slow[i] = 100000 + 1000 * i;    /* 100000 .. 199000 */
	}
	fast[99] = 1000;
	/* p99 of 100 values is the 99th: 990. */
	CHECK_EQ_U64(stats_percentile_u64(fast, 100, 99), 990);
	CHECK_EQ_U64(stats_percentile_u64(slow, 100, 10), 109000);
	uint64_t t = stats_threshold_between(fast, 100, slow, 100);
	CHECK_EQ_U64(t, 10387);   /* floor(sqrt(990 * 109000)) */
	CHECK_EQ_U64(stats_threshold_apart(990, 109000), 10387);
	CHECK_EQ_U64(stats_threshold_apart(1000, 1000), 0);
	CHECK_EQ_U64(stats_threshold_apart(5, 6), 6);       /* sqrt(30) = 5: above fast */
	CHECK_EQ_U64(stats_threshold_apart(1, UINT64_MAX), 65535); /* clamped, no overflow */

	/* Overlapping: fast 1..10, slow 8..17: the boundary misclassifying
	 * fewest is 8 (fast 8 9 10 counted slow = 3 errors; every other
	 * candidate does no better), first such candidate wins. */
	uint64_t f2[10], s2[10];
	for (unsigned i = 0; i < 10; i++) {
		f2[i] = 1 + i;
		s2[i] = 8 + i;
	}
	t = stats_threshold_between(f2, 10, s2, 10);
	CHECK(t >= 8 && t <= 11);
	size_t errors = 0;
	for (unsigned i = 0; i < 10; i++)
		errors += (f2[i] >= t) + (s2[i] < t);
	CHECK_EQ_U64(errors, 3);
	CHECK_EQ_U64(stats_threshold_between(f2, 0, s2, 10), 0);
	CHECK_EQ_U64(stats_threshold_between(f2, 10, s2, 0), 0);
}

static void test_timer(void)
{
	uint64_t a = timer_now_ns();
	uint64_t overhead = timer_overhead_ns();
	uint64_t b = timer_now_ns();
	CHECK(b >= a);
	/* Cheaper than a millisecond even where it is a syscall. */
	CHECK(overhead < 1000000);
	printf("timer overhead: %" PRIu64 " ns\n", overhead);
}

int main(void)
{
	test_running();
	test_order();
	test_outliers();
	test_threshold();
	test_timer();
	return 0;
}
