/* Description: the readahead model's predicted disk reads match /proc/self/io read_bytes of real reads on the block-device filesystem within 0.5% per access pattern. */
/*
 * The oracle is the kernel's own counter: read_bytes in /proc/self/io is
 * charged in submit_bio() for every read bio the task submits, which for a
 * buffered read(2) is exactly the synchronous and asynchronous readahead
 * the model emulates.  The model sees the page cache through cachestat(2)
 * (syscall 451), which counts every folio in the mapping, including the
 * ones still under readahead I/O, as filemap_get_read_batch() does; mincore
 * would call those absent (mincore_page() reports only uptodate folios), so
 * it is only a fallback.  The view adds what the model predicts during one
 * call and forgets it after the real read, so every prediction starts from
 * the real page cache, as it would in the agent.
 *
 * DISCNICE_TEST_DIR picks the scratch directory (default ./build/scratch);
 * DISCNICE_RA_DEBUG=1 prints every read whose prediction is off;
 * DISCNICE_RA_ONLY=<text> runs only the patterns whose name contains it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "graybox/readahead.h"
#include "unit.h"

#define TMPFS_MAGIC_VALUE 0x01021994
#define NR_CACHESTAT 451
#define FILE_BYTES (UINT64_C(64) << 20)
#define MAX_ERROR_PERCENT 0.5

struct cachestat_range_arg { uint64_t off, len; };
struct cachestat_result {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* The page cache as the model sees it: the kernel's, plus what the model
 * predicted during the current call (overlay). */
struct real_view {
	int fd;
	uint64_t pages;
	bool use_cachestat;
	unsigned char *map;       /* mincore fallback */
	unsigned char *vec;
	unsigned char *overlay;   /* predicted in this call */
	uint64_t dirty_first, dirty_end;
};

static long cachestat_call(int fd, uint64_t off, uint64_t len, struct cachestat_result *out)
{
	struct cachestat_range_arg range = { off, len };
	return syscall(NR_CACHESTAT, fd, &range, out, 0);
}

static uint64_t kernel_count(struct real_view *v, uint64_t first, uint64_t n)
{
	if (v->use_cachestat) {
		struct cachestat_result cs;
		if (cachestat_call(v->fd, first << READAHEAD_PAGE_SHIFT, n << READAHEAD_PAGE_SHIFT, &cs))
			abort();
		return cs.nr_cache;
	}
	if (mincore(v->map + (first << READAHEAD_PAGE_SHIFT), n << READAHEAD_PAGE_SHIFT, v->vec))
		abort();
	uint64_t k = 0;
	for (uint64_t i = 0; i < n; i++)
		k += v->vec[i] & 1;
	return k;
}

static uint64_t view_count(void *ctx, uint64_t first, uint64_t count)
{
	struct real_view *v = ctx;

	if (first >= v->pages)
		return 0;
	if (count > v->pages - first)
		count = v->pages - first;
	uint64_t predicted = 0;
	if (v->dirty_end > first && v->dirty_first < first + count)
		for (uint64_t i = first; i < first + count; i++)
			predicted += v->overlay[i];
	if (predicted == count)
		return count;
	/* A predicted page is not in the kernel's cache yet (the read has not
	 * run): the two sets are disjoint. */
	return predicted + kernel_count(v, first, count);
}

static void view_mark(void *ctx, uint64_t first, uint64_t count)
{
	struct real_view *v = ctx;

	if (first >= v->pages)
		return;
	if (count > v->pages - first)
		count = v->pages - first;
	memset(v->overlay + first, 1, count);
	if (v->dirty_end == 0 || first < v->dirty_first)
		v->dirty_first = first;
	if (first + count > v->dirty_end)
		v->dirty_end = first + count;
}

static void view_forget(struct real_view *v)
{
	if (v->dirty_end)
		memset(v->overlay + v->dirty_first, 0, v->dirty_end - v->dirty_first);
	v->dirty_first = v->dirty_end = 0;
}

