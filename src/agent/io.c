/*
 * io.c - the path of one intercepted call: predict the disk I/O it will
 * cause (graybox/), let the policy pace it (throttle.c), make the real call,
 * keep the books.  DiscNice Fig. 5.
 *
 * Reads: the cache detector (§4.2) and the read-size predictor (§4.3, a
 * model of mm/readahead.c) say which pages the kernel will fetch.
 * Writes: the write-size predictor (§4.4) counts pages newly dirtied, the
 * quantity Linux itself charges to write_bytes, and refunds dirty pages
 * cancelled by truncate or unlink.
 * A request larger than the chunk size is carried out in pieces with the
 * throttle between them, so the disk sees a smooth stream (§5.3) - except
 * O_APPEND writes, whose atomicity other writers may rely on.
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/io.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "agent/pool.h"
#include "agent/spin.h"
#include "common/clock.h"
#include "graybox/cache_detector.h"
#include "graybox/readahead.h"
#include "graybox/region_table.h"

#define PAGE_SHIFT READAHEAD_PAGE_SHIFT
#define PAGE_SIZE  READAHEAD_PAGE_SIZE
#define WRITEBACK_POLL_NS (100 * 1000 * 1000ull) /* issue #2: at most every 100 ms */
#define DIR_SLOW_MIN_NS (100 * 1000ull)
/* The pipe a kernel copy goes through: PIPE_DEF_BUFFERS pages. */
#define SPLICE_READ_BYTES (16 * PAGE_SIZE)
/* A random read of up to this many pages is read in by the agent itself. */
#define SMALL_READ_PAGES 4

static struct region_table *regions;
static uint32_t regions_lock;   /* guards regions and region_pool */
static struct pool region_pool;
static uint64_t last_writeback_poll_ns;

int io_init(void)
{
	/* Never malloc: the write path must stay async-signal-safe. */
	const struct region_memory memory = { pool_alloc, pool_release, &region_pool };
	regions = region_table_new(&memory);
	return regions ? 0 : -ENOMEM;
}

/* fork: hold the region table still across it, so the child never gets a
 * table half-way through an update by another thread. */
void io_before_fork(void)
{
	spin_lock(&regions_lock);
}

void io_after_fork(bool child)
{
	if (child)
		regions_lock = 0;
	else
		spin_unlock(&regions_lock);
}

static bool read_capped(void);

static bool predicting(uint32_t bit)
{
	return (agent.predict_mask & bit) != 0;
}

static uint64_t pages_of(uint64_t bytes)
{
	return (bytes + PAGE_SIZE - 1) >> PAGE_SHIFT;
}

/* ---- reads ---------------------------------------------------------- */

/* The page cache as the model sees it: the cache detector's answer, plus
 * the pages the model itself predicted the kernel brings in during this
 * call (they are not in the cache yet when we ask). */
struct view_ctx {
	int fd;
	struct open_file *of;
	bool use_cache;
	unsigned overlays;
	struct { uint64_t first, end; } overlay[8];
};

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

