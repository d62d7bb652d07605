/*
 * io_read.c - the path of one read: the cache detector (DiscNice §4.2) and
 * the read-size predictor (§4.3, a model of mm/readahead.c) say which pages
 * the kernel will fetch; holes of sparse files cost nothing; under a read
 * cap the agent reads the model's windows in itself, paced (prefetch), so
 * the disk never sees a whole readahead window at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/cache_drop.h"
#include "agent/io.h"
#include "agent/io_internal.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "agent/pieces_in_hand.h"
#include "agent/spin.h"
#include "agent/writeback.h"
#include "common/clock.h"
#include "graybox/cache_detector.h"
#include "graybox/readahead.h"
#include "policy/drop_behind.h"

/*
 * Learn where a sparse file's data is around [first, end), by FIEMAP on the
 * program's own descriptor (an ioctl: its offset and readahead state stay
 * untouched, as lseek(SEEK_DATA) would not leave them), over at least 64 MiB
 * so that a sequential reader asks once per 64 MiB or 16 extents.
 * Unwritten (preallocated) extents read as zeros without I/O: holes too.
 * A filesystem without FIEMAP: the file is treated as dense from then on.
 */
#define HOLES_SPAN_PAGES (UINT64_C(64) << (20 - PAGE_SHIFT))

static bool holes_known(int fd, struct open_file *of, uint64_t first, uint64_t end)
{
	uint64_t last = pages_of(of->isize);
	if (end > last)
		end = last;
	if (first >= end)
		return false; /* past EOF: the detector's business */
	if (extent_map_knows(&of->extents, first, end))
		return true;
	if (end - first < HOLES_SPAN_PAGES)
		end = first + HOLES_SPAN_PAGES < last ? first + HOLES_SPAN_PAGES : last;
	union {
		struct fiemap map;
		char bytes[sizeof(struct fiemap) + EXTENT_MAP_MAX * sizeof(struct fiemap_extent)];
	} req;
	memset(&req, 0, sizeof req);
	req.map.fm_start = first << PAGE_SHIFT;
	req.map.fm_length = (end - first) << PAGE_SHIFT;
	req.map.fm_extent_count = EXTENT_MAP_MAX;
	if (ioctl(fd, FS_IOC_FIEMAP, &req) != 0) {
		of->sparse = false;
		return false;
	}
	extent_map_learn(&of->extents, first, end);
	for (unsigned i = 0; i < req.map.fm_mapped_extents; i++) {
		const struct fiemap_extent *e = &req.map.fm_extents[i];
		if (!(e->fe_flags & FIEMAP_EXTENT_UNWRITTEN))
			extent_map_add(&of->extents, e->fe_logical >> PAGE_SHIFT,
				       pages_of(e->fe_logical + e->fe_length));
	}
	unsigned n = req.map.fm_mapped_extents;
	const struct fiemap_extent *tail = n ? &req.map.fm_extents[n - 1] : NULL;
	if (n == EXTENT_MAP_MAX && !(tail->fe_flags & FIEMAP_EXTENT_LAST)) {
		/* More extents follow: only up to the last one is known. */
		uint64_t known = pages_of(tail->fe_logical + tail->fe_length);
		if (known < of->extents.known_end)
			of->extents.known_end = known;
	}
	return extent_map_knows(&of->extents, first, first + 1);
}

/* The pages of [first, first + count) that are not holes (see
 * page_cache_view.count_disk): where FIEMAP has not told us, all. */
static uint64_t view_count_disk(void *ctx, uint64_t first, uint64_t count)
{
	struct view_ctx *v = ctx;
	uint64_t end = first + count, a, b;
	if (!v->of->sparse || !holes_known(v->fd, v->of, first, end))
		return count;
	uint64_t known = end < v->of->extents.known_end ? end : v->of->extents.known_end;
	uint64_t data = end - known;
	for (uint64_t pos = first; extent_map_next_data(&v->of->extents, pos, known, &a, &b); pos = b)
		data += b - a;
	return data;
}

/* Is the cache predicted, and asked of an exact detector (cachestat,
 * mincore), not of timing probes? */
static bool detector_exact(const struct open_file *of)
{
	return predicting(DN_PREDICT_CACHE) &&
	       (of->backend == DN_CACHE_CACHESTAT || of->backend == DN_CACHE_MINCORE);
}

/* A file of at most this many pages is asked about whole (detector_count). */
#define WHOLE_FILE_QUERY_PAGES 64

uint64_t detector_count(struct view_ctx *v, uint64_t first, uint64_t count)
{
	if (!v->use_cache || !count)
		return 0;
	/* Within one call the page cache is taken as still: a question inside
	 * a range found all cached in this call is answered from it. */
	if (first >= v->known_first && first + count <= v->known_end)
		return count;
	uint64_t threshold = agent.seg ? agent.seg->probe_threshold_ns : 0;
	uint64_t isize_pages = pages_of(v->of->isize);
	if (!v->asked_whole && v->of->backend == DN_CACHE_CACHESTAT && isize_pages > count &&
	    isize_pages <= WHOLE_FILE_QUERY_PAGES && first + count <= isize_pages) {
		/* A small file is asked about whole, once: in a warm tree
		 * (grep -r, make) it is all cached, and the model's questions
		 * (its first page, then its first window) cost one cachestat
		 * instead of two.  Not all cached: ask exactly, a syscall
		 * beside a disk read.  Never for the probe backend, whose
		 * questions read the file. */
		v->asked_whole = true;
		if (cache_detector_count(v->fd, DN_CACHE_CACHESTAT, &v->of->probe, threshold, 0,
					 isize_pages) == (int64_t)isize_pages) {
			v->known_first = 0;
			v->known_end = isize_pages;
			return count;
		}
	}
	int64_t n = cache_detector_count(v->fd, (enum dn_cache_backend)v->of->backend,
					 &v->of->probe, threshold, first, count);
	if (n == (int64_t)count && v->known_end <= v->known_first) {
		v->known_first = first;
		v->known_end = first + count;
	}
	/* A detector that cannot answer means "not cached": over-predicting
	 * slows the job down, under-predicting would break the cap. */
	return n < 0 ? 0 : (uint64_t)n > count ? count : (uint64_t)n;
}

static uint64_t view_count_cached(void *ctx, uint64_t first, uint64_t count)
{
	struct view_ctx *v = ctx;
	uint64_t end = first + count;
	/* Pages the model put in the cache (this call or earlier) count as
	 * cached; the detector is asked about the rest. */
	uint64_t lo = first > v->of->model_first ? first : v->of->model_first;
	uint64_t hi = end < v->of->model_end ? end : v->of->model_end;
	if (lo >= hi)
		lo = hi = end;
	uint64_t n = (hi - lo) + detector_count(v, first, lo - first) + detector_count(v, hi, end - hi);
	for (unsigned i = 0; i < v->overlays; i++) {
		uint64_t olo = first > v->overlay[i].first ? first : v->overlay[i].first;
		uint64_t ohi = end < v->overlay[i].end ? end : v->overlay[i].end;
		/* The part of the overlay outside the model range: the
		 * detector's answer there is replaced by "cached". */
		for (int part = 0; part < 2; part++) {
			uint64_t a = part ? (olo > hi ? olo : hi) : olo;
			uint64_t b = part ? ohi : (ohi < lo ? ohi : lo);
			if (a < b)
				n += (b - a) - detector_count(v, a, b - a);
		}
	}
	return n > count ? count : n;
}

/* Remember [first, first+count) in this call's overlay (the ranges the
 * model says the kernel reads now: the prefetch plan) and in the file's
 * model range (what later calls may take as resident). */
static void view_mark_cached(void *ctx, uint64_t first, uint64_t count)
{
	struct view_ctx *v = ctx;
	uint64_t end = first + count;
	struct open_file *of = v->of;
	if (of->model_end > of->model_first && first <= of->model_end && end >= of->model_first) {
		if (first < of->model_first)
			of->model_first = first;
		if (end > of->model_end)
			of->model_end = end;
	} else {
		/* A new stream position: remember the newest window. */
		of->model_first = first;
		of->model_end = end;
	}
	for (unsigned i = 0; i < v->overlays; i++)
		if (first <= v->overlay[i].end && end >= v->overlay[i].first) {
			/* Overlapping or adjacent: keep the overlay disjoint. */
			if (first < v->overlay[i].first)
				v->overlay[i].first = first;
			if (end > v->overlay[i].end)
				v->overlay[i].end = end;
			return;
		}
	if (v->overlays < sizeof v->overlay / sizeof v->overlay[0]) {
		v->overlay[v->overlays].first = first;
		v->overlay[v->overlays].end = end;
		v->overlays++;
	} else {
		/* Out of room: widen the last one (over-predicts slightly). */
		unsigned last = v->overlays - 1;
		if (first < v->overlay[last].first)
			v->overlay[last].first = first;
		if (end > v->overlay[last].end)
			v->overlay[last].end = end;
	}
}

/*
 * --cache drop: of the ranges the model says the kernel reads in for this
 * call (the view's overlays: the plan), the ones the job reads in from
 * disk - misses - kept on the file until the call is done
 * (io_read_dropped()).  A window is a miss only if none of its pages is
 * cached now: the model's windows may span pages cached before (someone
 * else's, kept), and a window partly cached is kept whole.  The probe
 * backend cannot tell without reading: then the model's word stands.
 */
static void note_misses(struct view_ctx *v)
{
	struct open_file *of = v->of;
	for (unsigned i = 0; i < v->overlays; i++) {
		uint64_t first = v->overlay[i].first, end = v->overlay[i].end;
		if (end <= first || of->drop_missed_count == sizeof of->drop_missed /
								sizeof of->drop_missed[0])
			continue;
		if (of->backend != DN_CACHE_PROBE && detector_count(v, first, end - first) != 0)
			continue;
		of->drop_missed[of->drop_missed_count++] = (struct drop_range){ first, end };
		of->drop_tracked = true;
	}
}

/* [*first, *end) less the pages of gone (a range behind the reader: the
 * part that stays is the one after it, or before it). */
static void trim_resident(uint64_t *first, uint64_t *end, struct drop_range gone)
{
	if (gone.end <= *first || gone.first >= *end)
		return;
	if (gone.first <= *first)
		*first = gone.end < *end ? gone.end : *end;
	else
		*end = gone.first;
}

