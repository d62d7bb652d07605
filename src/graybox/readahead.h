/*
 * readahead.h - the read-size predictor (DiscNice §4.3, §5.4): which pages
 * will the kernel read from disk for one read(2) of a regular file?
 *
 * It emulates today's Linux page-cache read path, mm/filemap.c
 * filemap_read()/filemap_get_pages() and mm/readahead.c:
 *   - block (page) rounding of the requested range;
 *   - page_cache_sync_ra(): initial window get_init_ra_size(), the
 *     sequential test (index - prev_index <= 1), the page-cache history test
 *     page_cache_prev_miss() for interleaved streams, small random reads;
 *   - page_cache_async_ra(): the PG_readahead marker, get_next_ra_size();
 *   - force_page_cache_ra() for POSIX_FADV_RANDOM (FMODE_RANDOM) and the
 *     doubled window of POSIX_FADV_SEQUENTIAL;
 *   - ractl_max_pages() (io_pages for oversized requests);
 *   - the clamp at EOF; pages already cached are skipped, not re-read;
 *   - large folios (page_cache_ra_order) where the mapping supports them.
 * State is kept per open file description, like struct file_ra_state.
 *
 * Pure logic: no I/O, no globals.  The page cache is seen only through the
 * page_cache_view the caller passes (backed by cachestat/mincore/probes in
 * the agent, by an array in the unit tests).  The model records the pages
 * it predicts the kernel brings in into the view (view->mark_cached) so a
 * second call sees them resident, as the kernel would.
 */
#ifndef DISCNICE_READAHEAD_H
#define DISCNICE_READAHEAD_H

#include <stdbool.h>
#include <stdint.h>

#define READAHEAD_PAGE_SHIFT 12
#define READAHEAD_PAGE_SIZE  (UINT64_C(1) << READAHEAD_PAGE_SHIFT)

struct page_cache_view {
	void *ctx;
	/* How many of pages [first, first + count) are in the page cache,
	 * counting pages still under readahead I/O, as cachestat(2) does
	 * (mincore(2) reports only uptodate pages, so right after an
	 * asynchronous readahead it under-reports and the model would
	 * predict those pages again). */
	uint64_t (*count_cached)(void *ctx, uint64_t first, uint64_t count);
	/* The model predicts the kernel reads pages [first, first + count)
	 * in: the view should answer "cached" for them from now on. */
	void (*mark_cached)(void *ctx, uint64_t first, uint64_t count);
	/* Optional: of pages [first, first + count) the kernel reads in, how
	 * many cost disk I/O - not the holes of a sparse file, which the
	 * filesystem zero-fills without a bio (graybox/extent_map.h).  The
	 * model's windows and markers run through holes as through data;
	 * only its count of disk pages leaves them out.  NULL: all of them. */
	uint64_t (*count_disk)(void *ctx, uint64_t first, uint64_t count);
};

enum readahead_advice {
	READAHEAD_NORMAL = 0,     /* POSIX_FADV_NORMAL                         */
	READAHEAD_RANDOM = 1,     /* POSIX_FADV_RANDOM: FMODE_RANDOM, no window */
	READAHEAD_SEQUENTIAL = 2, /* POSIX_FADV_SEQUENTIAL: ra_pages doubled    */
};

/* Folios carrying PG_readahead.  The flag lives in the page cache, not in
 * file_ra_state, so one stream leaves several behind (every history-sized
 * window of a random reader sets one, and a read landing on it much later
 * starts page_cache_async_ra()).  The model remembers the newest
 * READAHEAD_MARKERS it set, each packed as (first page << 4) | folio order;
 * READAHEAD_NO_MARKER marks a free slot. */
#define READAHEAD_MARKERS 64
#define READAHEAD_NO_MARKER UINT64_MAX

/* Mirrors struct file_ra_state plus what the model needs to know about
 * the device and the mapping.  All sizes in pages. */
struct readahead_state {
	uint64_t start;         /* ra->start                                */
	uint64_t size;          /* ra->size                                 */
	uint64_t async_size;    /* ra->async_size                           */
	uint64_t prev_pos;      /* ra->prev_pos in bytes; UINT64_MAX = none */
	uint64_t isize;         /* i_size at the last prediction (bytes)    */
	uint32_t order;         /* ra->order (large folios)                 */
	uint32_t ra_pages;      /* file's ra_pages (after fadvise)          */
	uint32_t bdi_ra_pages;  /* device read_ahead_kb / 4                 */
	uint32_t io_pages;      /* device max_sectors_kb / 4 (bdi->io_pages) */
	uint32_t max_folio_order; /* mapping_max_folio_order(); 0 = no large
				   * folios (page_cache_ra_order() falls
				   * back to order-0 do_page_cache_ra()).
				   * ext4 on x86-64: 9 (MAX_PAGECACHE_ORDER) */
	uint32_t advice;        /* enum readahead_advice                    */
	/* Fast path: pages known resident since the last prediction,
	 * [resident_first, resident_end), holding no marker the model knows
	 * of: a read inside it needs no view query.  Setting resident_end =
	 * resident_first turns the fast path off until the next prediction. */
	uint64_t resident_first;
	uint64_t resident_end;
	uint32_t marker_next;   /* slot the next marker replaces (FIFO)      */
	uint64_t markers[READAHEAD_MARKERS];
};

/* Fresh state for a newly opened file (file_ra_state_init). */
void readahead_init(struct readahead_state *ra, uint32_t bdi_ra_pages, uint32_t io_pages,
		    uint32_t max_folio_order);

/* A stream the model did not see begin (an fd classified mid-file: an
 * inherited one, or one opened while no cap was set, issue #9 §3).  The
 * kernel has read ahead of the reader up to page cached_end (the end of
 * the cached run from the reader's page, which the caller measured); its
 * PG_readahead marker is somewhere in [pos page, cached_end).  Assume the
 * earliest: the reader's page, with the window [pos page, cached_end) as
 * the current one.  The model's next window then starts at cached_end,
 * where the kernel's next one starts, and is predicted before the kernel
 * asks for it.  Nothing when nothing is cached ahead. */
void readahead_adopt_stream(struct readahead_state *ra, uint64_t pos, uint64_t cached_end);

/* posix_fadvise(fd, ..., advice) on the whole file. */
void readahead_advise(struct readahead_state *ra, enum readahead_advice advice);

/* Cheap test (two compares), no view query: true when a read of
 * [pos, pos + count) is served from pages the model knows resident and
 * touches no readahead marker.  The caller must still call
 * readahead_note_hit() so prev_pos follows the stream. */
bool readahead_is_hit(const struct readahead_state *ra, uint64_t pos, uint64_t count);
void readahead_note_hit(struct readahead_state *ra, uint64_t pos, uint64_t count);

/* Predict the pages the kernel reads from disk for read(pos, count) on a
 * file of isize bytes, and advance the state as the kernel would.
 * Returns the number of pages that will be read (not bytes).
 * With use_readahead false (ablation "CacheD"), only the requested
 * uncached pages are counted and the state is not advanced. */
uint64_t readahead_predict_read(struct readahead_state *ra, const struct page_cache_view *view,
				uint64_t pos, uint64_t count, uint64_t isize, bool use_readahead);

/* The kernel helpers, exposed for unit tests. */
uint64_t readahead_init_size(uint64_t request_pages, uint64_t max_pages);   /* get_init_ra_size */
uint64_t readahead_next_size(uint64_t cur_pages, uint64_t max_pages);       /* get_next_ra_size */

#endif
