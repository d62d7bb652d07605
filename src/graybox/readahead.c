/*
 * readahead.c - the read-size predictor (DiscNice §4.3, §5.4), emulating
 * the Linux 6.18 buffered read path page by page.
 *
 * The paper emulated only 2.4's synchronous mode and accepted a few percent
 * of error; today's readahead windows reach ra_pages (8 MiB here), so the
 * asynchronous ramp-up decides most of what a stream costs and is emulated
 * too.  Each static function below follows one kernel function; the names
 * in comments are those of mm/filemap.c and mm/readahead.c in 6.18.
 *
 * "Present" means in the page cache, as page_cache_view answers it.  The
 * kernel's pages under readahead I/O are present (locked, not uptodate),
 * which is why every page the model predicts is marked in the view at once.
 *
 * Checked read by read against /proc/self/io on 6.18/ext4 by
 * tests/unit/test_readahead_kernel.c.  What the model cannot see:
 *   - PG_readahead left by other file descriptions (or forgotten after
 *     READAHEAD_MARKERS newer ones): a read landing there starts
 *     page_cache_async_ra() in the kernel and nothing here;
 *   - the sizes of folios it did not create: page_cache_prev_miss() has
 *     the same XArray skew as page_cache_next_miss() when index - 1 is the
 *     tail of a 2..32-page folio, shortening the history by up to 31
 *     pages; modelled only for next_miss, where the folio is the marker's;
 *   - eviction, and large-folio allocation failures (the view shows
 *     their effect on the next call).
 */
#include "graybox/readahead.h"

#include <stddef.h>

#define NO_PAGE UINT64_MAX

/* force_page_cache_ra() reads in 2 MiB chunks. */
#define FORCE_CHUNK_PAGES ((UINT64_C(2) << 20) >> READAHEAD_PAGE_SHIFT)

/* One readahead_predict_read() call: what every helper needs. */
struct ra_call {
	struct readahead_state *ra;
	const struct page_cache_view *view;
	uint64_t eof_pages;   /* pages holding file data: DIV_ROUND_UP(isize) */
	uint64_t pages_read;  /* the prediction                              */
	bool window_filled;   /* page_cache_ra_order() ran in this call       */
};

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

static unsigned ilog2_u64(uint64_t v) { return 63u - (unsigned)__builtin_clzll(v); }

static uint64_t roundup_pow_of_two(uint64_t v)
{
	return v <= 1 ? 1 : UINT64_C(1) << (ilog2_u64(v - 1) + 1);
}

static uint64_t count_present(const struct ra_call *c, uint64_t first, uint64_t n)
{
	return n ? c->view->count_cached(c->view->ctx, first, n) : 0;
}

/* First page in [from, limit) that is not present, or limit.  A binary
 * search over count_cached keeps view queries at O(log n). */
