/*
 * gb_alloc.c - gray-box memory-based admission control (graybox-icl
 * §4.3.1, §4.3.2): probe, a page at a time, how much memory can be
 * written without paging, and hand that much over.
 *
 * One probe of `size` bytes (§4.3.1): two sequential loops over its
 * pages, each page written (not read: a read of a fresh page maps the
 * shared zero page and allocates nothing) and timed.
 *   Loop 1 moves the system to a known state: every page resident.  Its
 *   times alone prove nothing (allocate+zero, a swap-in of a page an
 *   earlier probe lost, a VM's host backing fresh guest memory), but a
 *   streak of slow ones is a suspicion that this size "activated the page
 *   daemon": as the paper does, it skips to verify what loop 1 has
 *   written so far, and goes on if that is clean.
 *   Loop 2 decides: if every page is fast, none was selected for
 *   replacement and the size fits; a streak of slow pages is paging if
 *   one more pass sees a streak again (see probe()).
 * The kernel's own word, where it gives it: a size also fails if pages
 * were written to swap while it was probed - in the memory cgroup whose
 * limit we are under, or on the machine (swap_signal.h).  Timing alone misses paging whose cost
 * is too small to see: reclaim to a fast swap device (zram, a swap file
 * the host caches) of a competitor's pages that sit on the inactive list
 * - a sort's buffer while it reads its input - makes none of our writes
 * slow, and four sorts probing beside each other took 1.1-1.9x the
 * memory there was (bench/results/2026-11-23-vm-graybox-mac.md).  A
 * swap-out from elsewhere during a probe makes the answer lower, never
 * higher: MAC errs on the side of not paging.  MAC_TIMING_ONLY (and
 * DISCNICE_GB_ALLOC_TIMING_ONLY=1 for gb_alloc) leaves it to timing, as
 * the paper did: neither the swap counters nor the page-fault filter of
 * write_pass().
 *
 * Between probes the pages above the last size that fitted are given back
 * (MADV_DONTNEED), so a failed probe's overshoot does not stay.
 *
 * Memory: one private anonymous mapping of a header page plus max bytes,
 * MAP_NORESERVE (reserving address space, not memory), MADV_NOHUGEPAGE so
 * every first touch is one 4 KiB page as timed by the threshold's
 * measurement and never a 2 MiB one; its tail beyond what is handed over
 * is unmapped.  The header page holds the mapping's length for gb_free().
 */
#include "graybox/mac/mac.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/proc_io.h"
#include "discnice/gb_alloc.h"
#include "graybox/mac/mac_policy.h"
#include "graybox/mac/swap_signal.h"
#include "graybox/toolbox/microbench.h"
#include "graybox/toolbox/timer.h"

#define GB_EXPORT __attribute__((visibility("default")))

#define HEADER_MAGIC UINT64_C(0x6762616c6c6f6321)   /* "gballoc!" */

struct header {
	uint64_t magic;
	uint64_t mapping_bytes;     /* header page included */
};

static uint64_t page_size(void)
{
	long size = sysconf(_SC_PAGESIZE);
	return size > 0 ? (uint64_t)size : 4096u;
}

static uint64_t pages_of(uint64_t bytes, uint64_t page)
{
	return (bytes + page - 1) / page;
}

/* Page faults this thread has taken so far (RUSAGE_THREAD: other threads
 * of the host program fault on their own memory, not ours). */
static uint64_t thread_faults(void)
{
	struct rusage usage;
	if (getrusage(RUSAGE_THREAD, &usage) != 0)
		return UINT64_MAX;      /* unknown: never rules a streak out */
	return (uint64_t)usage.ru_minflt + (uint64_t)usage.ru_majflt;
}

/* One pass over pages [first, end): writes and times each; true if the
 * pass saw paging.  *stopped (if given) says where a streak stopped it.
 *
 * resident: every page of the pass has been written before, so none of
 * them should fault.  Then a streak of slow writes is paging only if it
 * came with page faults of this thread: a page the kernel took away
 * faults when written again (a major fault from swap, a minor one from
 * the swap cache), while a streak with no fault at all is the machine,
 * not our memory - a busy host not running the guest for a while, seen
 * in CI as 566 slow writes of 475,120 that made a 128 MiB probe "page",
 * twice in a row, in a cgroup with 252 MiB free.  The faults are counted
 * from the slow page before the streak began, so one stray fault
 * elsewhere in the pass (a compaction's migration entry) confirms
 * nothing.
 *
 * timing_only (MAC_TIMING_ONLY): no page-fault counts either - they are
 * the kernel's word as much as the swap counters are, and the paper
 * "observe[s] only time" (graybox-icl §4.3.1); a streak is paging, as
 * in loop 1, with only the repeated pass of loop 2 to confirm it. */
