/*
 * cache_detector.h - which pages of a file are in the page cache?
 * (DiscNice §4.2; gray-box FCCD, graybox-icl §4.1)
 *
 * Three backends behind one interface:
 *   probe      the paper's method: timed one-byte reads through a private
 *              file description (so the application's readahead state and
 *              offset are untouched), over M = 5 MiB from the file pointer
 *              in m = 1.25 MiB units; results reused while the pointer stays
 *              inside.  The hit/miss time threshold is calibrated
 *              (microbench_probe_threshold(), toolbox/microbench.h).
 *   cachestat  cachestat(2) (syscall 451, Linux >= 6.5): exact counts.
 *   mincore    mmap(PROT_NONE) + mincore(2): exact per page.
 * cachestat refuses (EPERM) and mincore reports "all cached" for files the
 * caller can neither write nor own (can_do_cachestat() in mm/filemap.c,
 * can_do_mincore() in mm/mincore.c); cache_detector_choose() checks that
 * per file and falls back to probe.
 *
 * gbp has a fourth way for such files, cache_probe_nowait(): a one-byte
 * preadv2(RWF_NOWAIT), answered by the kernel without a threshold and
 * without waiting for the disk.  The agent does not use it (its backends
 * are the segment's, dn_cache_backend).
 *
 * Pages are sysconf(_SC_PAGESIZE) bytes.  Functions return counts, or
 * -errno; they never change errno as the caller sees it, and the counting
 * path allocates nothing.
 */
#ifndef DISCNICE_CACHE_DETECTOR_H
#define DISCNICE_CACHE_DETECTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "discnice/segment.h"

#define CACHE_PROBE_SPAN  (UINT64_C(5) << 20)          /* M */
#define CACHE_PROBE_UNIT  (UINT64_C(5) << 18)          /* m = 1.25 MiB */

/* cachestat(2) as in include/uapi/linux/mman.h (Linux 6.5). */
struct cache_stat_range { uint64_t off; uint64_t len; };
struct cache_stat {
	uint64_t nr_cache;
	uint64_t nr_dirty;
	uint64_t nr_writeback;
	uint64_t nr_evicted;
	uint64_t nr_recently_evicted;
};
int cache_stat_call(int fd, uint64_t off, uint64_t len, struct cache_stat *out);

/* Pages one missed probe reads from disk: the private description has
 * POSIX_FADV_RANDOM (FMODE_RANDOM), so page_cache_sync_ra() reads just the
 * requested page.  Measured on Linux 6.18/ext4: a cold one-byte probe adds
 * exactly 4096 to /proc/self/io read_bytes.  The probe charges what the
 * kernel's per-thread count (getrusage ru_inblock) says it read, and this
 * only where that count is unavailable; tests/unit/test_cache_detector.c
 * checks the charge against /proc/self/io. */
#define CACHE_PROBE_MISS_PAGES 1u

/* Which backend works for this open file: never AUTO.
 * AUTO: cachestat if it answers for this fd, else mincore if the caller
 * owns or may write the file (otherwise mincore lies), else probe.
 * An explicit CACHESTAT or MINCORE that cannot work for this file also
 * falls back to PROBE; an unknown value is treated as AUTO. */
enum dn_cache_backend cache_detector_choose(int fd, enum dn_cache_backend wanted);

/* The same, without a trial syscall when the file's owner (or root) asks:
 * the agent calls it on every open with the fstat it already made.  Not
 * for an overlayfs file (device.h overlay), whose cachestat answers
 * wrongly: cache_detector_choose() tells it. */
struct stat;
enum dn_cache_backend cache_detector_choose_stat(int fd, const struct stat *st,
						 enum dn_cache_backend wanted);

/* Per-file probe state (one per open file description; not thread-safe,
 * the caller serialises use of one struct). */
struct cache_probe {
	int fd;                 /* private O_RDONLY fd, -1 until opened    */
	uint64_t span_first;    /* examined region, in pages; empty when   */
	uint64_t span_end;      /*   span_first == span_end                */
	uint64_t unit_cached;   /* bit k: unit k of the region is cached   */
	uint64_t file_pages;    /* EOF in pages when the span was examined */
	uint64_t file_dev;      /* identity of the private fd's file, to   */
	uint64_t file_ino;      /*   notice if the program closed it       */
	uint64_t disk_pages;    /* pages the probes themselves read (charged) */
	/* Probe by faulting the page into a private mapping instead of
	 * read() (microbench_time_page_fault()): a probe then never starts
	 * the kernel's readahead from another reader's PG_readahead marker.
	 * Set by the agent, which paces what the kernel reads; cleared by
	 * the detector where mapping cannot work (old kernel, no mmap). */
	bool by_fault;
	/* The fd is closed before the caller returns to its program (gbp's
	 * one call): where the private reserve is full, it may stay at the
	 * number open() gave it rather than fail every probe with EMFILE. */
	bool transient;
};

