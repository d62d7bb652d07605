/*
 * fccd_plan.c - gbp's engine (see fccd_plan.h): per file, open and check
 * it, ask the page cache about each access unit (graybox-icl §4.1.2) -
 * cachestat/mincore where the kernel answers, else RWF_NOWAIT probes, or
 * timed probes where those are not supported or asked for, through
 * cache_detector.c - and read its layout keys (§4.2.2); then classify the
 * timed probes at once (with the device's calibrated hit/miss threshold
 * where the kernel counted no read, §5: probe_threshold()), mark the
 * cached pieces by 2-means (§4.2.4) and sort.
 *
 * Library code: returns -errno, never prints, leaves errno as it was.
 */
#include "graybox/fccd/fccd_plan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/private_fd.h"
#include "discnice/segment.h"
#include "graybox/cache_detector.h"
#include "graybox/device.h"
#include "graybox/fccd/fccd_order.h"
#include "graybox/fldc/layout_order.h"
#include "graybox/fldc/layout_probe.h"
#include "graybox/toolbox/parameters.h"

/* A growable array of T; n used, cap allocated. */
#define GROW(array, n, cap)                                                            \
	((n) < (cap) ? 0 : grow_array((void **)&(array), &(cap), sizeof *(array)))

static int grow_array(void **array, size_t *cap, size_t elem)
{
	size_t want = *cap ? *cap * 2 : 64;
	if (want > SIZE_MAX / elem)
		return -ENOMEM;
	void *p = realloc(*array, want * elem);
	if (!p)
		return -ENOMEM;
	*array = p;
	*cap = want;
	return 0;
}

/* Files whose nowait misses wait to be settled (settle_later(), below):
 * a private descriptor each (common/private_fd.h keeps 16 numbers for the
 * probes' and ours). */
#define SETTLE_WINDOW 8

struct pending_file {
	int fd;
	size_t first_sample, end_sample;
};

struct plan {
	const struct gbp_options *opt;
	uint64_t page;
	uint64_t chunk;            /* chunk length                    */
	uint64_t unit;             /* prediction unit                 */
	uint64_t rng;
	bool need_cache, need_physical;
	struct gbp_extent *pieces;
	size_t n_pieces, cap_pieces;
	uint32_t *hits;            /* per piece: probes that hit (parallel to pieces) */
	size_t cap_hits;
	struct fccd_probe_sample *samples;
	size_t n_samples, cap_samples;
	struct pending_file pending[SETTLE_WINDOW];
	size_t n_pending;
	struct fccd_plan_stats *stats;
	/* The page probed last, and its sample: a page is probed once per
	 * call (examine_chunk()). */
	bool probed;
	uint32_t probed_file;
	uint64_t probed_page;
	size_t probed_sample;
	bool sparse;               /* the file examined has holes (fewer blocks than bytes) */
};

/* Open a regular file for reading, or say why not.  stat() first, so that
 * a FIFO, a device or a socket is never opened (opening a tape or a FIFO
 * can do things); then open O_NONBLOCK (a FIFO swapped in meanwhile does
 * not block) and check it is still the file stat() saw. */
