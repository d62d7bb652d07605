/* Description: cache detector - cachestat, mincore, calibrated probes and RWF_NOWAIT probes agree with the page cache of a real file; auto falls back to probe where the kernel refuses; a nowait miss reads one page and does not wait */
/*
 * A 32 MiB file is made cold (fsync + POSIX_FADV_DONTNEED), then given a
 * known warm pattern by reads through a POSIX_FADV_RANDOM description (so
 * readahead adds nothing):
 *   [0, 16 MiB)                       warm
 *   [20, 21.25) and [22.5, 23.75) MiB  warm (alternate probe units)
 *   everything else                   cold
 * cachestat and mincore must report exactly that; the probe backend must
 * classify whole units, and its charged disk_pages must match the kernel's
 * own read_bytes in /proc/self/io.  A nowait probe (preadv2 RWF_NOWAIT)
 * must answer each page as cachestat does, and a miss must read that one
 * page and no other (read_bytes, cachestat around it).  As root, a child
 * that drops to nobody checks the permission fallback (can_do_cachestat /
 * can_do_mincore) and that nowait probes need only read permission.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc_io.h"
#include "graybox/cache_detector.h"
#include "graybox/toolbox/microbench.h"
#include "unit.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

#define MIB        (UINT64_C(1) << 20)
#define FILE_BYTES (32 * MIB)
#define NOBODY     65534

static uint64_t page;
static uint64_t file_pages;
static unsigned char *expect;   /* expected residency per page */
static char path[4096];         /* the test file, removed at exit */
static pid_t owner;

static void remove_file(void)
{
	if (getpid() == owner)  /* not from the forked child */
		unlink(path);
}

static void make_dir(const char *dir)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", dir);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		mkdir(tmp, 0755);
		*p = '/';
	}
	if (mkdir(tmp, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "mkdir %s: %s\n", dir, strerror(errno));
		exit(1);
	}
}

/* Make [off, off+len) bytes warm exactly: FADV_RANDOM means
 * force_page_cache_ra() reads only what is asked. */
static void warm(int rfd, uint64_t off, uint64_t len)
{
	static char buf[1 << 20];
	while (len > 0) {
		size_t n = len < sizeof buf ? (size_t)len : sizeof buf;
		CHECK(pread(rfd, buf, n, (off_t)off) == (ssize_t)n);
		for (uint64_t p = off / page; p < (off + n) / page; p++)
			expect[p] = 1;
		off += n;
		len -= n;
	}
}

/* The warm pattern of the top comment. */
static void warm_pattern(int rfd)
{
	warm(rfd, 0, 16 * MIB);
	warm(rfd, 20 * MIB, 5 * MIB / 4);
	warm(rfd, 45 * MIB / 2, 5 * MIB / 4);
}

static uint64_t expected(uint64_t first, uint64_t count)
{
	uint64_t n = 0;
	for (uint64_t p = first; p < first + count && p < file_pages; p++)
		n += expect[p];
	return n;
}

static uint64_t read_bytes(void)
{
	struct proc_io io;
	CHECK(proc_io_read(0, &io) == 0);
	return io.read_bytes;
}

static int64_t count(int fd, enum dn_cache_backend backend, uint64_t first, uint64_t n)
{
	errno = 4242;
	int64_t got = cache_detector_count(fd, backend, NULL, 0, first, n);
	CHECK(errno == 4242);   /* never touches the caller's errno */
	return got;
}