void io_read_dropped(int fd, uint64_t pos, uint64_t bytes)
{
	struct drop_range missed[sizeof ((struct open_file *)0)->drop_missed /
				 sizeof(struct drop_range)];
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return;
	if (!of->drop_tracked) {
		open_file_release(of);
		return;
	}
	unsigned n = of->drop_missed_count;
	memcpy(missed, of->drop_missed, n * sizeof missed[0]);
	of->drop_missed_count = 0;
	uint64_t dev = of->dev, ino = of->ino;
	open_file_release(of);
	struct drop_range gone;
	if (!cache_drop_read(fd, dev, ino, pos, bytes, missed, n, &gone))
		return;
	/* The model's resident ranges must not hold pages we dropped: a read
	 * there would be taken for a hit. */
	if (!(of = open_file_acquire(fd)))
		return;
	trim_resident(&of->model_first, &of->model_end, gone);
	trim_resident(&of->ra.resident_first, &of->ra.resident_end, gone);
	open_file_release(of);
}

/* Disk bytes a read of [pos, pos + count) will cause.  of is locked. */
/* The page ranges the model says the kernel will read for one call. */
struct read_plan {
	unsigned ranges;
	struct { uint64_t first, end; } range[8];
};

/* Is page cached?  The probe backend probes exactly it: the span's unit
 * judgments (count_probe(), §4.2) answer for 1.25 MiB at a time and from
 * when the span was examined - before the kernel read the window a
 * stream is adopted for, which they then cut short.  A miss reads the
 * page (charged, probe.disk_pages). */
static bool probe_page(struct view_ctx *v, uint64_t page)
{
	if (!v->use_cache)
		return false;
	if (page >= v->known_first && page < v->known_end)
		return true;
	uint64_t threshold = agent.seg ? agent.seg->probe_threshold_ns : 0;
	return cache_probe_pages(v->fd, &v->of->probe, threshold, page, 1) == 1;
}

/* Is all of [first, first + len) cached?  The probe backend asks about
 * the last page alone: asked about the range it would probe every page,
 * and read in each one missing, one page at a time.  The runs looked for
 * here (a cached start, the kernel's windows ahead of a reader) are
 * contiguous: read in whole. */
static bool run_reaches(struct view_ctx *v, uint64_t first, uint64_t len)
{
	if (v->of->backend == DN_CACHE_PROBE)
		return probe_page(v, first + len - 1);
	return detector_count(v, first, len) == len;
}

/* How many pages from first on are cached, up to limit: by doubling then
 * bisecting, about 2 log2(run) detector queries. */
static uint64_t cached_run(struct view_ctx *v, uint64_t first, uint64_t limit)
{
	uint64_t run = 0, len = 1;
	while (len <= limit && run_reaches(v, first, len)) {
		run = len;
		len *= 2;
	}
	uint64_t hi = len <= limit ? len : limit + 1; /* [first, first + hi) not all cached */
	while (hi - run > 1) {
		uint64_t mid = run + (hi - run) / 2;
		if (run_reaches(v, first, mid))
			run = mid;
		else
			hi = mid;
	}
	return run;
}

/* A file the model meets mid-stream (open_file.h: adopt): find where the
 * kernel's readahead ahead of the reader ends - the cached run from its
 * page, a dozen detector queries once per file - and let the model take
 * the stream over from there.  The kernel paced it until now: under a cap
 * its next window is read in by us. */
/* The cached run from page first, as far as the kernel's readahead can be
 * ahead of a reader there (two windows) and no further than EOF. */
static uint64_t stream_run(struct view_ctx *v, const struct open_file *of, uint64_t first)
{
	uint64_t limit = 2 * (uint64_t)of->ra.ra_pages + 1, isize_pages = pages_of(of->isize);
	if (first >= isize_pages)
		return 0;
	return cached_run(v, first, limit < isize_pages - first ? limit : isize_pages - first);
}

/* Pages [lo, hi) are cached now: nothing owed there is read in or
 * charged by the prefetch (owed_take()). */
static void owed_forget(struct open_file *of, uint64_t lo, uint64_t hi)
{
	uint64_t gone = 0;
	for (unsigned j = 0; j < of->owed_count;) {
		uint64_t first = of->owed[j].first, end = of->owed[j].end;
		uint64_t a = first > lo ? first : lo, b = end < hi ? end : hi;
		if (a < b) {
			gone += b - a;
			/* Keep the part after hi; a part before lo is behind the
			 * reader, which found it cached. */
			of->owed[j].first = b;
			if (b >= end) {
				of->owed[j] = of->owed[of->owed_count - 1];
				of->owed_count--;
				continue;
			}
		}
		j++;
	}
	uint64_t bytes = gone << PAGE_SHIFT;
	of->owed_bytes = of->owed_bytes > bytes && of->owed_count ? of->owed_bytes - bytes : 0;
}

/* Pages [a, a_end) and [b, b_end) have in common. */
static uint64_t overlap_pages(uint64_t a, uint64_t a_end, uint64_t b, uint64_t b_end)
{
	uint64_t lo = a > b ? a : b, hi = a_end < b_end ? a_end : b_end;
	return lo < hi ? hi - lo : 0;
}

/* ractl_max_pages() as far as the model knows it: the largest window the
 * kernel reads, ra_pages or io_pages for an oversized request. */
static uint64_t max_window_pages(const struct open_file *of)
{
	return of->ra.ra_pages > of->ra.io_pages ? of->ra.ra_pages : of->ra.io_pages;
}

/* The model has brought in (or knows) every page below page. */
static void raise_model_high(struct open_file *of, uint64_t page)
{
	if (page > of->watch.model_high)
		of->watch.model_high = page;
}

static void adopt_stream(struct view_ctx *v, struct open_file *of, uint64_t pos)
{
	uint64_t first = pos >> PAGE_SHIFT, run = stream_run(v, of, first);
	if (!run)
		return;
	readahead_adopt_stream(&of->ra, pos, first + run);
	raise_model_high(of, first + run); /* the kernel's window is the model's now */
	/* A plan owed from before the kernel read ahead by itself (its
	 * window from a marker the model never saw: io_unseen_settle()) would be
	 * read in and charged a second time. */
	owed_forget(of, first, first + run);
	of->kernel_paced = true;
}

/*
 * A cached start the model did not bring in (open_file.h struct stream_watch).
 *
 * The kernel's window from an unknown marker m in [0, run) starts at
 * page_cache_next_miss() after m - the run's end, or past what the model
 * read there since - and is at most ractl_max_pages() long, so two windows
 * of the larger of ra_pages and io_pages from the run's end hold it.  The
 * model cannot know m (mincore and cachestat do not show PG_readahead), so
 * it watches: one cachestat of that span at each prediction until the
 * reader is past the run.  Only the exact backends: the probe backend's
 * questions would read the span in.
 */
static uint64_t watch_span(const struct open_file *of)
{
	uint64_t max_pages = max_window_pages(of);
	uint64_t span = 2 * max_pages + 1, isize_pages = pages_of(of->isize);
	if (of->watch.first >= isize_pages)
		return 0;
	return span < isize_pages - of->watch.first ? span : isize_pages - of->watch.first;
}

/* The shortest run mid-file that may hold a marker: a sequential
 * reader's first window, get_init_ra_size() of one page, is four pages
 * with its marker on the second. */
#define FOREIGN_RUN_MIN_PAGES 4

/* Check the calls of a stream that met someone else's run mid-file
 * (io_unseen_wanted()) until the reader is past page, plus the farthest a
 * marker behind it can start a window: page_cache_async_ra() reads from
 * the next miss within max_pages of the marker, up to max_pages long -
 * and once more, for a window the kernel started from that one. */
static void foreign_check_until(struct open_file *of, uint64_t page)
{
	uint64_t max_pages = max_window_pages(of);
	of->watch.foreign_met = true;
	if (page + 4 * max_pages > of->watch.foreign_until)
		of->watch.foreign_until = page + 4 * max_pages;
}

/* The detector's count of cached pages, for page_spans_cover(). */
static uint64_t detector_cached(void *ctx, uint64_t first, uint64_t count)
{
	return detector_count(ctx, first, count);
}

/* Of pages [first, first + count), those cached now in pieces another open
 * file's taker read in (read_in_spans(), every record) or holds
 * (in_hand_spans(): its readahead(2), not yet returned, has put the pages
 * in the cache before they are recorded); of is locked.
 * The watch's span is two windows, 16 MiB here, and 128 threads reading
 * slices of it read in far more than one look's 64 spans: the pieces left
 * out were taken for the kernel's window and paid again.  So a range
 * whose records fill the array is halved, and each part looked at apart
 * (page_spans_cover() clips the spans to the part). */
static uint64_t theirs_cached(struct view_ctx *v, const struct open_file *of, uint64_t first,
			      uint64_t count)
{
	struct page_span spans[IN_HAND_SPANS_MAX];
	uint64_t paid = 0, end = first + count;
	for (uint64_t a = first; a < end;) {
		uint64_t b = end;
		unsigned n;
		for (;;) {
			n = 0;
			uint64_t held = in_hand_hold();
			in_hand_spans(held, of->dev, of->ino, (uintptr_t)of, false, a, b, spans, &n,
				      IN_HAND_SPANS_MAX);
			unsigned kept = 0;
			for (unsigned i = 0; i < n; i++)
				if (spans[i].theirs)
					spans[kept++] = spans[i];
			n = kept;
			read_in_spans(held, of->dev, of->ino, (uintptr_t)of, 0, a, b, spans, &n,
				      IN_HAND_SPANS_MAX);
			in_hand_release(held);
			if (n < IN_HAND_SPANS_MAX || b - a == 1)
				break;
			b = a + (b - a) / 2;
		}
		if (n) {
			uint64_t covered = page_spans_cover(a, b, spans, n, NULL, NULL);
			paid += covered - page_spans_cover(a, b, spans, n, detector_cached, v);
		}
		a = b;
	}
	return paid;
}

/* Of pages [first, end), those this open file owes and are missing now:
 * its plan's ranges not yet taken, and its pieces in hand.  Its prefetch
 * reads them in, charged there: counted at a look's baseline as cached,
 * as watch_note_model() counts a prediction made while watching.  Traced
 * before (8 threads, a descriptor each, reading slices of a cold 34 MiB
 * file at 9M without feedback, 0.95x the cap): a thread whose model had
 * planned 416 pages past its slice began watching the run there, and its
 * own pieces then read them in - a rise, charged again as the kernel's
 * window. */
static uint64_t owed_missing(struct view_ctx *v, struct open_file *of, uint64_t first,
			     uint64_t end)
{
	struct page_span spans[IN_HAND_SPANS_MAX];
	unsigned n = 0;
	for (unsigned j = 0; j < of->owed_count; j++)
		if (of->owed[j].first < end && of->owed[j].end > first)
			spans[n++] = (struct page_span){ of->owed[j].first, of->owed[j].end, false };
	in_hand_spans(0, of->dev, of->ino, (uintptr_t)of, true, first, end, spans, &n,
		      IN_HAND_SPANS_MAX);
	return n ? page_spans_cover(first, end, spans, n, detector_cached, v) : 0;
}