static int open_regular(const char *path, struct stat *st)
{
	struct stat first;
	if (stat(path, &first) < 0)
		return -errno;
	if (S_ISDIR(first.st_mode))
		return -EISDIR;
	if (!S_ISREG(first.st_mode))
		return -EINVAL;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (fstat(fd, st) < 0)
		rc = -errno;
	else if (!S_ISREG(st->st_mode) || (major(st->st_dev) == 0 && device_fd_on_pseudo_fs(fd)))
		rc = -EINVAL;   /* (a pseudo file system's device is anonymous, major 0:
				 * a file on a disk costs no fstatfs()) */
	else if (st->st_dev != first.st_dev || st->st_ino != first.st_ino)
		rc = -ESTALE;   /* replaced between stat and open */
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

static struct gbp_extent *new_piece(struct plan *p, uint32_t file)
{
	if (GROW(p->pieces, p->n_pieces, p->cap_pieces) < 0 ||
	    GROW(p->hits, p->n_pieces, p->cap_hits) < 0)
		return NULL;
	struct gbp_extent *e = &p->pieces[p->n_pieces];
	memset(e, 0, sizeof *e);
	e->file = file;
	e->cached_fraction = -1;
	e->physical = UINT64_MAX;
	p->hits[p->n_pieces] = 0;
	p->n_pieces++;
	return e;
}

/* The backend for one open file, as gbp names them (gbp.h): the cache
 * detector's three (its enum's values) and NOWAIT, gbp's own.  AUTO: the
 * detector's choice - cachestat, else mincore where the kernel answers
 * for the file, else timed probes, the paper's method.  Not NOWAIT: once
 * its misses are settled (settle_file(), below) it waits for the same
 * reads a timed probe waits for - on Fig 3's grep, 0.071 s of probing
 * against 0.076 s (bench/graybox_backends.py) - and only where a device
 * serves many reads at once do its overlapping misses gain.  A backend
 * asked for by name that does not answer for this file: -EOPNOTSUPP, no
 * quiet fallback. */
static int choose_backend(int fd, uint32_t wanted, uint32_t *backend)
{
	enum dn_cache_backend got;
	switch (wanted) {
	case GBP_BACKEND_PROBE:
	case GBP_BACKEND_NOWAIT:
		*backend = wanted;
		return 0;
	case GBP_BACKEND_CACHESTAT:
	case GBP_BACKEND_MINCORE:
		got = cache_detector_choose(fd, (enum dn_cache_backend)wanted);
		*backend = (uint32_t)got;
		return *backend == wanted ? 0 : -EOPNOTSUPP;
	default:
		*backend = (uint32_t)cache_detector_choose(fd, DN_CACHE_AUTO);
		return 0;
	}
}

static bool backend_probes(uint32_t backend)
{
	return backend == GBP_BACKEND_PROBE || backend == GBP_BACKEND_NOWAIT;
}

/* Where the next data of a sparse file is, at or after `at`: size where
 * only a hole follows (ENXIO), `at` where the kernel does not say. */
static uint64_t next_data(int fd, uint64_t at, uint64_t size)
{
	int saved = errno;
	off_t d = lseek(fd, (off_t)at, SEEK_DATA);
	uint64_t found = d >= 0 ? (uint64_t)d : errno == ENXIO ? size : at;
	errno = saved;
	return found;
}

/* A hole run: two or more whole chunks that are all hole, one piece
 * (examine_file()).  Nothing in it is read from the disk. */
static bool hole_run(const struct plan *p, const struct gbp_extent *e)
{
	return e->length > p->chunk;
}

/* Ask the page cache about one chunk [offset, offset + length) of piece
 * number `index`.  Exact backends: the share of its pages cached.  Probes:
 * one per prediction unit at a random byte of it; a timed probe is
 * classified later with all the others, a nowait probe comes with the
 * kernel's hit or miss.  -EOPNOTSUPP: no nowait reads for this file. */
/*
 * A hole of a sparse file reads as zeros with no disk I/O, and the read
 * puts zero pages in the page cache: one nowait run over a 1 TiB sparse
 * file left 819 MiB of them behind, and the timed probes' "hit" agreed
 * with neither cachestat nor fincore.  So a probe that would land in a
 * hole (lseek SEEK_DATA, fs/read_write.c) goes to the unit's data
 * instead; where the unit [start, end) has none, 0: it is not read.
 */
static int probe_data(int fd, uint64_t start, uint64_t end, uint64_t *at)
{
	int saved = errno;
	off_t d = lseek(fd, (off_t)*at, SEEK_DATA);
	int found = 1;
	if (d == (off_t)*at || (d < 0 && errno != ENXIO)) {
		found = 1;              /* data there, or no answer: probe it */
	} else if (d >= 0 && (uint64_t)d < end) {
		*at = (uint64_t)d;      /* data later in the unit */
	} else if ((d = lseek(fd, (off_t)start, SEEK_DATA)) >= 0 && (uint64_t)d < *at) {
		*at = (uint64_t)d;      /* data earlier in the unit */
	} else {
		found = 0;
	}
	errno = saved;
	return found;
}

static int examine_chunk(struct plan *p, int fd, uint32_t backend, struct cache_probe *probe,
			 size_t index, uint64_t size)
{
	struct gbp_extent *e = &p->pieces[index];
	if (hole_run(p, e)) {
		/* Read as zeros, with no disk I/O: as good as cached. */
		e->cached_fraction = 1.0;
		e->flags |= GBP_EXACT;
		return 0;
	}
	if (!backend_probes(backend)) {
		uint64_t first = e->offset / p->page;
		uint64_t end = (e->offset + e->length + p->page - 1) / p->page;
		int64_t cached = cache_detector_count(fd, (enum dn_cache_backend)backend, NULL, 0,
						      first, end - first);
		if (cached < 0)
			return (int)cached;
		e->cached_fraction = end > first ? (double)cached / (double)(end - first) : 1.0;
		e->flags |= GBP_EXACT;
		return 0;
	}
	bool nowait = backend == GBP_BACKEND_NOWAIT;
	uint32_t probes = fccd_probe_count(e->length, p->unit);
	for (uint32_t j = 0; j < probes; j++) {
		uint64_t start = e->offset + (uint64_t)j * p->unit;
		uint64_t end = e->offset + e->length;
		uint64_t len = end - start < p->unit ? end - start : p->unit;
		uint64_t at = fccd_probe_offset(start, len, &p->rng);
		if (at >= size)
			at = size - 1;
		/* One page, one probe.  A unit that shares a page with the
		 * one probed before it (units smaller than a page, chunks that
		 * do not start on a page boundary: --record-size) would find
		 * that page brought in by the first probe - a sure hit, on a
		 * file that was not cached at all.  Probe a page of the unit
		 * not yet probed; where it has none, the first probe's sample
		 * speaks for this unit too. */
		if (p->sparse && !probe_data(fd, start, start + len, &at)) {
			/* All hole: a hit without a read (fccd_order.h). */
			if (GROW(p->samples, p->n_samples, p->cap_samples) < 0)
				return -ENOMEM;
			p->samples[p->n_samples++] = (struct fccd_probe_sample){
				.offset = at, .extent = index, .slept = FCCD_SLEEP_NO,
				.kind = FCCD_PROBE_HOLE, .hit = true };
			e = &p->pieces[index];
			e->probes++;
			if (p->stats)
				p->stats->probes++; /* and a hit: probes >= hits */
			continue;
		}
		bool again = p->probed && p->probed_file == e->file;
		if (again && at / p->page <= p->probed_page) {
			uint64_t lo = (p->probed_page + 1) * p->page;
			uint64_t hi = start + len < size ? start + len : size;
			if (lo < hi) {
				at = fccd_probe_offset(lo, hi - lo, &p->rng);
			} else {
				if (GROW(p->samples, p->n_samples, p->cap_samples) < 0)
					return -ENOMEM;
				struct fccd_probe_sample same = p->samples[p->probed_sample];
				same.extent = index;
				same.copy = true;
				p->samples[p->n_samples++] = same;
				e = &p->pieces[index];
				e->probes++;
				continue;
			}
		}
		struct cache_probe_sample sample;
		int rc = nowait ? cache_probe_nowait(fd, probe, at, &sample)
				: cache_probe_time(fd, probe, at, &sample);
		if (rc < 0)
			return rc;
		if (rc == 0)
			continue;       /* truncated under us */
		if (GROW(p->samples, p->n_samples, p->cap_samples) < 0)
			return -ENOMEM;
		p->samples[p->n_samples++] = (struct fccd_probe_sample){
			.ns = sample.ns, .again_ns = sample.again_ns,
			.read_pages = sample.read_pages, .offset = at, .extent = index,
			.slept = !sample.usage_known ? FCCD_SLEEP_UNKNOWN
				 : sample.slept    ? FCCD_SLEEP_YES
						   : FCCD_SLEEP_NO,
			.kind = nowait ? FCCD_PROBE_NOWAIT : FCCD_PROBE_TIMED,
			.hit = nowait && sample.hit };
		p->probed = true;
		p->probed_file = e->file;
		p->probed_page = at / p->page;
		p->probed_sample = p->n_samples - 1;
		e = &p->pieces[index];
		e->probes++;
		e->probe_ns += sample.ns;
		if (p->stats) {
			p->stats->probes++;
			p->stats->nowait_probes += nowait;
			p->stats->probe_read_pages += sample.read_pages;
		}
	}
	return 0;
}

/*
 * A nowait probe that missed did not wait, but it did start its page's
 * read: filemap_get_pages() calls page_cache_sync_ra() before it answers
 * -EAGAIN (mm/filemap.c), and POSIX_FADV_RANDOM makes that one page.  The
 * page then enters the inactive LRU unreferenced, before any read the
 * order is for, and in a full cache it is the first of its file that
 * reclaim takes: the scan that follows leaves every cached file with a
 * one-page hole per probe, and the next scan reads each hole alone.
 * Measured on Fig 3's data in the 84 % memory cgroup: 134 such holes
 * after a cold scan in nowait's order, none after timed probes, whose
 * second read of the byte activates the page (a second
 * folio_mark_accessed()) (bench/graybox_holes.py); the warm grep after
 * nowait made ~100 more disk requests and ran 4.69 s against 4.10 s
 * (bench/graybox_cold_order.py).  So each missed page is settled: waited
 * for (its read is in flight) and dropped (POSIX_FADV_DONTNEED), which
 * leaves the cache as the probe found it.
 *
 * The waits are batched: a private descriptor of each of up to
 * SETTLE_WINDOW files with misses stays open, so that their reads
 * proceed together; the oldest is settled when the window is full, the
 * rest at the end.  examine_ns counts the waits: they are the probes'
 * cost.
 */
static bool nowait_missed(const struct fccd_probe_sample *s)
{
	return s->kind == FCCD_PROBE_NOWAIT && !s->hit;
}

/* Wait for each page the file's nowait misses started to read, through
 * fd, then drop it. */
static void settle_file(struct plan *p, int fd, size_t first_sample, size_t end_sample)
{
	uint64_t start_ns = clock_now_ns();
	for (size_t i = first_sample; i < end_sample; i++) {
		const struct fccd_probe_sample *s = &p->samples[i];
		if (!nowait_missed(s) || s->copy)
			continue;
		char byte;
		if (pread(fd, &byte, 1, (off_t)s->offset) < 0)
			continue;       /* truncated, gone: nothing to drop */
		uint64_t page = s->offset / p->page * p->page;
		(void)posix_fadvise(fd, (off_t)page, (off_t)p->page, POSIX_FADV_DONTNEED);
		if (p->stats)
			p->stats->nowait_settled++;
	}
	if (p->stats)
		p->stats->examine_ns += clock_now_ns() - start_ns;
}

/* Settle the oldest pending file, or all of them. */
static void settle_pending(struct plan *p, bool all)
{
	size_t n = all ? p->n_pending : (p->n_pending ? 1 : 0);
	for (size_t i = 0; i < n; i++) {
		settle_file(p, p->pending[i].fd, p->pending[i].first_sample,
			    p->pending[i].end_sample);
		close(p->pending[i].fd);
	}
	memmove(p->pending, p->pending + n, (p->n_pending - n) * sizeof *p->pending);
	p->n_pending -= n;
}

/* After a file's nowait probes (its samples from first_sample on; file_fd
 * the caller's descriptor of it): when one missed, a private duplicate
 * joins the window (the oldest file is settled first when it is full);
 * where no descriptor can be kept, the file is settled at once, through
 * the one at hand.  Closes probe. */
static void settle_later(struct plan *p, struct cache_probe *probe, int file_fd,
			 size_t first_sample)
{
	bool missed = false;
	for (size_t i = first_sample; i < p->n_samples && !missed; i++)
		missed = nowait_missed(&p->samples[i]);
	if (missed) {
		/* The probe's own description (POSIX_FADV_RANDOM) where it is
		 * still open; cache_detector.c may have closed it.  Else ours,
		 * made random too: a page evicted before its wait is read
		 * again alone, not with a readahead window. */
		int from = probe->fd;
		if (from < 0) {
			from = file_fd;
			(void)posix_fadvise(from, 0, 0, POSIX_FADV_RANDOM);
		}
		int fd = private_fd_scarce() ? -1 : fcntl(from, F_DUPFD_CLOEXEC, 0);
		if (fd >= 0)
			fd = private_fd_move(fd);
		if (fd < 0) {
			settle_file(p, from, first_sample, p->n_samples);
		} else {
			if (p->n_pending == SETTLE_WINDOW)
				settle_pending(p, false);
			p->pending[p->n_pending++] = (struct pending_file){
				.fd = fd, .first_sample = first_sample, .end_sample = p->n_samples };
		}
	}
	cache_probe_close(probe);
}

/* Forget the probes of pieces [first_piece, ...): their samples go, and
 * with `uncount` their share of the statistics too (they are made again). */
static void forget_probes(struct plan *p, size_t first_piece, bool uncount)
{
	size_t kept = 0;
	for (size_t i = 0; i < p->n_samples; i++) {
		const struct fccd_probe_sample *s = &p->samples[i];
		if (s->extent < first_piece) {
			p->samples[kept++] = *s;
		} else if (uncount && p->stats && !s->copy) {
			p->stats->probes--;
			p->stats->nowait_probes -= s->kind == FCCD_PROBE_NOWAIT;
			p->stats->probe_read_pages -= s->read_pages;
		}
	}
	p->n_samples = kept;
	p->probed = false;
	for (size_t i = first_piece; i < p->n_pieces; i++) {
		p->pieces[i].probes = 0;
		p->pieces[i].probe_ns = 0;
	}
}

static int examine_pieces(struct plan *p, int fd, uint32_t backend, struct cache_probe *probe,
			  size_t first_piece, uint64_t size)
{
	int rc = 0;
	for (size_t i = first_piece; i < p->n_pieces && rc == 0; i++)
		rc = examine_chunk(p, fd, backend, probe, i, size);
	return rc;
}

/* One operand: its pieces (one per chunk), or one error piece.  In a
 * sparse file, chunks that are all hole come as runs, one piece each: a
 * file's apparent size costs nothing to read there, and one piece per
 * chunk of a 4 EiB file of truncate(1) took all memory. */
static int examine_file(struct plan *p, const char *path, uint32_t file)
{
	struct stat st;
	size_t first_piece = p->n_pieces;
	int fd = open_regular(path, &st);
	int rc = fd < 0 ? fd : 0;
	uint32_t backend = GBP_BACKEND_PROBE;

	if (rc == 0 && p->need_cache)
		rc = choose_backend(fd, p->opt->backend, &backend);
	uint64_t physical = UINT64_MAX;
	if (rc == 0 && p->need_physical) {
		uint64_t addr;
		if (layout_first_physical(fd, &addr) == 0)
			physical = addr;
	}
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		struct gbp_extent *e = new_piece(p, file);
		if (!e)
			return -ENOMEM;
		e->flags = GBP_ERROR;
		e->error = rc;
		return 0;
	}

	uint64_t size = (uint64_t)st.st_size;
	p->sparse = (uint64_t)st.st_blocks * 512 < size;
	uint64_t chunks = fccd_chunk_count(size, p->chunk);
	uint64_t data_at = 0; /* the next data of a sparse file, from the chunk on */
	for (uint64_t k = 0; k < chunks; k++) {
		struct gbp_extent *e = new_piece(p, file);
		if (!e) {
			close(fd);
			return -ENOMEM;
		}
		e->offset = k * p->chunk;
		e->length = size - e->offset < p->chunk ? size - e->offset : p->chunk;
		if (p->sparse && data_at <= e->offset)
			data_at = next_data(fd, e->offset, size);
		if (p->sparse && data_at > e->offset && (data_at - e->offset) / p->chunk >= 2) {
			/* Whole chunks up to the one holding data, or to the end. */
			uint64_t run = data_at >= size ? chunks - k : (data_at - e->offset) / p->chunk;
			e->length = run == chunks - k ? size - e->offset : run * p->chunk;
			k += run - 1;
		}
		e->device = (uint64_t)st.st_dev;
		e->inode = (uint64_t)st.st_ino;
		e->physical = physical;
		e->backend = p->need_cache ? backend : GBP_BACKEND_AUTO;
	}
	if (!p->need_cache) {
		close(fd);
		return 0;
	}

	uint64_t start_ns = clock_now_ns();
	size_t first_sample = p->n_samples;
	struct cache_probe probe;
	cache_probe_init(&probe);
	probe.transient = true; /* closed before gbp_order() returns */
	if (size == 0) {
		/* Nothing to read: as good as cached. */
		p->pieces[first_piece].cached_fraction = 1.0;
		p->pieces[first_piece].flags |= GBP_EXACT;
	} else if (backend_probes(backend) && size < p->page) {
		/* §4.1.4: a probe would bring the whole file in - the answer
		 * would be "cached" whatever it was.  Not probed; sorted after
		 * every probed piece, as the paper's "fake high probe-time".
		 * A nowait probe too: it does not wait for that read, but it
		 * starts it - the whole file, evicting something where the
		 * cache is full, which is when the order matters. */
		p->pieces[first_piece].flags |= GBP_NOT_PROBED;
		if (p->stats)
			p->stats->files_not_probed++;
	} else {
		uint64_t rng_start = p->rng;
		rc = examine_pieces(p, fd, backend, &probe, first_piece, size);
		if (rc == -EOPNOTSUPP && backend == GBP_BACKEND_NOWAIT) {
			/* No nowait buffered reads on this file system (or
			 * kernel): timed probes, at the same points. */
			forget_probes(p, first_piece, true);
			p->rng = rng_start;
			backend = GBP_BACKEND_PROBE;
			for (size_t i = first_piece; i < p->n_pieces; i++)
				p->pieces[i].backend = backend;
			if (p->stats)
				p->stats->nowait_fallbacks++;
			rc = examine_pieces(p, fd, backend, &probe, first_piece, size);
		}
		if (p->stats && rc == 0) {
			if (backend == GBP_BACKEND_PROBE)
				p->stats->files_probed++;
			else if (backend == GBP_BACKEND_NOWAIT)
				p->stats->files_nowait++;
			else
				p->stats->files_exact++;
		}
	}
	if (p->stats)
		p->stats->examine_ns += clock_now_ns() - start_ns;
	if (rc == 0 && backend == GBP_BACKEND_NOWAIT)
		settle_later(p, &probe, fd, first_sample);
	else
		cache_probe_close(&probe);
	close(fd);
	if (rc < 0) {
		/* The file's pieces become one error piece; its samples go. */
		forget_probes(p, first_piece, false);
		p->n_pieces = first_piece + 1;
		struct gbp_extent *e = &p->pieces[first_piece];
		memset(e, 0, sizeof *e);
		e->file = file;
		e->flags = GBP_ERROR;
		e->error = rc;
		e->cached_fraction = -1;
		e->physical = UINT64_MAX;
		if (rc == -ENOMEM)
			return rc;
	}
	return 0;
}

