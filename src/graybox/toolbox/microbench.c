/*
 * microbench.c - the gray toolbox's microbenchmarks (graybox-icl §5; see
 * microbench.h).
 *
 * Linked into the agent too (through microbench_time_byte_read(), the
 * probe's timed read): no libm, every public function keeps errno.
 */
#include "graybox/toolbox/microbench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/proc_io.h"
#include "graybox/toolbox/stats.h"

/* The probe threshold: small enough to finish in ~0.1 s on a virtio disk,
 * large enough that every miss sample reads a page nobody has touched
 * since POSIX_FADV_DONTNEED. */
#define PROBE_FILE_BYTES (UINT64_C(8) << 20)
#define PROBE_HITS       512u
#define PROBE_MISSES     256u

#define WRITE_CHUNK      (1u << 20)

static uint64_t page_size(void)
{
	long size = sysconf(_SC_PAGESIZE);
	return size > 0 ? (uint64_t)size : 4096u;
}

int microbench_time_byte_read(int fd, uint64_t offset, uint64_t *ns)
{
	char byte;
	for (;;) {
		uint64_t start = timer_now_ns();
		ssize_t n = pread(fd, &byte, 1, (off_t)offset);
		uint64_t end = timer_now_ns();
		if (n >= 0) {
			*ns = end - start;
			return (int)n;
		}
		if (errno != EINTR)
			return -errno;
	}
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

int microbench_time_page_fault(int fd, uint64_t offset, uint64_t *ns)
{
	int saved = errno;
	uint64_t page = page_size(), base = offset / page * page;
	void *map = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, (off_t)base);
	if (map == MAP_FAILED) {
		int rc = -errno;
		errno = saved;
		return rc;
	}
	int rc = madvise(map, (size_t)page, MADV_RANDOM) == 0 ? 1 : -errno;
	while (rc == 1) {
		uint64_t start = timer_now_ns();
		int r = madvise(map, (size_t)page, MADV_POPULATE_READ);
		uint64_t end = timer_now_ns();
		if (r == 0) {
			*ns = end - start;
			break;
		}
		rc = errno == EFAULT ? 0 : -errno; /* EFAULT: past EOF */
		if (rc == -EINTR)
			rc = 1;
	}
	munmap(map, (size_t)page);
	errno = saved;
	return rc;
}

int microbench_scratch_open(const char *dir)
{
	int saved = errno;
	char path[4096];
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		if ((size_t)snprintf(path, sizeof path, "%s/.discnice-calibrate-XXXXXX", dir) >=
		    sizeof path) {
			fd = -ENAMETOOLONG;
		} else {
			fd = mkostemp(path, O_CLOEXEC);
			if (fd < 0)
				fd = -errno;
			else
				unlink(path);
		}
	}
	errno = saved;
	return fd;
}

static void times_summary(uint64_t *samples, uint32_t n, struct microbench_times *out)
{
	stats_sort_u64(samples, n);
	out->median_ns = stats_median_u64(samples, n);
	out->p10_ns = stats_percentile_u64(samples, n, 10);
	out->p90_ns = stats_percentile_u64(samples, n, 90);
	out->p99_ns = stats_percentile_u64(samples, n, 99);
	out->samples = n;
}

bool microbench_file_fits(uint64_t bytes)
{
	struct rlimit limit;
	return getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY ||
	       limit.rlim_cur >= bytes;
}

/* Fill the scratch file with `bytes` of a non-zero pattern (no sparse
 * holes: every page must really be on disk) and make the pages clean, so
 * that DONTNEED can drop them. */