/* The watch's look at its span [first, first + span): its cached pages
 * and the pages it owes (owed_missing()), and of the cached, above the
 * model's own windows, those in pieces another open file's taker read in
 * (theirs_cached(); without feedback only, where watch_look() takes their
 * rise off). */
static void watch_count(struct view_ctx *v, struct open_file *of, uint64_t span)
{
	uint64_t first = of->watch.first;
	uint64_t lo = of->watch.model_high > first ? of->watch.model_high : first;
	of->watch.cached = detector_count(v, first, span) + owed_missing(v, of, first, first + span);
	of->watch.theirs_lo = lo;
	of->watch.theirs_cached = !feedback_charges() && lo < first + span
					  ? theirs_cached(v, of, lo, first + span - lo)
					  : 0;
}

/*
 * A cached run the model did not bring in, met at page start: the first
 * read of a fresh open at offset 0 (count bytes), or a sequential reader
 * that comes from pages it read from disk onto pages someone else left
 * mid-file (count 0).  An earlier reader that stopped in the middle (dd
 * skip=, an interrupted copy, a database's scan) leaves its markers there
 * as at the start: measured before this watch, cat of a 100 MiB file whose
 * 40-60 MiB dd had read ran at 1.7x a 20M cap with --feedback off, 40 of
 * the kernel's 70 MiB predicted, the rest read by the kernel's chain a
 * window ahead of the model.
 */
static void watch_run(struct view_ctx *v, struct open_file *of, uint64_t start, uint64_t count)
{
	uint64_t isize_pages = pages_of(of->isize);
	if ((of->backend != DN_CACHE_CACHESTAT && of->backend != DN_CACHE_MINCORE) ||
	    of->ra.advice == READAHEAD_RANDOM || start >= isize_pages ||
	    pages_of(count) >= isize_pages)
		return; /* no exact detector, no window, or read whole in one call */
	if (start == 0) {
		/* A warm file (the common case: one query) or a cold one: the
		 * model sees the stream begin, as the kernel does. */
		if (detector_count(v, 0, 1) == 0 || detector_count(v, 0, isize_pages) == isize_pages)
			return;
	} else if (detector_count(v, start, 1) == 0) {
		return;
	}
	of->watch.first = start + cached_run(v, start, isize_pages - start);
	/* A new run: an earlier watch's pre-read, done or not, is not its. */
	of->watch.preread_first = of->watch.preread_end = 0;
	of->watch.preread_done = false;
	of->watch.looked = start;
	raise_model_high(of, of->watch.first); /* known now: no second watch */
	if (start && of->watch.first - start < FOREIGN_RUN_MIN_PAGES) {
		/* A page or two: a random reader's (page_cache_sync_ra() reads
		 * a lone miss with no async part, no marker) or a writer's. */
		of->watch.first = 0;
		return;
	}
	uint64_t span = watch_span(of);
	if (!span) {
		of->watch.first = 0; /* the run reaches the end of the file */
		return;
	}
	watch_count(v, of, span);
	of->watch.until = of->watch.first;
	if (start)
		foreign_check_until(of, of->watch.first);
	/* The marker is on the first page of the earlier reader's last
	 * window, at most its ra_pages (doubled by POSIX_FADV_SEQUENTIAL) or
	 * io_pages before the run's end. */
	uint64_t reach = 2 * (uint64_t)of->ra.bdi_ra_pages;
	if (of->ra.io_pages > reach)
		reach = of->ra.io_pages;
	if (of->ra.ra_pages > reach)
		reach = of->ra.ra_pages;
	of->watch.preread_base = start;
	of->watch.preread_from = of->watch.first - start > reach ? of->watch.first - reach : start;
	of->watch.preread_due = true;
}

/* Does a read at page first, sequential after pages the model predicted
 * from disk, meet a cached run that is not the model's (watch_run())?
 * The model's pages are below model_high: its windows go forward, and
 * whatever it predicted missing - read in by the kernel, by our prefetch
 * or by the pre-read after a run - is an overlay, which raises it.  Cheap
 * where it matters: asked only of reads that are not the model's hits
 * (readahead_is_hit() answered those) in a description that has missed,
 * so a warm file never asks; the detector is asked once, in watch_run().
 * The reader must come out of the model's last window (a stream, not a
 * random read the agent read in itself, which has no marker after it). */
static bool meets_foreign_run(const struct open_file *of, uint64_t first, uint64_t prev)
{
	return of->watch.model_high && !of->watch.first && prev != UINT64_MAX &&
	       (first == prev || first == prev + 1) && first >= of->watch.model_high &&
	       prev >= of->ra.start && prev < of->ra.start + of->ra.size;
}

/* The first page of [from, end) in none of this call's overlays, or end. */
static uint64_t first_unread(const struct view_ctx *v, uint64_t from, uint64_t end)
{
	for (bool moved = true; moved && from < end;) {
		moved = false;
		for (unsigned i = 0; i < v->overlays; i++)
			if (v->overlay[i].first <= from && from < v->overlay[i].end) {
				from = v->overlay[i].end;
				moved = true;
			}
	}
	return from < end ? from : end;
}

/*
 * After a prediction: the model's new window, [ra.start, ra.start +
 * ra.size), holds pages above what the model had brought in (old_high)
 * that it found cached - it read in only the missing ones, as
 * page_cache_ra_unbounded() does - so someone else's run lies in it, or
 * begins at its end, before the reader gets there.  A short run (a peek of
 * a megabyte, with its reader's readahead) fits inside one window, and its
 * marker makes the kernel read from the next miss after it, a window the
 * model never predicted: watched (watch_run()).  Measured before: cat of
 * a 153 MiB file whose middle 1 MB another process had read ran 12-18 %
 * over a 33MiB/s or 64MB/s cap without feedback, 10 % of the kernel's
 * reads unpredicted.  The pre-read after the run is for runs that end
 * beyond the window: inside it, the pages after the run are the model's,
 * owed already.
 */
static void watch_window_gap(struct view_ctx *v, struct open_file *of, uint64_t old_high)
{
	uint64_t window_end = of->ra.start + of->ra.size;
	uint64_t from = of->ra.start > old_high ? of->ra.start : old_high;
	if (from >= window_end)
		return;
	uint64_t gap = first_unread(v, from, window_end);
	if (gap >= window_end)
		return;
	watch_run(v, of, gap, 0);
	if (of->watch.first && of->watch.first < window_end)
		of->watch.preread_due = false;
}

/* Before a prediction while watching: the pages the kernel read into the
 * span by itself since the last look, which the model predicted none of. */
static uint64_t watch_look(struct view_ctx *v, struct open_file *of, uint64_t pos)
{
	uint64_t span = watch_span(of), page = pos >> PAGE_SHIFT;
	uint64_t now = span ? detector_count(v, of->watch.first, span) : 0;
	if (now <= of->watch.cached) {
		/* A fall (reclaim, or model pages still owed to the prefetch)
		 * keeps the higher count: owed pages read in later are no rise. */
		if (page >= of->watch.until || !span)
			of->watch.first = 0; /* past the run: every marker in it is behind */
		return 0;
	}
	uint64_t rise = now - of->watch.cached, first = of->watch.first;
	/* Pages another open file's pieces read in since the last look (two
	 * processes reading one file, a descriptor per thread) rise too, and
	 * were paid there: the kernel's window is the rest.  (The rise is
	 * charged only without feedback, predict_read().)  16 threads with a
	 * descriptor each, reading adjacent slices of a cold 256 MiB file at
	 * 16MiB/s, each watching the run its neighbour left, paid their
	 * neighbours' pieces again: 0.68x the cap, 64 threads 0.61-0.67x.
	 * Only above the model's own windows (model_high): pages it predicted
	 * are in the watch's count already (watch_note_model()), taken off
	 * the rise once, whoever read them in. */
	uint64_t lo = of->watch.model_high > first ? of->watch.model_high : first, paid = 0;
	if (!feedback_charges() && lo < first + span) {
		/* Counted as a rise of their cached pages since the look, not
		 * as the cached pages of their records written since: pages of
		 * records older than the look rose too, and were paid there -
		 * 64 threads reading 4 MiB slices of a cold 256 MiB file at
		 * 16MiB/s took 14-18 MiB of rises for the kernel's window,
		 * 0.93-0.97x the cap; every record counted, 1.9 MiB.  (Why
		 * pages of those records were not cached at the look is not
		 * known: not reclaim, the job read 1.004x the file, and each
		 * record's pages were all cached when it was written.)  Both
		 * counts start where the model's windows ended at the look
		 * (theirs_lo): clipped to where they end now, the look's count
		 * held pages this one does not, and the rises charged grew to
		 * 23 MiB.  So pages the model predicted since, and another's
		 * piece then read in, are taken off the rise here as well as
		 * counted in the look's figure (watch_note_model()): charged
		 * less than read, by at most the rise. */
		uint64_t tlo = of->watch.theirs_lo;
		uint64_t theirs = tlo < first + span ? theirs_cached(v, of, tlo, first + span - tlo) : 0;
		paid = theirs > of->watch.theirs_cached ? theirs - of->watch.theirs_cached : 0;
	}
	if (paid > rise)
		paid = rise;
	/* --cache drop: the job brought those pages in. */
	if (agent.cache_drop && of->drop_missed_count <
	    sizeof of->drop_missed / sizeof of->drop_missed[0]) {
		of->drop_missed[of->drop_missed_count++] = (struct drop_range){ first, first + span };
		of->drop_tracked = true;
	}
	if (page >= first) {
		/* The reader is in the window already: take the stream over
		 * where it is, as for one met mid-file. */
		of->watch.first = 0;
		adopt_stream(v, of, pos);
		return rise - paid;
	}
	/* The kernel's window starts at first, where the run ended
	 * (page_cache_next_miss()), with its marker on its first folio
	 * (async_size = size): the model takes that window for its own, so
	 * that the reader's crossing of first makes the model predict the
	 * kernel's next window, which the prefetch then reads in, paced,
	 * before the kernel can: the kernel's chain of markers ends there. */
	uint64_t run = stream_run(v, of, first);
	uint64_t prev_pos = of->ra.prev_pos;
	readahead_adopt_stream(&of->ra, first << PAGE_SHIFT, first + run);
	raise_model_high(of, first + run);
	of->ra.prev_pos = prev_pos; /* the reader is still behind first */
	of->kernel_paced = true;
	/* More markers of the earlier reader may lie between the reader and
	 * the old run's end: watch on, past the kernel's window. */
	of->watch.first = first + run;
	span = watch_span(of);
	if (span) {
		watch_count(v, of, span);
	} else {
		of->watch.first = 0;
	}
	return rise - paid;
}