/* One piece per file: sums of its chunks (GBP_WHOLE_FILES). */
static void merge_whole_files(struct plan *p)
{
	size_t out = 0;
	for (size_t i = 0; i < p->n_pieces;) {
		size_t j = i;
		struct gbp_extent whole = p->pieces[i];
		uint32_t hits = 0;
		double cached_bytes = 0;
		bool exact = true, runs = false;
		whole.probes = 0;
		whole.probe_ns = 0;
		whole.length = 0;
		for (; j < p->n_pieces && p->pieces[j].file == p->pieces[i].file; j++) {
			const struct gbp_extent *e = &p->pieces[j];
			whole.length += e->length;
			whole.probes += e->probes;
			whole.probe_ns += e->probe_ns;
			hits += p->hits[j];
			exact = exact && (e->flags & GBP_EXACT);
			runs = runs || hole_run(p, e);
			if (e->cached_fraction >= 0)
				cached_bytes += e->cached_fraction * (double)e->length;
		}
		/* Exact only if every piece was; a file of probed chunks and
		 * hole runs is weighed by bytes, its runs counting as cached. */
		if (!exact)
			whole.flags &= ~GBP_EXACT;
		if (!(whole.flags & (GBP_ERROR | GBP_NOT_PROBED)) && whole.cached_fraction >= 0) {
			if (exact || runs)
				whole.cached_fraction = whole.length ? cached_bytes / (double)whole.length
								     : 1.0;
			else if (whole.probes)
				whole.cached_fraction = (double)hits / whole.probes;
		}
		p->hits[out] = hits;
		p->pieces[out++] = whole;
		i = j;
	}
	p->n_pieces = out;
}

