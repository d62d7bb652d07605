/*
 * swap_signal.h - the kernel's own word on paging, for MAC (gb_alloc.c):
 * how much has been written to swap where it concerns this process.
 *
 * Which count: inside a memory cgroup (v1) with a limit - the process's
 * own or its nearest limited ancestor's - that cgroup's swap
 * (memory.stat total_swap, hierarchical): the memory at stake is under
 * that limit, and swapping in other cgroups is none of its business.
 * Otherwise the machine's (/proc/vmstat pswpout), since the memory at
 * stake is the machine's.  Both are readable by any user.  cgroup v2 is
 * not looked at (this machine has none to test it on): a process under a
 * v2 limit gets the machine's count, which a neighbour swapping at its
 * own limit also moves - MAC's answer is then too small, never too large.
 */
#ifndef DISCNICE_MAC_SWAP_SIGNAL_H
#define DISCNICE_MAC_SWAP_SIGNAL_H

#include <stddef.h>
#include <stdint.h>

struct swap_signal {
	char stat_path[512];    /* memory.stat of the limited cgroup, or ""   */
};

/* Choose the count for this process (see above).  Never fails: with no
 * cgroup found, the machine's count is used. */
void swap_signal_init(struct swap_signal *signal);

/* Pages written to swap so far by that count's measure (for a cgroup: its
 * swap in use, in pages); UINT64_MAX when it cannot be read. */
uint64_t swap_signal_read(const struct swap_signal *signal);

/* "cgroup" or "machine", for reports. */
const char *swap_signal_scope(const struct swap_signal *signal);

/* ---- pure parsing, unit-tested ---------------------------------------------------- */

/* The v1 memory controller's path in /proc/self/cgroup text ("4:memory:/a/b"
 * or "3:cpu,memory:/x"), copied to out; 0, or -ENOENT (no such line) or
 * -ENAMETOOLONG. */
int swap_signal_memory_path(const char *proc_cgroup, char *out, size_t size);

/* The value of `key` in "key value\n" lines; UINT64_MAX when absent. */
uint64_t swap_signal_stat_value(const char *text, const char *key);

#endif