/*
 * The earlier reader's marker, read in ahead of it.  Watching (above)
 * finds the kernel's window only once the kernel has read it, whole: 8-16
 * MiB in one burst, two to four seconds of a 4 MB/s cap (measured: the
 * job's read_bytes 8.7 MB in its first second after `head -c 20000000`,
 * then nothing for the next; rate_peeked.py's 1-s windows).  But
 * page_cache_async_ra(), meeting a marker with no readahead state of its
 * own, reads from page_cache_next_miss() after the marker only if that
 * miss is at most max_pages (ractl_max_pages(): ra_pages, or io_pages for
 * an oversized request) beyond it.  So under a cap, before the reader can
 * reach the marker, the model reads in max_pages after the run's end
 * itself - through the prefetch, paced, read by readahead(2), which sets
 * no marker of its own - and the marker, when the reader meets it, starts
 * nothing: the next miss, at the end of what we read, is too far.  The
 * reader then meets that miss as a cold stream's next read (a fresh
 * window, page_cache_sync_ra()), which the model predicts and paces as it
 * does any.  The window is planned at the first read and read in as the
 * reader goes through the run, in proportion, all of it by the time it
 * reaches preread_from (plan_read()): the job's work on the cached pages
 * overlaps the pacing, as on any paced stream (read in at once, md5sum
 * hashing 27 MiB after it ran 2.5 % under a 4 MB/s cap), and a job that
 * stops early pays for what it went through.
 *
 * Only after a run of half a window or more: an earlier reader's windows
 * double from 128 KiB, so a shorter run holds a short last window, and
 * the kernel's window from its marker is a few times that (the watch
 * above adopts the stream after it); defusing any marker takes a whole
 * max_pages, which a short peek does not warrant.  Returns the pages to
 * read in.
 */
static uint64_t preread_after_run(struct view_ctx *v, struct open_file *of)
{
	of->watch.preread_due = false;
	if (!read_capped() || of->sparse || !of->watch.first || of->watch.first != of->watch.until)
		return 0; /* uncapped the kernel may burst; or its window came already */
	uint64_t max_pages = max_window_pages(of);
	uint64_t first = of->watch.until, isize_pages = pages_of(of->isize);
	if (first >= isize_pages || first - of->watch.preread_base < max_pages / 2)
		return 0;
	uint64_t n = max_pages < isize_pages - first ? max_pages : isize_pages - first;
	uint64_t missing = n - detector_count(v, first, n);
	if (!missing)
		return 0;
	view_mark_cached(v, first, n);
	of->watch.preread_first = first;
	of->watch.preread_end = first + n;
	return missing;
}

/* While the window after the run is read in: how far it must be by the
 * time the reader reaches page need_end (see above). */
static uint64_t preread_need(const struct open_file *of, uint64_t need_end)
{
	uint64_t n = of->watch.preread_end - of->watch.preread_first;
	uint64_t base = of->watch.preread_base, way = of->watch.preread_from - base;
	if (need_end >= of->watch.preread_from)
		return of->watch.preread_end;
	if (need_end <= base)
		return 0; /* the reader is not in the run yet (watch_window_gap()) */
	return of->watch.preread_first + (n * (need_end - base) + way - 1) / way;
}

/* Pages [*first, *end) of file (dev, ino), open as fd: are the missing
 * ones, by an exact detector that answered, one run?  Then *first and
 * *end are that run.  A piece whose start or end another reader's window
 * brought in meanwhile (a descriptor per thread, each reading the slice
 * after its neighbour's) has one such hole; found in about log2(pages)
 * counts, asked only of a piece not all missing. */
static bool still_missing_run(int fd, uint64_t dev, uint64_t ino, uint64_t *first, uint64_t *end)
{
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return false;
	bool run = false;
	if (of->dev == dev && of->ino == ino && detector_exact(of)) {
		enum dn_cache_backend backend = (enum dn_cache_backend)of->backend;
		uint64_t threshold = agent.seg ? agent.seg->probe_threshold_ns : 0;
#define COUNT(a, n) cache_detector_count(fd, backend, &of->probe, threshold, (a), (n))
		/* (A count below 0 is a detector that did not answer: no run.) */
		int64_t pages = (int64_t)(*end - *first), cached = COUNT(*first, pages);
		if (cached == 0) {
			run = true;
		} else if (cached > 0 && cached < pages) {
			/* The cached head: the longest k with [first, first + k)
			 * all cached (a count at most k, so monotone). */
			int64_t lo = 0, hi = pages - 1;
			while (lo < hi) {
				int64_t k = lo + (hi - lo + 1) / 2, c = COUNT(*first, k);
				if (c < 0)
					break;
				if (c == k)
					lo = k;
				else
					hi = k - 1;
			}
			uint64_t hole = *first + (uint64_t)lo, missing = (uint64_t)(pages - cached);
			if (lo == hi && COUNT(hole, missing) == 0) {
				*first = hole;
				*end = hole + missing;
				run = true;
			}
		}
#undef COUNT
	}
	open_file_release(of);
	return run;
}

/* Read in pages [first, first + pages) of fd, a piece in this thread's
 * hand at slot (-1: none), and let it go.  Recorded as read in from now on
 * (for other open files' plans and watches, read_in_spans()) if paid
 * whole when taken (all_missing: every page it found missing), and only
 * its pages missing still, after the sleep that paid for it, by a
 * detector that answered, if they are one run (a third reader may have
 * read some in since): a plan made after this may have seen the pages
 * cached already (page_cache_ra_unbounded() inserts them before the I/O),
 * so a record that said later would take them off a plan that never
 * counted them.  Before 2026-11-29 a piece not all missing still was not
 * recorded at all: 64 threads with a descriptor each, reading 4 MiB slices
 * of a cold file without feedback, had their neighbours' pieces charged
 * again as the kernel's window (watch_look()), 3-21 MiB for the 2-3 MiB
 * those pieces read in. */
static void read_piece_in(int fd, int slot, uint64_t dev, uint64_t ino, uint64_t first,
			  uint64_t pages, bool all_missing)
{
	uint64_t rec_first = first, rec_end = first + pages;
	uint64_t from_ns = slot >= 0 && all_missing &&
					   still_missing_run(fd, dev, ino, &rec_first, &rec_end)
				   ? clock_now_ns()
				   : 0;
	if (syscall(SYS_readahead, fd, (off_t)(first << PAGE_SHIFT), (size_t)(pages << PAGE_SHIFT)))
		from_ns = 0;
	in_hand_end(slot, from_ns, rec_first, rec_end);
}

/*
 * After the pre-read, before the reader may cross the marker: are its
 * pages all still there?  At a low cap it takes seconds, and pages read
 * in and not yet used can be reclaimed meanwhile (on this project's VM a
 * DAMON pageout scheme takes pages idle for about a second: measured 3-20
 * of 4,096 gone by the pre-read's end, in 5 of 8 runs).  One hole within
 * max_pages of the marker and page_cache_async_ra() reads from it, a whole
 * window (10-15 MiB in one call, measured).  So each hole is read in
 * again, charged, up to a few rounds.  Exact detectors only: the probe
 * backend does not pre-read.
 *
 * A hole may also be another thread's piece, in its hand: the run's end
 * is where that reader is (a descriptor per thread, each reading a slice
 * after its neighbour's), and it takes its next pieces there, charged
 * before they are read in.  Counted as holes, they were charged and read
 * in twice: 128 threads reading 2 MiB slices of one file at 16MiB/s ran
 * 0.95x the cap, 6-19 MiB paid twice here.  So the holes are counted
 * under the class lock beside the pieces in hand, and those in a hand
 * waited for (in_hand_wait()), a few times at most; and the holes to read
 * are put in our hand under the same lock, for that reader to wait for in
 * its turn while we sleep for them.  Returns the ns slept.
 */
static uint64_t preread_repair(int fd, uint64_t *charged)
{
	uint64_t slept = 0;
	unsigned waits = 0;
	for (int round = 0; round < 4; round++) {
		struct open_file *of = open_file_acquire(fd);
		if (!of)
			break;
		uint64_t first = of->watch.preread_first, end = of->watch.preread_end, missing = 0;
		uint64_t in_hand = 0, dev = of->dev, ino = of->ino;
		int slot = -1;
		bool checked = end > first && round < 3, wait = false;
		if (checked) {
			struct view_ctx v = { .fd = fd, .of = of, .use_cache = true };
			struct page_span spans[IN_HAND_SPANS_MAX];
			unsigned n = 0;
			uint64_t held = in_hand_hold();
			in_hand_spans(held, dev, ino, (uintptr_t)of, false, first, end, spans, &n,
				      IN_HAND_SPANS_MAX);
			missing = (end - first) - detector_count(&v, first, end - first);
			if (missing && n)
				in_hand = page_spans_cover(first, end, spans, n, detector_cached, &v);
			wait = in_hand && waits < 4;
			if (!wait && missing > in_hand)
				slot = in_hand_begin(dev, ino, (uintptr_t)of, first, end);
			in_hand_release(held);
		}
		if (wait) {
			open_file_release(of);
			waits++;
			slept += in_hand_wait(dev, ino, first, end);
			if (throttle_cut_pending())
				break;
			round--; /* a wait is no round */
			continue;
		}
		missing -= in_hand < missing ? in_hand : missing;
		if (!missing) {
			of->watch.preread_first = of->watch.preread_end = 0;
			/* All in, as checked: only then may the watch look less often. */
			of->watch.preread_done = checked;
		}
		open_file_release(of);
		if (!missing)
			break;
		slept += throttle_charge(missing << PAGE_SHIFT, 0);
		if (throttle_cut_pending()) {
			in_hand_end(slot, 0, 0, 0);
			break;
		}
		*charged += missing << PAGE_SHIFT;
		agent_trace("preread-repair", 0, missing << PAGE_SHIFT, slept);
		read_piece_in(fd, slot, dev, ino, first, end - first, missing == end - first);
	}
	return slept;
}

/*
 * Is a look due (watch_look()) for a read at page?  A look is a cachestat
 * of the watch's span, two windows (32 MiB under POSIX_FADV_SEQUENTIAL):
 * ~50 us, more than the call it rides on when a reader goes through the
 * rest of a cached run in 32 KiB stdio reads - md5sum's last 32 MiB after
 * a 20 MB peek took 0.13 s against 0.06 s plain, and its rate at 4 MB/s
 * came 3 % under the cap, all of it after its last disk read.  Once the
 * window after the run is read in (preread_repair()), a marker the reader
 * crosses starts nothing (preread_after_run()); only a hole reclaim made
 * there since could let it, and the kernel's window from it stays risen
 * until looked at: a look every WATCH_LOOK_STRIDE pages of the reader's
 * way finds it, a few calls late.  (Under --feedback on the supervisor
 * charges such a window, not the look; without it, a job that stops within
 * the stride after one and before the run's end leaves it uncharged.)
 * Before that, at the run's end, and after a checked call charged pages of
 * the kernel's own (unseen_pages, which the next prediction takes off the
 * look's rise: without a look it would drop them, and the look after
 * charge the window again), every call looks.
 */
