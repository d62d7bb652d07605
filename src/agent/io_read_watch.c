/*
 * io_read_watch.c - the streams the read-size model (DiscNice §4.3, a model
 * of mm/readahead.c) meets but did not start: a file whose start is cached
 * (another process read it first: `head`, file(1)), a reader that meets
 * another's run mid-file, neighbours with a descriptor each reading slices
 * of one file.  The kernel's window there starts from a marker the model
 * cannot see (PG_readahead), so it watches the span where that window can
 * be, one cachestat per prediction, and takes a rise it did not predict
 * for the kernel's window (watch_look()); under a cap it reads the window
 * after a cached run in itself first (preread_after_run()).  Called from
 * predict_read() (io_read.c) with the open file locked.
 */

#include "agent/agent.h"
#include "agent/io_internal.h"
#include "agent/io_read_internal.h"
#include "agent/open_file.h"
#include "agent/pieces_in_hand.h"
#include "graybox/readahead.h"

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

/* The cached run from page first, as far as the kernel's readahead can be
 * ahead of a reader there (two windows) and no further than EOF. */
static uint64_t stream_run(struct view_ctx *v, const struct open_file *of, uint64_t first)
{
	uint64_t limit = 2 * (uint64_t)of->ra.ra_pages + 1, isize_pages = pages_of(of->isize);
	if (first >= isize_pages)
		return 0;
	return cached_run(v, first, limit < isize_pages - first ? limit : isize_pages - first);
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
void raise_model_high(struct open_file *of, uint64_t page)
{
	if (page > of->watch.model_high)
		of->watch.model_high = page;
}

/* A file the model meets mid-stream (open_file.h: adopt): find where the
 * kernel's readahead ahead of the reader ends - the cached run from its
 * page, a dozen detector queries once per file - and let the model take
 * the stream over from there.  The kernel paced it until now: under a cap
 * its next window is read in by us. */
void adopt_stream(struct view_ctx *v, struct open_file *of, uint64_t pos)
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
void foreign_check_until(struct open_file *of, uint64_t page)
{
	uint64_t max_pages = max_window_pages(of);
	of->watch.foreign_met = true;
	if (page + 4 * max_pages > of->watch.foreign_until)
		of->watch.foreign_until = page + 4 * max_pages;
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
void watch_run(struct view_ctx *v, struct open_file *of, uint64_t start, uint64_t count)
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
bool meets_foreign_run(const struct open_file *of, uint64_t first, uint64_t prev)
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
void watch_window_gap(struct view_ctx *v, struct open_file *of, uint64_t old_high)
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
uint64_t watch_look(struct view_ctx *v, struct open_file *of, uint64_t pos)
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
uint64_t preread_after_run(struct view_ctx *v, struct open_file *of)
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
uint64_t preread_need(const struct open_file *of, uint64_t need_end)
{
	uint64_t n = of->watch.preread_end - of->watch.preread_first;
	uint64_t base = of->watch.preread_base, way = of->watch.preread_from - base;
	if (need_end >= of->watch.preread_from)
		return of->watch.preread_end;
	if (need_end <= base)
		return 0; /* the reader is not in the run yet (watch_window_gap()) */
	return of->watch.preread_first + (n * (need_end - base) + way - 1) / way;
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

bool watch_due(struct open_file *of, uint64_t page)
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
void watch_note_model(const struct view_ctx *v, struct open_file *of)
{
	uint64_t lo = of->watch.first, hi = lo + watch_span(of);
	for (unsigned i = 0; i < v->overlays; i++)
		of->watch.cached += overlap_pages(v->overlay[i].first, v->overlay[i].end, lo, hi);
}