static bool write_pass(char *base, uint64_t first, uint64_t end, uint64_t page, bool resident,
		       bool timing_only, struct mac_paging *paging, struct mac_report *r,
		       uint64_t *stopped)
{
	if (timing_only)
		resident = false; /* every streak counts */
	uint64_t faults_before = resident ? thread_faults() : 0;
	uint64_t streak_base = faults_before;

	mac_paging_restart(paging);
	for (uint64_t i = first; i < end; i++) {
		uint64_t ns = microbench_page_write_ns(base + i * page);
		r->pages_written++;
		bool streak = mac_paging_page(paging, i, ns);
		if (!resident || ns < paging->threshold_ns) {
			if (streak) {
				if (stopped)
					*stopped = i + 1;
				return true;
			}
			continue;
		}
		uint64_t faults_now = thread_faults();
		if (streak) {
			if (faults_now != streak_base) {
				if (stopped)
					*stopped = i + 1;
				return true;
			}
			r->faultless_streaks++;
			mac_paging_restart(paging);
		}
		if (paging->streak <= 1)
			streak_base = faults_before;
		faults_before = faults_now;
	}
	return false;
}

/* "Key:   N kB" of /proc/meminfo or /proc/PID/status, in bytes;
 * UINT64_MAX when absent. */
static uint64_t kb_field(const char *text, const char *key)
{
	size_t len = strlen(key);
	for (const char *line = text; *line;) {
		if (strncmp(line, key, len) == 0 && line[len] == ':') {
			char *end;
			unsigned long long kib = strtoull(line + len + 1, &end, 10);
			if (end != line + len + 1)
				return (uint64_t)kib * 1024;
		}
		const char *next = strchr(line, '\n');
		if (!next)
			break;
		line = next + 1;
	}
	return UINT64_MAX;
}

/* What says our own pages went out, from /proc/self/status: the
 * resident set (VmRSS, which the probe's pages kept are taken off), and
 * the pages that went out (VmSwap, swapped, less RssFile, file pages
 * resident: a number that grows by one for each of our pages evicted,
 * whichever kind).  UINT64_MAX where unknown. */
struct own_pages {
	uint64_t resident, out;
};

static void own_pages_read(uint64_t page, struct own_pages *own)
{
	char buf[4096];
	own->resident = own->out = UINT64_MAX;
	if (proc_read_small("/proc/self/status", buf, sizeof buf) <= 0)
		return;
	uint64_t rss = kb_field(buf, "VmRSS"), swap = kb_field(buf, "VmSwap");
	uint64_t file = kb_field(buf, "RssFile");
	if (rss != UINT64_MAX)
		own->resident = rss / page;
	/* Offset so that it never goes below zero. */
	if (file != UINT64_MAX)
		own->out = (swap == UINT64_MAX ? 0 : swap / page) + (UINT64_C(1) << 40) - file / page;
}

/* Our pages the probing evicted, from the two readings: the smaller of
 * the drop in the resident set (the probe's kept pages, `touched`, left
 * out) and the rise of the pages that went out.  Either alone is fooled:
 * another thread's free() or munmap() shrinks the resident set too (4 of
 * 30 calls -EAGAIN beside a thread that allocated and freed 64 MiB in a
 * loop, with 23 GiB free and no swap); and the probe's own pages swapped
 * out raise the second (a 384 MiB cgroup with swap: 30 MiB taken off the
 * answer now and then, 7-9 % low).  Our pages really evicted move both. */
static uint64_t own_pages_evicted(const struct own_pages *before, const struct own_pages *after,
				  uint64_t touched)
{
	if (before->resident == UINT64_MAX || after->resident == UINT64_MAX ||
	    before->out == UINT64_MAX || after->out == UINT64_MAX)
		return 0;
	uint64_t resident = after->resident > touched ? after->resident - touched : 0;
	uint64_t dropped = before->resident > resident ? before->resident - resident : 0;
	uint64_t went_out = after->out > before->out ? after->out - before->out : 0;
	return dropped < went_out ? dropped : went_out;
}

/* Was anything swapped out since `before` (NULL signal: not asked), by
 * the count that concerns us (swap_signal.h)? */
static bool swapped_since(const struct swap_signal *signal, const struct swap_sample *before,
			  struct mac_report *r)
{
	if (!signal)
		return false;
	uint64_t pages = swap_signal_since(signal, before);
	if (pages == 0)
		return false;
	r->swapped_out_pages += pages;
	r->swapping_probes++;
	return true;
}

