/*
 * cluster.h - one-dimensional 2-means clustering: split a set of numbers
 * into a low and a high group with no threshold given (graybox-icl §4.2.4:
 * "the probe times of each file are clustered into two groups, minimizing
 * the intragroup variance and maximizing the intergroup variance").
 *
 * In one dimension the optimal 2-means partition is a cut of the sorted
 * values (every point is nearer its own mean), so the exact optimum is found
 * by trying every cut with prefix sums: O(n) after the sort, no iteration,
 * no random start.
 *
 * 2-means always finds *some* cut, also in a sample that has only one group
 * (every file cached, every file on disk, §4.2.4: "these predictions may be
 * incorrect").  The split is called significant only when it explains most
 * of the spread: between-group sum of squares / total sum of squares >=
 * CLUSTER_SIGNIFICANT_EXPLAINED.  A one-group sample explains little with
 * its best cut - a uniform sample 0.75, a normal one 2/pi = 0.64, one
 * outlier among n values of spread s about d^2 / (d^2 + (n-1) s^2) - while
 * two groups d standard deviations apart explain d^2/4 / (1 + d^2/4) at
 * equal sizes: 0.9 at d = 6.  Probe times, clustered on a log scale, are
 * further apart than that (a page-cache hit ~1 us, a disk read >= 50 us).
 *
 * Pure logic: no I/O, no globals, no allocation.
 */
#ifndef DISCNICE_TOOLBOX_CLUSTER_H
#define DISCNICE_TOOLBOX_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>

#define CLUSTER_SIGNIFICANT_EXPLAINED 0.9

struct cluster_split {
	size_t low_count;     /* sorted[0 .. low_count) is the low group       */
	double low_mean;      /* means of the two groups (equal if no split)   */
	double high_mean;
	double boundary;      /* value < boundary: low group; the midpoint of
			       * the gap between the groups' nearest members   */
	double explained;     /* between-group SS / total SS, in [0, 1]        */
	bool significant;     /* two groups, not one (see above)               */
};

/* Cluster sorted[0 .. n) (ascending; NaN not allowed).  With n < 2 or all
 * values equal: low_count = n, explained = 0, not significant, boundary =
 * +infinity (everything is "low").  When the split is not significant the
 * best cut is still reported (low_count, means, boundary, explained) so a
 * caller can show it; deciding what one group means is the caller's. */
void cluster_two_means_sorted(const double *sorted, size_t n, struct cluster_split *out);

/* The same for values in any order: copied into scratch (n doubles, may
 * not alias values) and sorted there.  Returns 0, or -EINVAL for a NaN or
 * a NULL pointer with n > 0. */
int cluster_two_means(const double *values, size_t n, double *scratch, struct cluster_split *out);

#endif