/* cachestat and mincore against each other and against the pattern. */
static void check_exact(int fd)
{
	for (uint64_t first = 0; first < file_pages; first += 64) {
		CHECK_EQ_U64(count(fd, DN_CACHE_CACHESTAT, first, 64), expected(first, 64));
		CHECK_EQ_U64(count(fd, DN_CACHE_MINCORE, first, 64), expected(first, 64));
	}
	/* Unaligned, single pages, across the edges of the pattern. */
	const uint64_t edges[] = { 0, 16 * MIB / page, 20 * MIB / page, 45 * MIB / 2 / page };
	for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
		for (uint64_t d = 0; d < 5; d++) {
			uint64_t first = edges[e] > 2 ? edges[e] - 2 + d : d;
			CHECK_EQ_U64(count(fd, DN_CACHE_CACHESTAT, first, 1), expected(first, 1));
			CHECK_EQ_U64(count(fd, DN_CACHE_MINCORE, first, 1), expected(first, 1));
			CHECK_EQ_U64(count(fd, DN_CACHE_MINCORE, first, 333), expected(first, 333));
		}
	}
	/* Whole file, a 100 GiB range (bounded pieces, clamped at EOF), a
	 * range past EOF, and one past what off_t can address. */
	uint64_t all = expected(0, file_pages);
	uint64_t huge = (100 * 1024 * MIB) / page;
	CHECK_EQ_U64(count(fd, DN_CACHE_CACHESTAT, 0, file_pages), all);
	CHECK_EQ_U64(count(fd, DN_CACHE_MINCORE, 0, file_pages), all);
	CHECK_EQ_U64(count(fd, DN_CACHE_CACHESTAT, 0, huge), all);
	CHECK_EQ_U64(count(fd, DN_CACHE_MINCORE, 0, huge), all);
	CHECK_EQ_U64(count(fd, DN_CACHE_MINCORE, 0, UINT64_MAX), all);
	CHECK_EQ_U64(count(fd, DN_CACHE_CACHESTAT, file_pages - 3, 100), expected(file_pages - 3, 100));
	CHECK_EQ_U64(count(fd, DN_CACHE_MINCORE, file_pages - 3, 100), expected(file_pages - 3, 100));
	CHECK_EQ_U64(count(fd, DN_CACHE_MINCORE, file_pages + 10, 100), 0);
	CHECK_EQ_U64(count(fd, DN_CACHE_CACHESTAT, UINT64_MAX - 5, 100), 0);
	CHECK_EQ_U64(count(fd, DN_CACHE_MINCORE, UINT64_MAX - 5, 100), 0);
	CHECK(count(fd, DN_CACHE_AUTO, 0, 1) == -EINVAL);
}

/* One probe query: returns cached pages; checks the pages it charged
 * against the kernel's read_bytes and against the cache's growth. */
static int64_t probe_query(int fd, struct cache_probe *probe, uint64_t threshold,
			   uint64_t first, uint64_t n, uint64_t want_misses)
{
	uint64_t disk_before = probe->disk_pages, rb_before = read_bytes();
	int64_t cached_before = count(fd, DN_CACHE_CACHESTAT, 0, file_pages);
	errno = 4242;
	int64_t got = cache_detector_count(fd, DN_CACHE_PROBE, probe, threshold, first, n);
	CHECK(errno == 4242);
	uint64_t charged = probe->disk_pages - disk_before;
	uint64_t rb = read_bytes() - rb_before;
	CHECK_EQ_U64(charged, want_misses);
	CHECK_EQ_U64(rb, charged * page);       /* the kernel agrees on the cost */
	/* Each miss brought its page in (DiscNice §6.1, graybox-icl §4.1.1),
	 * and the probe brought in nothing it did not charge.  The cache may
	 * also lose a few of the file's cold pages meanwhile to the machine's
	 * own reclaim (seen once in CI: 8 pages fewer, none charged), so the
	 * growth may fall short of the charge by a little, never exceed it. */
	int64_t grown = count(fd, DN_CACHE_CACHESTAT, 0, file_pages) - cached_before;
	CHECK(grown <= (int64_t)charged);
	CHECK(grown + 64 >= (int64_t)charged);
	return got;
}