static int options_check(const struct gbp_options *in, struct gbp_options *out)
{
	memset(out, 0, sizeof *out);
	if (in == NULL)
		return 0;
	if (in->size < sizeof *out)
		return -EINVAL;
	*out = *in;
	out->size = sizeof *out;
	if (out->order > GBP_ORDER_COMPOSE_PHYSICAL || out->backend > GBP_BACKEND_NOWAIT ||
	    (out->flags & ~GBP_WHOLE_FILES))
		return -EINVAL;
	/* An access unit below a page: its prediction units (a quarter
	 * each) would be probed in the same page several times over. */
	long page = sysconf(_SC_PAGESIZE);
	if (out->access_unit && out->access_unit < (uint64_t)(page > 0 ? page : 4096))
		return -EINVAL;
	return 0;
}

/* The first read(2) of a process pays for its cold code path - page
 * faults in, instruction and data caches, the probe's /proc reopen - and
 * a first probe of a cached page then looks like a miss.  A few one-byte
 * reads of our own executable, surely cached since it runs, warm that
 * path without touching any file being ordered (cache_detector.c's
 * calibration times a warm pass for the same reason). */
static void warm_read_path(void)
{
	char byte;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	for (int i = 0; i < 8; i++)
		if (pread(fd, &byte, 1, 0) < 0)
			break;
	close(fd);
}

