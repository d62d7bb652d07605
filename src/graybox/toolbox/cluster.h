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
 * incorrect").  The split is called significant when the two means lie at
 * least CLUSTER_SEPARATION_MIN pooled within-group standard deviations
 * apart, s^2 = within-group SS / (n - 2), the separation that Ashman's D
 * measures for mixtures.  It does not depend on the groups' sizes (a few
 * misses among many hits are still a group).  The best cut of a one-group
 * sample is never that far apart: a normal sample's is 2.65 s (means at
 * +-0.80 sd, within sd 0.60), a uniform one's 3.46 s.  Probe times on a
 * log scale are much further apart (a page-cache hit ~1 us, a read from
 * this VM's disk 20-300 us: about 4 / 0.6 = 7 s).  With n < 3 there is no
 * spread to measure, and no split is significant.
 *
 * Statistics cannot tell a far outlier from a small group, nor, in a
 * sample of three, a group from noise; callers that know their scale (a
 * probe miss costs at least twice a hit; cached shares differ by at least
 * one half) add that knowledge (fccd_order.c).
 *
 * Pure logic: no I/O, no globals, no allocation.
 */
#ifndef DISCNICE_TOOLBOX_CLUSTER_H
#define DISCNICE_TOOLBOX_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>

#define CLUSTER_SEPARATION_MIN 4.0

struct cluster_split {
	size_t low_count;     /* sorted[0 .. low_count) is the low group       */
	double low_mean;      /* means of the two groups (equal if no split)   */
	double high_mean;
	double boundary;      /* value < boundary: low group; the midpoint of
			       * the gap between the groups' nearest members   */
	double explained;     /* between-group SS / total SS, in [0, 1]        */
	double separation;    /* (high_mean - low_mean) / pooled within sd;
			       * +infinity when both groups are constant       */
	bool significant;     /* separation >= CLUSTER_SEPARATION_MIN, n >= 3  */
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