static void check_probe(int fd, uint64_t threshold)
{
	const uint64_t unit = CACHE_PROBE_UNIT / page;  /* 320 pages */
	const uint64_t span = CACHE_PROBE_SPAN / page;  /* 1280 pages */
	struct cache_probe probe;
	int app_flags = fcntl(fd, F_GETFL);
	off_t app_offset = lseek(fd, 0, SEEK_CUR);

	cache_probe_init(&probe);
	CHECK(cache_detector_count(fd, DN_CACHE_PROBE, &probe, 0, 0, 1) == -EINVAL);

	/* Warm span: four fast probes, nothing charged. */
	CHECK_EQ_U64(probe_query(fd, &probe, threshold, 0, span, 0), span);
	CHECK(probe.fd >= 0 && probe.fd != fd);
	CHECK_EQ_U64(probe.unit_cached, 0xf);

	/* The span at 20 MiB: warm, cold, warm, cold units. */
	uint64_t at20 = 20 * MIB / page;
	CHECK_EQ_U64(probe_query(fd, &probe, threshold, at20, span, 2), 2 * unit);
	CHECK_EQ_U64(probe.unit_cached, 0x5);
	/* Inside the examined span the results are reused: no probes. */
	CHECK_EQ_U64(probe_query(fd, &probe, threshold, at20 + 100, 10, 0), 10);
	CHECK_EQ_U64(probe_query(fd, &probe, threshold, at20 + unit + 7, 10, 0), 0);
	/* Spanning two units of the examined region. */
	CHECK_EQ_U64(probe_query(fd, &probe, threshold, at20 + 2 * unit - 5, 10, 0), 5);

	/* A cold span: four misses, one page each. */
	uint64_t at26 = 26 * MIB / page;
	CHECK_EQ_U64(probe_query(fd, &probe, threshold, at26, span, 4), 0);
	CHECK_EQ_U64(probe.unit_cached, 0);

	/* A range longer than M continues with fresh spans: [8, 16) MiB is
	 * warm (2048 pages, two spans beginning at 8 and 13 MiB; the second
	 * runs past 16 MiB, its cold tail units miss). */
	uint64_t at8 = 8 * MIB / page;
	int64_t got = probe_query(fd, &probe, threshold, at8, 2048, 2);
	/* Second span [13, 18) MiB: units [13,14.25) [14.25,15.5) warm,
	 * [15.5,16.75) probed at 16.75 MiB - 1: cold, so the 128 warm pages of
	 * [15.5, 16) in it are counted cold - the granularity of §4.2; the
	 * whole span is examined, so [16.75,18) costs a miss too. */
	CHECK_EQ_U64(got, 2048 - 128);

	/* EOF: a span cut by it probes the file's last byte; past it nothing
	 * is probed and nothing is cached. */
	CHECK_EQ_U64(probe_query(fd, &probe, threshold, file_pages + 5, 100, 0), 0);
	uint64_t tail = file_pages - unit / 2;  /* last unit half in the file */
	CHECK_EQ_U64(probe_query(fd, &probe, threshold, tail, span, 1), 0);
	CHECK_EQ_U64(probe.file_pages, file_pages);

	/* The program's description is untouched. */
	CHECK(fcntl(fd, F_GETFL) == app_flags);
	CHECK(lseek(fd, 0, SEEK_CUR) == app_offset);

	/* A program that closes our descriptor behind our back: we reopen,
	 * and never close a number that is no longer ours. */
	int stolen = probe.fd;
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(null >= 0 && dup3(null, stolen, O_CLOEXEC) == stolen);
	close(null);
	int other = stolen;
	probe.span_first = probe.span_end = 0;
	CHECK_EQ_U64(probe_query(fd, &probe, threshold, 0, span, 0), span);
	CHECK(probe.fd != other);
	cache_probe_close(&probe);
	CHECK(fcntl(other, F_GETFD) >= 0);      /* still open */
	CHECK(probe.fd == -1);
	close(other);
}

/* cachestat's count of [first, first + n) pages. */
static uint64_t cached_pages(int fd, uint64_t first, uint64_t n)
{
	int64_t got = count(fd, DN_CACHE_CACHESTAT, first, n);
	CHECK(got >= 0);
	return (uint64_t)got;
}

/* One nowait probe of a byte in page p, judged by cachestat: a hit reads
 * nothing; a miss submits the read of page p alone (its folio is in the
 * mapping at once, locked until the read completes) and returns without
 * waiting for it.  Returns whether it hit. */
