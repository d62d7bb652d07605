/*
 * gb_alloc.h - gray-box memory-based admission control (MAC; graybox-icl
 * §4.3), in libgraybox.so.0.  See gb_alloc(3).
 *
 * gb_alloc() finds out how much memory this process can use without
 * paging - by writing to pages and timing each write, never by asking
 * the kernel - and hands that much over, already resident: at least
 * `min` bytes, at most `max`, a multiple of `multiple`.  An application
 * that can work in passes (a sort, a hash join) sizes each pass to what
 * it got; one that cannot gives min == max.  If not even min is available
 * now it gets -EAGAIN and nothing: wait, then try again (§4.3.2; to avoid
 * deadlock, free what you hold before you wait).
 *
 *   void *mem;
 *   size_t got;
 *   int rc = gb_alloc(100 << 20, 477 << 20, 100, &mem, &got);
 *   if (rc == 0) { ... use got bytes at mem ...; gb_free(mem); }
 *
 * The calls are thread-safe; they never abort, print, or change errno.
 * The memory is anonymous, private, zero-filled, page-aligned.
 */
#ifndef DISCNICE_GB_ALLOC_H
#define DISCNICE_GB_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Allocate between min and max bytes, a multiple of `multiple`, of memory
 * that is available without paging.  Returns 0 with *mem and *got set,
 * or a negative errno value with *mem = NULL and *got = 0:
 *   -EINVAL   mem or got NULL, multiple == 0, min > max, or no multiple
 *             of `multiple` other than 0 lies in [min, max];
 *   -EAGAIN   min is not available now (nothing is allocated); where
 *             memory cannot be swapped (no swap on, a cgroup, v1 or v2,
 *             that may not swap), max is cut first to what is left before the OOM
 *             killer: there is no paging to time (gb_alloc(3) NOTES);
 *   -ENOMEM   the address space for max could not be reserved.
 * Takes time: each probe writes every page of its size twice, from the
 * start, so the pages written come to 10-25 times the size found; on a
 * 2-vCPU VM, 75-190 ms per 100 MiB when memory is there (1 GiB: 0.8-1.5
 * s; 4 GiB: 4.7 s), more when it finds paging (it pages a little
 * itself, at most one step's worth, to see it). */
int gb_alloc(size_t min, size_t max, size_t multiple, void **mem, size_t *got);

/* Give back memory from gb_alloc (NULL: nothing).  As with free(3),
 * giving it back twice, or anything gb_alloc did not return, is
 * undefined (it is unmapped: a crash, most likely). */
void gb_free(void *mem);

#ifdef __cplusplus
}
#endif

#endif