static uint64_t detector_count(struct view_ctx *v, uint64_t first, uint64_t count)
{
	if (!v->use_cache || !count)
		return 0;
	uint64_t threshold = agent.seg ? agent.seg->probe_threshold_ns : 0;
	int64_t n = cache_detector_count(v->fd, (enum dn_cache_backend)v->of->backend,
					 &v->of->probe, threshold, first, count);
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

static void refresh_size(int fd, struct open_file *of)
{
	struct stat st;
	if (fstat(fd, &st) == 0) {
		if ((uint64_t)st.st_size != of->isize)
			extent_map_clear(&of->extents); /* written: holes may be filled */
		of->isize = (uint64_t)st.st_size;
		of->sparse = open_file_may_be_sparse(&st);
	}
}

/* Disk bytes a read of [pos, pos + count) will cause.  of is locked. */
/* The page ranges the model says the kernel will read for one call. */
struct read_plan {
	unsigned ranges;
	struct { uint64_t first, end; } range[8];
};

static uint64_t predict_read(int fd, struct open_file *of, uint64_t pos, uint64_t count,
			     struct read_plan *plan)
{
	if (plan)
		plan->ranges = 0;
	if (!count)
		return 0;
	if (of->direct)
		return count; /* O_DIRECT: straight to the device, no cache */
	if (!predicting(DN_PREDICT_CACHE) && !predicting(DN_PREDICT_READAHEAD))
		return count; /* Table 5 "All-off": police file I/O as if it were disk I/O */
	if (predicting(DN_PREDICT_READAHEAD) && readahead_is_hit(&of->ra, pos, count)) {
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
	uint64_t probe_pages = of->probe.disk_pages;
	uint64_t first = pos >> PAGE_SHIFT, last = (pos + count - 1) >> PAGE_SHIFT;
	uint64_t prev = of->ra.prev_pos == UINT64_MAX ? UINT64_MAX : of->ra.prev_pos >> PAGE_SHIFT;
	uint64_t touched = 0;
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
			touched = n - detector_count(&v, first, n);
			if (touched) {
				view_mark_cached(&v, first, n);
				if (!read_capped())
					syscall(SYS_readahead, fd, (off_t)(first << PAGE_SHIFT),
						(size_t)(n << PAGE_SHIFT));
			}
		}
	}
	uint64_t pages = touched + readahead_predict_read(&of->ra, &view, pos, count, of->isize,
							  predicting(DN_PREDICT_READAHEAD));
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

static size_t write_piece(size_t count)
{
	const struct dn_caps *caps = &agent.seg->caps;
	if (!caps->write_bps && !caps->total_bps)
		return count;
	size_t piece = (size_t)throttle_piece_bytes();
	return piece && piece < count ? piece : count;
}

/*
 * Before a call is cut into pieces, ask the kernel for the description's
 * flags: O_APPEND and O_DIRECT live in the open file description, which
 * fcntl(F_SETFL) changes through any fd that shares it - a dup, a child's
 * copy - without our seeing it (issue #8 item 4).  One fcntl per call that
 * would be split, none on the common path.  of is locked.
 */
static void refresh_flags(int fd, struct open_file *of)
{
	int flags = fcntl(fd, F_GETFL); /* our own wrapper: the guard makes it plain */
	if (flags >= 0)
		open_file_set_flags(of, flags);
}

/*
 * The alignment O_DIRECT needs of every piece's offset, length and buffer
 * (issue #8 item 9): statx(STATX_DIOALIGN) gives the file's
 * (fs/stat.c, ext4_getattr -> stx_dio_offset_align, stx_dio_mem_align,
 * Linux 6.1).  Pieces are whole multiples of the larger, and at least a
 * page; 0 when the kernel cannot tell: then the call is not cut at all.
 */
static uint64_t direct_alignment(int fd, struct open_file *of)
{
	if (!of->dio_align) {
		struct statx stx;
		uint64_t align = 0;
		if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
		    (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
			align = PAGE_SIZE;
			if (stx.stx_dio_offset_align > align)
				align = stx.stx_dio_offset_align;
			if (stx.stx_dio_mem_align > align)
				align = stx.stx_dio_mem_align;
		}
		of->dio_align = align ? align : UINT64_MAX;
	}
	return of->dio_align == UINT64_MAX ? 0 : of->dio_align;
}

/* The piece a call of `count` bytes on this description may be cut to:
 * never an O_APPEND write (its atomicity is the program's to rely on), and
 * O_DIRECT only on its alignment.  of is locked. */
static size_t piece_for(int fd, struct open_file *of, size_t piece, size_t count, bool writing)
{
	if (piece >= count)
		return count;
	refresh_flags(fd, of);
	if (writing && of->append)
		return count;
	if (of->direct) {
		uint64_t align = direct_alignment(fd, of);
		if (!align)
			return count;
		piece -= piece % align;
		if (piece < align)
			piece = (size_t)align;
		return piece < count ? piece : count;
	}
	return piece;
}

/* Where the next read()/write() on this description starts. */
static uint64_t current_pos(int fd, struct open_file *of)
{
	if (!open_file_pos_valid(of)) {
		off_t pos = libc_real.lseek64(fd, 0, SEEK_CUR);
		if (pos < 0)
			return 0;
		open_file_pos_set(of, (uint64_t)pos);
	}
	return of->pos;
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
static bool read_capped(void)
{
	return agent.seg->caps.read_bps || agent.seg->caps.total_bps;
}

/* Add the plan's ranges to what the file still owes; of is locked. */
static void owe_plan(struct open_file *of, const struct read_plan *plan, uint64_t predicted)
{
	for (unsigned i = 0; i < plan->ranges; i++) {
		uint64_t first = plan->range[i].first, end = plan->range[i].end;
		unsigned j;
		for (j = 0; j < of->owed_count; j++)
			if (first <= of->owed[j].end && end >= of->owed[j].first) {
				if (first < of->owed[j].first)
					of->owed[j].first = first;
				if (end > of->owed[j].end)
					of->owed[j].end = end;
				break;
			}
		if (j < of->owed_count)
			continue;
		if (of->owed_count == sizeof of->owed / sizeof of->owed[0]) {
			/* Full: forget the oldest (a stream long abandoned). */
			memmove(&of->owed[0], &of->owed[1], sizeof of->owed[0] * (of->owed_count - 1));
			of->owed_count--;
		}
		of->owed[of->owed_count].first = first;
		of->owed[of->owed_count].end = end;
		of->owed_count++;
	}
	of->owed_bytes += predicted;
}

/* Take the next piece to read in before the program reads up to page
 * need_end: the owed range nearest below need_end.  of is locked. */
static bool owed_take(struct open_file *of, uint64_t need_end, uint64_t piece_pages,
		      uint64_t *first, uint64_t *pages, uint64_t *charge)
{
	unsigned best = of->owed_count;
	for (unsigned j = 0; j < of->owed_count; j++)
		if (of->owed[j].first < need_end &&
		    (best == of->owed_count || of->owed[j].first < of->owed[best].first))
			best = j;
	if (best == of->owed_count)
		return false;
	*first = of->owed[best].first;
	*pages = of->owed[best].end - *first < piece_pages ? of->owed[best].end - *first : piece_pages;
	of->owed[best].first += *pages;
	if (of->owed[best].first >= of->owed[best].end) {
		of->owed[best] = of->owed[of->owed_count - 1];
		of->owed_count--;
	}
	uint64_t bytes = *pages << PAGE_SHIFT;
	*charge = of->owed_bytes < bytes ? of->owed_bytes : bytes;
	of->owed_bytes -= *charge;
	if (!of->owed_count) {
		/* Nothing left to read in: what remains was probe reads. */
		*charge += of->owed_bytes;
		of->owed_bytes = 0;
	}
	return true;
}

/* Read in, paced, everything owed below page need_end (plus one piece of
 * lookahead).  Returns ns slept; adds the bytes charged to *charged. */
static uint64_t prefetch_until(int fd, uint64_t need_end, uint64_t *charged)
{
	uint64_t piece_pages = pages_of(throttle_piece_bytes()), slept = 0;
	if (!piece_pages)
		piece_pages = 1;
	for (;;) {
		uint64_t first, pages, charge;
		struct open_file *of = open_file_acquire(fd);
		if (!of)
			break;
		bool more = owed_take(of, need_end + piece_pages, piece_pages, &first, &pages, &charge);
		open_file_release(of);
		if (!more)
			break;
		slept += throttle_charge(charge, 0);
		*charged += charge;
		syscall(SYS_readahead, fd, (off_t)(first << PAGE_SHIFT), (size_t)(pages << PAGE_SHIFT));
	}
	return slept;
}

ssize_t io_read(int fd, void *buf, size_t count, const off_t *offset)
{
	int saved = errno;
	bool moves_offset = !offset;
	bool capped = read_capped();
	size_t piece = read_piece(count), done = 0;
	ssize_t result = 0;
	int err = saved;
	do {
		size_t n = count - done < piece ? count - done : piece;
		uint64_t pos = moves_offset ? 0 : (uint64_t)*offset + done, predicted = 0, delay;
		struct read_plan plan;
		uint64_t need_end = pages_of(pos + n);
		struct open_file *of = open_file_acquire(fd);
		if (of) {
			if (!done && piece < count) {
				piece = piece_for(fd, of, piece, count, false);
				n = count < piece ? count : piece;
				need_end = pages_of(pos + n);
			}
			if (moves_offset)
				pos = current_pos(fd, of);
			need_end = pages_of(pos + n);
			predicted = predict_read(fd, of, pos, n, &plan);
			/* Under a cap the model's windows are read in by us, paced
			 * (prefetch above); O_DIRECT has none and is charged as is,
			 * and a sparse file's are charged for their data only, before
			 * the kernel reads them (prefetch paces pages, not data). */
			capped = capped && (plan.ranges || !predicted) && !of->sparse;
			if (capped && predicted) {
				owe_plan(of, &plan, predicted);
				/* A cap that came while the kernel paced the file
				 * (yield, `discnice set`): the first window the model
				 * sees coming is the kernel's, behind a marker the
				 * kernel set - read all of it in, paced, before the
				 * call touches the marker, or the disk gets it in one
				 * burst.  From then on the windows are ours. */
				if (of->kernel_paced)
					for (unsigned i = 0; i < plan.ranges; i++)
						if (plan.range[i].end > need_end)
							need_end = plan.range[i].end;
				of->kernel_paced = false;
			} else if (predicted && !read_capped()) {
				of->kernel_paced = true;
			}
			open_file_release(of);
		} else if (!done) {
			/* Not a disk file (or closed under us): not ours to judge. */
			errno = saved;
			return moves_offset ? libc_real.read(fd, buf, count)
					    : libc_real.pread64(fd, buf, count, *offset);
		} else {
			n = count - done;
			capped = false;
		}
		if (capped) {
			uint64_t charged = 0;
			delay = prefetch_until(fd, need_end, &charged);
			predicted = charged;
		} else {
			delay = throttle_charge(predicted, 0);
		}
		errno = saved;
		ssize_t r = moves_offset ? libc_real.read(fd, (char *)buf + done, n)
					 : libc_real.pread64(fd, (char *)buf + done, n, (off_t)pos);
		/* pread of what was asked changes nothing we track: skip the books. */
		if (moves_offset || r < (ssize_t)n)
			read_done(fd, pos, n, r, moves_offset);
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
		if ((size_t)r < n)
			break; /* EOF (or a short read): one call would stop here too */
	} while (done < count);
	if (result < 0) {
		errno = err;
		return -1;
	}
	errno = saved;
	return (ssize_t)done;
}

/*
 * The bytes an iovec asks for, read without trusting it (issue #8 item
 * 10): the kernel validates the program's iovec (import_iovec() ->
 * -EFAULT, -EINVAL), the agent must not dereference it first.  The array
 * is copied through process_vm_readv(2), which reports EFAULT instead of
 * faulting, in batches on the stack.  Returns false when the call should
 * go to the kernel unaccounted: a count out of range, unreadable memory,
 * a total over SSIZE_MAX (EINVAL from the kernel), or no process_vm_readv
 * (a seccomp filter).
 */
static bool iov_total_checked(const struct iovec *iov, int iovcnt, size_t *total)
{
	*total = 0;
	if (iovcnt <= 0 || iovcnt > IOV_MAX)
		return false;
	struct iovec batch[64];
	pid_t self = getpid();
	for (int i = 0; i < iovcnt; i += 64) {
		size_t n = (size_t)(iovcnt - i < 64 ? iovcnt - i : 64);
		struct iovec local = { batch, n * sizeof batch[0] };
		struct iovec remote = { (void *)(iov + i), n * sizeof batch[0] };
		if (process_vm_readv(self, &local, 1, &remote, 1, 0) != (ssize_t)local.iov_len)
			return false;
		for (size_t k = 0; k < n; k++) {
			if (batch[k].iov_len > (size_t)SSIZE_MAX - *total)
				return false;
			*total += batch[k].iov_len;
		}
	}
	return true;
}

ssize_t io_readv(int fd, const struct iovec *iov, int iovcnt, const off_t *offset, int flags)
{
	int saved = errno;
	bool moves_offset = !offset;
	uint64_t predicted = 0, pos = 0, delay = 0;
	size_t total = 0;
	struct open_file *of = NULL;
	/* Not a disk file, or an iovec the kernel will refuse: plain. */
	if (open_file_maybe_disk(fd) && iov_total_checked(iov, iovcnt, &total))
		of = open_file_acquire(fd);
	/* RWF_NOWAIT reads never wait for the disk: nothing to predict. */
	bool accounted = of && !(flags & RWF_NOWAIT);
	if (of) {
		if (accounted) {
			pos = moves_offset ? current_pos(fd, of) : (uint64_t)*offset;
			predicted = predict_read(fd, of, pos, total, NULL);
		}
		open_file_release(of);
		delay = throttle_charge(predicted, 0);
	}
	errno = saved;
	ssize_t r = libc_real.preadv64v2(fd, iov, iovcnt, offset ? *offset : -1, flags);
	if (!accounted)
		return r;
	int err = errno;
	read_done(fd, pos, total, r, moves_offset);
	if (r > 0)
		AGENT_COUNT(file_read_bytes, (uint64_t)r);
	if (predicted || delay)
		agent_trace("readv", r > 0 ? (uint64_t)r : 0, predicted, delay);
	errno = r < 0 ? err : saved;
	return r;
}

/* ---- writes --------------------------------------------------------- */

/* A partial write to a page that is neither cached nor beyond EOF makes
 * the kernel read it first (block_write_begin -> read-modify-write). */
static uint64_t partial_page_read(int fd, struct open_file *of, uint64_t page)
{
	if (!predicting(DN_PREDICT_CACHE) || page >= pages_of(of->isize))
		return 0;
	if (region_table_is_dirty(regions, of->dev, of->ino, page))
		return 0;
	if (of->backend == DN_CACHE_PROBE) {
		/* The probe reads the page if it is missing, so the kernel's
		 * read-modify-write will not: its read is the one to charge. */
		uint64_t before = of->probe.disk_pages;
		if (cache_probe_pages(fd, &of->probe, agent.seg->probe_threshold_ns, page, 1) < 0)
			return PAGE_SIZE;
		return (of->probe.disk_pages - before) << PAGE_SHIFT;
	}
	struct view_ctx v = { .fd = fd, .of = of, .use_cache = true };
	return detector_count(&v, page, 1) ? 0 : PAGE_SIZE;
}

/* Disk bytes of a write of [pos, pos + count): newly dirtied pages (and
 * read-modify-write reads into *read_bytes).  of is locked. */
static uint64_t predict_write(int fd, struct open_file *of, uint64_t pos, uint64_t count,
			      uint64_t *read_bytes)
{
	*read_bytes = 0;
	if (!count)
		return 0;
	if (of->direct || !predicting(DN_PREDICT_WRITE))
		return count; /* no delayed write to model: every byte goes out */
	uint64_t first = pos >> PAGE_SHIFT, last = (pos + count - 1) >> PAGE_SHIFT;
	spin_lock(&regions_lock);
	if (pos & (PAGE_SIZE - 1))
		*read_bytes += partial_page_read(fd, of, first);
	if (((pos + count) & (PAGE_SIZE - 1)) && last != first)
		*read_bytes += partial_page_read(fd, of, last);
	int64_t fresh = region_table_dirty(regions, of->dev, of->ino, first, last - first + 1,
					   clock_now_ns());
	spin_unlock(&regions_lock);
	if (fresh < 0)
		fresh = (int64_t)(last - first + 1); /* out of memory: count all */
	return (uint64_t)fresh << PAGE_SHIFT;
}

static void poll_file_writeback(void *ctx, int fd, struct open_file *of)
{
	(void)ctx;
	struct cache_stat cs;
	spin_lock(&regions_lock);
	uint64_t dirty = region_table_file_pages(regions, of->dev, of->ino);
	spin_unlock(&regions_lock);
	/* cachestat's nr_dirty/nr_writeback: has the flusher been here? */
	if (!dirty || cache_stat_call(fd, 0, 0, &cs) != 0 || cs.nr_dirty || cs.nr_writeback)
		return;
	spin_lock(&regions_lock);
	region_table_clean(regions, of->dev, of->ino, 0, UINT64_MAX >> PAGE_SHIFT);
	spin_unlock(&regions_lock);
}

/* Regions clear when the kernel writes them back (§5.2): pages of open
 * files are checked with cachestat, the rest expire with the periodic
 * writeback.  At most every 100 ms. */
static void poll_writeback(void)
{
	uint64_t now = clock_now_ns();
	uint64_t last = __atomic_load_n(&last_writeback_poll_ns, __ATOMIC_RELAXED);
	if (now - last < WRITEBACK_POLL_NS ||
	    !__atomic_compare_exchange_n(&last_writeback_poll_ns, &last, now, 0,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	spin_lock(&regions_lock);
	bool any = region_table_total_pages(regions) != 0;
	if (any && now > agent.writeback_expire_ns)
		region_table_expire(regions, now - agent.writeback_expire_ns);
	spin_unlock(&regions_lock);
	if (any)
		open_file_each(poll_file_writeback, NULL);
}

static void write_done(int fd, uint64_t pos, ssize_t done, bool moves_offset)
{
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return;
	if (done >= 0) {
		if (pos + (uint64_t)done > of->isize)
			of->isize = pos + (uint64_t)done;
		if (moves_offset)
			of->pos = pos + (uint64_t)done;
	} else if (moves_offset) {
		of->pos_known = false;
	}
	open_file_release(of);
}

/* Where a write on this description lands. */
static uint64_t write_pos(int fd, struct open_file *of, bool moves_offset, off_t offset)
{
	if (of->append) {
		refresh_size(fd, of); /* O_APPEND: at EOF, wherever others left it */
		return of->isize;
	}
	return moves_offset ? current_pos(fd, of) : (uint64_t)offset;
}

ssize_t io_write(int fd, const void *buf, size_t count, const off_t *offset)
{
	int saved = errno;
	bool moves_offset = !offset;
	struct open_file *of = open_file_acquire(fd);
	if (!of) {
		errno = saved;
		return moves_offset ? libc_real.write(fd, buf, count)
				    : libc_real.pwrite64(fd, buf, count, *offset);
	}
	size_t piece = piece_for(fd, of, write_piece(count), count, true), done = 0;
	open_file_release(of);

	ssize_t result = 0;
	int err = saved;
	do {
		size_t n = count - done < piece ? count - done : piece;
		uint64_t pos = 0, predicted = 0, rmw = 0;
		of = open_file_acquire(fd);
		if (of) {
			pos = write_pos(fd, of, moves_offset, moves_offset ? 0 : *offset + (off_t)done);
			predicted = predict_write(fd, of, pos, n, &rmw);
			open_file_release(of);
		}
		uint64_t delay = throttle_charge(rmw, predicted);
		errno = saved;
		ssize_t r = moves_offset ? libc_real.write(fd, (const char *)buf + done, n)
					 : libc_real.pwrite64(fd, (const char *)buf + done, n,
							      (off_t)pos);
		if (r < 0) {
			err = errno;
			write_done(fd, pos, r, moves_offset);
			if (!done)
				result = -1;
			break;
		}
		write_done(fd, pos, r, moves_offset);
		AGENT_COUNT(file_write_bytes, (uint64_t)r);
		if (predicted || delay || rmw)
			agent_trace("write", (uint64_t)r, predicted + rmw, delay);
		done += (size_t)r;
		if ((size_t)r < n)
			break;
	} while (done < count);
	poll_writeback();
	if (result < 0) {
		errno = err;
		return -1;
	}
	errno = saved;
	return (ssize_t)done;
}

ssize_t io_writev(int fd, const struct iovec *iov, int iovcnt, const off_t *offset, int flags)
{
	int saved = errno;
	bool moves_offset = !offset;
	uint64_t predicted = 0, rmw = 0, pos = 0, delay = 0;
	size_t total = 0;
	struct open_file *of = NULL;
	if (open_file_maybe_disk(fd) && iov_total_checked(iov, iovcnt, &total))
		of = open_file_acquire(fd);
	if (of) {
		pos = (flags & RWF_APPEND) ? (refresh_size(fd, of), of->isize)
					   : write_pos(fd, of, moves_offset, offset ? *offset : 0);
		predicted = predict_write(fd, of, pos, total, &rmw);
		open_file_release(of);
		delay = throttle_charge(rmw, predicted);
	}
	errno = saved;
	ssize_t r = libc_real.pwritev64v2(fd, iov, iovcnt, offset ? *offset : -1, flags);
	if (!of)
		return r;
	int err = errno;
	write_done(fd, pos, r, moves_offset);
	if (r > 0)
		AGENT_COUNT(file_write_bytes, (uint64_t)r);
	if (predicted || delay || rmw)
		agent_trace("writev", r > 0 ? (uint64_t)r : 0, predicted + rmw, delay);
	poll_writeback();
	errno = r < 0 ? err : saved;
	return r;
}

/* ---- kernel-side copies ---------------------------------------------- */

/*
 * Copies inside the kernel: the source is predicted before the call, like a
 * read of what the call can copy (never past the source's EOF, whatever
 * length the caller asked: cp asks for SSIZE_MAX); the destination after
 * it, from the bytes really copied (the write predictor needs positions,
 * not cache state).  Under a cap the length is cut to one chunk: these
 * calls may copy less than asked, and every caller loops.
 */
struct copy_plan {
	bool out_disk;
	uint64_t out_pos;
	uint64_t reads, writes;
	uint64_t delay;
};

static size_t copy_begin(int in_fd, const off_t *off_in, int out_fd, const off_t *off_out,
			 size_t len, struct copy_plan *plan)
{
	memset(plan, 0, sizeof *plan);
	const struct dn_caps *caps = &agent.seg->caps;
	if ((caps->read_bps || caps->write_bps || caps->total_bps) && len > throttle_piece_bytes())
		len = (size_t)throttle_piece_bytes();
	struct open_file *of = open_file_acquire(in_fd);
	if (of) {
		uint64_t pos = off_in ? (uint64_t)*off_in : current_pos(in_fd, of);
		if (pos + len > of->isize)
			refresh_size(in_fd, of);
		uint64_t left = pos < of->isize ? of->isize - pos : 0;
		/* The kernel moves a copy through a pipe (do_splice_direct ->
		 * filemap_splice_read): the page cache sees reads of at most
		 * the pipe's 16 pages, not one read of the whole length. */
		for (uint64_t done = 0, want = len < left ? len : left; done < want;
		     done += SPLICE_READ_BYTES) {
			uint64_t n = want - done < SPLICE_READ_BYTES ? want - done : SPLICE_READ_BYTES;
			plan->reads += predict_read(in_fd, of, pos + done, n, NULL);
		}
		open_file_release(of);
	}
	of = open_file_acquire(out_fd);
	if (of) {
		plan->out_disk = true;
		plan->out_pos = off_out ? (uint64_t)*off_out : write_pos(out_fd, of, true, 0);
		open_file_release(of);
	}
	plan->delay = throttle_charge(plan->reads, 0);
	return len;
}

/* After a copy the offsets of the descriptions that moved are unknown:
 * cheaper to ask the kernel next time than to mirror every rule. */
static void copy_done(int in_fd, const off_t *off_in, int out_fd, const off_t *off_out,
		      ssize_t copied, struct copy_plan *plan, const char *op)
{
	struct open_file *of;
	uint64_t rmw = 0;
	if (!off_in && (of = open_file_acquire(in_fd))) {
		of->pos_known = false;
		open_file_release(of);
	}
	if (plan->out_disk && (of = open_file_acquire(out_fd))) {
		if (copied > 0)
			plan->writes = predict_write(out_fd, of, plan->out_pos, (uint64_t)copied, &rmw);
		if (!off_out)
			of->pos_known = false;
		refresh_size(out_fd, of);
		open_file_release(of);
		if (copied > 0)
			AGENT_COUNT(file_write_bytes, (uint64_t)copied);
		plan->delay += throttle_charge(rmw, plan->writes);
	}
	if (copied > 0 && open_file_maybe_disk(in_fd))
		AGENT_COUNT(file_read_bytes, (uint64_t)copied);
	if (plan->reads || plan->writes || plan->delay || rmw)
		agent_trace(op, copied > 0 ? (uint64_t)copied : 0, plan->reads + plan->writes + rmw,
			    plan->delay);
}

ssize_t io_sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	int saved = errno;
	struct copy_plan plan;
	count = copy_begin(in_fd, offset, out_fd, NULL, count, &plan);
	errno = saved;
	ssize_t r = libc_real.sendfile64(out_fd, in_fd, offset, count);
	int err = errno;
	copy_done(in_fd, offset, out_fd, NULL, r, &plan, "sendfile");
	errno = r < 0 ? err : saved;
	return r;
}

/* copy_file_range and splice: the same signature, the same path. */
static ssize_t copy_between(ssize_t (*real)(int, off_t *, int, off_t *, size_t, unsigned),
			    const char *op, int in_fd, off_t *off_in, int out_fd, off_t *off_out,
			    size_t len, unsigned flags)
{
	int saved = errno;
	struct copy_plan plan;
	len = copy_begin(in_fd, off_in, out_fd, off_out, len, &plan);
	errno = saved;
	ssize_t r = real(in_fd, off_in, out_fd, off_out, len, flags);
	int err = errno;
	copy_done(in_fd, off_in, out_fd, off_out, r, &plan, op);
	errno = r < 0 ? err : saved;
	return r;
}

ssize_t io_copy_file_range(int in_fd, off_t *off_in, int out_fd, off_t *off_out, size_t len,
			   unsigned flags)
{
	return copy_between(libc_real.copy_file_range, "copy_file_range", in_fd, off_in, out_fd,
			    off_out, len, flags);
}

ssize_t io_splice(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len, unsigned flags)
{
	return copy_between(libc_real.splice, "splice", fd_in, off_in, fd_out, off_out, len, flags);
}

/* ---- bookkeeping ---------------------------------------------------- */

void io_opened(int fd, int flags)
{
	int saved = errno;
	open_file_track(fd, flags, true);
	errno = saved;
}

/* Dirty pages of a file that is truncated or gone are cancelled, not
 * written (truncate_inode_pages -> folio_account_cleaned): refund them. */
static void book_cancel(uint64_t dev, uint64_t ino, uint64_t first_page, uint64_t dirty_pages)
{
	spin_lock(&regions_lock);
	uint64_t known = first_page ? region_table_truncate(regions, dev, ino, first_page)
				    : region_table_forget(regions, dev, ino);
	spin_unlock(&regions_lock);
	/* cachestat counted every dirty page, ours and other processes'; the
	 * table is the fallback when it could not. */
	uint64_t pages = dirty_pages != UINT64_MAX ? dirty_pages : known;
	if (pages) {
		AGENT_COUNT(cancelled_write_bytes, pages << PAGE_SHIFT);
		throttle_refund(pages << PAGE_SHIFT);
		agent_trace("cancel", 0, pages << PAGE_SHIFT, 0);
	}
}

/* Dirty pages of an open file from first_page on, by cachestat(2);
 * UINT64_MAX when the kernel cannot tell us. */
static uint64_t dirty_pages_from(int fd, uint64_t first_page)
{
	struct cache_stat cs;
	if (cache_stat_call(fd, first_page << PAGE_SHIFT, 0, &cs) != 0)
		return UINT64_MAX;
	return cs.nr_dirty;
}

void io_victim_note_fd(int fd, uint64_t new_size, struct io_victim *victim)
{
	int saved = errno;
	struct stat st;
	victim->valid = 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		victim->valid = 1;
		victim->dev = st.st_dev;
		victim->ino = st.st_ino;
		victim->first_page = pages_of(new_size);
		victim->dirty_pages = predicting(DN_PREDICT_WRITE)
					      ? dirty_pages_from(fd, victim->first_page) : 0;
	}
	errno = saved;
}

void io_victim_note_path(int dirfd, const char *path, uint64_t new_size, bool unlinking,
			 struct io_victim *victim)
{
	int saved = errno;
	struct stat st;
	victim->valid = 0;
	if (!path || !predicting(DN_PREDICT_WRITE) ||
	    fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
	    (unlinking && st.st_nlink != 1)) {
		errno = saved;
		return;
	}
	victim->valid = 1;
	victim->dev = st.st_dev;
	victim->ino = st.st_ino;
	victim->first_page = pages_of(new_size);
	victim->dirty_pages = UINT64_MAX;
	/* A page dirtied longer ago than periodic writeback has been written
	 * back (§5.2): only a recently modified file is worth opening. */
	uint64_t age_ns = (uint64_t)(time(NULL) - st.st_mtime) * NS_PER_SEC;
	if ((uint64_t)st.st_size > new_size && age_ns <= agent.writeback_expire_ns) {
		int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd >= 0) {
			victim->dirty_pages = dirty_pages_from(fd, victim->first_page);
			libc_real.close(fd);
		}
	} else if ((uint64_t)st.st_size <= new_size) {
		victim->dirty_pages = 0;
	}
	errno = saved;
}

void io_victim_truncated(const struct io_victim *victim, uint64_t new_size)
{
	(void)new_size;
	if (victim->valid)
		book_cancel(victim->dev, victim->ino, victim->first_page, victim->dirty_pages);
}

void io_truncated_fd(int fd, const struct io_victim *victim, uint64_t new_size)
{
	int saved = errno;
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		of->isize = new_size;
		of->ra.resident_end = of->ra.resident_first;
		of->model_end = of->model_first;
		open_file_release(of);
	}
	io_victim_truncated(victim, new_size);
	errno = saved;
}