static bool nowait_page(int fd, struct cache_probe *probe, uint64_t p, uint64_t *miss_ns)
{
	struct cache_probe_sample s;
	uint64_t lo = p >= 16 ? p - 16 : 0;
	uint64_t truth = cached_pages(fd, p, 1), around = cached_pages(fd, lo, 33);
	uint64_t before = read_bytes();
	errno = 4242;
	CHECK(cache_probe_nowait(fd, probe, p * page + 123, &s) == 1);
	CHECK(errno == 4242);
	uint64_t read = read_bytes() - before;
	if (s.hit != (truth == 1))
		fprintf(stderr, "page %" PRIu64 ": truth %" PRIu64 " hit %d ns %" PRIu64 " read %" PRIu64
			" now %" PRIu64 "\n", p, truth, s.hit, s.ns, read, cached_pages(fd, p, 1));
	CHECK(s.hit == (truth == 1));
	CHECK_EQ_U64(s.again_ns, 0);
	if (s.hit) {
		CHECK_EQ_U64(read, 0);
		CHECK_EQ_U64(cached_pages(fd, lo, 33), around);
	} else {
		CHECK(read <= page);            /* that page, or nothing yet */
		CHECK(s.read_pages <= 1);
		CHECK_EQ_U64(cached_pages(fd, p, 1), 1);
		CHECK_EQ_U64(cached_pages(fd, lo, 33), around + 1);
		*miss_ns += s.ns;
	}
	return s.hit;
}

static void check_nowait(int fd)
{
	struct cache_probe probe;
	struct cache_probe_sample s;
	off_t app_offset = lseek(fd, 0, SEEK_CUR);
	uint64_t hits = 0, misses = 0, miss_ns = 0;

	cache_probe_init(&probe);
	CHECK(cache_probe_nowait(fd, NULL, 0, &s) == -EINVAL);
	/* A sequential reader's pages carry a readahead mark (PG_readahead);
	 * a probe of that page starts the next window, asynchronously - the
	 * probe read more than its page, and its page was cached: a hit. */
	uint64_t seq = 31 * MIB / page, marked_reads = 0;
	int sfd = open(path, O_RDONLY | O_CLOEXEC);
	char two[8192];
	CHECK(sfd >= 0 && pread(sfd, two, 4096, (off_t)(seq * page)) == 4096);
	CHECK(pread(sfd, two, sizeof two, (off_t)(seq * page + 4096)) == (ssize_t)sizeof two);
	close(sfd);
	/* cachestat counts a page whose read is in flight; a nowait read of
	 * it says EAGAIN (it would wait).  Let each window land first. */
	usleep(50000);
	for (uint64_t q = seq; q < seq + 64; q++) {
		if (cached_pages(fd, q, 1) == 0)
			continue;
		CHECK(cache_probe_nowait(fd, &probe, q * page, &s) == 1);
		if (!s.hit)
			fprintf(stderr, "marked page %" PRIu64 ": read %" PRIu64 " pages\n", q - seq,
				s.read_pages);
		CHECK(s.hit);
		if (s.read_pages > 1) {
			marked_reads++;
			usleep(50000);
		}
	}
	CHECK(marked_reads > 0);
	/* Every 97th page: the warm first half, the mixed and cold rest. */
	for (uint64_t p = 0; p < file_pages; p += 97) {
		if (nowait_page(fd, &probe, p, &miss_ns))
			hits++;
		else
			misses++;
	}
	CHECK(hits > 0 && misses > 0);
	CHECK(probe.fd >= 0 && probe.fd != fd);
	/* The missed pages arrive without our waiting; then they hit. */
	uint64_t p = 28 * MIB / page + 2;
	while (p < file_pages && cached_pages(fd, p, 1) != 0)
		p++;
	CHECK(p < file_pages);
	CHECK(!nowait_page(fd, &probe, p, &miss_ns));
	misses++;
	bool arrived = false;
	for (int i = 0; i < 2000 && !arrived; i++) {
		CHECK(cache_probe_nowait(fd, &probe, p * page, &s) == 1);
		arrived = s.hit;
		if (!arrived)
			usleep(1000);
	}
	CHECK(arrived);
	/* At and past EOF: nothing probed (a nowait read there says EAGAIN). */
	CHECK(cache_probe_nowait(fd, &probe, FILE_BYTES, &s) == 0);
	CHECK(cache_probe_nowait(fd, &probe, FILE_BYTES + 5 * page, &s) == 0);
	CHECK(lseek(fd, 0, SEEK_CUR) == app_offset);
	cache_probe_close(&probe);
	printf("nowait: %" PRIu64 " hits, %" PRIu64 " misses as cachestat says, each miss one "
	       "page, %.1f us per miss; %" PRIu64 " hit(s) on a readahead mark\n", hits, misses,
	       (double)miss_ns / 1e3 / (double)misses, marked_reads);
}

