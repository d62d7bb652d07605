/*
 * stats.h - the gray toolbox's statistics (graybox-icl §5, "Interpreting
 * Measurements"): what every gray-box layer does with the times it
 * measured.
 *
 *   incremental   mean, variance, min, max of a stream, one value at a
 *                 time, O(1) space (Welford's update, so the variance of
 *                 values near 1e9 ns loses no precision);
 *   order         median and percentiles of a sorted array;
 *   outliers      median absolute deviation and rejection of values
 *                 outside median +- k * MAD (robust: one preempted probe
 *                 of 10 ms does not move the boundary, as it would a mean
 *                 +- k * stddev);
 *   two groups    the boundary between a fast and a slow population
 *                 (cache hit/miss, page in memory/on disk).
 *
 * Pure: no I/O, no globals, no allocation; 2-means clustering lives in
 * cluster.h beside it.
 */
#ifndef DISCNICE_TOOLBOX_STATS_H
#define DISCNICE_TOOLBOX_STATS_H

#include <stddef.h>
#include <stdint.h>

/* ---- incremental ---------------------------------------------------------- */

struct stats_running {
	uint64_t count;
	double mean;
	double m2;              /* sum of squared deviations from the mean */
	double min, max;        /* meaningful once count > 0                */
};

void stats_running_init(struct stats_running *s);
void stats_running_add(struct stats_running *s, double value);
/* Sample variance (divisor count - 1); 0 for fewer than two values. */
double stats_running_variance(const struct stats_running *s);
double stats_running_stddev(const struct stats_running *s);

/* ---- order ---------------------------------------------------------------- */

void stats_sort_u64(uint64_t *values, size_t n);
/* Nearest-rank percentile of a sorted array: the smallest value with at
 * least pct % of the values at or below it (pct 0..100); 0 when n == 0. */
uint64_t stats_percentile_u64(const uint64_t *sorted, size_t n, unsigned pct);
/* Median of a sorted array: the middle value, or the mean of the two
 * middle ones (rounded down); 0 when n == 0. */
uint64_t stats_median_u64(const uint64_t *sorted, size_t n);

/* ---- outliers ------------------------------------------------------------- */

/* Median absolute deviation of a sorted array: the median of
 * |x - median|.  O(n), no scratch memory: the deviations below and above
 * the median are two sorted runs, merged only as far as their middle. */
uint64_t stats_mad_u64(const uint64_t *sorted, size_t n);

/* Keep the values of the sorted array within median +- k * MAD (k * MAD
 * at least 1, so a set of equal values keeps them all); the kept ones stay
 * sorted at the front.  Returns how many were kept. */
size_t stats_reject_outliers_u64(uint64_t *sorted, size_t n, double k);

/* ---- two groups ----------------------------------------------------------- */

/* A boundary t between a fast and a slow population (both sorted):
 * "fast" means value < t.  When they do not overlap (fast p99 < slow p10)
 * the geometric mean of those two, since timing populations differ by a
 * factor (a cached read ~1 us, a disk read ~100 us) and the midpoint on a
 * log scale leaves the same factor of room on either side.  Otherwise the
 * sample value that misclassifies the fewest samples.  Returns >= 1; 0 if
 * either population is empty. */
uint64_t stats_threshold_between(const uint64_t *fast, size_t n_fast, const uint64_t *slow,
				 size_t n_slow);

/* The same from two summaries, when the samples are gone: the geometric
 * mean of fast_p99 and slow_p10 (above fast_p99), or 0 if they overlap
 * (fast_p99 >= slow_p10). */
uint64_t stats_threshold_apart(uint64_t fast_p99, uint64_t slow_p10);

#endif