static void mark_unlinked(void *ctx, int fd, struct open_file *of)
{
	struct io_victim *victim = ctx;
	(void)fd;
	if (of->dev == victim->dev && of->ino == victim->ino) {
		of->unlinked = true;
		victim->valid = 2;
	}
}

void io_victim_gone(const struct io_victim *victim)
{
	if (!victim->valid)
		return;
	int saved = errno;
	/* While we hold it open the inode lives on, dirty pages and all: its
	 * pages are cancelled at our last close (io_close). */
	struct io_victim probe = *victim;
	open_file_each(mark_unlinked, &probe);
	if (probe.valid == 1)
		book_cancel(victim->dev, victim->ino, 0, victim->dirty_pages);
	errno = saved;
}

int io_close(int fd)
{
	int saved = errno;
	struct io_victim doomed = { 0, 0, 0, 0, 0 };
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		if (of->unlinked && of->refs == 1) {
			/* Our last reference to an unlinked file: closing it
			 * frees the inode and cancels its dirty pages. */
			doomed.valid = 1;
			doomed.dev = of->dev;
			doomed.ino = of->ino;
			doomed.dirty_pages = predicting(DN_PREDICT_WRITE) ? dirty_pages_from(fd, 0) : 0;
		}
		open_file_release(of);
	}
	open_file_forget(fd);
	errno = saved;
	int r = libc_real.close(fd);
	if (doomed.valid) {
		int err = errno;
		book_cancel(doomed.dev, doomed.ino, 0, doomed.dirty_pages);
		errno = err;
	}
	return r;
}