/* Devices told apart when choosing the threshold's device; the timed
 * probes of files on further devices do not vote. */
#define THRESHOLD_DEVICES 16

struct device_votes {
	uint64_t device;
	size_t probes;
	size_t piece;      /* of its first timed probe */
};

/* The device of the most timed probes (a tie: the one probed first) and
 * the piece of its first probe, for probe_threshold().  false: no timed
 * probe. */
static bool most_probed_device(const struct plan *p, uint64_t *device, size_t *piece)
{
	struct device_votes seen[THRESHOLD_DEVICES];
	size_t n_seen = 0;
	for (size_t i = 0; i < p->n_samples; i++) {
		if (p->samples[i].kind != FCCD_PROBE_TIMED)
			continue;
		size_t piece_index = p->samples[i].extent;
		uint64_t dev = p->pieces[piece_index].device;
		size_t k = 0;
		while (k < n_seen && seen[k].device != dev)
			k++;
		if (k == n_seen) {
			if (n_seen == THRESHOLD_DEVICES)
				continue;
			seen[n_seen++] = (struct device_votes){ .device = dev, .piece = piece_index };
		}
		seen[k].probes++;
	}
	if (n_seen == 0)
		return false;
	size_t best = 0;
	for (size_t k = 1; k < n_seen; k++)
		if (seen[k].probes > seen[best].probes)
			best = k;
	*device = seen[best].device;
	*piece = seen[best].piece;
	return true;
}