#define WATCH_LOOK_STRIDE 64

static bool watch_due(struct open_file *of, uint64_t page)
{
	if (!of->watch.preread_done || page >= of->watch.until || of->watch.unseen_pages)
		return true;
	if (page >= of->watch.looked && page - of->watch.looked < WATCH_LOOK_STRIDE)
		return false;
	of->watch.looked = page;
	return true;
}

/* After a prediction while watching: the pages the model predicted in the
 * span will be cached by the next look, and are no rise. */
static void watch_note_model(const struct view_ctx *v, struct open_file *of)
{
	uint64_t lo = of->watch.first, hi = lo + watch_span(of);
	for (unsigned i = 0; i < v->overlays; i++)
		of->watch.cached += overlap_pages(v->overlay[i].first, v->overlay[i].end, lo, hi);
}

uint64_t predict_read(int fd, struct open_file *of, uint64_t pos, uint64_t count,
			     struct read_plan *plan)
{
	if (plan)
		plan->ranges = 0;
	if (!count || agent_counting())
		return 0;
	if (of->direct)
		return count; /* O_DIRECT: straight to the device, no cache */
	if (!predicting(DN_PREDICT_CACHE) && !predicting(DN_PREDICT_READAHEAD))
		return count; /* Table 5 "All-off": police file I/O as if it were disk I/O */
	/* (Not while a stream is to be adopted: the model's old windows
	 * would answer "hit" until the reader left them, the kernel reading
	 * ahead meanwhile.) */
	if (predicting(DN_PREDICT_READAHEAD) && !of->adopt && readahead_is_hit(&of->ra, pos, count)) {
		readahead_note_hit(&of->ra, pos, count);
		return 0;
	}
	/* Past the size we know: someone may have appended - unless a read
	 * here just came back short (EOF), the common second read of a file. */
	if (pos >= of->isize && pos != of->eof_pos)
		refresh_size(fd, of);
	if (pos >= of->isize)
		return 0;
	struct view_ctx v = { .fd = fd, .of = of, .use_cache = predicting(DN_PREDICT_CACHE) };
	struct page_cache_view view = { &v, view_count_cached, view_mark_cached,
					v.use_cache ? view_count_disk : NULL };
	if (of->adopt) {
		of->adopt = false;
		if (v.use_cache && predicting(DN_PREDICT_READAHEAD))
			adopt_stream(&v, of, pos);
	}
	uint64_t kernel_pages = 0;
	uint64_t first = pos >> PAGE_SHIFT, last = (pos + count - 1) >> PAGE_SHIFT;
	uint64_t prev = of->ra.prev_pos == UINT64_MAX ? UINT64_MAX : of->ra.prev_pos >> PAGE_SHIFT;
	/* The first read of this description (no prev_pos yet: file_ra_state_init),
	 * at its start, unless the pages there are the model's own (a copy
	 * that failed after prefetch read them in, io_copy.c copy_done()); or
	 * a stream onto someone else's run mid-file. */
	if (of->watch.foreign_met && first > of->watch.foreign_until && !of->watch.first)
		of->watch.foreign_met = false;
	if (pos == 0 && of->ra.prev_pos == UINT64_MAX && !of->watch.model_high && v.use_cache &&
	    predicting(DN_PREDICT_READAHEAD))
		watch_run(&v, of, 0, count);
	else if (v.use_cache && predicting(DN_PREDICT_READAHEAD) && meets_foreign_run(of, first, prev))
		watch_run(&v, of, first, 0);
	if (of->watch.first && watch_due(of, first))
		kernel_pages = watch_look(&v, of, pos);
	uint64_t probe_pages = of->probe.disk_pages;
	uint64_t touched = 0;
	if (of->watch.preread_due)
		touched = preread_after_run(&v, of);
	if (v.use_cache && predicting(DN_PREDICT_READAHEAD) && last - first < SMALL_READ_PAGES &&
	    first != 0 && (prev == UINT64_MAX || first > prev + 1 || first + 1 < prev) &&
	    (first < of->model_first || last >= of->model_end)) {
		/*
		 * A small read that does not continue a stream, outside the
		 * model's windows: a random read.  Left to itself the kernel
		 * may answer a miss with a history-based window
		 * (page_cache_sync_ra() -> page_cache_prev_miss()) whose
		 * PG_readahead markers pile up by the thousand, out of any
		 * model's sight.  So read the missing pages in ourselves -
		 * exactly them, no marker: the probe does it by probing, the
		 * exact backends with readahead(2) (under a cap, paced, by
		 * prefetch) - and the program's read then finds them cached.
		 * Gray-box control, not only information (graybox-icl §2).
		 */
		uint64_t n = last - first + 1;
		if (of->backend == DN_CACHE_PROBE) {
			if (cache_probe_pages(fd, &of->probe, agent.seg->probe_threshold_ns, first, n) >= 0)
				view_mark_cached(&v, first, n);
		} else {
			uint64_t missing = n - detector_count(&v, first, n);
			if (missing) {
				touched += missing;
				view_mark_cached(&v, first, n);
				if (!read_capped())
					syscall(SYS_readahead, fd, (off_t)(first << PAGE_SHIFT),
						(size_t)(n << PAGE_SHIFT));
			}
		}
	}
	uint64_t pages = touched + readahead_predict_read(&of->ra, &view, pos, count, of->isize,
							  predicting(DN_PREDICT_READAHEAD));
	uint64_t old_high = of->watch.model_high;
	for (unsigned i = 0; i < v.overlays; i++)
		raise_model_high(of, v.overlay[i].end);
	if (v.use_cache && predicting(DN_PREDICT_READAHEAD) && !of->watch.first)
		watch_window_gap(&v, of, old_high);
	if (of->watch.first)
		watch_note_model(&v, of);
	/* The kernel's window from an unknown marker, read since the last
	 * call: charged now, one call late (under --feedback on the
	 * supervisor has charged it from /proc/PID/io already; the calls
	 * checked since the last prediction (io_unseen) charged their part). */
	uint64_t unseen = of->watch.unseen_pages;
	of->watch.unseen_pages = 0;
	if (!feedback_charges())
		pages += kernel_pages > unseen ? kernel_pages - unseen : 0;
	if (agent.cache_drop && pages)
		note_misses(&v);
	if (plan && pages) {
		plan->ranges = v.overlays;
		for (unsigned i = 0; i < v.overlays; i++) {
			plan->range[i].first = v.overlay[i].first;
			plan->range[i].end = v.overlay[i].end;
		}
	}
	/* The probes' own one-page reads are real disk traffic (§6.1). */
	pages += of->probe.disk_pages - probe_pages;
	return pages << PAGE_SHIFT;
}

/* Cap on reads or on all I/O? Then large calls go in pieces. */
static size_t read_piece(size_t count)
{
	const struct dn_caps *caps = &agent.seg->caps;
	if (!caps->read_bps && !caps->total_bps)
		return count;
	size_t piece = (size_t)throttle_piece_bytes();
	return piece && piece < count ? piece : count;
}

/* Book a finished read of `done` bytes that started at pos. */
static void read_done(int fd, uint64_t pos, size_t asked, ssize_t done, bool moves_offset)
{
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return;
	if (done >= 0) {
		if (moves_offset)
			of->pos = pos + (uint64_t)done;
		if ((size_t)done < asked) {
			/* Short read: EOF is here (until someone appends). */
			of->isize = of->eof_pos = pos + (uint64_t)done;
		}
	} else if (moves_offset) {
		of->pos_known = false;
	}
	open_file_release(of);
}

/*
 * Prefetch under a read cap.
 *
 * A readahead window is read by the kernel in one burst: 8 MiB at once is
 * 1.6 s of a 5 MB/s budget, so a job read at "5 MB/s" would hit the disk in
 * 8 MiB spikes.  Under a cap the agent reads the model's windows in itself,
 * with readahead(2) (force_page_cache_ra(): exactly the missing pages, no
 * marker), one chunk at a time and only just ahead of the program, the
 * throttle between chunks; the program's reads then find their pages
 * cached.  The model keeps predicting the kernel's windows, so the total
 * stays what the kernel would have read, and pages do not sit in the cache
 * for seconds waiting to be read (where reclaim could take them).
 */
/* Widen [*first, *end) over owed range j, which leaves the owed ranges;
 * of is locked. */
static void owed_absorb(struct open_file *of, unsigned j, uint64_t *first, uint64_t *end)
{
	if (of->owed[j].first < *first)
		*first = of->owed[j].first;
	if (of->owed[j].end > *end)
		*end = of->owed[j].end;
	of->owed[j] = of->owed[--of->owed_count];
}

/* Add the plan's ranges to what the file still owes; of is locked. */
static void owe_plan(int fd, struct open_file *of, const struct read_plan *plan, uint64_t predicted)
{
	/* A page owed already and predicted again (the model lost sight of
	 * the pages its plan had not yet read in - its resident range moved
	 * to a new stream position - and found them missing) is one read,
	 * not two: owed twice, the surplus was charged at once when the
	 * ranges ran out (owed_take()), 1.7-2.6 s of sleep at the end of a
	 * 7.5MiB/s cat without feedback, 20 MB the kernel never read. */
	uint64_t again = 0;
	/* So is a page another thread took from these owed ranges and has
	 * not read in yet (pieces_in_hand.h): missing to
	 * the detector, owed no more.  Each page once (a plan merged into
	 * the owed ranges may span a piece in hand), and with an exact
	 * detector only a page the prediction counted: missing now (owed
	 * ranges merged so may hold pages read in since). */
	struct page_span spans[sizeof of->owed / sizeof of->owed[0] + IN_HAND_SPANS_MAX];
	unsigned n = 0;
	for (unsigned j = 0; j < of->owed_count; j++) {
		spans[n].first = of->owed[j].first;
		spans[n].end = of->owed[j].end;
		n++;
	}
	uint64_t lo = UINT64_MAX, hi = 0;
	for (unsigned i = 0; i < plan->ranges; i++) {
		lo = plan->range[i].first < lo ? plan->range[i].first : lo;
		hi = plan->range[i].end > hi ? plan->range[i].end : hi;
	}
	/* (Pieces from other open files' owed ranges are left to
	 * owed_take(), which takes their pages off the plan's figure.) */
	in_hand_spans(0, of->dev, of->ino, (uintptr_t)of, true, lo, hi, spans, &n,
		      sizeof spans / sizeof spans[0]);
	struct view_ctx v = { .fd = fd, .of = of, .use_cache = true };
	for (unsigned i = 0; i < plan->ranges && n; i++)
		again += page_spans_cover(plan->range[i].first, plan->range[i].end, spans, n,
					  detector_exact(of) ? detector_cached : NULL, &v);
	again <<= PAGE_SHIFT;
	predicted = predicted > again ? predicted - again : 0;
	/* Each range keeps when it was planned: with --feedback off, pages
	 * another open file's piece read in after that were counted here
	 * too (missing then), and are taken off (owed_take()).  So a window
	 * next to an owed one is a range of its own while there is room (one
	 * merged would move the older pages' time on, and leave them
	 * charged); an overlapping one is merged, the later time kept (the
	 * pages planned again were counted once, owe_plan's `again`). */
	uint64_t now = clock_now_ns();
	const unsigned room = sizeof of->owed / sizeof of->owed[0];
	for (unsigned i = 0; i < plan->ranges; i++) {
		uint64_t first = plan->range[i].first, end = plan->range[i].end;
		/* Every owed range it overlaps becomes part of it (one left
		 * beside the merged one would owe its pages twice, and take
		 * them off twice). */
		for (unsigned j = 0; j < of->owed_count;) {
			if (first < of->owed[j].end && end > of->owed[j].first)
				owed_absorb(of, j, &first, &end);
			else
				j++;
		}
		if (of->owed_count == room) {
			/* Full: into a range it touches, else in place of the
			 * oldest (a stream long abandoned). */
			unsigned j, oldest = 0;
			for (j = 0; j < room; j++) {
				if (first == of->owed[j].end || end == of->owed[j].first)
					break;
				if (of->owed[j].plan_ns < of->owed[oldest].plan_ns)
					oldest = j;
			}
			if (j < room)
				owed_absorb(of, j, &first, &end);
			else
				of->owed[oldest] = of->owed[--of->owed_count];
		}
		of->owed[of->owed_count].first = first;
		of->owed[of->owed_count].end = end;
		of->owed[of->owed_count].plan_ns = now;
		of->owed_count++;
	}
	of->owed_bytes += predicted;
}