static uint64_t proc_read_bytes(void)
{
	char buf[1024];
	int fd = open("/proc/self/io", O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	CHECK(n > 0);
	buf[n] = '\0';
	char *p = strstr(buf, "\nread_bytes: ");
	CHECK(p != NULL);
	return strtoull(p + 13, NULL, 10);
}

/* Counters in /proc/vmstat that move when page-cache folios leave other
 * than by our own fadvise: reclaim (global or any memcg's), drop_caches,
 * and refaults.  Printed with a miss, so the next reader knows whether
 * something else on the machine took our readahead away before use. */
static const char *const disturbance_names[] = {
	"pgsteal_file", "drop_pagecache", "workingset_refault_file",
};
#define DISTURBANCES (sizeof(disturbance_names) / sizeof(disturbance_names[0]))

static void vmstat_disturbances(uint64_t out[DISTURBANCES])
{
	char line[256];
	memset(out, 0, DISTURBANCES * sizeof(out[0]));
	FILE *f = fopen("/proc/vmstat", "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		for (size_t i = 0; i < DISTURBANCES; i++) {
			size_t n = strlen(disturbance_names[i]);
			if (strncmp(line, disturbance_names[i], n) == 0 && line[n] == ' ')
				out[i] = strtoull(line + n + 1, NULL, 10);
		}
	}
	fclose(f);
}

static long sysfs_long(const char *dir, const char *name)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long v = -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* The disk behind st_dev: /sys/dev/block/MAJ:MIN, or its parent for a
 * partition; bdi->ra_pages = read_ahead_kb / 4, bdi->io_pages =
 * max_sectors_kb / 4 (blk_apply_bdi_limits()). */
static bool device_limits(dev_t dev, uint32_t *ra_pages, uint32_t *io_pages)
{
	char link[64], disk[PATH_MAX], queue[PATH_MAX + 16];
	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(dev), minor(dev));
	if (!realpath(link, disk))
		return false;
	snprintf(queue, sizeof(queue), "%s/partition", disk);
	if (access(queue, F_OK) == 0) {
		char *slash = strrchr(disk, '/');
		if (!slash)
			return false;
		*slash = '\0';
	}
	snprintf(queue, sizeof(queue), "%s/queue", disk);
	long ra_kb = sysfs_long(queue, "read_ahead_kb");
	long io_kb = sysfs_long(queue, "max_sectors_kb");
	if (ra_kb < 0 || io_kb < 0)
		return false;
	*ra_pages = (uint32_t)(ra_kb / 4);
	*io_pages = (uint32_t)(io_kb / 4);
	return true;
}

/* mapping_max_folio_order(): MAX_PAGECACHE_ORDER is the PMD order where
 * transparent huge pages exist (ext4 caps at 11 above that). */