/* The calibrated hit/miss probe threshold (graybox-icl §5) for the timed
 * probes' files, asked only once fccd_classify_probes() said one decides
 * (the kernel counted no read: a file system without block I/O
 * accounting, or every probe hit) - most runs never ask.  Files on several
 * devices are classified as one population (§4.2.4), so one threshold:
 * that of the device with the most timed probes.  A fresh entry of the
 * calibration file, else measured now (~0.1 s, 8 MiB written to an
 * unlinked scratch file) in the directory of the first such file, which
 * is on the same file system, and stored, as `discnice run` does
 * (toolbox/parameters.c).  0 (the caller's fixed factor) when neither
 * worked: no fresh entry, and the directory is not writable, is on a
 * read-only file system, or cannot evict a page (tmpfs); or the file is a
 * mount point of its own, whose directory measures another file system
 * (then only the file is asked). */
static uint64_t probe_threshold(const struct plan *p, const char *const *paths,
				enum parameter_source *source, uint64_t *device)
{
	size_t piece;
	*source = PARAMETER_DEFAULT;
	*device = 0;
	if (!most_probed_device(p, device, &piece))
		return 0;
	const char *path = paths[p->pieces[piece].file];
	const char *slash = strrchr(path, '/');
	size_t len = slash == NULL ? 1 : slash == path ? 1 : (size_t)(slash - path);
	char *dir = malloc(len + 1);
	if (!dir)
		return 0;
	if (slash == NULL) {
		memcpy(dir, ".", 2);
	} else {
		memcpy(dir, path, len);
		dir[len] = '\0';
	}
	struct stat st;
	bool same_fs = stat(dir, &st) == 0 && (uint64_t)st.st_dev == *device;
	int64_t threshold = same_fs ? parameters_probe_threshold(dir, true, source)
				    : parameters_probe_threshold(path, false, source);
	free(dir);
	if (threshold <= 0) {
		*source = PARAMETER_DEFAULT;
		*device = 0;
		return 0;
	}
	return (uint64_t)threshold;
}