/* Pages another open file's taker reads in and pays were counted in the
 * plan's figure too (another process's plan, or a description of its own,
 * could not see them owed): not ours to pay.  of is locked. */
static void owed_skip(struct open_file *of, uint64_t pages)
{
	uint64_t bytes = pages << PAGE_SHIFT;
	of->owed_bytes -= of->owed_bytes < bytes ? of->owed_bytes : bytes;
}

/* Take the next piece to read in before the program reads up to page
 * need_end: the owed range nearest below need_end.  of is locked.
 *
 * What the piece is charged.  The plan was predicted when the program's
 * read met the model's window, up to a second before the piece is read
 * in; meanwhile the kernel may have read some of its pages itself.
 * Measured on this VM (a cold 256 MiB cat at 7.5 MiB/s; /proc/PID/io of
 * the job against the run's predicted counter, tick by tick): reclaim
 * (kdamond; 40-150 MiB of workingset refaults per 35 s run) takes a page
 * we read in before the program reads it, the program's read misses,
 * page_cache_sync_ra() starts the kernel's own windows and reads 2-3 MiB
 * ahead of us at once - after the whole file is evicted, 8-16 MiB windows.
 * With --feedback on the supervisor sees the kernel ahead of every
 * prediction and charges those bytes when the kernel submits them
 * (tool_regulate.c); charging them again here when the piece comes up made
 * the window carry them twice - one run charged 5.5 MB of feedback for
 * 1.4 MB of I/O beyond the prediction and ended 1.5 % under its cap (2-5 %
 * in issue #9's runs).  So under feedback, with an exact detector
 * (cachestat, mincore), the piece is charged for its pages still missing
 * now, and the plan's bytes whose pages someone else brought in are
 * dropped.  Without feedback nobody else charges them: the plan's figure
 * stands, paid as the program consumes the pages (late, but paid; charged
 * by missing pages, a cat through the kernel's windows ran at 5 x its
 * cap).  The probe backend (probing reads pages in) and predictors without
 * the cache keep the plan's figure too.
 *
 * held: in_hand_hold(), kept by the caller until the piece is in hand
 * (in_hand_begin()), so that no other taker takes the same pages meanwhile
 * (pieces_in_hand.h). */
static bool owed_take(int fd, struct open_file *of, uint64_t held, uint64_t need_end,
		      uint64_t piece_pages, uint64_t *first, uint64_t *pages, uint64_t *charge,
		      bool *whole)
{
	if (!of->owed_count)
		return false;
	/* Pages in another thread's piece (a plan merged into the owed
	 * ranges over it, another process's plan) are that thread's to read
	 * in and pay: read here too, the kernel counted them before that
	 * thread's prediction was counted, and the supervisor's feedback
	 * held the job for them. */
	struct page_span theirs[IN_HAND_SPANS_MAX];
	unsigned n = 0;
	uint64_t lo = UINT64_MAX, hi = 0;
	for (unsigned j = 0; j < of->owed_count; j++) {
		lo = of->owed[j].first < lo ? of->owed[j].first : lo;
		hi = of->owed[j].end > hi ? of->owed[j].end : hi;
	}
	in_hand_spans(held, of->dev, of->ino, (uintptr_t)of, false, lo, hi, theirs, &n,
		      IN_HAND_SPANS_MAX);
	uint64_t skipped = 0; /* pages in the hand of another open file's taker */
	uint64_t plan_ns = 0;
	for (;;) {
		unsigned best = of->owed_count;
		for (unsigned j = 0; j < of->owed_count; j++)
			if (of->owed[j].first < need_end &&
			    (best == of->owed_count || of->owed[j].first < of->owed[best].first))
				best = j;
		if (best == of->owed_count) {
			owed_skip(of, skipped);
			return false;
		}
		uint64_t end = of->owed[best].end;
		plan_ns = of->owed[best].plan_ns;
		*first = of->owed[best].first;
		for (unsigned i = 0; i < n; i++) /* skip theirs at the start */
			if (theirs[i].first <= *first && *first < theirs[i].end) {
				if (theirs[i].theirs)
					skipped += (theirs[i].end < end ? theirs[i].end : end) - *first;
				*first = theirs[i].end;
				i = UINT_MAX; /* again from the first: i++ wraps to 0 */
				if (*first >= end)
					break;
			}
		*pages = end > *first ? end - *first : 0;
		if (*pages > piece_pages)
			*pages = piece_pages;
		for (unsigned i = 0; i < n; i++) /* ... and stop at theirs after it */
			if (theirs[i].first > *first && theirs[i].first < *first + *pages)
				*pages = theirs[i].first - *first;
		of->owed[best].first = *first + *pages;
		if (of->owed[best].first >= of->owed[best].end) {
			of->owed[best] = of->owed[of->owed_count - 1];
			of->owed_count--;
		}
		if (*pages)
			break;
	}
	owed_skip(of, skipped);
	bool by_missing = feedback_charges() && detector_exact(of);
	uint64_t missing = *pages;
	struct view_ctx v = { .fd = fd, .of = of, .use_cache = true };
	/* Maybe all missing: asked again after the piece's sleep
	 * (prefetch_until()). */
	*whole = false;
	if (by_missing) {
		missing -= detector_count(&v, *first, *pages);
		*whole = missing == *pages;
	} else if (detector_exact(of)) {
		/* Pages another open file's taker read in since this range was
		 * planned (a process of its own, a descriptor per thread,
		 * reading the same pages) were missing to both plans and paid
		 * there: taken off the plan's figure - those still cached (a
		 * page reclaimed since is read again, by this piece).  Two cats
		 * of one file ran 20-31 % under the cap, each paying the pages
		 * the other read in.  (theirs serves again: the stack is the
		 * program's, maybe a signal handler's.) */
		n = 0;
		read_in_spans(held, of->dev, of->ino, (uintptr_t)of, plan_ns, *first, *first + *pages,
			      theirs, &n, IN_HAND_SPANS_MAX);
		if (n) {
			uint64_t covered = page_spans_cover(*first, *first + *pages, theirs, n, NULL, NULL);
			uint64_t paid = covered - page_spans_cover(*first, *first + *pages, theirs, n,
								   detector_cached, &v);
			missing -= paid;
			owed_skip(of, paid);
			/* Their pages at the piece's start are not ours to read
			 * in: the piece begins after them, and so can be all
			 * missing, and recorded in its turn for their next
			 * piece (two readers of one file leapfrog: a piece of
			 * each overlaps the other's last one). */
			uint64_t a = *first; /* theirs is sorted now */
			for (unsigned i = 0; i < n; i++)
				if (theirs[i].first <= a && a < theirs[i].end)
					a = theirs[i].end;
			if (a > *first && a < *first + *pages &&
			    detector_count(&v, *first, a - *first) == a - *first) {
				*pages -= a - *first;
				*first = a;
			}
		}
		*whole = true;
	}
	uint64_t bytes = missing << PAGE_SHIFT;
	/* By missing pages, exactly what the piece makes the kernel read
	 * (even past the plan's figure: a page reclaimed since is read
	 * again); else the plan's figure, piece by piece. */
	*charge = by_missing || of->owed_bytes > bytes ? bytes : of->owed_bytes;
	of->owed_bytes -= of->owed_bytes < *charge ? of->owed_bytes : *charge;
	if (!of->owed_count) {
		/* Nothing left to read in: what remains was predicted outside
		 * the plan's ranges - the kernel's own window watch_look()
		 * found, charged with the plan (the probes' reads are charged
		 * apart, plan_read()) - or, by_missing, pages someone else
		 * brought in, which feedback charges. */
		if (!by_missing)
			*charge += of->owed_bytes;
		of->owed_bytes = 0;
	}
	return true;
}

/* The thread's read or write blocks (getrusage: the task's ioac
 * read_bytes or write_bytes / 512; reads counted at submit_bio(), writes
 * when a page is dirtied, folio_account_dirtied()).  UINT64_MAX: unknown. */
uint64_t io_thread_blocks(bool written)
{
	int saved = errno;
	struct rusage ru;
	uint64_t blocks = UINT64_MAX;
	if (getrusage(RUSAGE_THREAD, &ru) == 0)
		blocks = (uint64_t)(written ? ru.ru_oublock : ru.ru_inblock);
	errno = saved;
	return blocks;
}

/*
 * The probe backend's prefetch, made good by the kernel's count.  The
 * model's windows are judged cached or not by timing probes of a few
 * pages each (cache_detector.c), and a window partly cached - the end of
 * a run another reader left, pages the kernel read ahead by itself since
 * (io_unseen_settle()) - is predicted whole: the plan overstates, and the
 * job ran up to 11 % under its cap (rate_peeked.py --backend probe).  But
 * readahead(2) reads exactly the missing pages, submitted by this thread
 * (force_page_cache_ra(), counted at submit_bio()), so its read blocks
 * before and after say what the piece really cost.  What the piece was
 * charged for its pages and the kernel did not read is taken back at once,
 * while the window still holds it; what it read beyond the charge (owed
 * bytes run short) is charged.  A last piece's charge may carry bytes
 * predicted outside the ranges (owed_take()): only the piece's own pages
 * are compared.  The same for an exact backend's file whose calls are
 * checked so (io_unseen_wanted()): a window a checked call charged as the
 * kernel's own holds pages of the plan, which the piece must not charge
 * again.
 */
