/*
 * mac.h - the MAC runtime behind gb_alloc() (graybox-icl §4.3), with the
 * details `discnice memprobe` and the tests report.  The decisions are
 * mac_policy.h's; this part touches memory and times it.
 */
#ifndef DISCNICE_MAC_H
#define DISCNICE_MAC_H

#include <stddef.h>
#include <stdint.h>

#include "graybox/toolbox/parameters.h"

struct mac_report {
	uint64_t got;                    /* bytes handed over (0: none)           */
	uint64_t threshold_ns;           /* a page write this slow is "slow"     */
	enum parameter_source threshold_source;
	unsigned probes;                 /* sizes probed                          */
	unsigned paging_probes;          /* of which found paging                 */
	uint64_t largest_failed;         /* largest size that paged (0: none)     */
	uint64_t pages_written;          /* page writes timed, all probes        */
	uint64_t slow_pages;             /* of which slow                         */
	uint64_t faultless_streaks;      /* streaks with no page fault: not paging */
	unsigned swapping_probes;        /* probes failed because pages were swapped out */
	uint64_t swapped_out_pages;      /* how many, during those                 */
	uint64_t own_evicted_bytes;      /* the caller's own pages the probing
					  * evicted: taken off the answer         */
	const char *swap_scope;          /* whose swap: "cgroup", "machine"; NULL
					  * with MAC_TIMING_ONLY                  */
	uint64_t ceiling;                /* max was cut to this: no swap on, the
					  * kernel's MemAvailable (0: not cut)    */
	uint64_t elapsed_ns;
};

/* Decide by page-write timing alone (the paper's MAC), not also by the
 * kernel's count of pages written to swap (gb_alloc.c). */
#define MAC_TIMING_ONLY 1u

/* gb_alloc() with a report (may be NULL), the threshold given (0: from
 * the calibration file or the quick self-measurement, parameters.h) and
 * flags (MAC_TIMING_ONLY or 0).  The same errors. */
int mac_allocate(size_t min, size_t max, size_t multiple, uint64_t threshold_ns, unsigned flags,
		 void **mem, size_t *got, struct mac_report *report);

void mac_free(void *mem);

/* Where this process's memory cannot be swapped, the most a probe may
 * take: with no swap on the machine, the kernel's MemAvailable estimate
 * (mm/show_mem.c si_mem_available()); in a v1 memory cgroup that cannot
 * swap, its room too (swap_signal.h).  Without swap nothing pages, so
 * writes find no edge to time: past that the kernel reclaims what cache
 * it can and then kills.  UINT64_MAX where it can swap, or when nothing
 * says. */
uint64_t mac_no_swap_ceiling(void);

#endif