static uint64_t fresh_seed(void)
{
	uint64_t seed = 0;
	if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
		seed = clock_now_ns() ^ ((uint64_t)getpid() << 32);
	return seed ? seed : 1;
}

int fccd_plan(const char *const *paths, size_t n_paths, const struct gbp_options *options,
	      struct gbp_extent **extents, size_t *n_extents, struct fccd_plan_stats *stats)
{
	int saved = errno;
	struct gbp_options opt;
	struct plan p;
	double *scratch = NULL;
	int rc;

	memset(&p, 0, sizeof p);
	/* The out values are set first, so that every -EINVAL leaves them
	 * as empty as any other failure does. */
	if (extents)
		*extents = NULL;
	if (n_extents)
		*n_extents = 0;
	if (extents == NULL || n_extents == NULL || (paths == NULL && n_paths > 0))
		return -EINVAL;
	if ((rc = options_check(options, &opt)) < 0)
		return rc;
	if (n_paths > UINT32_MAX)
		return -EOVERFLOW;
	for (size_t i = 0; i < n_paths; i++)
		if (paths[i] == NULL)
			return -EINVAL;

	long page = sysconf(_SC_PAGESIZE);
	p.opt = &opt;
	p.page = page > 0 ? (uint64_t)page : 4096;
	p.chunk = fccd_chunk_length(opt.access_unit, opt.record_size);
	p.unit = fccd_prediction_unit(p.chunk, p.page);
	p.rng = opt.seed ? opt.seed : fresh_seed();
	p.need_cache = opt.order == GBP_ORDER_MEMORY || opt.order == GBP_ORDER_COMPOSE ||
		       opt.order == GBP_ORDER_COMPOSE_PHYSICAL;
	p.need_physical = opt.order == GBP_ORDER_PHYSICAL ||
			  opt.order == GBP_ORDER_COMPOSE_PHYSICAL;
	p.stats = stats;
	if (stats) {
		memset(stats, 0, sizeof *stats);
		stats->seed = p.rng;
		stats->chunk_length = p.chunk;
		stats->prediction_unit = p.unit;
	}