void io_dup(int oldfd, int newfd)
{
	int saved = errno;
	open_file_dup(oldfd, newfd);
	errno = saved;
}

void io_flags_set(int fd, int flags)
{
	int saved = errno;
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		open_file_set_flags(of, flags);
		open_file_release(of);
	}
	errno = saved;
}

void io_seeked(int fd, off_t result)
{
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return;
	if (result >= 0)
		open_file_pos_set(of, (uint64_t)result);
	else
		of->pos_known = false;
	open_file_release(of);
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
			cache_probe_init(&of->probe);
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
			/* force_page_cache_ra: every uncached page of the range. */
			uint64_t first = start >> PAGE_SHIFT, count = pages_of(end) - first;
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

void io_synced_fd(int fd)
{
	int saved = errno;
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		/* fsync returned: every dirty page of the file is on disk. */
		spin_lock(&regions_lock);
		region_table_clean(regions, of->dev, of->ino, 0, UINT64_MAX >> PAGE_SHIFT);
		spin_unlock(&regions_lock);
		open_file_release(of);
	}
	errno = saved;
}

void io_synced_all(void)
{
	spin_lock(&regions_lock);
	region_table_clear(regions);
	spin_unlock(&regions_lock);
}

void io_mapped(int fd, size_t length, int prot)
{
	int saved = errno;
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		open_file_release(of);
		/* Faults on the mapping read through filemap_fault, which we
		 * cannot see: account the mapping so the report shows it. */
		AGENT_COUNT(mmapped_bytes, length);
		agent_trace((prot & PROT_WRITE) ? "mmap-rw" : "mmap", length, 0, 0);
	}
	errno = saved;
}