static int scratch_fill(int fd, uint64_t bytes)
{
	if (!microbench_file_fits(bytes))
		return -EFBIG;
	char *buf = malloc(WRITE_CHUNK);
	if (!buf)
		return -ENOMEM;
	memset(buf, 0xa5, WRITE_CHUNK);
	int rc = 0;
	for (uint64_t done = 0; done < bytes;) {
		size_t want = bytes - done < WRITE_CHUNK ? (size_t)(bytes - done) : WRITE_CHUNK;
		ssize_t n = write(fd, buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		done += (uint64_t)n;
	}
	free(buf);
	if (rc == 0 && fdatasync(fd) < 0)
		rc = -errno;
	return rc;
}

/* Pages of the file resident now: mincore over a PROT_NONE mapping (we
 * own the file, so can_do_mincore() answers honestly). */
static int64_t resident_pages(int fd, uint64_t bytes)
{
	const uint64_t page = page_size();
	uint64_t pages = (bytes + page - 1) / page;
	unsigned char *vec = malloc(pages);
	if (!vec)
		return -ENOMEM;
	void *map = mmap(NULL, (size_t)bytes, PROT_NONE, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		free(vec);
		return -errno;
	}
	int64_t resident = 0;
	if (mincore(map, (size_t)bytes, vec) < 0)
		resident = -errno;
	else
		for (uint64_t i = 0; i < pages; i++)
			resident += vec[i] & 1;
	munmap(map, (size_t)bytes);
	free(vec);
	return resident;
}

/* Evict this file only (never the global caches), and check that it
 * worked: on tmpfs DONTNEED does nothing and there is no miss to time. */
static int scratch_evict(int fd, uint64_t bytes)
{
	for (int attempt = 0;; attempt++) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		int64_t resident = resident_pages(fd, bytes);
		if (resident < 0)
			return (int)resident;
		if (resident == 0)
			return 0;
		if (attempt == 2)
			return -EOPNOTSUPP;
		fdatasync(fd);
	}
}

/* A second description of the scratch file, set up like a probe's. */
static int reopen_random(int fd)
{
	char path[40];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	int rfd = open(path, O_RDONLY | O_CLOEXEC);
	if (rfd < 0)
		return -errno;
	int adv = posix_fadvise(rfd, 0, 0, POSIX_FADV_RANDOM);
	if (adv != 0) {
		close(rfd);
		return -adv;
	}
	return rfd;
}

static int time_byte_reads(int fd, uint64_t first_page, uint64_t stride, uint32_t n, uint64_t page,
			   uint64_t *out)
{
	for (uint32_t i = 0; i < n; i++) {
		int rc = microbench_time_byte_read(fd, (first_page + i * stride) * page, &out[i]);
		if (rc < 0)
			return rc;
		if (rc == 0)
			return -EIO;
	}
	return 0;
}