/* One probe of `pages` pages.  Returns true if the size fits.  No signal:
 * MAC_TIMING_ONLY, decided by the write times alone. */
static bool probe(char *base, uint64_t pages, uint64_t page, const struct swap_signal *signal,
		  struct mac_paging *paging, struct mac_report *r)
{
	bool timing_only = signal == NULL;
	uint64_t at = 0, next_check = 0;
	struct swap_sample swapped;
	if (signal)
		swap_signal_sample(signal, &swapped);

	/* Loop 1. */
	while (at < pages) {
		uint64_t stopped = pages;
		if (!write_pass(base, at, pages, page, false, timing_only, paging, r, &stopped))
			break;
		at = stopped;
		/* A streak of slow writes: the kernel reclaiming for us, our
		 * own pages coming back from swap - or, on a VM, the host
		 * backing guest memory never touched since boot, which is as
		 * slow and no paging at all.  So, as the paper does on such
		 * "suspicions", verify what loop 1 has written so far; if
		 * that is clean, go on.  Checks are spaced out (each at
		 * twice the last one's position) to bound their cost to one
		 * more pass. */
		if (at >= next_check) {
			if (write_pass(base, 0, at, page, true, timing_only, paging, r, NULL))
				return false;
			next_check = 2 * at;
		}
	}
	if (swapped_since(signal, &swapped, r))
		return false;
	/* Loop 2: the verdict.  A streak in it is confirmed by one more
	 * pass before the size is called paging: a size that does not fit
	 * pages on every pass (the kernel's LRU evicts a cyclic sweep larger
	 * than memory on each round), while a burst of slow writes from
	 * elsewhere - a busy host stalling the guest, compaction, another
	 * process's reclaim - does not come back at the same size.  Seen in
	 * CI: 424 slow writes of 495,420 on a machine busy compiling made a
	 * 128 MiB probe "page" in a cgroup with 254 MiB free. */
	bool fits = !write_pass(base, 0, pages, page, true, timing_only, paging, r, NULL) ||
		    !write_pass(base, 0, pages, page, true, timing_only, paging, r, NULL);
	return fits && !swapped_since(signal, &swapped, r);
}

