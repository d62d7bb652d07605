/*
 * microbench.h - the gray toolbox's microbenchmarks (graybox-icl §5,
 * "Microbenchmarks for Configuration"): the performance parameters the
 * gray-box layers need, measured once and kept in the calibration file
 * (calibration.h), or measured quickly by a layer that finds none.
 *
 *   probe threshold    a cached against an uncached one-byte read(): the
 *                      cache detector's hit/miss boundary (FCCD, §4.1.1;
 *                      DiscNice §4.2).  The one implementation: the
 *                      supervisor's calibration, `discnice calibrate` and
 *                      gbp all call microbench_probe_threshold(), and the
 *                      probe itself times with microbench_time_byte_read().
 *   disk               sequential read bandwidth, random 4 KiB read time,
 *                      and the time to fault a page in from disk.
 *   memory             the time to write a page already in memory, and to
 *                      allocate+zero a fresh one (first touch): MAC's
 *                      "fast" side (§4.3.2); the disk fault is its "slow"
 *                      side.
 *
 * Disk measurements work on an unlinked scratch file in a directory the
 * caller names (its filesystem is what is measured) and evict only that
 * file (POSIX_FADV_DONTNEED, checked with mincore), never the machine's
 * caches.  Functions return 0 (or a count) or -errno and leave errno as
 * they found it.
 */
#ifndef DISCNICE_TOOLBOX_MICROBENCH_H
#define DISCNICE_TOOLBOX_MICROBENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "graybox/toolbox/timer.h"

/* One timed one-byte pread() (graybox-icl §4.1.1: a probe is a read() of a
 * single byte), retried on EINTR.  Returns bytes read (0 at EOF) or
 * -errno; *ns is the time of the successful call. */
int microbench_time_byte_read(int fd, uint64_t offset, uint64_t *ns);

/* The same question asked without read(): the page at offset is mapped
 * (MADV_RANDOM) and faulted in with MADV_POPULATE_READ (Linux 5.14), the
 * fault timed.  A read() that lands on a page carrying PG_readahead - the
 * marker another reader's readahead left - starts the kernel's next
 * window, up to read_ahead_kb, whatever the probe's POSIX_FADV_RANDOM
 * (page_cache_async_ra() does not look at FMODE_RANDOM); a fault in a
 * VM_RAND_READ mapping neither starts it nor clears the marker
 * (do_async_mmap_readahead()).  Past EOF the populate fails with EFAULT,
 * never SIGBUS.  Returns 1, 0 past EOF, or -errno (-EINVAL: a kernel
 * without MADV_POPULATE_READ; use microbench_time_byte_read()).  A few
 * µs dearer than a read(). */
int microbench_time_page_fault(int fd, uint64_t offset, uint64_t *ns);

/* Write one byte to a page and return how long it took (graybox-icl
 * §4.3.1: "the probes must *write* to each page", since a read of a fresh
 * anonymous page maps the shared zero page and allocates nothing).  What
 * MAC's probe loops and the memory microbenchmark both time. */
static inline uint64_t microbench_page_write_ns(volatile char *page)
{
	uint64_t start = timer_now_ns();
	*page = 1;
	return timer_now_ns() - start;
}

/* May this process write a file of `bytes`?  Not past its RLIMIT_FSIZE:
 * a write there raises SIGXFSZ, which kills a host program that has not
 * ignored it, and the toolbox runs inside gbp_order()'s and gb_alloc()'s
 * callers (gbp.h: no function raises a signal). */
bool microbench_file_fits(uint64_t bytes);

/* An unlinked scratch file in dir, open O_RDWR: O_TMPFILE where the
 * filesystem has it, else mkstemp + unlink.  Returns the fd or -errno. */
int microbench_scratch_open(const char *dir);

/* A summary of one set of timings. */
struct microbench_times {
	uint64_t median_ns, p10_ns, p90_ns, p99_ns;
	uint32_t samples;
};

/* ---- the cache hit/miss probe threshold -------------------------------------- */

struct microbench_probe_threshold {
	uint64_t hit_median_ns, hit_p99_ns;
	uint64_t miss_p10_ns, miss_median_ns;
	uint64_t threshold_ns;
	uint64_t miss_read_bytes;  /* /proc/self/io read_bytes of a miss (median); 0 if unreadable */
	uint32_t hits, misses;     /* sample counts */
};

/* Time one-byte reads of cached pages and of pages evicted with
 * POSIX_FADV_DONTNEED through a description set up exactly like a probe's
 * (POSIX_FADV_RANDOM), on an 8 MiB scratch file in dir, and return the
 * boundary between the two populations in ns (stats_threshold_between), or
 * -errno: -EOPNOTSUPP where DONTNEED does not evict (tmpfs) or a miss is
 * no slower than a hit.  Costs 8 MiB of writes and 1 MiB of reads, ~0.1 s.
 * `out` may be NULL. */
int64_t microbench_probe_threshold(const char *dir, struct microbench_probe_threshold *out);

/* ---- disk ------------------------------------------------------------------------ */

struct microbench_disk {
	uint64_t file_bytes;             /* scratch file size used             */
	uint64_t sequential_read_bps;    /* cold file, 1 MiB read()s, one pass */
	struct microbench_times random_read;  /* cold 4 KiB pread()s, random pages,
					       * POSIX_FADV_RANDOM (no readahead) */
	struct microbench_times page_from_disk; /* first touch of a cold page of a
						 * MADV_RANDOM file mapping: a major
						 * fault that reads one page */
};

/* On a file_bytes scratch file in dir (at least 4 MiB): one sequential
 * pass, then `reads` random reads, then `reads` page faults, the file
 * evicted before each.  Returns 0 or -errno (-EOPNOTSUPP: cannot evict). */
int microbench_disk(const char *dir, uint64_t file_bytes, uint32_t reads,
		    struct microbench_disk *out);

/* ---- memory ---------------------------------------------------------------------- */

struct microbench_memory {
	struct microbench_times alloc_zero;  /* first write to a fresh anonymous page */
	struct microbench_times in_memory;   /* a later write to the same, resident page */
};

/* Over `pages` fresh anonymous pages (MADV_NOHUGEPAGE, so each first touch
 * is one 4 KiB allocate+zero, as MAC's are), time the first write to each,
 * then a second write.  Returns 0 or -errno. */
int microbench_memory(uint32_t pages, struct microbench_memory *out);

/* The boundary between a page in memory (allocate+zero or resident write:
 * the fast side) and a page from disk (the slow side), for MAC (§4.3.2),
 * from the two measurements above: stats_threshold_between(). */
uint64_t microbench_page_threshold(const struct microbench_memory *memory,
				   const struct microbench_disk *disk);

#endif
