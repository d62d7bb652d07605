/*
 * mac_policy.h - the decisions of gray-box memory-based admission control
 * (graybox-icl §4.3), apart from the memory they are about: which size to
 * probe next, and whether a run of page times says "paging".  Pure: no
 * I/O, no globals; gb_alloc.c touches the pages and feeds the times in.
 *
 * Growth (§4.3.2, "Increment unit"): probe min first; while a size fits,
 * add the increment and double it (up to a maximum: the fixed
 * max_increment, or an eighth of the size that fits when that is more -
 * see increment_cap() for why); when one does not,
 * back off completely to the initial increment from the last size that
 * fitted (never again reaching a size already seen to fail) - "analogous to but more conservative than the TCP
 * congestion-control scheme".  The search ends when a size one initial
 * increment above the last fit fails, or at max.  All sizes are multiples
 * of `multiple`, so the answer's resolution is the initial increment.
 *
 * Paging (§4.3.2, "Memory-differentiation threshold"): a page is slow when
 * its write took at least the threshold; "observing several slow data
 * points in near succession is a reliable indicator of paging", while one
 * slow page is a timer interrupt or a preemption.  Here: MAC_SLOW_STREAK
 * slow pages each within MAC_NEAR_PAGES pages of the previous one.  "Near"
 * rather than "consecutive" because swap readahead (vm.page-cluster, 8
 * pages by default) brings a missing page's neighbours in with it, so a
 * swapped-out run reads slow, fast x7, slow, ...
 */
#ifndef DISCNICE_MAC_POLICY_H
#define DISCNICE_MAC_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#define MAC_SLOW_STREAK 4u
#define MAC_NEAR_PAGES  32u

/* Defaults for gb_alloc: 1 MiB steps at first (the answer's resolution),
 * at most 64 MiB (the most a wrong step can overshoot and page). */
#define MAC_INITIAL_INCREMENT (UINT64_C(1) << 20)
#define MAC_MAX_INCREMENT     (UINT64_C(64) << 20)

struct mac_growth {
	uint64_t lowest, highest;       /* the sizes allowed: multiples of multiple */
	uint64_t multiple;
	uint64_t initial_increment, max_increment, increment;
	uint64_t fitted;                /* largest size seen to fit; 0 = none yet */
	uint64_t failed;                /* smallest size seen to fail; 0 = none   */
	uint64_t next;                  /* the size to probe now; 0 = done        */
};

/* Set up a search between min and max in multiples of `multiple`, with
 * increments from initial_increment up to max_increment (each rounded up
 * to a multiple).  Returns 0, or -EINVAL: multiple == 0, min > max, or no
 * multiple of `multiple` (other than 0) lies in [min, max]. */
int mac_growth_init(struct mac_growth *growth, uint64_t min, uint64_t max, uint64_t multiple,
		    uint64_t initial_increment, uint64_t max_increment);

/* The size to probe next, or 0 when the search is over. */
static inline uint64_t mac_growth_next(const struct mac_growth *growth)
{
	return growth->next;
}

/* The probe of mac_growth_next() fitted, or not. */
void mac_growth_result(struct mac_growth *growth, bool fits);

/* The answer once the search is over: the largest size that fitted, or
 * 0 if not even the lowest did. */
static inline uint64_t mac_growth_answer(const struct mac_growth *growth)
{
	return growth->fitted;
}

/* The answer less what the probing took from the caller itself: its own
 * pages (code, heap) that were resident before and were evicted to make
 * room - `own_evicted` bytes.  MAC counts clean and idle pages as
 * available (§4.3.4), the caller's own included; but the caller needs its
 * own back as soon as it runs, and then pages against its own buffer (seen
 * in a test: a Python caller handed 383 of its cgroup's 384 MiB was
 * OOM-killed using it).  Less than one initial increment is noise and
 * ignored.  The result is a multiple of `multiple`, or 0 when not even
 * the lowest size is left. */
uint64_t mac_answer_less_own(const struct mac_growth *growth, uint64_t own_evicted);

/* ---- paging ---------------------------------------------------------------------- */

struct mac_paging {
	uint64_t threshold_ns;
	uint64_t last_slow;             /* page index of the previous slow page */
	unsigned streak;                /* slow pages in near succession so far */
	uint64_t slow_pages;            /* every slow page seen                 */
};

void mac_paging_init(struct mac_paging *paging, uint64_t threshold_ns);

/* Page number `index` (increasing within one pass) took `ns`.  Returns
 * true once the slow pages form a streak: paging. */
bool mac_paging_page(struct mac_paging *paging, uint64_t index, uint64_t ns);

/* A new pass over the pages: forget the streak (not the count). */
void mac_paging_restart(struct mac_paging *paging);

#endif