int mac_allocate(size_t min, size_t max, size_t multiple, uint64_t threshold_ns, unsigned flags,
		 void **mem, size_t *got, struct mac_report *report)
{
	int saved = errno;
	const uint64_t page = page_size();
	struct mac_report local;
	struct mac_report *r = report ? report : &local;
	struct mac_growth growth;
	struct mac_paging paging;
	int rc;

	memset(r, 0, sizeof *r);
	if (mem)
		*mem = NULL;
	if (got)
		*got = 0;
	if (!mem || !got)
		return -EINVAL;
	rc = mac_growth_init(&growth, min, max, multiple, MAC_INITIAL_INCREMENT, MAC_MAX_INCREMENT);
	if (rc < 0)
		return rc;
	uint64_t start = timer_now_ns();

	if (threshold_ns == 0)
		threshold_ns = parameters_page_threshold(&r->threshold_source);
	else
		r->threshold_source = PARAMETER_GIVEN;
	r->threshold_ns = threshold_ns;

	/* No swap: a probe past what the kernel can give is not timed as
	 * paging but killed (1 TiB asked of 24 GiB here: the OOM killer took
	 * the caller; 1 GiB in a cgroup of 256 MiB that cannot swap: its OOM
	 * killer did).  Cut max to it; if min is above it, min is not
	 * available now. */
	uint64_t ceiling = mac_no_swap_ceiling();
	errno = saved;
	if (ceiling < growth.highest) {
		r->ceiling = ceiling;
		if (ceiling < min || mac_growth_init(&growth, min, ceiling, multiple,
						     MAC_INITIAL_INCREMENT, MAC_MAX_INCREMENT) < 0)
			return -EAGAIN;
	}
	/* The highest size, in whole pages, plus the header page, must fit
	 * in the address space (after the cut: gb_alloc(min, SIZE_MAX, ...)
	 * asks for all there is, which without swap is the ceiling). */
	if (growth.highest > (uint64_t)SIZE_MAX - 2 * page)
		return -ENOMEM;

	uint64_t region_bytes = pages_of(growth.highest, page) * page;
	uint64_t mapping_bytes = page + region_bytes;
	char *mapping = mmap(NULL, (size_t)mapping_bytes, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mapping == MAP_FAILED) {
		errno = saved;
		return -ENOMEM;
	}
	char *base = mapping + page;
	madvise(base, (size_t)region_bytes, MADV_NOHUGEPAGE);

	struct swap_signal signal;
	if (!(flags & MAC_TIMING_ONLY)) {
		swap_signal_init(&signal);
		r->swap_scope = swap_signal_scope(&signal);
	}
	mac_paging_init(&paging, threshold_ns);
	struct own_pages own_before, own_after;
	own_pages_read(page, &own_before);
	uint64_t touched = 0;        /* pages written by some probe so far */
	for (uint64_t size; (size = mac_growth_next(&growth)) != 0;) {
		uint64_t pages = pages_of(size, page);
		bool fits = probe(base, pages, page, flags & MAC_TIMING_ONLY ? NULL : &signal,
				  &paging, r);
		r->probes++;
		if (pages > touched)
			touched = pages;
		if (!fits) {
			r->paging_probes++;
			if (size > r->largest_failed)
				r->largest_failed = size;
		}
		mac_growth_result(&growth, fits);
		if (!fits) {
			/* Give the overshoot back at once: what does not fit
			 * is paging someone. */
			uint64_t keep = pages_of(mac_growth_answer(&growth), page);
			if (touched > keep) {
				madvise(base + keep * page, (size_t)((touched - keep) * page),
					MADV_DONTNEED);
				touched = keep;
			}
		}
	}
	r->slow_pages = paging.slow_pages;

	/* What the probing took from ourselves (mac_answer_less_own). */
	own_pages_read(page, &own_after);
	r->own_evicted_bytes = own_pages_evicted(&own_before, &own_after, touched) * page;
	uint64_t answer = mac_answer_less_own(&growth, r->own_evicted_bytes);
	if (answer < mac_growth_answer(&growth) && pages_of(answer, page) < touched)
		madvise(base + pages_of(answer, page) * page,
			(size_t)((touched - pages_of(answer, page)) * page), MADV_DONTNEED);
	if (answer == 0) {
		munmap(mapping, (size_t)mapping_bytes);
		r->elapsed_ns = timer_now_ns() - start;
		errno = saved;
		return -EAGAIN;
	}
	/* Zero-filled, as promised: the probes left a 1 in each page (not
	 * a 0, which would make every page a same-filled one that zram and
	 * zswap store for nothing, hiding the paging).  The pages are
	 * resident: a write each. */
	for (uint64_t i = 0; i < pages_of(answer, page); i++)
		base[i * page] = 0;
	/* Keep what is handed over; unmap the tail. */
	uint64_t keep_bytes = page + pages_of(answer, page) * page;
	if (keep_bytes < mapping_bytes)
		munmap(mapping + keep_bytes, (size_t)(mapping_bytes - keep_bytes));
	struct header *header = (struct header *)mapping;
	header->magic = HEADER_MAGIC;
	header->mapping_bytes = keep_bytes;
	*mem = base;
	*got = (size_t)answer;
	r->got = answer;
	r->elapsed_ns = timer_now_ns() - start;
	errno = saved;
	return 0;
}

uint64_t mac_no_swap_ceiling(void)
{
	char text[8192];
	uint64_t swap = UINT64_MAX, available = UINT64_MAX;
	if (proc_read_small("/proc/meminfo", text, sizeof text) > 0) {
		swap = kb_field(text, "SwapTotal");
		available = kb_field(text, "MemAvailable");
	}
	struct swap_signal signal;
	swap_signal_init(&signal);
	return swap_signal_no_swap_ceiling(&signal, swap, available);
}

void mac_free(void *mem)
{
	if (!mem)
		return;
	int saved = errno;
	uint64_t page = page_size();
	struct header *header = (struct header *)((char *)mem - page);
	/* As with free(3), a pointer gb_alloc() did not return (or one
	 * freed before) is undefined behaviour; the magic only keeps a
	 * page-aligned stray pointer inside some other mapping from
	 * unmapping it. */
	if (((uintptr_t)mem % page) == 0 && header->magic == HEADER_MAGIC) {
		size_t bytes = (size_t)header->mapping_bytes;
		header->magic = 0;
		munmap(header, bytes);
	}
	errno = saved;
}

GB_EXPORT int gb_alloc(size_t min, size_t max, size_t multiple, void **mem, size_t *got)
{
	const char *timing_only = getenv("DISCNICE_GB_ALLOC_TIMING_ONLY");
	unsigned flags = timing_only && strcmp(timing_only, "1") == 0 ? MAC_TIMING_ONLY : 0;
	return mac_allocate(min, max, multiple, 0, flags, mem, got, NULL);
}

GB_EXPORT void gb_free(void *mem)
{
	mac_free(mem);
}