int64_t microbench_probe_threshold(const char *dir, struct microbench_probe_threshold *out)
{
	int saved = errno;
	const uint64_t page = page_size();
	const uint64_t pages = PROBE_FILE_BYTES / page;
	uint64_t *hits = NULL, *misses = NULL, *miss_bytes = NULL;
	int fd = -1, rfd = -1;
	int64_t ret;
	struct proc_io io_before, io_after;
	bool have_io;

	if (pages < 2 * PROBE_MISSES) {
		ret = -EINVAL;  /* pages bigger than 16 KiB: too few to sample */
		goto out;
	}
	hits = malloc(PROBE_HITS * sizeof *hits);
	misses = malloc(PROBE_MISSES * sizeof *misses);
	miss_bytes = malloc(PROBE_MISSES * sizeof *miss_bytes);
	if (!hits || !misses || !miss_bytes) {
		ret = -ENOMEM;
		goto out;
	}
	fd = microbench_scratch_open(dir);
	if (fd < 0) {
		ret = fd;
		goto out;
	}
	if ((ret = scratch_fill(fd, PROBE_FILE_BYTES)) < 0)
		goto out;
	/* Time through a description set up exactly like a probe's. */
	rfd = reopen_random(fd);
	if (rfd < 0) {
		ret = rfd;
		goto out;
	}

	/* Hits: the pages are cached since the write; one untimed pass first
	 * so the timed one sees warm CPU caches and TLB, as a probe that
	 * follows the program's own reads does. */
	const uint64_t hit_stride = pages / PROBE_HITS;
	if ((ret = time_byte_reads(rfd, 0, hit_stride, PROBE_HITS, page, hits)) < 0 ||
	    (ret = time_byte_reads(rfd, 0, hit_stride, PROBE_HITS, page, hits)) < 0)
		goto out;

	if ((ret = scratch_evict(fd, PROBE_FILE_BYTES)) < 0)
		goto out;
	/* Misses, one at a time between two readings of /proc/self/io: the
	 * disk bytes a miss costs is the median of those deltas, not their
	 * mean, so that a page this process faults in meanwhile (its own text,
	 * a library's), which the kernel also charges to read_bytes
	 * (submit_bio() -> task_io_account_read()), does not count as the
	 * probe's. */
	const uint64_t miss_stride = pages / PROBE_MISSES;
	have_io = proc_io_read(0, &io_before) == 0;
	for (uint32_t i = 0; i < PROBE_MISSES; i++) {
		if ((ret = time_byte_reads(rfd, miss_stride / 2 + i * miss_stride, 0, 1, page,
					   &misses[i])) < 0)
			goto out;
		if (have_io && (have_io = proc_io_read(0, &io_after) == 0)) {
			miss_bytes[i] = io_after.read_bytes - io_before.read_bytes;
			io_before = io_after;
		}
	}

	stats_sort_u64(hits, PROBE_HITS);
	stats_sort_u64(misses, PROBE_MISSES);
	uint64_t hit_median = stats_percentile_u64(hits, PROBE_HITS, 50);
	uint64_t miss_median = stats_percentile_u64(misses, PROBE_MISSES, 50);
	if (miss_median <= hit_median) {
		ret = -EOPNOTSUPP;      /* a miss is no slower: timing tells nothing */
		goto out;
	}
	uint64_t threshold = stats_threshold_between(hits, PROBE_HITS, misses, PROBE_MISSES);
	if (out) {
		memset(out, 0, sizeof *out);
		out->hit_median_ns = hit_median;
		out->hit_p99_ns = stats_percentile_u64(hits, PROBE_HITS, 99);
		out->miss_p10_ns = stats_percentile_u64(misses, PROBE_MISSES, 10);
		out->miss_median_ns = miss_median;
		out->threshold_ns = threshold;
		out->hits = PROBE_HITS;
		out->misses = PROBE_MISSES;
		if (have_io) {
			stats_sort_u64(miss_bytes, PROBE_MISSES);
			out->miss_read_bytes = stats_percentile_u64(miss_bytes, PROBE_MISSES, 50);
		}
	}
	ret = (int64_t)threshold;
out:
	if (rfd >= 0)
		close(rfd);
	if (fd >= 0)
		close(fd);
	free(miss_bytes);
	free(misses);
	free(hits);
	errno = saved;
	return ret;
}

/* A reproducible shuffle of 0..n-1 (xorshift, Fisher-Yates): random page
 * order without depending on the caller's rand() state. */
static void shuffle_pages(uint64_t *order, uint64_t n, uint64_t seed)
{
	for (uint64_t i = 0; i < n; i++)
		order[i] = i;
	uint64_t x = seed | 1;
	for (uint64_t i = n; i > 1; i--) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t j = x % i, t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
}

int microbench_disk(const char *dir, uint64_t file_bytes, uint32_t reads,
		    struct microbench_disk *out)
{
	int saved = errno;
	const uint64_t page = page_size();
	file_bytes -= file_bytes % page;
	const uint64_t pages = file_bytes / page;
	uint64_t *samples = NULL, *order = NULL;
	char *buf = NULL;
	int fd = -1, rfd = -1, rc;

	memset(out, 0, sizeof *out);
	if (file_bytes < (UINT64_C(4) << 20) || reads == 0 || reads > pages / 2) {
		rc = -EINVAL;
		goto out;
	}
	samples = malloc(reads * sizeof *samples);
	order = malloc(pages * sizeof *order);
	buf = malloc(WRITE_CHUNK);
	if (!samples || !order || !buf) {
		rc = -ENOMEM;
		goto out;
	}
	fd = microbench_scratch_open(dir);
	if (fd < 0) {
		rc = fd;
		goto out;
	}
	if ((rc = scratch_fill(fd, file_bytes)) < 0 || (rc = scratch_evict(fd, file_bytes)) < 0)
		goto out;
	out->file_bytes = file_bytes;

