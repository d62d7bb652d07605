/*
 * mac_policy.c - MAC's growth and paging decisions (graybox-icl §4.3.2;
 * see mac_policy.h).  Pure.
 */
#include "graybox/mac/mac_policy.h"

#include <errno.h>

static uint64_t round_up(uint64_t v, uint64_t multiple)
{
	uint64_t r = v % multiple;
	if (r == 0)
		return v;
	return v > UINT64_MAX - (multiple - r) ? 0 : v + (multiple - r);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

int mac_growth_init(struct mac_growth *growth, uint64_t min, uint64_t max, uint64_t multiple,
		    uint64_t initial_increment, uint64_t max_increment)
{
	if (multiple == 0 || min > max)
		return -EINVAL;
	uint64_t lowest = round_up(min > multiple ? min : multiple, multiple);
	uint64_t highest = max - max % multiple;
	if (lowest == 0 || lowest > highest)
		return -EINVAL;
	growth->lowest = lowest;
	growth->highest = highest;
	growth->multiple = multiple;
	growth->initial_increment = round_up(initial_increment ? initial_increment : 1, multiple);
	if (growth->initial_increment == 0)
		growth->initial_increment = multiple;
	growth->max_increment = round_up(max_increment, multiple);
	if (growth->max_increment < growth->initial_increment)
		growth->max_increment = growth->initial_increment;
	growth->increment = growth->initial_increment;
	growth->fitted = 0;
	growth->failed = 0;
	growth->next = lowest;
	return 0;
}

/* The next size from the last fit: one increment up, below any size
 * already seen to fail (probing it again would only page again). */
static uint64_t step_from(const struct mac_growth *growth, uint64_t from, uint64_t increment)
{
	uint64_t top = growth->highest;
	if (growth->failed && growth->failed - growth->multiple < top)
		top = growth->failed - growth->multiple;
	if (from >= top)
		return 0;
	return top - from <= increment ? top : from + increment;
}

/* The largest step now: the fixed maximum, or an eighth of what already
 * fits if that is more.  The paper's cap is fixed; with gigabytes to
 * search a fixed 64 MiB step makes the search quadratic in earnest (each
 * probe touches the whole size: 24 GiB would take ~380 probes), while an
 * eighth keeps the count logarithmic and a wrong step's overshoot - what
 * it pages - within 12.5 % of the size. */
static uint64_t increment_cap(const struct mac_growth *growth)
{
	uint64_t eighth = growth->fitted / 8;
	eighth -= eighth % growth->multiple;
	return eighth > growth->max_increment ? eighth : growth->max_increment;
}

void mac_growth_result(struct mac_growth *growth, bool fits)
{
	uint64_t probed = growth->next;
	if (probed == 0)
		return;
	if (fits) {
		/* It fits: grow the step ("slowly double the increment amount
		 * as the allocated memory is found to fit", up to the max). */
		bool first = growth->fitted == 0;
		growth->fitted = probed;
		if (!first)
			growth->increment = min_u64(growth->increment * 2, increment_cap(growth));
		growth->next = step_from(growth, probed, growth->increment);
		return;
	}
	/* It does not: the lowest failing means nothing can be had; a step
	 * of the initial increment failing means the answer is known to
	 * that resolution; otherwise back off completely and climb again. */
	if (growth->failed == 0 || probed < growth->failed)
		growth->failed = probed;
	if (growth->fitted == 0 || probed - growth->fitted <= growth->initial_increment) {
		growth->next = 0;
		return;
	}
	growth->increment = growth->initial_increment;
	growth->next = step_from(growth, growth->fitted, growth->increment);
}

uint64_t mac_answer_less_own(const struct mac_growth *growth, uint64_t own_evicted)
{
	uint64_t answer = growth->fitted;
	if (answer == 0 || own_evicted < growth->initial_increment)
		return answer;
	if (own_evicted >= answer)
		return 0;
	uint64_t less = answer - own_evicted;
	less -= less % growth->multiple;
	return less >= growth->lowest ? less : 0;
}

void mac_paging_init(struct mac_paging *paging, uint64_t threshold_ns)
{
	paging->threshold_ns = threshold_ns;
	paging->last_slow = 0;
	paging->streak = 0;
	paging->slow_pages = 0;
}

void mac_paging_restart(struct mac_paging *paging)
{
	paging->streak = 0;
}

bool mac_paging_page(struct mac_paging *paging, uint64_t index, uint64_t ns)
{
	if (ns < paging->threshold_ns)
		return false;
	paging->slow_pages++;
	if (paging->streak > 0 && index > paging->last_slow &&
	    index - paging->last_slow <= MAC_NEAR_PAGES)
		paging->streak++;
	else
		paging->streak = 1;
	paging->last_slow = index;
	return paging->streak >= MAC_SLOW_STREAK;
}