/* Count cached pages of [first, first+count) with the given backend.
 * Pages past EOF count as not cached.  For probe, `probe` holds the
 * per-file state and `threshold_ns` the calibrated boundary (0 gives
 * -EINVAL); pages read by slow probes are added to probe->disk_pages so the
 * caller can charge them (a probe miss also brings its page into the
 * cache, DiscNice §6.1).  AUTO gives -EINVAL: choose first. */
int64_t cache_detector_count(int fd, enum dn_cache_backend backend, struct cache_probe *probe,
			     uint64_t threshold_ns, uint64_t first, uint64_t count);

/* Probe every page of [first, first+count) exactly, one byte each, for
 * small reads the unit sampling of §4.2 cannot resolve (a random 4 KiB
 * read says nothing about a 1.25 MiB unit).  A missed page is read in by
 * the probe itself - the read the program would have caused - and charged
 * to probe->disk_pages; afterwards every page of the range is cached.
 * Returns how many were cached before, or -errno. */
int64_t cache_probe_pages(int fd, struct cache_probe *probe, uint64_t threshold_ns, uint64_t first,
			  uint64_t count);

/* One timed probe for callers that order by probe time and draw no line
 * themselves (gbp, graybox-icl §4.1.2: "sorting the prediction units by
 * the time required for each probe", then 2-means): a one-byte read at
 * byte `offset` through probe's private description (opened from fd on
 * first use, POSIX_FADV_RANDOM so a miss reads one page), timed; then the
 * same byte read again, timed - the page is cached now, so that second
 * time is a known hit on this machine at this moment (the "known state"
 * technique of §2.2), an anchor for clustering without a threshold.
 * read_pages: what the kernel's per-thread count (ru_inblock) says the
 * first read submitted, in pages (0 where the kernel does not count).
 * Returns 1, 0 at or past EOF (nothing timed), or -errno. */
struct cache_probe_sample {
	uint64_t ns;            /* the probe                                  */
	uint64_t again_ns;      /* the same byte again: a hit (timed only)    */
	uint64_t read_pages;    /* pages the probe made the kernel read       */
	bool usage_known;       /* getrusage(RUSAGE_THREAD) answered, so:     */
	bool slept;             /* the probe slept (ru_nvcsw grew): a miss
				 * waits for its read in io_schedule(); a hit
				 * that lost the CPU does not sleep           */
	bool hit;               /* cache_probe_nowait(): the kernel's answer  */
};
int cache_probe_time(int fd, struct cache_probe *probe, uint64_t offset,
		     struct cache_probe_sample *out);

/* One probe that never waits for the disk: preadv2() of the byte at
 * `offset` with RWF_NOWAIT through probe's private description (as
 * cache_probe_time()).  The kernel reads it if its page is in the page
 * cache and up to date (out->hit), else fails with EAGAIN (a miss) -
 * filemap_get_pages() with IOCB_NOWAIT.  (A byte that came back because
 * the probe's own one-page read had already completed - a device faster
 * than the call - is a miss too: ru_inblock says the probe read exactly
 * that page.)  No threshold, no clustering, and
 * only read permission is needed.  The miss still starts the read of its
 * page (page_cache_sync_ra(); one page, POSIX_FADV_RANDOM), asynchronously:
 * the page is cached soon after, as with a timed probe (§4.1.4's
 * Heisenberg effect), but the caller does not wait for it.  out->ns is the
 * call's time, out->read_pages what ru_inblock says it submitted (0 where
 * the kernel does not count), out->again_ns 0.
 * Returns 1, 0 at or past EOF (nothing probed), -EOPNOTSUPP where there
 * are no nowait buffered reads (the file system lacks FMODE_NOWAIT:
 * EOPNOTSUPP; a kernel before 4.14: EINVAL; before 4.6: ENOSYS) - the
 * caller then times its probes instead -, or another -errno (-EIO...). */
int cache_probe_nowait(int fd, struct cache_probe *probe, uint64_t offset,
		       struct cache_probe_sample *out);

/* At most this many private descriptors stay open for probes at once,
 * process-wide, at the top of the descriptor range (common/private_fd.h);
 * a file beyond them reopens its descriptor when it is examined. */
#define CACHE_PROBE_MAX_FDS 4

void cache_probe_init(struct cache_probe *probe);
/* Close the private descriptor and forget what was examined; by_fault,
 * the owner's choice, stays. */
void cache_probe_close(struct cache_probe *probe);

/* The probe's threshold_ns is measured by the gray toolbox
 * (graybox/toolbox/microbench.h: microbench_probe_threshold(), timing the
 * same microbench_time_byte_read() the probe uses) and kept per device in
 * the calibration file (graybox/toolbox/calibration.h). */

#endif