/* As nobody, on a root-owned 0644 file: cachestat refuses
 * (can_do_cachestat), mincore would lie (can_do_mincore), auto picks probe.
 * Exit code: 0 ok, 1 failed (CHECK). */
static void check_unprivileged_child(int fd, uint64_t threshold, uint64_t cold_page)
{
	struct cache_stat stat;
	CHECK(setgroups(0, NULL) == 0);
	CHECK(setgid(NOBODY) == 0);
	CHECK(setuid(NOBODY) == 0);
	CHECK(geteuid() == NOBODY);

	CHECK(cache_stat_call(fd, 0, (uint64_t)page, &stat) == -EPERM);
	CHECK(cache_detector_choose(fd, DN_CACHE_AUTO) == DN_CACHE_PROBE);
	CHECK(cache_detector_choose(fd, DN_CACHE_CACHESTAT) == DN_CACHE_PROBE);
	CHECK(cache_detector_choose(fd, DN_CACHE_MINCORE) == DN_CACHE_PROBE);

	uint64_t cold = 28 * MIB / page, n = 64;
	int64_t lie = cache_detector_count(fd, DN_CACHE_MINCORE, NULL, 0, cold, n);
	printf("  as nobody: cachestat EPERM; mincore on %" PRIu64 " cold pages says %" PRId64
	       " resident (can_do_mincore); auto -> probe\n", n, lie);

	struct cache_probe probe;
	cache_probe_init(&probe);
	uint64_t span = CACHE_PROBE_SPAN / page;
	CHECK_EQ_U64(cache_detector_count(fd, DN_CACHE_PROBE, &probe, threshold, 0, span), span);
	CHECK_EQ_U64(probe.disk_pages, 0);
	/* A nowait probe needs only read permission: warm page 0 hits, the
	 * cold page the parent found misses (and is read in). */
	struct cache_probe_sample s;
	CHECK(cache_probe_nowait(fd, &probe, 0, &s) == 1 && s.hit);
	CHECK(cache_probe_nowait(fd, &probe, cold_page * page, &s) == 1 && !s.hit);
	cache_probe_close(&probe);
	exit(0);
}