static uint32_t max_folio_order(void)
{
	const char *env = getenv("DISCNICE_MAX_FOLIO_ORDER");
	if (env)
		return (uint32_t)atoi(env);
	long pmd = sysfs_long("/sys/kernel/mm/transparent_hugepage", "hpage_pmd_size");
	uint32_t order = 0;
	while (pmd > 4096) {
		pmd >>= 1;
		order++;
	}
	return order > 11 ? 11 : order;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rng_next(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* One access pattern: the reads, and how the file is prepared. */
enum prep { PREP_COLD, PREP_FIRST_HALF, PREP_ALL };
enum shape { SHAPE_SEQUENTIAL, SHAPE_RANDOM, SHAPE_STRIDE, SHAPE_INTERLEAVED, SHAPE_BACKWARD };
struct pattern {
	const char *name;
	enum prep prep;
	enum readahead_advice advice;
	enum shape shape;
	uint64_t size;     /* bytes per read                           */
	uint64_t length;   /* bytes of file covered (per stream)        */
	uint64_t step;     /* stride step / number of random reads      */
	bool unaligned;    /* random reads at any byte offset           */
};

static const struct pattern patterns[] = {
	{ "seq 4KiB whole file",    PREP_COLD, READAHEAD_NORMAL, SHAPE_SEQUENTIAL, 4096, FILE_BYTES, 0, false },
	{ "seq 4KiB 37MiB+12KiB",   PREP_COLD, READAHEAD_NORMAL, SHAPE_SEQUENTIAL, 4096, (37u << 20) + 12288, 0, false },
	{ "seq 128KiB 21MiB",       PREP_COLD, READAHEAD_NORMAL, SHAPE_SEQUENTIAL, 128u << 10, 21u << 20, 0, false },
	{ "seq 128KiB whole file",  PREP_COLD, READAHEAD_NORMAL, SHAPE_SEQUENTIAL, 128u << 10, FILE_BYTES, 0, false },
	{ "seq 1MiB 13MiB",         PREP_COLD, READAHEAD_NORMAL, SHAPE_SEQUENTIAL, 1u << 20, 13u << 20, 0, false },
	{ "seq 5000B 9MiB",         PREP_COLD, READAHEAD_NORMAL, SHAPE_SEQUENTIAL, 5000, 9u << 20, 0, false },
	{ "seq 16MiB whole file",   PREP_COLD, READAHEAD_NORMAL, SHAPE_SEQUENTIAL, 16u << 20, FILE_BYTES, 0, false },
	{ "2 streams 64KiB x 9MiB", PREP_COLD, READAHEAD_NORMAL, SHAPE_INTERLEAVED, 64u << 10, 9u << 20, 0, false },
	{ "backward 64KiB 8MiB",    PREP_COLD, READAHEAD_NORMAL, SHAPE_BACKWARD, 64u << 10, 8u << 20, 0, false },
	{ "random 4KiB x2000",      PREP_COLD, READAHEAD_NORMAL, SHAPE_RANDOM, 4096, 0, 2000, false },
	{ "random 4KiB unaligned",  PREP_COLD, READAHEAD_NORMAL, SHAPE_RANDOM, 4096, 0, 2000, true },
	{ "stride 1B every 12KiB",  PREP_COLD, READAHEAD_NORMAL, SHAPE_STRIDE, 1, FILE_BYTES, 12288, false },
	{ "half cached, seq 128KiB", PREP_FIRST_HALF, READAHEAD_NORMAL, SHAPE_SEQUENTIAL, 128u << 10, (48u << 20) + 4096, 0, false },
	{ "FADV_RANDOM seq 128KiB", PREP_COLD, READAHEAD_RANDOM, SHAPE_SEQUENTIAL, 128u << 10, 21u << 20, 0, false },
	{ "FADV_RANDOM random 4KiB", PREP_COLD, READAHEAD_RANDOM, SHAPE_RANDOM, 4096, 0, 2000, false },
	{ "FADV_SEQUENTIAL seq 128KiB", PREP_COLD, READAHEAD_SEQUENTIAL, SHAPE_SEQUENTIAL, 128u << 10, 21u << 20, 0, false },
	{ "fully cached, seq 128KiB", PREP_ALL, READAHEAD_NORMAL, SHAPE_SEQUENTIAL, 128u << 10, FILE_BYTES, 0, false },
};

struct env {
	const char *path;
	uint32_t ra_pages, io_pages, folio_order;
	bool use_cachestat;
	bool debug;
};

static void make_cold(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(fdatasync(fd) == 0);
	for (int tries = 0; tries < 5; tries++) {
		CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
		struct cachestat_result cs;
		if (cachestat_call(fd, 0, 0, &cs) != 0 || cs.nr_cache == 0)
			break;
		usleep(10000);
	}
	close(fd);
}

/* Bring [0, bytes) into the cache exactly, leaving no PG_readahead behind:
 * FMODE_RANDOM reads go through force_page_cache_ra() with no lookahead. */
static void prefill(const char *path, uint64_t bytes, char *buf)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM) == 0);
	for (uint64_t off = 0; off < bytes; off += 1u << 20)
		CHECK(pread(fd, buf, 1u << 20, (off_t)off) > 0);
	close(fd);
}

static void next_read(const struct pattern *p, uint64_t i, uint64_t *pos, uint64_t *len)
{
	switch (p->shape) {
	case SHAPE_SEQUENTIAL:
		*pos = i * p->size;
		*len = p->size;
		if (*pos + *len > p->length)
			*len = p->length - *pos;
		break;
	case SHAPE_INTERLEAVED:
		/* stream 0 from 0, stream 1 from the middle, taking turns */
		*pos = (i & 1) * (FILE_BYTES / 2) + (i / 2) * p->size;
		*len = p->size;
		break;
	case SHAPE_BACKWARD:
		*pos = FILE_BYTES / 2 - (i + 1) * p->size;
		*len = p->size;
		break;
	case SHAPE_STRIDE:
		*pos = i * p->step;
		*len = p->size;
		break;
	case SHAPE_RANDOM:
		if (p->unaligned)
			*pos = rng_next() % (FILE_BYTES - p->size);
		else
			*pos = (rng_next() % (FILE_BYTES / p->size)) * p->size;
		*len = p->size;
		break;
	}
}

static uint64_t pattern_reads(const struct pattern *p)
{
	switch (p->shape) {
	case SHAPE_SEQUENTIAL: return (p->length + p->size - 1) / p->size;
	case SHAPE_STRIDE:     return (p->length + p->step - 1) / p->step;
	case SHAPE_INTERLEAVED: return 2 * (p->length / p->size);
	case SHAPE_BACKWARD:   return p->length / p->size;
	case SHAPE_RANDOM:     return p->step;
	}
	return 0;
}