static uint64_t prefetch_settle(uint64_t before, uint64_t piece_bytes, uint64_t charge,
				uint64_t *charged)
{
	uint64_t now = io_thread_blocks(false);
	if (now == UINT64_MAX || now < before)
		return 0;
	uint64_t read = (now - before) * 512, paid = charge < piece_bytes ? charge : piece_bytes;
	if (read < paid) {
		throttle_unpredict_read(paid - read);
		*charged -= paid - read;
		return 0;
	}
	if (read > charge) {
		*charged += read - charge;
		return throttle_charge_done(read - charge, 0);
	}
	return 0;
}

/* Read in, paced, everything owed below page need_end (plus one piece of
 * lookahead), then wait for the call's pages [need_first, need_end) in
 * other threads' hands.  Returns ns slept; adds the bytes charged to
 * *charged. */
static uint64_t prefetch_until(int fd, uint64_t need_first, uint64_t need_end, uint64_t *charged)
{
	uint64_t piece_pages = pages_of(throttle_piece_bytes()), slept = 0, dev = 0, ino = 0;
	if (!piece_pages)
		piece_pages = 1;
	for (;;) {
		uint64_t first, pages, charge;
		bool whole;
		struct open_file *of = open_file_acquire(fd);
		if (!of)
			return slept;
		/* (Nothing owed, as for most calls: no lock.) */
		uint64_t held = of->owed_count ? in_hand_hold() : 0;
		bool more = owed_take(fd, of, held, need_end + piece_pages, piece_pages, &first, &pages,
				      &charge, &whole);
		bool measured = more && io_unseen_wanted(of);
		int slot = more ? in_hand_begin(of->dev, of->ino, (uintptr_t)of, first, first + pages) : -1;
		in_hand_release(held);
		dev = of->dev;
		ino = of->ino;
		open_file_release(of);
		if (!more)
			break;
		slept += throttle_charge(charge, 0);
		if (throttle_cut_pending()) {
			in_hand_end(slot, 0, 0, 0);
			return slept; /* the call ends: io_read() takes the cut */
		}
		*charged += charge;
		uint64_t before = measured ? io_thread_blocks(false) : UINT64_MAX;
		read_piece_in(fd, slot, dev, ino, first, pages, whole);
		if (before != UINT64_MAX)
			slept += prefetch_settle(before, pages << PAGE_SHIFT, charge, charged);
	}
	/* What the call needs may be in another thread's hand: read now,
	 * the kernel reads those pages itself, and counts them before that
	 * thread's prediction is counted - the supervisor's feedback took
	 * them for I/O nobody predicted and held the job (32-64 threads on
	 * one description ran 2-7 % under the cap).  Wait for them. */
	return slept + in_hand_wait(dev, ino, need_first, need_end);
}

/* Predict a read of [pos, pos + n) before the call; of is locked.  Returns
 * whether it is paid by prefetch (prefetch_until() up to pay->need_end,
 * which is set) rather than by charging *predicted.  Paid by prefetch, the
 * probes' own reads of the prediction (§6.1) are set apart in pay->probed
 * and charged first: they have happened already, and counted after the
 * plan's pieces they would reach our count seconds after the kernel's,
 * where the supervisor's feedback (tool_regulate.c) charges them too - and
 * gives back only what its window still holds. */
static bool plan_read(int fd, struct open_file *of, uint64_t pos, uint64_t n, bool capped,
		      uint64_t *predicted, struct read_pay *pay)
{
	struct read_plan plan;
	uint64_t probe_pages = of->probe.disk_pages;
	pay->need_first = pos >> PAGE_SHIFT;
	pay->need_end = pages_of(pos + n);
	*predicted = predict_read(fd, of, pos, n, &plan);
	pay->probed = 0;
	pay->preread_check = false;
	/* Under a cap the model's windows are read in by us, paced
	 * (prefetch above); O_DIRECT has none and is charged as is, and a
	 * sparse file's are charged for their data only, before the kernel
	 * reads them (prefetch paces pages, not data). */
	capped = capped && (plan.ranges || !*predicted) && !of->sparse;
	if (capped && *predicted) {
		uint64_t probe_bytes = (of->probe.disk_pages - probe_pages) << PAGE_SHIFT;
		pay->probed = probe_bytes < *predicted ? probe_bytes : *predicted;
		owe_plan(fd, of, &plan, *predicted - pay->probed);
		/* A cap that came while the kernel paced the file (yield,
		 * `discnice set`), or a window the kernel read from a marker
		 * the model did not set (watch_look): the first window the
		 * model sees coming is the kernel's, behind a marker the
		 * kernel set - read all of it in, paced, before the call
		 * touches the marker, or the disk gets it in one burst.  From
		 * then on the windows are ours. */
		if (of->kernel_paced)
			for (unsigned i = 0; i < plan.ranges; i++)
				if (plan.range[i].end > pay->need_end)
					pay->need_end = plan.range[i].end;
		of->kernel_paced = false;
	} else if (*predicted && !read_capped()) {
		of->kernel_paced = true;
	}
	if (capped && of->watch.preread_end > of->watch.preread_first) {
		uint64_t need = preread_need(of, pay->need_end);
		if (need > pay->need_end)
			pay->need_end = need;
		pay->preread_check = need >= of->watch.preread_end;
	}
	return capped;
}

/* Pay for a planned read (plan_read()), of unlocked: by prefetch up to
 * pay->need_end after the probes' reads, *predicted becoming what that
 * charged, or by charging *predicted.  Returns ns slept. */
static uint64_t pay_read(int fd, bool by_prefetch, const struct read_pay *pay, uint64_t *predicted)
{
	if (!by_prefetch)
		return throttle_charge(*predicted, 0);
	uint64_t charged = pay->probed, slept = throttle_charge_done(pay->probed, 0);
	slept += prefetch_until(fd, pay->need_first, pay->need_end, &charged);
	if (pay->preread_check && !throttle_cut_pending())
		slept += preread_repair(fd, &charged);
	*predicted = charged;
	return slept;
}

/*
 * A kernel copy's source (io_copy.c: sendfile, copy_file_range, splice).
 * The kernel reads it through a pipe, at most SPLICE_READ_BYTES at a time
 * (do_splice_direct -> filemap_splice_read), so it is predicted step by
 * step; and under a cap it is paid as a read() is, the model's windows
 * read in by prefetch a piece at a time.  Charged whole instead, cp and
 * `cat > file` (coreutils copies with copy_file_range) read their windows
 * in 14-17 MB bursts at 33MiB/s, and the copying the job still did after
 * the last one came out of its rate: 3-7 % under the cap (by hand, 96 MiB,
 * 2026-11-26).
 */
uint64_t io_copy_read_plan(int fd, struct open_file *of, uint64_t pos, uint64_t len, bool capped,
			   struct copy_read *c)
{
	uint64_t total = 0;
	memset(c, 0, sizeof *c);
	for (uint64_t done = 0; done < len; done += SPLICE_READ_BYTES) {
		uint64_t n = len - done < SPLICE_READ_BYTES ? len - done : SPLICE_READ_BYTES, predicted;
		struct read_pay pay;
		if (plan_read(fd, of, pos + done, n, capped, &predicted, &pay)) {
			if (!c->by_prefetch || pay.need_first < c->pay.need_first)
				c->pay.need_first = pay.need_first;
			if (pay.need_end > c->pay.need_end)
				c->pay.need_end = pay.need_end;
			c->pay.probed += pay.probed;
			c->pay.preread_check |= pay.preread_check;
			c->by_prefetch = true;
		} else {
			c->direct += predicted;
		}
		total += predicted;
	}
	return total;
}

uint64_t io_copy_read_pay(int fd, const struct copy_read *c, uint64_t *charged)
{
	uint64_t slept = throttle_charge(c->direct, 0), prefetched = 0;
	if (c->by_prefetch)
		slept += pay_read(fd, true, &c->pay, &prefetched);
	*charged = c->direct + prefetched;
	return slept;
}

/*
 * The probe backend cannot watch a cached run (watch_run(): its
 * questions would read the span in), so a read crossing an earlier
 * reader's PG_readahead marker there makes the kernel read a window the
 * model never sees - and stay a window ahead of it, every later window
 * found cached (measured: md5sum as nobody of a file whose first 20 MB
 * head(1) had read ran at 6.7x a 16M cap with --feedback off).  The
 * kernel itself says how much it read for the call: the thread's read
 * blocks (getrusage RUSAGE_THREAD ru_inblock, read_bytes >> 9, counted at
 * submit_bio()), before and after.  Under a cap the model's pages are
 * read in before the call (prefetch) and the probes' before it too, so
 * what the call itself submitted beyond what was charged for it is the
 * kernel's own.  It is charged (one call late; under --feedback on the
 * supervisor charges it from /proc/PID/io), and the model takes the
 * stream over at the reader (adopt_stream() at the next prediction), so
 * that its next window is read in by us, paced, before the kernel can.
 */

/* Should the call be checked so?  of is locked.  The probe backend's
 * every call; an exact backend's once the stream has met someone else's
 * run mid-file (meets_foreign_run()): the watch sees a window the kernel
 * read into the two windows after the run only once the model's own pages
 * there are in, and that reader's marker can start one further on
 * (measured: 10 MiB read by the kernel two windows past a 1 MB run, found
 * cached by the model, 10 % of a 153 MiB job unpredicted at 33MiB/s).
 * The watch then only adopts what it finds; the call charges it. */
bool io_unseen_wanted(const struct open_file *of)
{
	return (of->backend == DN_CACHE_PROBE || of->watch.foreign_met) &&
	       !of->direct && read_capped() && predicting(DN_PREDICT_CACHE) &&
	       predicting(DN_PREDICT_READAHEAD);
}

/* Just before the call, after it was paid for: by_prefetch, the model's
 * pages were read in already; else the call reads predicted bytes
 * itself. */
void io_unseen_begin(struct io_unseen_check *c, bool by_prefetch, uint64_t predicted)
{
	c->expected = by_prefetch ? 0 : predicted;
	c->inblock = c->on ? io_thread_blocks(false) : UINT64_MAX;
}