static uint64_t first_missing(const struct ra_call *c, uint64_t from, uint64_t limit)
{
	if (from >= limit || count_present(c, from, limit - from) == limit - from)
		return limit;
	uint64_t lo = from, hi = limit;  /* [from, lo) present; a hole in [lo, hi) */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (count_present(c, lo, mid - lo) == mid - lo)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* First page in [from, limit) that is present, or limit. */
static uint64_t first_present(const struct ra_call *c, uint64_t from, uint64_t limit)
{
	if (from >= limit || count_present(c, from, limit - from) == 0)
		return limit;
	uint64_t lo = from, hi = limit;  /* [from, lo) absent; a page in [lo, hi) */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (count_present(c, lo, mid - lo) == 0)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Last page in [lo, hi) that is not present, or NO_PAGE. */
static uint64_t last_missing(const struct ra_call *c, uint64_t lo, uint64_t hi)
{
	if (lo >= hi || count_present(c, lo, hi - lo) == hi - lo)
		return NO_PAGE;
	while (hi - lo > 1) {  /* a hole in [lo, hi) */
		uint64_t mid = lo + (hi - lo) / 2;
		if (count_present(c, mid, hi - mid) == hi - mid)
			hi = mid;
		else
			lo = mid;
	}
	return lo;
}

static uint64_t marker_first(uint64_t m) { return m >> 4; }
static uint64_t marker_end(uint64_t m) { return (m >> 4) + (UINT64_C(1) << (m & 15)); }

/* Folios added to the page cache and submitted: filemap_add_folio() +
 * read_pages().  A folio created anew carries no stale PG_readahead (the
 * old one was evicted with its flag). */
static void read_in(struct ra_call *c, uint64_t first, uint64_t n)
{
	uint64_t *m = c->ra->markers;

	for (unsigned i = 0; i < READAHEAD_MARKERS; i++)
		if (m[i] != READAHEAD_NO_MARKER && marker_first(m[i]) < first + n &&
		    first < marker_end(m[i]))
			m[i] = READAHEAD_NO_MARKER;
	c->view->mark_cached(c->view->ctx, first, n);
	c->pages_read += c->view->count_disk ? c->view->count_disk(c->view->ctx, first, n) : n;
}

/* folio_set_readahead() on the folio of 2^order pages just added at first:
 * a free slot, else the oldest remembered marker is forgotten. */
static void set_marker(struct readahead_state *ra, uint64_t first, unsigned order)
{
	unsigned slot = ra->marker_next;

	for (unsigned i = 0; i < READAHEAD_MARKERS; i++)
		if (ra->markers[i] == READAHEAD_NO_MARKER) {
			slot = i;
			break;
		}
	if (slot == ra->marker_next)
		ra->marker_next = (slot + 1) % READAHEAD_MARKERS;
	ra->markers[slot] = first << 4 | order;
}

/* The first marker folio (in file order) overlapping [lo, hi), or NULL:
 * filemap_get_read_batch() ends each batch at the first one it meets. */
static uint64_t *find_marker(struct readahead_state *ra, uint64_t lo, uint64_t hi)
{
	uint64_t *found = NULL;

	for (unsigned i = 0; i < READAHEAD_MARKERS; i++) {
		uint64_t *m = &ra->markers[i];
		if (*m != READAHEAD_NO_MARKER && marker_first(*m) < hi && lo < marker_end(*m) &&
		    (!found || *m < *found))
			found = m;
	}
	return found;
}

/* page_cache_ra_unbounded(): order-0 folios for the absent pages of
 * [index, index + nr_to_read); PG_readahead on the page nr_to_read -
 * lookahead_size in, only if that page is newly allocated. */
static void ra_unbounded(struct ra_call *c, uint64_t index, uint64_t nr_to_read,
			 uint64_t lookahead_size)
{
	uint64_t mark = lookahead_size <= nr_to_read ? index + nr_to_read - lookahead_size
						     : NO_PAGE;
	uint64_t end = index + nr_to_read;

	for (uint64_t i = index; i < end;) {
		uint64_t hole = first_missing(c, i, end);
		if (hole == end)
			break;
		uint64_t next = first_present(c, hole, end);
		read_in(c, hole, next - hole);
		if (mark >= hole && mark < next)
			set_marker(c->ra, mark, 0);
		i = next;
	}
}

/* do_page_cache_ra(): clamp to the page holding the last byte. */
static void do_page_cache_ra(struct ra_call *c, uint64_t index, uint64_t nr_to_read,
			     uint64_t lookahead_size)
{
	if (index >= c->eof_pages)
		return;
	nr_to_read = min_u64(nr_to_read, c->eof_pages - index);
	ra_unbounded(c, index, nr_to_read, lookahead_size);
}

/* force_page_cache_ra(): FMODE_RANDOM and readahead-off reads. */
static void force_page_cache_ra(struct ra_call *c, uint64_t index, uint64_t nr_to_read)
{
	const struct readahead_state *ra = c->ra;
	uint64_t max_pages = max_u64(ra->io_pages, ra->ra_pages);

	nr_to_read = min_u64(nr_to_read, max_pages);
	while (nr_to_read) {
		uint64_t chunk = min_u64(FORCE_CHUNK_PAGES, nr_to_read);
		do_page_cache_ra(c, index, chunk, 0);
		index += chunk;  /* ractl->_index moves on past the chunk */
		nr_to_read -= chunk;
	}
}

/* page_cache_ra_order(): the window [ra->start, ra->start + ra->size) in
 * naturally aligned folios of at most ra->order.  Large folios read the
 * same pages as order-0 ones; they move the marker to the start of the
 * folio holding it (round_down in ra_alloc_folio()) and their order feeds
 * the window trimming in page_cache_async_ra(). */
static void page_cache_ra_order(struct ra_call *c)
{
	struct readahead_state *ra = c->ra;
	uint64_t start = ra->start, index = start;

	c->window_filled = true;
	if (ra->max_folio_order == 0 || ra->size == 0) {
		ra->order = 0;
		goto fallback;
	}
	if (start >= c->eof_pages)
		return;  /* the loop below allocates nothing: err stays 0 */

	uint64_t limit = min_u64(c->eof_pages - 1, start + ra->size - 1);
	uint64_t mark = start + ra->size - ra->async_size;
	unsigned new_order = ra->order;
	if (new_order > ra->max_folio_order)
		new_order = ra->max_folio_order;
	if (new_order > ilog2_u64(ra->size))
		new_order = ilog2_u64(ra->size);
	ra->order = new_order;

	while (index <= limit) {
		unsigned order = new_order;
		/* Align with smaller folios if needed (index is never 0 here
		 * when unaligned). */
		if (index & ((UINT64_C(1) << order) - 1))
			order = (unsigned)__builtin_ctzll(index);
		/* Don't allocate folios past EOF (or past the window). */
		while (order > 0 && index + (UINT64_C(1) << order) - 1 > limit)
			order--;
		uint64_t n = UINT64_C(1) << order;
		/* filemap_add_folio() fails with -EEXIST on any present page
		 * in the range: stop, and let the order-0 code fill the gaps. */
		if (count_present(c, index, n) != 0)
			goto fallback;
		read_in(c, index, n);
		if (index == (mark & ~(n - 1)))
			set_marker(ra, index, order);
		index += n;
	}
	return;
fallback:
	if (ra->size > index - start)
		do_page_cache_ra(c, index, ra->size - (index - start), ra->async_size);
}

/* ractl_max_pages(): an oversized request may use up to bdi->io_pages. */
static uint64_t ractl_max_pages(const struct readahead_state *ra, uint64_t req_size)
{
	uint64_t max_pages = ra->ra_pages;

	if (req_size > max_pages && ra->io_pages > max_pages)
		max_pages = min_u64(req_size, ra->io_pages);
	return max_pages;
}

uint64_t readahead_init_size(uint64_t request_pages, uint64_t max_pages)
{
	/* get_init_ra_size() */
	uint64_t newsize = roundup_pow_of_two(request_pages);

	if (newsize <= max_pages / 32)
		return newsize * 4;
	if (newsize <= max_pages / 4)
		return newsize * 2;
	return max_pages;
}

uint64_t readahead_next_size(uint64_t cur_pages, uint64_t max_pages)
{
	/* get_next_ra_size() */
	if (cur_pages < max_pages / 16)
		return 4 * cur_pages;
	if (cur_pages <= max_pages / 2)
		return 2 * cur_pages;
	return max_pages;
}

/* page_cache_sync_ra(): page index is missing; req_count pages remain in
 * the read (last_index - index, not clamped to EOF). */
static void page_cache_sync_ra(struct ra_call *c, uint64_t index, uint64_t req_count)
{
	struct readahead_state *ra = c->ra;
	bool forced = ra->advice == READAHEAD_RANDOM;

	if (ra->ra_pages == 0) {
		req_count = 1;
		forced = true;
	}
	if (forced) {
		force_page_cache_ra(c, index, req_count);
		return;
	}

	uint64_t max_pages = ractl_max_pages(ra, req_count);
	uint64_t prev_index = ra->prev_pos >> READAHEAD_PAGE_SHIFT;

	/* Start of file, oversized read, or sequential miss (unsigned
	 * arithmetic, as in the kernel: a backward step is not sequential). */
	if (!index || req_count > max_pages || index - prev_index <= 1) {
		ra->start = index;
		ra->size = readahead_init_size(req_count, max_pages);
		ra->async_size = ra->size > req_count ? ra->size - req_count : ra->size >> 1;
		goto readit;
	}

	/* page_cache_prev_miss(mapping, index - 1, max_pages): the cached
	 * history a sequential stream would leave behind. */
	uint64_t scan = min_u64(max_pages, index);
	uint64_t miss = last_missing(c, index - scan, index);
	bool from_start = false;
	uint64_t contig_count;
	if (miss != NO_PAGE) {
		contig_count = index - miss - 1;
	} else if (scan == index) {
		contig_count = index;  /* miss wrapped to ULONG_MAX */
		from_start = true;
	} else {
		contig_count = max_pages;
	}
	/* Standalone, small random read: read as is, state untouched. */
	if (contig_count <= req_count) {
		do_page_cache_ra(c, index, req_count, 0);
		return;
	}
	if (from_start)
		contig_count *= 2;
	ra->start = index;
	ra->size = min_u64(contig_count + req_count, max_pages);
	ra->async_size = 1;
readit:
	ra->order = 0;
	page_cache_ra_order(c);
}

/* page_cache_next_miss(mapping, index, max_scan) as the XArray walks it.
 * When index is inside a folio of 2..32 pages (its head is index - 1:
 * the caller passes the page after a marker folio's head), xas_load()
 * leaves xa_offset on the head slot, and xas_next() then advances index
 * and offset together: every slot is reported one index too high, until
 * the walk leaves the 64-slot XArray node, re-syncs, and so skips the
 * first slot of the next node.  Measured on 6.18: a hole at page h right
 * after such a window makes page_cache_async_ra() start at h + 1 and
 * leave h for a later synchronous read.  Larger folios live in upper
 * nodes without the skew. */
static uint64_t page_cache_next_miss(const struct ra_call *c, uint64_t index,
				     uint64_t folio_pages, uint64_t max_scan)
{
	uint64_t lag = folio_pages > 1 && folio_pages < 64 ? 1 : 0;

	if (lag == 0)
		return first_missing(c, index, index + max_scan);  /* index + max_scan: no gap */
	uint64_t slot = index - lag;
	uint64_t node_end = (slot | 63) + 1;
	uint64_t skewed = min_u64(max_scan, node_end - slot);
	uint64_t hole = first_missing(c, slot, slot + skewed);
	if (hole < slot + skewed || skewed == max_scan)
		return hole + lag;
	uint64_t resume = node_end + lag;
	return first_missing(c, resume, resume + (max_scan - skewed));
}

/* page_cache_async_ra(): the folio [index, index + folio_pages) carried
 * PG_readahead (already cleared by the caller). */
static void page_cache_async_ra(struct ra_call *c, uint64_t index, uint64_t folio_pages,
				uint64_t req_count)
{
	struct readahead_state *ra = c->ra;

	if (ra->ra_pages == 0)
		return;

	uint64_t max_pages = ractl_max_pages(ra, req_count);
	uint64_t expected = (ra->start + ra->size - ra->async_size) & ~(folio_pages - 1);

	if (index == expected) {
		/* The expected callback: push the window forward. */
		ra->start += ra->size;
		ra->size = max_u64(ra->size, readahead_next_size(ra->size, max_pages));
	} else {
		/* A marker without matching state (interleaved streams):
		 * page_cache_next_miss(mapping, index + 1, max_pages) tells
		 * how far the old window went. */
		uint64_t start = page_cache_next_miss(c, index + 1, folio_pages, max_pages);
		if (start - index > max_pages)
			return;
		ra->start = start;
		ra->size = readahead_next_size(start - index + req_count, max_pages);
	}
	/* readit: trim the end to the folio order about to be used. */
	ra->order += 2;
	unsigned align_order = (unsigned)__builtin_ctzll(max_pages);
	if (ra->order < align_order)
		align_order = ra->order;
	uint64_t end = ra->start + ra->size;
	uint64_t aligned_end = end & ~((UINT64_C(1) << align_order) - 1);
	if (aligned_end > ra->start)
		ra->size -= end - aligned_end;
	ra->async_size = ra->size;
	page_cache_ra_order(c);
}

void readahead_init(struct readahead_state *ra, uint32_t bdi_ra_pages, uint32_t io_pages,
		    uint32_t max_folio_order)
{
	/* file_ra_state_init(): ra_pages from the bdi, prev_pos = -1. */
	*ra = (struct readahead_state){
		.prev_pos = UINT64_MAX,
		.ra_pages = bdi_ra_pages,
		.bdi_ra_pages = bdi_ra_pages,
		.io_pages = io_pages,
		.max_folio_order = max_folio_order,
		.advice = READAHEAD_NORMAL,
	};
	for (unsigned i = 0; i < READAHEAD_MARKERS; i++)
		ra->markers[i] = READAHEAD_NO_MARKER;
}

void readahead_adopt_stream(struct readahead_state *ra, uint64_t pos, uint64_t cached_end)
{
	uint64_t first = pos >> READAHEAD_PAGE_SHIFT;
	if (cached_end <= first || ra->advice == READAHEAD_RANDOM)
		return;
	ra->start = first;
	ra->size = min_u64(cached_end - first, max_u64(ra->ra_pages, 1));
	ra->async_size = ra->size;
	ra->prev_pos = pos ? pos - 1 : UINT64_MAX;
	set_marker(ra, first, 0);
	ra->resident_end = ra->resident_first; /* the fast path would skip the marker */
}

void readahead_advise(struct readahead_state *ra, enum readahead_advice advice)
{
	/* generic_fadvise(): RANDOM only sets FMODE_RANDOM and keeps ra_pages;
	 * NORMAL and SEQUENTIAL clear it and set ra_pages. */
	switch (advice) {
	case READAHEAD_NORMAL:
		ra->ra_pages = ra->bdi_ra_pages;
		break;
	case READAHEAD_SEQUENTIAL:
		ra->ra_pages = ra->bdi_ra_pages * 2;
		break;
	case READAHEAD_RANDOM:
		break;
	}
	ra->advice = advice;
}

bool readahead_is_hit(const struct readahead_state *ra, uint64_t pos, uint64_t count)
{
	/* The resident range holds no known marker (readahead_predict_read()
	 * clips it), so containment is the whole test; an empty read is
	 * contained anywhere in it. */
	uint64_t lo = ra->resident_first << READAHEAD_PAGE_SHIFT;
	uint64_t hi = ra->resident_end << READAHEAD_PAGE_SHIFT;

	return pos >= lo && pos < hi && count <= hi - pos;
}

void readahead_note_hit(struct readahead_state *ra, uint64_t pos, uint64_t count)
{
	/* filemap_read(): prev_pos = the position after the last byte copied;
	 * a read at or past EOF leaves it alone. */
	if (count == 0 || pos >= ra->isize)
		return;
	ra->prev_pos = min_u64(pos + count, ra->isize);
}

uint64_t readahead_predict_read(struct readahead_state *ra, const struct page_cache_view *view,
				uint64_t pos, uint64_t count, uint64_t isize, bool use_readahead)
{
	struct ra_call c = {
		.ra = ra,
		.view = view,
		.eof_pages = (isize >> READAHEAD_PAGE_SHIFT) + ((isize & (READAHEAD_PAGE_SIZE - 1)) != 0),
	};

	ra->isize = isize;
	if (count == 0 || pos >= isize)
		return 0;  /* filemap_read() returns before touching anything */
	/* rw_verify_area() caps one read at MAX_RW_COUNT (INT_MAX & PAGE_MASK),
	 * which also keeps pos + count from overflowing. */
	count = min_u64(count, UINT64_C(0x7ffff000));
	/* "last_index" is the index of the page beyond the end of the read:
	 * req_count is measured to it even past EOF. */
	uint64_t first = pos >> READAHEAD_PAGE_SHIFT;
	uint64_t last_index = (pos + count + READAHEAD_PAGE_SIZE - 1) >> READAHEAD_PAGE_SHIFT;
	uint64_t end = min_u64(last_index, c.eof_pages);

	if (!use_readahead) {
		/* Ablation "CacheD": the requested uncached pages only. */
		for (uint64_t i = first; i < end;) {
			uint64_t hole = first_missing(&c, i, end);
			if (hole == end)
				break;
			uint64_t next = first_present(&c, hole, end);
			view->mark_cached(view->ctx, hole, next - hole);
			c.pages_read += next - hole;
			i = next;
		}
		return c.pages_read;
	}

	/* filemap_read() -> filemap_get_pages(), folio batch by folio batch:
	 * a missing page starts page_cache_sync_ra(); a batch always ends at
	 * (and includes) a folio with PG_readahead, which starts
	 * page_cache_async_ra() with req_count from that folio. */
	for (uint64_t index = first; index < end;) {
		if (count_present(&c, index, 1) == 0) {
			page_cache_sync_ra(&c, index, last_index - index);
			if (count_present(&c, index, 1) == 0)
				read_in(&c, index, 1);  /* filemap_create_folio() */
		}
		uint64_t run_end = first_missing(&c, index, end);
		uint64_t *m = find_marker(ra, index, run_end);
		if (m) {
			uint64_t folio = marker_first(*m), pages = marker_end(*m) - folio;
			*m = READAHEAD_NO_MARKER;  /* folio_clear_readahead() */
			page_cache_async_ra(&c, folio, pages, last_index - folio);
			index = max_u64(index, folio + pages);
			continue;
		}
		index = run_end;
	}
	ra->prev_pos = min_u64(pos + count, isize);

	/* Fast path: the pages of this read are now resident.  So is a
	 * window filled in this call (each of its pages was present or read),
	 * and one view query tells whether the pages from here to the end of
	 * the current window are too: for a stream, the rest of the previous
	 * window and the one just submitted (at most two windows, which bounds
	 * the cost of the query).  Then a sequential reader asks the view
	 * once per window, at its marker. */
	uint64_t resident_end = end;
	uint64_t window_end = min_u64(ra->start + ra->size, c.eof_pages);
	if (c.window_filled && ra->start <= end && window_end > end)
		resident_end = window_end;
	else if (window_end > end && window_end - end <= 2 * (uint64_t)ra->ra_pages &&
		 count_present(&c, end, window_end - end) == window_end - end)
		resident_end = window_end;
	/* ... up to the first marker folio the model knows of. */
	uint64_t *m = find_marker(ra, first, resident_end);
	if (m)
		resident_end = marker_first(*m) > first ? marker_first(*m) : first;
	ra->resident_first = first;
	ra->resident_end = resident_end;
	return c.pages_read;
}