/* The first reads of an attempt whose prediction was off. */
#define MISSES_KEPT 4
struct attempt {
	uint64_t predicted, actual;        /* bytes */
	uint64_t off_reads;                /* reads predicted wrong */
	struct off_read { uint64_t index, pos, len, predicted, kernel; } miss[MISSES_KEPT];
	uint64_t vmstat_delta[DISTURBANCES];
};

/* Run one pattern from a cold file; fills *a. */
static void run_pattern(const struct env *e, const struct pattern *p, char *buf,
			struct attempt *a)
{
	uint64_t vm_before[DISTURBANCES], vm_after[DISTURBANCES];
	memset(a, 0, sizeof(*a));
	make_cold(e->path);
	if (p->prep == PREP_FIRST_HALF)
		prefill(e->path, FILE_BYTES / 2, buf);
	else if (p->prep == PREP_ALL)
		prefill(e->path, FILE_BYTES, buf);

	int fd = open(e->path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	static const int fadv[] = {
		[READAHEAD_NORMAL] = POSIX_FADV_NORMAL,
		[READAHEAD_RANDOM] = POSIX_FADV_RANDOM,
		[READAHEAD_SEQUENTIAL] = POSIX_FADV_SEQUENTIAL,
	};
	struct readahead_state ra;
	readahead_init(&ra, e->ra_pages, e->io_pages, e->folio_order);
	if (p->advice != READAHEAD_NORMAL) {
		CHECK(posix_fadvise(fd, 0, 0, fadv[p->advice]) == 0);
		readahead_advise(&ra, p->advice);
	}

	struct real_view v = {
		.fd = fd,
		.pages = FILE_BYTES >> READAHEAD_PAGE_SHIFT,
		.use_cachestat = e->use_cachestat,
		.overlay = calloc(FILE_BYTES >> READAHEAD_PAGE_SHIFT, 1),
		.vec = malloc(FILE_BYTES >> READAHEAD_PAGE_SHIFT),
	};
	CHECK(v.overlay && v.vec);
	if (!v.use_cachestat) {
		v.map = mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
		CHECK(v.map != MAP_FAILED);
	}
	struct page_cache_view view = { &v, view_count, view_mark, NULL };

	rng_state = 0x9e3779b97f4a7c15u;
	vmstat_disturbances(vm_before);
	uint64_t pages = 0, before = proc_read_bytes(), reads = pattern_reads(p);
	for (uint64_t i = 0; i < reads; i++) {
		uint64_t pos = 0, len = 0, got;
		next_read(p, i, &pos, &len);
		struct readahead_state before_ra = ra;
		if (readahead_is_hit(&ra, pos, len)) {
			readahead_note_hit(&ra, pos, len);
			got = 0;
		} else {
			got = readahead_predict_read(&ra, &view, pos, len, FILE_BYTES, true);
		}
		view_forget(&v);
		uint64_t b0 = proc_read_bytes();
		CHECK(pread(fd, buf, len, (off_t)pos) == (ssize_t)len);
		uint64_t real = (proc_read_bytes() - b0) >> READAHEAD_PAGE_SHIFT;
		if (real != got) {
			if (a->off_reads < MISSES_KEPT)
				a->miss[a->off_reads] = (struct off_read){ i, pos, len, got, real };
			a->off_reads++;
			if (e->debug)
				printf("  %s: read %" PRIu64 " pos %" PRIu64 " len %" PRIu64
				       ": predicted %" PRIu64 " pages, kernel %" PRIu64 "\n"
				       "    model window %" PRIu64 "+%" PRIu64 " async %" PRIu64
				       " order %u -> %" PRIu64 "+%" PRIu64 " async %" PRIu64 " order %u\n",
				       p->name, i, pos, len, got, real, before_ra.start, before_ra.size,
				       before_ra.async_size, before_ra.order, ra.start, ra.size,
				       ra.async_size, ra.order);
		}
		pages += got;
	}
	a->actual = proc_read_bytes() - before;
	a->predicted = pages << READAHEAD_PAGE_SHIFT;
	vmstat_disturbances(vm_after);
	for (size_t k = 0; k < DISTURBANCES; k++)
		a->vmstat_delta[k] = vm_after[k] - vm_before[k];
	if (v.map)
		munmap(v.map, FILE_BYTES);
	free(v.overlay);
	free(v.vec);
	close(fd);
}

int main(void)
{
	const char *dir = getenv("DISCNICE_TEST_DIR");
	if (!dir || !*dir)
		dir = "build/scratch";
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		printf("skip: cannot create %s: %s\n", dir, strerror(errno));
		return UNIT_SKIP;
	}
	struct statfs sfs;
	CHECK(statfs(dir, &sfs) == 0);
	if (sfs.f_type == TMPFS_MAGIC_VALUE) {
		printf("skip: %s is tmpfs: no disk reads to compare with\n", dir);
		return UNIT_SKIP;
	}
	if (access("/proc/self/io", R_OK) != 0) {
		printf("skip: no /proc/self/io (CONFIG_TASK_IO_ACCOUNTING)\n");
		return UNIT_SKIP;
	}