/* After the call (see above); errno kept.  Returns the ns slept. */
uint64_t io_unseen_settle(int fd, const struct io_unseen_check *c)
{
	if (!c->on || c->inblock == UINT64_MAX)
		return 0;
	uint64_t now = io_thread_blocks(false);
	if (now == UINT64_MAX || now <= c->inblock)
		return 0;
	uint64_t bytes = (now - c->inblock) * 512;
	if (bytes <= c->expected)
		return 0;
	bytes -= c->expected;
	int saved = errno;
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		/* The watch's next look sees these pages rise: charged here. */
		of->watch.unseen_pages += pages_of(bytes);
		if (bytes > PAGE_SIZE) {
			/* More than a page: a window, not an inode or extent
			 * block; more of that reader's markers may follow it. */
			of->adopt = true;
			if (of->watch.foreign_met)
				foreign_check_until(of, pages_of(of->pos));
		}
		open_file_release(of);
	}
	uint64_t slept = 0;
	if (!feedback_charges()) {
		slept = throttle_charge_done(bytes, 0);
		agent_trace("kernel-read", 0, bytes, slept);
	}
	errno = saved;
	return slept;
}

bool io_read_pay(int fd, uint64_t pos, uint64_t count, uint64_t *predicted, uint64_t *slept,
		 struct io_unseen_check *unseen)
{
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return false;
	of->pos_known = false; /* stdio moves the offset behind our back */
	struct read_pay pay;
	bool capped = plan_read(fd, of, pos, count, read_capped(), predicted, &pay);
	if (unseen)
		unseen->on = io_unseen_wanted(of);
	open_file_release(of);
	*slept = pay_read(fd, capped, &pay, predicted);
	if (unseen)
		io_unseen_begin(unseen, capped, *predicted);
	return true;
}

ssize_t io_read(int fd, void *buf, size_t count, const off_t *offset)
{
	int saved = errno;
	if (io_call_refused(buf, count, offset))
		return offset ? libc_real.pread64(fd, buf, count, *offset)
			      : libc_real.read(fd, buf, count);
	if (count > IO_MAX_RW_COUNT)
		count = IO_MAX_RW_COUNT; /* all one call moves (vfs_read()) */
	/* A socket under a network cap (io_net.c); else a file, if the disk
	 * path watches it (agent.h agent_enter_fd lets both kinds in). */
	enum open_file_net net = offset ? OPEN_FILE_NET_NONE : io_net_kind(fd);
	if (net)
		return io_net_read(fd, net, buf, count);
	writeback_tend(); /* any read, a pipe's too: a script reads after its rm */
	if (!agent_disk_watches(fd)) {
		errno = saved;
		return offset ? libc_real.pread64(fd, buf, count, *offset)
			      : libc_real.read(fd, buf, count);
	}
	bool moves_offset = !offset;
	bool capped = read_capped();
	struct io_unseen_check unseen = { .on = false };
	size_t piece = read_piece(count), done = 0;
	/* Readers sharing the description never get interleaved parts: a
	 * read cut into pieces takes its range first (io_range_take()). */
	struct io_range range = { 0, -1 };
	off_t base = offset ? *offset : 0;
	ssize_t result = 0;
	int err = saved;
	bool short_read = false;
	do {
		size_t n = count - done < piece ? count - done : piece;
		uint64_t pos = (uint64_t)(base + (off_t)done), predicted = 0, delay;
		struct read_pay pay = { 0 }; /* set by plan_read(); unused uncapped */
		struct open_file *of = open_file_acquire(fd);
		if (of) {
			if (!done && piece < count) {
				piece = piece_for(fd, of, piece, count, false);
				if (moves_offset && piece < count &&
				    io_range_take(fd, &count, &range)) {
					moves_offset = false;
					pos = (uint64_t)(base = range.base);
				}
				n = count < piece ? count : piece;
			}
			if (moves_offset)
				pos = current_pos(fd, of);
			capped = plan_read(fd, of, pos, n, capped, &predicted, &pay);
			unseen.on = io_unseen_wanted(of);
			open_file_release(of);
		} else if (!done) {
			/* Not a disk file (or closed under us): not ours to judge. */
			errno = saved;
			return moves_offset ? libc_real.read(fd, buf, count)
					    : libc_real.pread64(fd, buf, count, *offset);
		} else {
			n = count - done;
			capped = unseen.on = false;
		}
		throttle_call_moved(done);
		delay = pay_read(fd, capped, &pay, &predicted);
		int cut = throttle_take_cut();
		if (cut != THROTTLE_NOT_CUT) {
			/* The user interrupted the job while this piece waited:
			 * what was moved, or EINTR (throttle.c). */
			if (!done) {
				err = EINTR;
				result = -1;
			}
			break;
		}
		io_unseen_begin(&unseen, capped, predicted);
		errno = saved;
		ssize_t r = moves_offset ? libc_real.read(fd, (char *)buf + done, n)
					 : libc_real.pread64(fd, (char *)buf + done, n, (off_t)pos);
		if (unseen.on && r > 0)
			delay += io_unseen_settle(fd, &unseen);
		/* pread of what was asked changes nothing we track: skip the books. */
		if (moves_offset || r < (ssize_t)n)
			read_done(fd, pos, n, r, moves_offset);
		if (agent.cache_drop && r >= 0)
			io_read_dropped(fd, pos, (uint64_t)r);
		if (r < 0) {
			err = errno;
			if (!done)
				result = -1;
			break;
		}
		AGENT_COUNT(file_read_bytes, (uint64_t)r);
		if (predicted || delay)
			agent_trace("read", (uint64_t)r, predicted, delay);
		done += (size_t)r;
		if ((size_t)r < n) {
			short_read = true;
			break; /* EOF (or a short read): one call would stop here too */
		}
	} while (done < count);
	if (range.end >= 0)
		io_range_done(fd, &range, done, short_read);
	if (result < 0) {
		errno = err;
		return -1;
	}
	errno = saved;
	return (ssize_t)done;
}

#define READV_PREFETCH_PIECES 4

ssize_t io_readv(int fd, const struct iovec *iov, int iovcnt, const off_t *offset, int flags)
{
	int saved = errno;
	enum open_file_net net = offset || flags ? OPEN_FILE_NET_NONE : io_net_kind(fd);
	if (net)
		return io_net_readv(fd, iov, iovcnt);
	if (!agent_disk_watches(fd)) {
		errno = saved;
		return libc_real.preadv64v2(fd, iov, iovcnt, offset ? *offset : -1, flags);
	}
	bool moves_offset = !offset;
	uint64_t predicted = 0, pos = 0, delay = 0;
	size_t total = 0;
	struct open_file *of = NULL;
	/* Not a disk file, or an iovec the kernel will refuse: plain. */
	if (open_file_maybe_disk(fd) && iov_total_checked(iov, iovcnt, &total))
		of = open_file_acquire(fd);
	/* RWF_NOWAIT reads never wait for the disk: nothing to predict. */
	bool accounted = of && !(flags & RWF_NOWAIT);
	struct io_unseen_check unseen = { .on = false };
	if (of) {
		/* Paid as read(2) is: under a cap the model's windows read in
		 * by prefetch, a piece at a time (charged whole, the disk got
		 * them at once, as it did a copy's: io_copy_read_plan()).  But
		 * a call is not cut as read(2)'s is, and all its pages are read
		 * in before it: a large one (over READV_PREFETCH_PIECES pieces)
		 * would leave its first pages for seconds, to reclaim, so it is
		 * charged whole as before. */
		struct read_pay pay = { 0 };
		bool by_prefetch = false;
		if (accounted) {
			pos = moves_offset ? current_pos(fd, of) : (uint64_t)*offset;
			bool capped = read_capped();
			bool small = total <= READV_PREFETCH_PIECES * throttle_piece_bytes();
			by_prefetch = plan_read(fd, of, pos, total, capped && small, &predicted, &pay);
			if (capped && !small && predicted)
				of->kernel_paced = true; /* its marker: the next plan reads past it */
			unseen.on = io_unseen_wanted(of);
		}
		open_file_release(of);
		delay = pay_read(fd, by_prefetch, &pay, &predicted);
		io_unseen_begin(&unseen, by_prefetch, predicted);
	}
	errno = saved;
	ssize_t r = libc_real.preadv64v2(fd, iov, iovcnt, offset ? *offset : -1, flags);
	if (!accounted)
		return r;
	int err = errno;
	if (unseen.on && r > 0)
		delay += io_unseen_settle(fd, &unseen);
	read_done(fd, pos, total, r, moves_offset);
	if (agent.cache_drop && r >= 0)
		io_read_dropped(fd, pos, (uint64_t)r);
	if (r > 0)
		AGENT_COUNT(file_read_bytes, (uint64_t)r);
	if (predicted || delay)
		agent_trace("readv", r > 0 ? (uint64_t)r : 0, predicted, delay);
	errno = r < 0 ? err : saved;
	return r;
}

void io_advised(int fd, off_t offset, off_t len, int advice)
{
	int saved = errno;
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		switch (advice) {
		case POSIX_FADV_NORMAL:
			readahead_advise(&of->ra, READAHEAD_NORMAL);
			break;
		case POSIX_FADV_RANDOM:
			readahead_advise(&of->ra, READAHEAD_RANDOM);
			break;
		case POSIX_FADV_SEQUENTIAL:
			readahead_advise(&of->ra, READAHEAD_SEQUENTIAL);
			break;
		case POSIX_FADV_DONTNEED:
			/* Pages we believed resident may be gone now. */
			of->ra.resident_end = of->ra.resident_first;
			of->model_end = of->model_first;
			cache_probe_close(&of->probe);
			break;
		}
		open_file_release(of);
	}
	(void)offset;
	(void)len;
	errno = saved;
}

void io_before_willneed(int fd, off_t offset, off_t len)
{
	int saved = errno;
	uint64_t predicted = 0;
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		refresh_size(fd, of);
		uint64_t start = offset > 0 ? (uint64_t)offset : 0;
		uint64_t end = len > 0 ? start + (uint64_t)len : of->isize;
		if (end > of->isize)
			end = of->isize;
		if (start < end && !of->direct) {
			/* force_page_cache_ra(): the uncached pages of the
			 * range's first max(bdi->io_pages, ra_pages) - no more,
			 * whatever the length asked (mm/readahead.c).  Charged
			 * for the whole range, a 64 MiB WILLNEED paid for the
			 * 2.5 MiB the kernel read and again for the rest as the
			 * program read it: -53 % of the cap. */
			uint64_t first = start >> PAGE_SHIFT, count = pages_of(end) - first;
			uint64_t most = of->ra.io_pages > of->ra.ra_pages ? of->ra.io_pages
									   : of->ra.ra_pages;
			if (count > most)
				count = most;
			struct view_ctx v = { .fd = fd, .of = of,
					      .use_cache = predicting(DN_PREDICT_CACHE) };
			predicted = (count - detector_count(&v, first, count)) << PAGE_SHIFT;
		}
		open_file_release(of);
	}
	uint64_t delay = throttle_charge(predicted, 0);
	if (predicted)
		agent_trace("willneed", 0, predicted, delay);
	errno = saved;
}