	/* Sequential: one cold pass of 1 MiB read()s, the kernel's readahead
	 * doing what it does for any streaming reader. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	uint64_t start = timer_now_ns();
	for (uint64_t done = 0; done < file_bytes;) {
		ssize_t n = pread(fd, buf, WRITE_CHUNK, (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto out;
		}
		done += (uint64_t)n;
	}
	uint64_t took = timer_now_ns() - start;
	out->sequential_read_bps = took ? (uint64_t)((unsigned __int128)file_bytes *
						     TIMER_NS_PER_SEC / took) : 0;

	/* Random: 4 KiB preads of distinct cold pages in shuffled order,
	 * without readahead (FMODE_RANDOM): each one seeks and reads. */
	if ((rc = scratch_evict(fd, file_bytes)) < 0)
		goto out;
	rfd = reopen_random(fd);
	if (rfd < 0) {
		rc = rfd;
		goto out;
	}
	shuffle_pages(order, pages, 0x9e3779b97f4a7c15u ^ pages);
	for (uint32_t i = 0; i < reads; i++) {
		for (;;) {
			uint64_t t0 = timer_now_ns();
			ssize_t n = pread(rfd, buf, (size_t)page, (off_t)(order[i] * page));
			uint64_t t1 = timer_now_ns();
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				rc = n < 0 ? -errno : -EIO;
				goto out;
			}
			samples[i] = t1 - t0;
			break;
		}
	}
	times_summary(samples, reads, &out->random_read);

	/* A page from disk: the first touch of a cold page of a mapping;
	 * MADV_RANDOM turns off fault-around and mmap readahead
	 * (do_sync_mmap_readahead() with VM_RAND_READ reads one page), so
	 * each touch is one major fault reading one page, as a swap-in is. */
	if ((rc = scratch_evict(fd, file_bytes)) < 0)
		goto out;
	volatile char *map = mmap(NULL, (size_t)file_bytes, PROT_READ, MAP_SHARED, rfd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		goto out;
	}
	madvise((void *)map, (size_t)file_bytes, MADV_RANDOM);
	for (uint32_t i = 0; i < reads; i++) {
		uint64_t t0 = timer_now_ns();
		(void)map[order[reads + i] * page];
		samples[i] = timer_now_ns() - t0;
	}
	munmap((void *)map, (size_t)file_bytes);
	times_summary(samples, reads, &out->page_from_disk);
	rc = 0;
out:
	if (rfd >= 0)
		close(rfd);
	if (fd >= 0)
		close(fd);
	free(buf);
	free(order);
	free(samples);
	errno = saved;
	return rc;
}

int microbench_memory(uint32_t pages, struct microbench_memory *out)
{
	int saved = errno;
	const uint64_t page = page_size();
	size_t bytes = (size_t)pages * page;
	uint64_t *samples = NULL;
	int rc = 0;

	memset(out, 0, sizeof *out);
	if (pages == 0) {
		errno = saved;
		return -EINVAL;
	}
	samples = malloc(pages * sizeof *samples);
	char *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!samples || mem == MAP_FAILED) {
		rc = mem == MAP_FAILED ? -errno : -ENOMEM;
		goto out;
	}
	/* One 4 KiB page per first touch, never a 2 MiB huge page: what MAC
	 * probes (gb_alloc.c asks for the same). */
	madvise(mem, bytes, MADV_NOHUGEPAGE);
	for (uint32_t i = 0; i < pages; i++)
		samples[i] = microbench_page_write_ns(mem + (size_t)i * page);
	times_summary(samples, pages, &out->alloc_zero);
	for (uint32_t i = 0; i < pages; i++)
		samples[i] = microbench_page_write_ns(mem + (size_t)i * page);
	times_summary(samples, pages, &out->in_memory);
out:
	if (mem != MAP_FAILED)
		munmap(mem, bytes);
	free(samples);
	errno = saved;
	return rc;
}

uint64_t microbench_page_threshold(const struct microbench_memory *memory,
				   const struct microbench_disk *disk)
{
	uint64_t fast = memory->alloc_zero.p99_ns > memory->in_memory.p99_ns
		      ? memory->alloc_zero.p99_ns : memory->in_memory.p99_ns;
	uint64_t t = stats_threshold_apart(fast, disk->page_from_disk.p10_ns);
	if (t == 0)     /* overlapping tails: between the medians */
		t = stats_threshold_apart(memory->alloc_zero.median_ns,
					  disk->page_from_disk.median_ns);
	return t;
}
