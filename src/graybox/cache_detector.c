/*
 * cache_detector.c - which pages of a file are in the page cache?
 * (DiscNice §4.2; gray-box FCCD, graybox-icl §4.1.  See cache_detector.h.)
 *
 * A probe is timed by the gray toolbox's microbench_time_byte_read(), the
 * same call that measures its threshold (microbench_probe_threshold()).
 *
 * This runs inside other people's programs: every public function saves and
 * restores errno, returns -errno, and the counting path allocates nothing
 * (mincore's vector is on the stack, the probe's byte too).
 */
#include "graybox/cache_detector.h"
#include "graybox/device.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/private_fd.h"
#include "graybox/toolbox/microbench.h"
#include "graybox/toolbox/timer.h"

/* cachestat(2) is 451 in the unified syscall table on every architecture
 * but alpha; glibc headers older than 2.39 do not have it. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

/* mincore in bounded pieces, so a 100 GiB range neither maps 100 GiB at
 * once nor needs a 25-million-byte vector: one mmap() covers a window, one
 * mincore() call a stack vector's worth of it. */
#define MINCORE_VEC_PAGES    4096u   /* bytes of stack vector per mincore()  */
#define MINCORE_WINDOW_PAGES 16384u  /* pages per mmap(): 64 MiB at 4 KiB    */