int main(void)
{
	const char *dir = getenv("DISCNICE_TEST_DIR");
	struct statfs sfs;

	if (!dir || !*dir)
		dir = "./build/scratch";
	make_dir(dir);
	CHECK(statfs(dir, &sfs) == 0);
	if (sfs.f_type == TMPFS_MAGIC) {
		printf("skip: %s is tmpfs, where POSIX_FADV_DONTNEED cannot make pages cold\n", dir);
		return UNIT_SKIP;
	}
	page = (uint64_t)sysconf(_SC_PAGESIZE);
	file_pages = FILE_BYTES / page;
	expect = calloc(file_pages, 1);
	CHECK(expect != NULL);

	/* Calibration first: the probe threshold for this machine. */
	struct microbench_probe_threshold cal;
	uint64_t t0 = clock_now_ns();
	errno = 4242;
	int64_t threshold = microbench_probe_threshold(dir, &cal);
	CHECK(errno == 4242);
	uint64_t took = clock_now_ns() - t0;
	if (threshold < 0) {
		fprintf(stderr, "microbench_probe_threshold: %s\n", strerror((int)-threshold));
		return 1;
	}
	printf("calibration: hit median %" PRIu64 " ns (p99 %" PRIu64 "), miss median %" PRIu64
	       " ns (p10 %" PRIu64 "), threshold %" PRId64 " ns; %" PRIu64
	       " read_bytes per miss; %.1f ms\n",
	       cal.hit_median_ns, cal.hit_p99_ns, cal.miss_median_ns, cal.miss_p10_ns, threshold,
	       cal.miss_read_bytes, (double)took / 1e6);
	CHECK_EQ_U64(cal.threshold_ns, threshold);
	CHECK(cal.hit_median_ns < (uint64_t)threshold && (uint64_t)threshold <= cal.miss_median_ns);
	CHECK_EQ_U64(cal.miss_read_bytes, CACHE_PROBE_MISS_PAGES * page);
	CHECK(microbench_probe_threshold("/nonexistent/discnice", NULL) == -ENOENT);

	/* The file: written, synced, evicted, root-owned 0644. */
	snprintf(path, sizeof path, "%s/cache_detector.%d.dat", dir, (int)getpid());
	unlink(path);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	CHECK(fd >= 0);
	owner = getpid();
	atexit(remove_file);    /* also when a CHECK fails */
	CHECK(fchmod(fd, 0644) == 0);
	static char buf[1 << 20];
	memset(buf, 0x5a, sizeof buf);
	for (uint64_t off = 0; off < FILE_BYTES; off += sizeof buf)
		CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);
	CHECK(fsync(fd) == 0);
	CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
	CHECK_EQ_U64(count(fd, DN_CACHE_CACHESTAT, 0, file_pages), 0);

	int rfd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(rfd >= 0);
	CHECK(posix_fadvise(rfd, 0, 0, POSIX_FADV_RANDOM) == 0);
	warm_pattern(rfd);
	printf("file: %" PRIu64 " pages, %" PRIu64 " made warm\n", file_pages,
	       expected(0, file_pages));

	/* Reclaim may take a warm page during the checks (this VM's page
	 * cache loses ~0.4 %/s of its pages; once, under a CI run, cachestat
	 * counted 63 of 64): each attempt runs in a child, and a failed one
	 * is tried again after the pattern is warmed again.  A detector that
	 * disagrees with the pattern fails all three. */
	for (int attempt = 0;; attempt++) {
		pid_t child = fork();
		CHECK(child >= 0);
		if (child == 0) {
			check_exact(fd);
			_exit(0);
		}
		int status;
		CHECK(waitpid(child, &status, 0) == child);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			break;
		CHECK(attempt < 2);
		printf("exact checks: attempt %d failed, warming the pattern again\n", attempt + 1);
		warm_pattern(rfd);
	}
	close(rfd);
	CHECK(cache_detector_choose(fd, DN_CACHE_AUTO) == DN_CACHE_CACHESTAT);
	CHECK(cache_detector_choose(fd, DN_CACHE_MINCORE) == DN_CACHE_MINCORE);
	CHECK(cache_detector_choose(fd, DN_CACHE_CACHESTAT) == DN_CACHE_CACHESTAT);
	CHECK(cache_detector_choose(fd, DN_CACHE_PROBE) == DN_CACHE_PROBE);
	printf("cachestat and mincore agree with the pattern; auto -> cachestat\n");

	check_probe(fd, (uint64_t)threshold);
	printf("probe: units classified, reuse within the span, disk_pages == read_bytes\n");

	check_nowait(fd);

	if (geteuid() != 0) {
		printf("permission fallback not checked: needs root to drop to uid %d\n", NOBODY);
	} else {
		int ro = open(path, O_RDONLY | O_CLOEXEC);
		CHECK(ro >= 0);
		uint64_t cold_page = 28 * MIB / page + 1;
		while (cold_page < file_pages && cached_pages(fd, cold_page, 1) != 0)
			cold_page++;
		CHECK(cold_page < file_pages);
		fflush(stdout);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0)
			check_unprivileged_child(ro, (uint64_t)threshold, cold_page);
		int status;
		CHECK(waitpid(pid, &status, 0) == pid);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		close(ro);
		printf("permission fallback: ok\n");
	}

	close(fd);
	free(expect);
	return 0;
}
