/*
 * cluster.c - one-dimensional 2-means clustering (see cluster.h).
 */
#include "graybox/toolbox/cluster.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Square root by Newton's method: the toolbox is part of the core that the
 * agent links, and the agent does not link libm. */
static double square_root(double x)
{
	if (!(x > 0))
		return 0;
	if (isinf(x))
		return x;
	double r = x > 1 ? x : 1;
	for (int i = 0; i < 200; i++) {
		double next = (r + x / r) / 2;
		if (next >= r)
			break;
		r = next;
	}
	return r;
}

static int compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void cluster_two_means_sorted(const double *sorted, size_t n, struct cluster_split *out)
{
	memset(out, 0, sizeof *out);
	out->low_count = n;
	out->boundary = INFINITY;
	if (n == 0)
		return;

	/* Centre on the overall mean first, so the prefix sums of squares do
	 * not cancel catastrophically for values like 1e9 + small spread. */
	double mean = 0;
	for (size_t i = 0; i < n; i++)
		mean += sorted[i];
	mean /= (double)n;
	out->low_mean = out->high_mean = mean;

	double total_ss = 0;
	for (size_t i = 0; i < n; i++)
		total_ss += (sorted[i] - mean) * (sorted[i] - mean);
	if (n < 2 || !(total_ss > 0))
		return;

	/* Cut after position k-1: low = [0, k), high = [k, n).  Since the
	 * values are centred, the whole sum is ~0 and the high group's sum is
	 * minus the low group's; between-group SS = k*lo^2 + (n-k)*hi^2 with
	 * lo, hi the groups' centred means.  Maximising it minimises the
	 * within-group SS (total = within + between). */
	double low_sum = 0, total_sum = 0;
	for (size_t i = 0; i < n; i++)
		total_sum += sorted[i] - mean;
	double best_between = -1;
	size_t best_k = n;
	for (size_t k = 1; k < n; k++) {
		low_sum += sorted[k - 1] - mean;
		if (sorted[k] == sorted[k - 1])
			continue;       /* equal values never go to different groups */
		double lo = low_sum / (double)k;
		double hi = (total_sum - low_sum) / (double)(n - k);
		double between = (double)k * lo * lo + (double)(n - k) * hi * hi;
		if (between > best_between) {
			best_between = between;
			best_k = k;
		}
	}
	if (best_k == n)
		return;         /* cannot happen with total_ss > 0; be safe */

	double low = 0, high = 0;
	for (size_t i = 0; i < best_k; i++)
		low += sorted[i];
	for (size_t i = best_k; i < n; i++)
		high += sorted[i];
	out->low_count = best_k;
	out->low_mean = low / (double)best_k;
	out->high_mean = high / (double)(n - best_k);
	out->boundary = sorted[best_k - 1] + (sorted[best_k] - sorted[best_k - 1]) / 2;
	out->explained = best_between / total_ss;
	if (out->explained > 1)
		out->explained = 1;
	if (n >= 3) {
		double within = total_ss - best_between;
		double pooled = within > 0 ? square_root(within / (double)(n - 2)) : 0;
		out->separation = pooled > 0 ? (out->high_mean - out->low_mean) / pooled : INFINITY;
		out->significant = out->separation >= CLUSTER_SEPARATION_MIN;
	}
}

int cluster_two_means(const double *values, size_t n, double *scratch, struct cluster_split *out)
{
	if (n > 0 && (values == NULL || scratch == NULL))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (isnan(values[i]))
			return -EINVAL;
	if (n > 0) {
		memcpy(scratch, values, n * sizeof *scratch);
		qsort(scratch, n, sizeof *scratch, compare_double);
	}
	cluster_two_means_sorted(scratch, n, out);
	return 0;
}