void io_dir_read(int fd, uint64_t started_ns, long bytes, int64_t measured_bytes)
{
	if (bytes <= 0 || !predicting(DN_PREDICT_CACHE))
		return;
	int saved = errno;
	uint64_t charged = 0;
	if (measured_bytes >= 0) {
		/* getdents64 called directly: the kernel told us (getrusage
		 * ru_inblock around the call) what it read for it. */
		charged = (uint64_t)measured_bytes;
	} else {
		/* readdir: directory blocks live in the block device's cache,
		 * which no syscall lets us query, and glibc refills its buffer
		 * out of sight.  Time the call instead (gray-box, as §4.2 times
		 * probes): a cached refill of 32 KiB of entries stays well
		 * under DIR_SLOW_MIN_NS, a block read from the disk does not. */
		uint64_t slow = agent.seg->probe_threshold_ns * 10;
		if (slow < DIR_SLOW_MIN_NS)
			slow = DIR_SLOW_MIN_NS;
		if (clock_now_ns() - started_ns > slow) {
			struct stat st;
			if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
				charged = pages_of((uint64_t)bytes) << PAGE_SHIFT;
		}
	}
	if (charged) {
		AGENT_COUNT(dir_read_bytes, charged);
		uint64_t delay = throttle_charge(charged, 0);
		agent_trace("getdents", (uint64_t)bytes, charged, delay);
	}
	errno = saved;
}

/* ---- for io_stdio.c ------------------------------------------------- */

void io_charge_read_at(int fd, uint64_t pos, uint64_t count, const char *op)
{
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return;
	uint64_t predicted = predict_read(fd, of, pos, count, NULL);
	of->pos_known = false; /* stdio moves the offset behind our back */
	open_file_release(of);
	uint64_t delay = throttle_charge(predicted, 0);
	AGENT_COUNT(file_read_bytes, count);
	if (predicted || delay)
		agent_trace(op, count, predicted, delay);
}

void io_charge_write_at(int fd, uint64_t pos, uint64_t count, const char *op)
{
	uint64_t rmw = 0;
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return;
	uint64_t predicted = predict_write(fd, of, pos, count, &rmw);
	if (pos + count > of->isize)
		of->isize = pos + count;
	of->pos_known = false;
	open_file_release(of);
	uint64_t delay = throttle_charge(rmw, predicted);
	AGENT_COUNT(file_write_bytes, count);
	if (predicted || delay || rmw)
		agent_trace(op, count, predicted + rmw, delay);
	poll_writeback();
}