static uint64_t page_size(void)
{
	long size = sysconf(_SC_PAGESIZE);
	return size > 0 ? (uint64_t)size : 4096u;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Clamp [first, first+count) so that byte offsets stay within off_t (the
 * kernel's loff_t); pages beyond that cannot exist, let alone be cached. */
static uint64_t range_clamp(uint64_t first, uint64_t count, uint64_t page)
{
	uint64_t limit = (uint64_t)INT64_MAX / page;
	if (first >= limit)
		return 0;
	return min_u64(count, limit - first);
}

/* ---------------------------------------------------------------- cachestat */

int cache_stat_call(int fd, uint64_t off, uint64_t len, struct cache_stat *out)
{
	int saved = errno;
	struct cache_stat_range range = { .off = off, .len = len };
	int rc = 0;
	if (syscall(__NR_cachestat, fd, &range, out, 0) < 0)
		rc = -errno;
	errno = saved;
	return rc;
}

static int64_t count_cachestat(int fd, uint64_t first, uint64_t count, uint64_t page)
{
	struct cache_stat stat;
	/* filemap_cachestat() counts only the pages of a large folio that lie
	 * inside the range, so the count is exact per page; pages past EOF
	 * are simply absent from the mapping. */
	int rc = cache_stat_call(fd, first * page, count * page, &stat);
	if (rc < 0)
		return rc;
	return (int64_t)min_u64(stat.nr_cache, count);
}

static bool cachestat_works(int fd)
{
	struct cache_stat stat;
	/* ENOSYS before Linux 6.5; EPERM where can_do_cachestat() says the
	 * caller neither opened the file for writing, nor owns it, nor could
	 * open it for writing; EOPNOTSUPP on hugetlbfs.  On overlayfs it
	 * answers, wrongly: its reads go to the file beneath
	 * (ovl_read_iter() -> backing_file_read_iter()), and cachestat asks
	 * the overlay's own mapping, 0 cached for a file wholly in the cache
	 * (measured: 10 of 30 MB cached, cachestat 0, mincore and timed
	 * probes 0.33; its mmap maps the file beneath, backing_file_mmap()). */
	return cache_stat_call(fd, 0, page_size(), &stat) == 0 && !device_fd_on_overlayfs(fd);
}

/* ------------------------------------------------------------------ mincore */

static int64_t count_mincore(int fd, uint64_t first, uint64_t count, uint64_t page)
{
	unsigned char vec[MINCORE_VEC_PAGES];
	int64_t cached = 0;

	/* Mapping past EOF is allowed and mincore() reports those pages absent
	 * (only touching them would SIGBUS, and PROT_NONE never touches), so
	 * small ranges skip the fstat; big ones are clamped to EOF so a huge
	 * range over a small file does not walk windows of nothing. */
	if (count > MINCORE_WINDOW_PAGES) {
		struct stat st;
		if (fstat(fd, &st) < 0)
			return -errno;
		uint64_t eof = ((uint64_t)st.st_size + page - 1) / page;
		if (first >= eof)
			return 0;
		count = min_u64(count, eof - first);
	}

	while (count > 0) {
		uint64_t window = min_u64(count, MINCORE_WINDOW_PAGES);
		size_t bytes = (size_t)(window * page);
		/* PROT_NONE + MAP_PRIVATE: nothing can fault pages in, the
		 * mapping is not charged as writable (no overcommit accounting,
		 * no mapping_map_writable() that would block F_SEAL_WRITE), and
		 * mincore() still answers from the page cache for file VMAs
		 * (mincore_unmapped_range() -> mincore_page()). */
		void *map = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE, fd, (off_t)(first * page));
		if (map == MAP_FAILED)
			return -errno;
		for (uint64_t done = 0; done < window; done += MINCORE_VEC_PAGES) {
			uint64_t n = min_u64(window - done, MINCORE_VEC_PAGES);
			if (mincore((char *)map + done * page, (size_t)(n * page), vec) < 0) {
				int rc = -errno;
				munmap(map, bytes);
				return rc;
			}
			for (uint64_t i = 0; i < n; i++)
				cached += vec[i] & 1;
		}
		munmap(map, bytes);
		first += window;
		count -= window;
	}
	return cached;
}

/* can_do_mincore() (mm/mincore.c) answers honestly only if the caller owns
 * the inode, is capable (CAP_FOWNER), or could open it for writing
 * (file_permission(MAY_WRITE), which includes EROFS); for any other file
 * it reports every page resident.  That lie cannot be told from a truly
 * cached file, so we check the same conditions ourselves. */
static bool mincore_permitted(int fd)
{
	struct stat st;
	char path[40];

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	/* Root stands for CAP_FOWNER (inode_owner_or_capable()); the owner
	 * check uses euid, which fsuid follows unless setfsuid() was called. */
	if (geteuid() == 0 || st.st_uid == geteuid())
		return true;
	/* The magic link reaches the open inode even if it was unlinked. */
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	return faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0;
}

static bool mincore_works(int fd)
{
	/* Permission first, then a trial: mmap needs a readable regular file
	 * (EACCES for O_WRONLY, ENODEV where the filesystem cannot map). */
	return mincore_permitted(fd) && count_mincore(fd, 0, 1, page_size()) >= 0;
}

/* -------------------------------------------------------------------- probe */

void cache_probe_init(struct cache_probe *probe)
{
	memset(probe, 0, sizeof *probe);
	probe->fd = -1;
}

/* Is probe->fd still the description we opened?  A program that closes
 * descriptors it does not know of (daemonising, closefrom()) may have closed
 * ours and reused the number for a file of its own; we must then neither
 * probe through it nor close it.  Checks the file identity and the flags we
 * opened with (O_RDONLY, FD_CLOEXEC).  Fills *st on success. */
static bool probe_fd_is_ours(const struct cache_probe *probe, struct stat *st)
{
	if (probe->fd < 0 || fstat(probe->fd, st) < 0)
		return false;
	if ((uint64_t)st->st_dev != probe->file_dev || (uint64_t)st->st_ino != probe->file_ino)
		return false;
	int fl = fcntl(probe->fd, F_GETFL);
	int fdfl = fcntl(probe->fd, F_GETFD);
	return fl >= 0 && (fl & O_ACCMODE) == O_RDONLY && fdfl >= 0 && (fdfl & FD_CLOEXEC);
}

/* Private descriptors open now, process-wide (see probe_release()). */
static unsigned probe_fds_open;

/* Close a probe's descriptor: one in the reserve only while it is still
 * ours (private_fd.h), one the reserve had no room for as it is. */
static void probe_fd_close(int fd)
{
	if (private_fd_is_ours(fd))
		private_fd_close(fd);
	else
		close(fd);
}

/* Forget probe->fd; close it only if it is still ours. */
static void probe_fd_drop(struct cache_probe *probe, bool ours)
{
	if (probe->fd < 0)
		return;
	if (ours)
		probe_fd_close(probe->fd);
	__atomic_sub_fetch(&probe_fds_open, 1, __ATOMIC_RELAXED);
	probe->fd = -1;
}

void cache_probe_close(struct cache_probe *probe)
{
	int saved = errno;
	struct stat st;
	probe_fd_drop(probe, probe_fd_is_ours(probe, &st));
	bool by_fault = probe->by_fault, transient = probe->transient; /* the owner's */
	cache_probe_init(probe);
	probe->by_fault = by_fault;
	probe->transient = transient;
	errno = saved;
}

/* After a probe: a process probing more files at once than
 * CACHE_PROBE_MAX_FDS keeps no descriptor for the extra ones (they reopen
 * at their next examination), so the agent never holds more than a few
 * of the program's descriptor numbers - and none between examinations
 * where descriptors are scarce (private_fd_scarce()). */
static void probe_release(struct cache_probe *probe)
{
	if (__atomic_load_n(&probe_fds_open, __ATOMIC_RELAXED) > CACHE_PROBE_MAX_FDS ||
	    private_fd_scarce())
		probe_fd_drop(probe, true);
}

/* Open the private description (§4.2 probes must not disturb the program):
 * a fresh open of /proc/self/fd/N has its own offset and its own
 * file_ra_state, and POSIX_FADV_RANDOM on it sets FMODE_RANDOM so that
 * page_cache_sync_ra() reads only the probed page on a miss
 * (CACHE_PROBE_MISS_PAGES), not a readahead window. */
static int probe_open(struct cache_probe *probe, int fd, struct stat *st)
{
	char path[40];
	int pfd, rc;

	/* Only regular files: opening a FIFO through /proc would block. */
	if (fstat(fd, st) < 0)
		return -errno;
	if (!S_ISREG(st->st_mode))
		return -EINVAL;
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	pfd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (pfd < 0)
		return -errno;
	/* Not at the lowest free number, where the program expects its own
	 * next descriptor (private_fd.h) - unless the reserve is full and
	 * the fd is gone before the program runs again (transient): a host
	 * that holds the top numbers of its limit got EMFILE for every file
	 * probed. */
	if (probe->transient) {
		int high = private_fd_dup(pfd);
		if (high >= 0) {
			close(pfd);
			pfd = high;
		}
	} else {
		pfd = private_fd_move(pfd);
		if (pfd < 0)
			return pfd;
	}
	if (fstat(pfd, st) < 0) {
		rc = -errno;
		probe_fd_close(pfd);
		return rc;
	}
	rc = posix_fadvise(pfd, 0, 0, POSIX_FADV_RANDOM);   /* returns the error */
	if (rc != 0) {
		probe_fd_close(pfd);
		return -rc;
	}
	probe->fd = pfd;
	__atomic_add_fetch(&probe_fds_open, 1, __ATOMIC_RELAXED);
	probe->file_dev = (uint64_t)st->st_dev;
	probe->file_ino = (uint64_t)st->st_ino;
	probe->span_first = probe->span_end = 0;
	return 0;
}

/* The private description for fd, opened if it is not ours (never opened,
 * or closed behind our back: the number is not ours any more, so it is
 * forgotten rather than closed).  0 with *st filled, or -errno. */
static int probe_fd_ensure(struct cache_probe *probe, int fd, struct stat *st)
{
	if (probe_fd_is_ours(probe, st))
		return 0;
	probe_fd_drop(probe, false);
	return probe_open(probe, fd, st);
}

/* What this thread has done, per the kernel (getrusage RUSAGE_THREAD ->
 * accumulate_thread_rusage()): blocks of 512 bytes it submitted for reading
 * (task_io_get_inblock(), the counter behind read_bytes in /proc/PID/io,
 * charged in submit_bio()) and its voluntary context switches (nvcsw).
 * Taken once per examination and after each slow probe, so the hit path
 * pays one cheap syscall per M bytes. */
struct thread_usage {
	bool valid;
	uint64_t inblock;
	uint64_t voluntary;
};

static struct thread_usage thread_usage_now(void)
{
	struct rusage usage;
	struct thread_usage now = { .valid = false };
	if (getrusage(RUSAGE_THREAD, &usage) == 0) {
		now.valid = true;
		now.inblock = (uint64_t)usage.ru_inblock;
		now.voluntary = (uint64_t)usage.ru_nvcsw;
	}
	return now;
}

/* Judge a probe slower than the threshold.  Timing alone misjudges a hit
 * that lost the CPU, common under CPU contention (graybox-icl §4.1.2 sorts
 * probe times for the same robustness).  A real miss submitted a read
 * (inblock grows) or, if that accounting is compiled out
 * (CONFIG_TASK_IO_ACCOUNTING) or another thread's read was in flight,
 * waited for it in folio_wait_bit() -> io_schedule() (voluntary switch); a
 * preempted hit shows neither.  Returns the pages to charge, 0 for a hit:
 * what the kernel says was read, rounded up to pages.
 *
 * in_flight_is_hit (the agent's by_fault probes): a wait without a read of
 * our own is a page someone else is reading - most often the kernel's
 * window the program's last call started, which the agent has charged
 * (io_unseen_settle()); taken for a miss it cut the cached run the agent
 * adopts short of that window, and the kernel went on reading the next
 * one itself.  Only where the thread's count shows accounting works
 * (inblock > 0 at some time). */
static uint64_t probe_is_miss(struct thread_usage *before, uint64_t page, bool in_flight_is_hit)
{
	struct thread_usage now = thread_usage_now();
	uint64_t pages = CACHE_PROBE_MISS_PAGES;
	if (before->valid && now.valid) {
		uint64_t blocks = now.inblock - before->inblock;
		if (blocks > 0)
			pages = (blocks * 512 + page - 1) / page;
		else if (now.voluntary == before->voluntary || (in_flight_is_hit && now.inblock > 0))
			pages = 0;
	}
	*before = now;
	return pages;
}

/* One timed probe of the byte at offset, by fault or by read() (see
 * struct cache_probe's by_fault).  As microbench_time_byte_read(). */
static int probe_time(struct cache_probe *probe, uint64_t offset, uint64_t *ns)
{
	if (probe->by_fault) {
		int rc = microbench_time_page_fault(probe->fd, offset, ns);
		if (rc >= 0 || rc == -EIO || rc == -ENOMEM)
			return rc;
		probe->by_fault = false; /* no MADV_POPULATE_READ, or no mmap here */
	}
	return microbench_time_byte_read(probe->fd, offset, ns);
}

/* Examine the span of M bytes from page `first` (§4.2): one probe per
 * m-byte unit.  The paper probes "into fp + k*m" and lets a fast answer
 * mark the unit [fp + (k-1)*m, fp + k*m); we probe the last byte before
 * that boundary, fp + k*m - 1, so the probed page lies in the unit it
 * judges: with the boundary byte itself the last unit would be judged by
 * a page outside the span, and a unit just before a warm->cold edge would
 * always be called cold.  A unit cut by EOF is probed at its last byte in
 * the file; units past EOF are not probed.  A fast probe is a hit; a slow
 * one is checked against the kernel's own counters (probe_is_miss()). */
static int probe_examine(struct cache_probe *probe, int fd, uint64_t threshold_ns,
			 uint64_t first, uint64_t page)
{
	const uint64_t unit = CACHE_PROBE_UNIT >= page ? CACHE_PROBE_UNIT / page : 1;
	const unsigned units = (unsigned)(CACHE_PROBE_SPAN / CACHE_PROBE_UNIT);
	struct stat st;
	int rc;

	rc = probe_fd_ensure(probe, fd, &st);
	if (rc < 0)
		return rc;

	uint64_t size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
	probe->span_first = first;
	probe->span_end = first + units * unit;
	probe->unit_cached = 0;
	probe->file_pages = (size + page - 1) / page;

	struct thread_usage usage = thread_usage_now();
	for (unsigned k = 0; k < units; k++) {
		uint64_t unit_first = first + k * unit;
		if (unit_first >= probe->file_pages)
			break;
		uint64_t at = min_u64((unit_first + unit) * page - 1, size - 1);
		uint64_t ns;
		rc = probe_time(probe, at, &ns);
		if (rc < 0) {
			probe->span_first = probe->span_end = 0;
			return rc;
		}
		if (rc == 0)            /* truncated under us: nothing there */
			continue;
		uint64_t read = ns < threshold_ns ? 0 : probe_is_miss(&usage, page, probe->by_fault);
		if (read == 0)
			probe->unit_cached |= UINT64_C(1) << k;
		else                    /* the miss read pages: charge them */
			probe->disk_pages += read;
	}
	probe_release(probe);
	return 0;
}

static int64_t count_probe(int fd, struct cache_probe *probe, uint64_t threshold_ns,
			   uint64_t first, uint64_t count, uint64_t page)
{
	const uint64_t unit = CACHE_PROBE_UNIT >= page ? CACHE_PROBE_UNIT / page : 1;
	const unsigned units = (unsigned)(CACHE_PROBE_SPAN / CACHE_PROBE_UNIT);
	uint64_t end = first + count, cur = first;
	int64_t cached = 0;

	if (probe == NULL || threshold_ns == 0)
		return -EINVAL;
	while (cur < end) {
		/* §4.2: "If the current file pointer is within the M-bytes
		 * region that has already been examined, the cache detector is
		 * not invoked."  A range running past the span continues with
		 * a fresh span where the old one ends. */
		if (cur < probe->span_first || cur >= probe->span_end) {
			int rc = probe_examine(probe, fd, threshold_ns, cur, page);
			if (rc < 0)
				return rc;
			if (cur >= probe->file_pages)
				break;  /* past EOF: nothing cached */
		}
		uint64_t stop = min_u64(end, probe->span_end);
		uint64_t in_file = min_u64(stop, probe->file_pages);
		for (unsigned k = 0; k < units; k++) {
			if (!(probe->unit_cached >> k & 1))
				continue;
			uint64_t lo = probe->span_first + k * unit;
			uint64_t hi = min_u64(lo + unit, in_file);
			if (lo < cur)
				lo = cur;
			if (hi > lo)
				cached += (int64_t)(hi - lo);
		}
		cur = stop;
	}
	return cached;
}

int64_t cache_probe_pages(int fd, struct cache_probe *probe, uint64_t threshold_ns, uint64_t first,
			  uint64_t count)
{
	int saved = errno;
	const uint64_t page = page_size();
	struct stat st;
	int64_t hits = 0;
	int rc;

	if (probe == NULL || threshold_ns == 0) {
		errno = saved;
		return -EINVAL;
	}
	rc = probe_fd_ensure(probe, fd, &st);
	if (rc < 0) {
		errno = saved;
		return rc;
	}
	uint64_t size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
	struct thread_usage usage = thread_usage_now();
	for (uint64_t p = first; p < first + count && p * page < size; p++) {
		uint64_t ns;
		rc = probe_time(probe, p * page, &ns);
		if (rc < 0) {
			errno = saved;
			return rc;
		}
		uint64_t read = ns < threshold_ns ? 0 : probe_is_miss(&usage, page, probe->by_fault);
		if (read == 0)
			hits++;
		else
			probe->disk_pages += read;
	}
	probe_release(probe);
	errno = saved;
	return hits;
}

/* The start of one sample (cache_probe_time(), cache_probe_nowait()):
 * cleared, and the probe's private descriptor for fd.  0 or -errno. */
static int sample_begin(int fd, struct cache_probe *probe, uint64_t offset,
			struct cache_probe_sample *out, struct stat *st)
{
	memset(out, 0, sizeof *out);
	if (probe == NULL || offset > (uint64_t)INT64_MAX)
		return -EINVAL;
	return probe_fd_ensure(probe, fd, st);
}

/* What the thread's counters say of one probe since `before`: the pages
 * it submitted (charged to this thread: submit_bio()) and whether it
 * slept. */
static void sample_usage(struct cache_probe_sample *out, struct thread_usage before)
{
	const uint64_t page = page_size();
	struct thread_usage after = thread_usage_now();
	out->usage_known = before.valid && after.valid;
	if (out->usage_known && after.inblock > before.inblock)
		out->read_pages = ((after.inblock - before.inblock) * 512 + page - 1) / page;
	out->slept = out->usage_known && after.voluntary != before.voluntary;
}

int cache_probe_time(int fd, struct cache_probe *probe, uint64_t offset,
		     struct cache_probe_sample *out)
{
	int saved = errno;
	struct stat st;
	int rc = sample_begin(fd, probe, offset, out, &st);
	if (rc < 0) {
		errno = saved;
		return rc;
	}
	struct thread_usage before = thread_usage_now();
	rc = microbench_time_byte_read(probe->fd, offset, &out->ns);
	if (rc > 0) {
		sample_usage(out, before);
		rc = microbench_time_byte_read(probe->fd, offset, &out->again_ns);
		if (rc >= 0)
			rc = 1;
	}
	errno = saved;
	return rc;
}

/* RWF_NOWAIT is in <sys/uio.h> from glibc 2.26 on; Linux 4.14's value. */
#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

int cache_probe_nowait(int fd, struct cache_probe *probe, uint64_t offset,
		       struct cache_probe_sample *out)
{
	int saved = errno;
	struct stat st;
	char byte;
	int rc = sample_begin(fd, probe, offset, out, &st);
	if (rc < 0) {
		errno = saved;
		return rc;
	}
	if (offset >= (uint64_t)(st.st_size > 0 ? st.st_size : 0)) {
		/* Past EOF filemap_get_pages() finds no folio and says EAGAIN
		 * to a nowait read, not 0: that is no miss. */
		errno = saved;
		return 0;
	}
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct thread_usage before = thread_usage_now();
	ssize_t n;
	for (;;) {
		uint64_t start = timer_now_ns();
		n = preadv2(probe->fd, &iov, 1, (off_t)offset, RWF_NOWAIT);
		out->ns = timer_now_ns() - start;
		if (n >= 0 || errno != EINTR)
			break;
	}
	int error = errno;
	sample_usage(out, before);
	if (n > 0) {
		/* The byte came back: its page was cached - or the probe's
		 * own read of it, one page (FMODE_RANDOM), completed before
		 * filemap_get_pages() looked again, on a device that answers
		 * within the call (this VM's host-cached disk, ~30 us, about
		 * one miss in a thousand).  That read is a miss.  A cached
		 * page with a readahead mark (PG_readahead) starts the async
		 * readahead of the pages after it, more than one page: a hit. */
		out->hit = out->read_pages != CACHE_PROBE_MISS_PAGES;
		rc = 1;
	} else if (n == 0) {
		rc = 0;         /* truncated under us */
	} else if (error == EAGAIN) {
		/* A miss: the kernel started the page's read and returned. */
		rc = 1;
	} else if (error == EOPNOTSUPP || error == EINVAL || error == ENOSYS) {
		rc = -EOPNOTSUPP;
	} else {
		rc = -error;
	}
	probe_release(probe);
	errno = saved;
	return rc;
}

/* ------------------------------------------------------------ the interface */

/* Does this kernel have cachestat at all?  0 unknown, 1 yes, -1 no; asked
 * once per process (a benign race asks twice). */
static int kernel_cachestat;

enum dn_cache_backend cache_detector_choose_stat(int fd, const struct stat *st,
						 enum dn_cache_backend wanted)
{
	/* can_do_cachestat() admits the owner and CAP_FOWNER outright: for
	 * them (the usual case, a job reading its own files) no trial call
	 * is needed, only the kernel's support, learnt once. */
	uid_t euid = geteuid();
	if (wanted == DN_CACHE_AUTO && (st->st_uid == euid || euid == 0)) {
		int known = __atomic_load_n(&kernel_cachestat, __ATOMIC_RELAXED);
		if (known == 0) {
			known = cachestat_works(fd) ? 1 : -1;
			__atomic_store_n(&kernel_cachestat, known, __ATOMIC_RELAXED);
		}
		if (known > 0)
			return DN_CACHE_CACHESTAT;
	}
	return cache_detector_choose(fd, wanted);
}

enum dn_cache_backend cache_detector_choose(int fd, enum dn_cache_backend wanted)
{
	int saved = errno;
	enum dn_cache_backend got = DN_CACHE_PROBE;

	switch (wanted) {
	case DN_CACHE_PROBE:
		break;
	case DN_CACHE_CACHESTAT:
		if (cachestat_works(fd))
			got = DN_CACHE_CACHESTAT;
		break;
	case DN_CACHE_MINCORE:
		if (mincore_works(fd))
			got = DN_CACHE_MINCORE;
		break;
	case DN_CACHE_AUTO:
	default:
		/* cachestat's EPERM is the same test as can_do_mincore()
		 * (bar FMODE_WRITE), so on 6.5+ the mincore step matters only
		 * for kernels without cachestat. */
		if (cachestat_works(fd))
			got = DN_CACHE_CACHESTAT;
		else if (mincore_works(fd))
			got = DN_CACHE_MINCORE;
		break;
	}
	errno = saved;
	return got;
}

int64_t cache_detector_count(int fd, enum dn_cache_backend backend, struct cache_probe *probe,
			     uint64_t threshold_ns, uint64_t first, uint64_t count)
{
	int saved = errno;
	uint64_t page = page_size();
	int64_t rc;

	count = range_clamp(first, count, page);
	if (count == 0)
		return 0;   /* cachestat would read len 0 as "to EOF" */
	switch (backend) {
	case DN_CACHE_CACHESTAT:
		rc = count_cachestat(fd, first, count, page);
		break;
	case DN_CACHE_MINCORE:
		rc = count_mincore(fd, first, count, page);
		break;
	case DN_CACHE_PROBE:
		rc = count_probe(fd, probe, threshold_ns, first, count, page);
		break;
	case DN_CACHE_AUTO:
	default:
		rc = -EINVAL;
		break;
	}
	errno = saved;
	return rc;
}