	if (p.need_cache)
		warm_read_path();
	for (size_t i = 0; i < n_paths; i++)
		if ((rc = examine_file(&p, paths[i], (uint32_t)i)) < 0)
			goto fail;
	settle_pending(&p, true);

	/* Hits and misses, all timed probes together (§4.2.4 clusters "the
	 * probe times of each file" as one population); nowait probes came
	 * with theirs. */
	size_t scratch_n = 2 * p.n_samples > p.n_pieces ? 2 * p.n_samples : p.n_pieces;
	scratch = malloc((scratch_n ? scratch_n : 1) * sizeof *scratch);
	if (!scratch) {
		rc = -ENOMEM;
		goto fail;
	}
	/* Without a threshold first: one is fetched (and the probes classified
	 * again) only where it decides. */
	struct fccd_probe_verdict verdict;
	enum parameter_source threshold_source = PARAMETER_DEFAULT;
	uint64_t threshold_dev = 0;
	fccd_classify_probes(p.samples, p.n_samples, scratch, 0, &verdict);
	if (verdict.threshold_needed) {
		uint64_t threshold = probe_threshold(&p, paths, &threshold_source, &threshold_dev);
		if (threshold > 0)
			fccd_classify_probes(p.samples, p.n_samples, scratch, threshold, &verdict);
	}
	for (size_t i = 0; i < p.n_samples; i++)
		if (p.samples[i].hit)
			p.hits[p.samples[i].extent]++;
	for (size_t i = 0; i < p.n_pieces; i++) {
		struct gbp_extent *e = &p.pieces[i];
		if (!(e->flags & (GBP_EXACT | GBP_ERROR | GBP_NOT_PROBED)) && e->probes > 0)
			e->cached_fraction = (double)p.hits[i] / e->probes;
	}
	if (stats) {
		stats->probe_verdict = verdict;
		stats->probe_threshold_source = threshold_source;
		stats->probe_threshold_device = threshold_dev;
		for (size_t i = 0; i < p.n_samples; i++)
			stats->probe_hits += p.samples[i].hit;
	}
	if (opt.flags & GBP_WHOLE_FILES)
		merge_whole_files(&p);

	struct cluster_split cache_split;
	if (p.need_cache)
		fccd_mark_in_cache(p.pieces, p.n_pieces, scratch, &cache_split);
	else
		cluster_two_means_sorted(scratch, 0, &cache_split);
	if (stats)
		stats->cache_split = cache_split;

	switch (opt.order) {
	case GBP_ORDER_MEMORY:
		fccd_sort_memory(p.pieces, p.n_pieces);
		break;
	case GBP_ORDER_INODE:
		layout_order_sort(p.pieces, p.n_pieces, false, false);
		break;
	case GBP_ORDER_PHYSICAL:
		layout_order_sort(p.pieces, p.n_pieces, true, false);
		break;
	case GBP_ORDER_COMPOSE:
		layout_order_sort(p.pieces, p.n_pieces, false, true);
		break;
	default:
		layout_order_sort(p.pieces, p.n_pieces, true, true);
		break;
	}

	free(scratch);
	free(p.hits);
	if (stats) {
		stats->samples = p.samples;
		stats->n_samples = p.n_samples;
	} else {
		free(p.samples);
	}
	if (p.n_pieces == 0) {
		free(p.pieces);
		p.pieces = NULL;
	}
	*extents = p.pieces;
	*n_extents = p.n_pieces;
	errno = saved;
	return 0;
fail:
	settle_pending(&p, true);
	free(scratch);
	free(p.hits);
	free(p.samples);
	free(p.pieces);
	errno = saved;
	return rc;
}
