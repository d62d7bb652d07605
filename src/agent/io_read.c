/*
 * io_read.c - the path of one read: the cache detector (DiscNice §4.2) and
 * the read-size predictor (§4.3, a model of mm/readahead.c) say which pages
 * the kernel will fetch; holes of sparse files cost nothing; under a read
 * cap the agent reads the model's windows in itself, paced (prefetch), so
 * the disk never sees a whole readahead window at once.
 *
 * Two parts live beside it: io_read_watch.c, the streams the model meets
 * that it did not start (a cached start, another reader's windows), and
 * io_read_prefetch.c, how a capped read is paid by reading its windows
 * in.  io_read_internal.h is what the three share.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "agent/agent.h"
#include "agent/cache_drop.h"
#include "agent/io_internal.h"
#include "agent/io_read_internal.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "agent/writeback.h"
#include "graybox/cache_detector.h"
#include "graybox/readahead.h"

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
bool detector_exact(const struct open_file *of)
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
void view_mark_cached(void *ctx, uint64_t first, uint64_t count)
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

/* The detector's count of cached pages, for page_spans_cover(). */
uint64_t detector_cached(void *ctx, uint64_t first, uint64_t count)
{
	return detector_count(ctx, first, count);
}

/* Disk bytes a read of [pos, pos + count) will cause.  of is locked. */
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

/* Predict a read of [pos, pos + n) before the call; of is locked.  Returns
 * whether it is paid by prefetch (prefetch_until() up to pay->need_end,
 * which is set) rather than by charging *predicted.  Paid by prefetch, the
 * probes' own reads of the prediction (§6.1) are set apart in pay->probed
 * and charged first: they have happened already, and counted after the
 * plan's pieces they would reach our count seconds after the kernel's,
 * where the supervisor's feedback (tool_regulate.c) charges them too - and
 * gives back only what its window still holds. */
bool plan_read(int fd, struct open_file *of, uint64_t pos, uint64_t n, bool capped,
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
