/*
 * swap_signal.h - the kernel's own word on paging, for MAC (gb_alloc.c):
 * were pages written to swap, where it concerns this process, between two
 * moments?
 *
 * The count is the machine's (/proc/vmstat pswpout, counted in
 * swap_writepage()): a counter, which only grows.  Inside a memory cgroup
 * (v1) with a limit - the process's own or its nearest limited ancestor's
 * - the memory at stake is under that limit, and swapping in other
 * cgroups is none of its business.  There the machine's swap-outs count
 * only while that cgroup is full (usage within 1/64 of its limit: a
 * cgroup below its limit reclaims nothing, so whatever swapped was
 * elsewhere), and a rise of the cgroup's own swap in use (memory.stat
 * total_swap) counts always.  That one alone would not do: it is a level,
 * not a counter, and a competitor that writes to a page it swapped in
 * frees the page's swap slot (do_swap_page(), should_try_to_free_swap()),
 * so four sorts swapping in and out kept it flat while pages went out.
 * All of it is readable by any user.
 *
 * Under cgroup v2 (systemd's slices, containers) the same holds with v2's
 * files: the limit is memory.max or memory.high, whichever is lower, of
 * the ancestor with the least room (every ancestor's limit binds); the
 * cgroup's swap-outs are memory.stat's pswpout counter where the kernel
 * has it, and memory.swap.current; memory.swap.max 0 anywhere up the tree
 * keeps its pages from swap.  v1's memory controller, where it is
 * mounted, is the one the kernel charges, and is looked at first.
 */
#ifndef DISCNICE_MAC_SWAP_SIGNAL_H
#define DISCNICE_MAC_SWAP_SIGNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SWAP_SIGNAL_DIR_MAX 512

struct swap_signal {
	char cgroup_dir[SWAP_SIGNAL_DIR_MAX];  /* the limited memory cgroup, or "" */
	uint64_t limit_bytes;   /* its limit                                 */
	int version;            /* 1 or 2: its hierarchy's; 0 when none      */
	bool swap_off;          /* v2: memory.swap.max 0 at or above it      */
};

/* What was counted at one moment; UINT64_MAX: unknown. */
struct swap_sample {
	uint64_t machine_out;   /* pswpout, pages                           */
	uint64_t cgroup_swap;   /* v1 total_swap, v2 memory.swap.current: bytes */
	uint64_t cgroup_out;    /* v2 memory.stat pswpout, pages             */
};

/* Choose the counts for this process (see above).  Never fails: with no
 * cgroup found, the machine's count alone is used. */
void swap_signal_init(struct swap_signal *signal);

void swap_signal_sample(const struct swap_signal *signal, struct swap_sample *sample);

/* Pages written to swap since `before` that concern us (0: none). */
uint64_t swap_signal_since(const struct swap_signal *signal, const struct swap_sample *before);

/* "cgroup" or "machine", for reports. */
const char *swap_signal_scope(const struct swap_signal *signal);

/* Where this process's memory cannot be swapped - no swap on the machine
 * (swap_total 0), a v1 cgroup limit with memory.swappiness 0 or a memsw
 * limit no higher than the memory limit, or a v2 limit under a
 * memory.swap.max of 0 - nothing pages, and past
 * what is left comes the OOM killer: the most a probe may take, the
 * smaller of the machine's MemAvailable (`available`, when no swap) and
 * the cgroup's room (swap_signal_cgroup_room()), less a sixteenth kept
 * back for the page tables and the caller's own text.  UINT64_MAX where
 * it can swap, or nothing says. */
uint64_t swap_signal_no_swap_ceiling(const struct swap_signal *signal, uint64_t swap_total,
				     uint64_t available);

/* ---- pure parts, unit-tested ------------------------------------------------------ */

/* A cgroup's room before its OOM killer: its limit, less its usage, plus
 * the file pages it holds (memory.stat total_inactive_file and
 * total_active_file in v1, inactive_file and active_file in v2), which
 * reclaim frees first.  0 when full. */
uint64_t swap_signal_cgroup_room(uint64_t limit, uint64_t usage, const char *stat_text);

/* The v1 memory controller's path in /proc/self/cgroup text ("4:memory:/a/b"
 * or "3:cpu,memory:/x"), copied to out; 0, or -ENOENT (no such line) or
 * -ENAMETOOLONG. */
int swap_signal_memory_path(const char *proc_cgroup, char *out, size_t size);

/* The v2 path in /proc/self/cgroup text (the "0::/a/b" line), copied to
 * out; 0, -ENOENT or -ENAMETOOLONG. */
int swap_signal_v2_path(const char *proc_cgroup, char *out, size_t size);

/* The value of `key` in "key value\n" lines; UINT64_MAX when absent. */
uint64_t swap_signal_stat_value(const char *text, const char *key);

/* The decision of swap_signal_since() from two samples and whether the
 * cgroup (if any: `in_cgroup`) is full now: pages. */
uint64_t swap_signal_decide(const struct swap_sample *before, const struct swap_sample *now,
			    bool in_cgroup, bool cgroup_full, uint64_t page_size);

#endif