	static char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/readahead-oracle.%d", dir, (int)getpid());
	struct env e = { .path = path, .debug = getenv("DISCNICE_RA_DEBUG") != NULL };

	char *buf = malloc(16u << 20);  /* the largest read */
	CHECK(buf != NULL);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	for (uint64_t off = 0; off < FILE_BYTES; off += 1u << 20) {
		for (size_t i = 0; i < (1u << 20); i += 8) {
			uint64_t r = rng_next();
			memcpy(buf + i, &r, 8);
		}
		CHECK(write(fd, buf, 1u << 20) == (ssize_t)(1u << 20));
	}
	CHECK(fsync(fd) == 0);
	struct stat st;
	CHECK(fstat(fd, &st) == 0);
	struct cachestat_result cs;
	e.use_cachestat = cachestat_call(fd, 0, 0, &cs) == 0;
	close(fd);

	int rc = 0;
	if (!device_limits(st.st_dev, &e.ra_pages, &e.io_pages)) {
		printf("skip: %s is not on a block device (st_dev %u:%u)\n", dir,
		       major(st.st_dev), minor(st.st_dev));
		rc = UNIT_SKIP;
		goto out;
	}
	e.folio_order = max_folio_order();
	printf("device %u:%u: ra_pages %u, io_pages %u, max folio order %u, view %s\n",
	       major(st.st_dev), minor(st.st_dev), e.ra_pages, e.io_pages, e.folio_order,
	       e.use_cachestat ? "cachestat" : "mincore");
	printf("%-28s %14s %14s %9s\n", "pattern", "predicted B", "actual B", "error %");
	const char *only = getenv("DISCNICE_RA_ONLY");
	/* A pattern off by more than the bound is run again from cold, up to
	 * ATTEMPTS times in all, and fails only if every attempt is off: one
	 * clean-clone CI run in about ten saw the kernel read one readahead
	 * window (2 MiB) more than the model on the sequential pattern, and
	 * never again on a re-run.  Each off attempt prints its first wrong
	 * reads and what /proc/vmstat says left the page cache meanwhile. */
	enum { ATTEMPTS = 3 };
	for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
		if (only && !strstr(patterns[i].name, only))
			continue;
		for (int attempt = 1; attempt <= ATTEMPTS; attempt++) {
			struct attempt a;
			run_pattern(&e, &patterns[i], buf, &a);
			double err = a.actual ? 100.0 * ((double)a.predicted - (double)a.actual) /
							(double)a.actual
					      : (a.predicted ? INFINITY : 0.0);
			bool ok = fabs(err) <= MAX_ERROR_PERCENT;
			bool last = ok || attempt == ATTEMPTS;
			printf("%-28s %14" PRIu64 " %14" PRIu64 " %8.3f%s\n", patterns[i].name,
			       a.predicted, a.actual, err,
			       ok ? "" : last ? "  FAIL" : "  off: run again");
			if (!ok) {
				printf("    attempt %d: %" PRIu64 " reads off; /proc/vmstat meanwhile:",
				       attempt, a.off_reads);
				for (size_t k = 0; k < DISTURBANCES; k++)
					printf(" %s +%" PRIu64, disturbance_names[k], a.vmstat_delta[k]);
				printf("\n");
				for (uint64_t k = 0; k < a.off_reads && k < MISSES_KEPT; k++)
					printf("    read %" PRIu64 " at %" PRIu64 " len %" PRIu64
					       ": predicted %" PRIu64 " pages, kernel %" PRIu64 "\n",
					       a.miss[k].index, a.miss[k].pos, a.miss[k].len,
					       a.miss[k].predicted, a.miss[k].kernel);
			}
			if (ok)
				break;
			if (last)
				rc = 1;
		}
	}
out:
	unlink(path);
	free(buf);
	return rc;
}
