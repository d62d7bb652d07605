/*
 * stats.c - the gray toolbox's statistics (graybox-icl §5; see stats.h).
 */
#include "graybox/toolbox/stats.h"

#include <stdlib.h>

/* No libm: this file is linked into the agent (libdiscnice.so links
 * without -lm, so that it adds nothing to a program's libraries). */

void stats_running_init(struct stats_running *s)
{
	s->count = 0;
	s->mean = s->m2 = s->min = s->max = 0.0;
}

/* Welford (1962), as in Knuth TAOCP vol. 2 §4.2.2: the running mean and
 * the sum of squared deviations, updated without forming sum(x^2), whose
 * cancellation loses the variance of large, close values. */
void stats_running_add(struct stats_running *s, double value)
{
	s->count++;
	double delta = value - s->mean;
	s->mean += delta / (double)s->count;
	s->m2 += delta * (value - s->mean);
	if (s->count == 1 || value < s->min)
		s->min = value;
	if (s->count == 1 || value > s->max)
		s->max = value;
}

double stats_running_variance(const struct stats_running *s)
{
	return s->count > 1 ? s->m2 / (double)(s->count - 1) : 0.0;
}

/* Newton's iteration for the square root: from above, it decreases
 * monotonically to sqrt(v) and stops when it no longer does (within an
 * ulp, in at most ~60 steps for any finite double). */
static double square_root(double v)
{
	if (!(v > 0.0))
		return 0.0;
	double x = v > 1.0 ? v : 1.0;
	for (int i = 0; i < 200; i++) {
		double next = 0.5 * (x + v / x);
		if (next >= x)
			break;
		x = next;
	}
	return x;
}

double stats_running_stddev(const struct stats_running *s)
{
	return square_root(stats_running_variance(s));
}

static int compare_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

void stats_sort_u64(uint64_t *values, size_t n)
{
	if (n > 1)
		qsort(values, n, sizeof *values, compare_u64);
}

uint64_t stats_percentile_u64(const uint64_t *sorted, size_t n, unsigned pct)
{
	if (n == 0)
		return 0;
	if (pct > 100)
		pct = 100;
	uint64_t rank = ((uint64_t)n * pct + 99) / 100;
	return sorted[rank > 0 ? rank - 1 : 0];
}

uint64_t stats_median_u64(const uint64_t *sorted, size_t n)
{
	if (n == 0)
		return 0;
	if (n % 2)
		return sorted[n / 2];
	uint64_t a = sorted[n / 2 - 1], b = sorted[n / 2];
	return a + (b - a) / 2;
}

/* The k-th smallest (0-based) deviation |x - median|.  Below the median,
 * walking down from the middle gives increasing deviations; above it,
 * walking up does too: a merge of the two runs reaches the k-th in k
 * steps. */
static uint64_t deviation_kth(const uint64_t *sorted, size_t n, uint64_t median, size_t k)
{
	size_t split = 0;      /* first index with value >= median */
	while (split < n && sorted[split] < median)
		split++;
	size_t down = split, up = split;   /* next: sorted[down - 1], sorted[up] */
	uint64_t dev = 0;
	for (size_t taken = 0; taken <= k; taken++) {
		uint64_t below = down > 0 ? median - sorted[down - 1] : UINT64_MAX;
		uint64_t above = up < n ? sorted[up] - median : UINT64_MAX;
		if (below <= above) {
			dev = below;
			down--;
		} else {
			dev = above;
			up++;
		}
	}
	return dev;
}

uint64_t stats_mad_u64(const uint64_t *sorted, size_t n)
{
	if (n == 0)
		return 0;
	uint64_t median = stats_median_u64(sorted, n);
	if (n % 2)
		return deviation_kth(sorted, n, median, n / 2);
	uint64_t a = deviation_kth(sorted, n, median, n / 2 - 1);
	uint64_t b = deviation_kth(sorted, n, median, n / 2);
	return a + (b - a) / 2;
}

size_t stats_reject_outliers_u64(uint64_t *sorted, size_t n, double k)
{
	if (n == 0)
		return 0;
	double median = (double)stats_median_u64(sorted, n);
	double room = k * (double)stats_mad_u64(sorted, n);
	if (room < 1.0)
		room = 1.0;
	size_t kept = 0;
	for (size_t i = 0; i < n; i++) {
		double v = (double)sorted[i];
		if (v >= median - room && v <= median + room)
			sorted[kept++] = sorted[i];
	}
	return kept;
}

static uint64_t isqrt_u64(uint64_t v)
{
	uint64_t lo = 0, hi = UINT64_C(0xffffffff);
	while (lo < hi) {       /* largest r with r*r <= v */
		uint64_t mid = lo + (hi - lo + 1) / 2;
		if (mid * mid <= v)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

uint64_t stats_threshold_apart(uint64_t fast_p99, uint64_t slow_p10)
{
	if (fast_p99 >= slow_p10)
		return 0;
	/* Both clamped to 32 bits (4.3 s) so the product cannot overflow. */
	uint64_t a = fast_p99 < UINT64_C(0xffffffff) ? fast_p99 : UINT64_C(0xffffffff);
	uint64_t b = slow_p10 < UINT64_C(0xffffffff) ? slow_p10 : UINT64_C(0xffffffff);
	uint64_t t = isqrt_u64(a * b);
	return t > fast_p99 ? t : fast_p99 + 1;
}

/* How many values of a sorted array are below t. */
static size_t count_below(const uint64_t *sorted, size_t n, uint64_t t)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (sorted[mid] < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint64_t stats_threshold_between(const uint64_t *fast, size_t n_fast, const uint64_t *slow,
				 size_t n_slow)
{
	if (n_fast == 0 || n_slow == 0)
		return 0;
	uint64_t fast_p99 = stats_percentile_u64(fast, n_fast, 99);
	uint64_t slow_p10 = stats_percentile_u64(slow, n_slow, 10);
	if (fast_p99 < slow_p10)
		return stats_threshold_apart(fast_p99, slow_p10);
	/* Candidates are the sample values; errors(t) = fast values >= t
	 * plus slow values < t. */
	uint64_t best = slow_p10;
	size_t best_errors = SIZE_MAX;
	for (size_t c = 0; c < n_fast + n_slow; c++) {
		uint64_t t = c < n_fast ? fast[c] : slow[c - n_fast];
		size_t errors = (n_fast - count_below(fast, n_fast, t)) + count_below(slow, n_slow, t);
		if (errors < best_errors) {
			best_errors = errors;
			best = t;
		}
	}
	return best > 0 ? best : 1;
}
