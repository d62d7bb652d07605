/* Description: the readahead model's window sizes, stream ramp-up and predicted pages for known access patterns, against an array-backed page cache. */
/*
 * The totals marked "kernel" were measured by test_readahead_kernel on
 * Linux 6.18, ext4 on virtio (read_ahead_kb 8192, max_sectors_kb 4096,
 * large folios up to order 9): /proc/self/io read_bytes / 4096 for the same
 * reads on a cold 64 MiB file.  They pin the model to what that kernel did.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "graybox/readahead.h"
#include "unit.h"

#define FILE_PAGES  UINT64_C(16384)               /* 64 MiB */
#define FILE_BYTES  (FILE_PAGES << READAHEAD_PAGE_SHIFT)
#define RA_PAGES    2048u                         /* read_ahead_kb 8192  */
#define IO_PAGES    1024u                         /* max_sectors_kb 4096 */
#define FOLIO_ORDER 9u                            /* MAX_PAGECACHE_ORDER */

/* The page cache of one file as an array of flags. */
struct array_cache {
	unsigned char page[FILE_PAGES + 64];
	uint64_t queries;
};

static uint64_t array_count(void *ctx, uint64_t first, uint64_t count)
{
	struct array_cache *a = ctx;
	uint64_t n = 0;

	a->queries++;
	for (uint64_t i = first; i < first + count && i < FILE_PAGES + 64; i++)
		n += a->page[i];
	return n;
}

static void array_mark(void *ctx, uint64_t first, uint64_t count)
{
	struct array_cache *a = ctx;

	for (uint64_t i = first; i < first + count; i++) {
		CHECK(i < FILE_PAGES + 64);
		CHECK(a->page[i] == 0);  /* the model never re-reads a present page */
		a->page[i] = 1;
	}
}

static struct array_cache cache;
static const struct page_cache_view view = { &cache, array_count, array_mark, NULL };

static void cold(struct readahead_state *ra)
{
	memset(&cache, 0, sizeof(cache));
	readahead_init(ra, RA_PAGES, IO_PAGES, FOLIO_ORDER);
}

/* One read as the agent issues it: the fast path first. */
static uint64_t do_read(struct readahead_state *ra, uint64_t pos, uint64_t count, uint64_t isize)
{
	if (readahead_is_hit(ra, pos, count)) {
		readahead_note_hit(ra, pos, count);
		return 0;
	}
	return readahead_predict_read(ra, &view, pos, count, isize, true);
}

static uint64_t read_sequential(struct readahead_state *ra, uint64_t size, uint64_t length)
{
	uint64_t pages = 0;
	for (uint64_t pos = 0; pos < length; pos += size)
		pages += do_read(ra, pos, size < length - pos ? size : length - pos, FILE_BYTES);
	return pages;
}

/* xorshift64, as in test_readahead_kernel (same seed per pattern). */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void test_window_sizes(void)
{
	/* get_init_ra_size(): x4 up to max/32, x2 up to max/4, else max. */
	CHECK_EQ_U64(readahead_init_size(1, 2048), 4);
	CHECK_EQ_U64(readahead_init_size(3, 2048), 16);
	CHECK_EQ_U64(readahead_init_size(32, 2048), 128);
	CHECK_EQ_U64(readahead_init_size(64, 2048), 256);
	CHECK_EQ_U64(readahead_init_size(65, 2048), 256);
	CHECK_EQ_U64(readahead_init_size(256, 2048), 512);
	CHECK_EQ_U64(readahead_init_size(512, 2048), 1024);
	CHECK_EQ_U64(readahead_init_size(513, 2048), 2048);
	CHECK_EQ_U64(readahead_init_size(32, 32), 32);
	/* get_next_ra_size(): x4 below max/16, x2 up to max/2, else max. */
	CHECK_EQ_U64(readahead_next_size(4, 2048), 16);
	CHECK_EQ_U64(readahead_next_size(127, 2048), 508);
	CHECK_EQ_U64(readahead_next_size(128, 2048), 256);
	CHECK_EQ_U64(readahead_next_size(1024, 2048), 2048);
	CHECK_EQ_U64(readahead_next_size(1025, 2048), 2048);
	CHECK_EQ_U64(readahead_next_size(2048, 2048), 2048);
}

/* Cold 128 KiB reads: the windows the kernel's page_cache_ra_order trace
 * showed (the async ones trimmed to the growing folio order). */
static void test_ramp_up(void)
{
	static const struct { uint64_t start, size; } want[] = {
		{ 0, 128 }, { 128, 256 }, { 384, 512 }, { 896, 1024 }, { 1920, 1920 },
		{ 3840, 1280 }, { 5120, 1024 }, { 6144, 2048 }, { 8192, 2048 },
	};
	struct readahead_state ra;
	size_t seen = 0;

	cold(&ra);
	for (uint64_t pos = 0; pos < FILE_BYTES && seen < sizeof(want) / sizeof(want[0]); pos += 128u << 10) {
		do_read(&ra, pos, 128u << 10, FILE_BYTES);
		if (ra.start == want[seen].start) {
			CHECK_EQ_U64(ra.size, want[seen].size);
			seen++;
		}
	}
	CHECK_EQ_U64(seen, sizeof(want) / sizeof(want[0]));
	CHECK_EQ_U64(ra.order, 9);
}

static void test_sequential(void)
{
	struct readahead_state ra;

	/* A whole cold file costs the file, whatever the read size. */
	cold(&ra);
	CHECK_EQ_U64(read_sequential(&ra, 128u << 10, FILE_BYTES), FILE_PAGES);
	cold(&ra);
	CHECK_EQ_U64(read_sequential(&ra, 4096, FILE_BYTES), FILE_PAGES);
	cold(&ra);
	CHECK_EQ_U64(read_sequential(&ra, 16u << 20, FILE_BYTES), FILE_PAGES);
	/* The second pass, on a fresh descriptor, is free. */
	readahead_init(&ra, RA_PAGES, IO_PAGES, FOLIO_ORDER);
	CHECK_EQ_U64(read_sequential(&ra, 128u << 10, FILE_BYTES), 0);
	/* A prefix costs what the readahead ran ahead to (kernel). */
	cold(&ra);
	CHECK_EQ_U64(read_sequential(&ra, 128u << 10, 21u << 20), 8192);
	cold(&ra);
	CHECK_EQ_U64(read_sequential(&ra, 4096, (37u << 20) + 12288), 12288);
	cold(&ra);
	CHECK_EQ_U64(read_sequential(&ra, 1u << 20, 13u << 20), 5632);
	cold(&ra);
	CHECK_EQ_U64(read_sequential(&ra, 5000, 9u << 20), 4096);
}

static void test_random(void)
{
	struct readahead_state ra;

	/* A small random read: exactly the pages asked for, state untouched. */
	cold(&ra);
	do_read(&ra, 0, 1, FILE_BYTES);
	CHECK_EQ_U64(readahead_predict_read(&ra, &view, 1000 * 4096, 4096, FILE_BYTES, true), 1);
	CHECK_EQ_U64(ra.start, 0);
	CHECK_EQ_U64(ra.size, 4);
	CHECK_EQ_U64(readahead_predict_read(&ra, &view, 5000 * 4096 + 100, 4096, FILE_BYTES, true), 2);

	/* 2000 reads, as test_readahead_kernel does them (kernel). */
	for (int unaligned = 0; unaligned < 2; unaligned++) {
		uint64_t s = 0x9e3779b97f4a7c15u, pages = 0;
		cold(&ra);
		for (int i = 0; i < 2000; i++) {
			uint64_t pos = unaligned ? rng_next(&s) % (FILE_BYTES - 4096)
						 : (rng_next(&s) % FILE_PAGES) * 4096;
			pages += do_read(&ra, pos, 4096, FILE_BYTES);
		}
		/* unaligned: history windows and their markers, and the
		 * skewed page_cache_next_miss() of page_cache_async_ra(). */
		CHECK_EQ_U64(pages, unaligned ? 4026 : 1906);
	}
}

static void test_stride_and_streams(void)
{
	struct readahead_state ra;
	uint64_t pages = 0;

	/* One byte every 12 KiB (kernel). */
	cold(&ra);
	for (uint64_t pos = 0; pos < FILE_BYTES; pos += 12288)
		pages += do_read(&ra, pos, 1, FILE_BYTES);
	CHECK_EQ_U64(pages, 5464);

	/* Two streams on one descriptor, 64 KiB turns (kernel): the
	 * page_cache_prev_miss() history keeps both streaming. */
	cold(&ra);
	pages = 0;
	for (uint64_t i = 0; i < 2 * 144; i++)
		pages += do_read(&ra, (i & 1) * (FILE_BYTES / 2) + (i / 2) * 65536, 65536, FILE_BYTES);
	CHECK_EQ_U64(pages, 9152);

	/* Backward 64 KiB reads: no readahead at all. */
	cold(&ra);
	pages = 0;
	for (uint64_t i = 0; i < 128; i++)
		pages += do_read(&ra, FILE_BYTES / 2 - (i + 1) * 65536, 65536, FILE_BYTES);
	CHECK_EQ_U64(pages, 2048);
}

static void test_fadvise(void)
{
	struct readahead_state ra;

	/* RANDOM: force_page_cache_ra(), the request and nothing more ... */
	cold(&ra);
	readahead_advise(&ra, READAHEAD_RANDOM);
	CHECK_EQ_U64(ra.ra_pages, RA_PAGES);
	CHECK_EQ_U64(read_sequential(&ra, 128u << 10, 21u << 20), 5376);
	CHECK_EQ_U64(ra.size, 0);
	/* ... in chunks of max(io_pages, ra_pages), all of a big read. */
	cold(&ra);
	readahead_advise(&ra, READAHEAD_RANDOM);
	CHECK_EQ_U64(do_read(&ra, 4096, 16u << 20, FILE_BYTES), 4096);

	/* SEQUENTIAL: twice the window (kernel). */
	cold(&ra);
	readahead_advise(&ra, READAHEAD_SEQUENTIAL);
	CHECK_EQ_U64(ra.ra_pages, 2 * RA_PAGES);
	CHECK_EQ_U64(read_sequential(&ra, 128u << 10, 21u << 20), 11264);
	readahead_advise(&ra, READAHEAD_NORMAL);
	CHECK_EQ_U64(ra.ra_pages, RA_PAGES);
}

static void test_eof(void)
{
	struct readahead_state ra;
	uint64_t isize = 10 * 4096 + 100;  /* 11 pages */

	cold(&ra);
	CHECK_EQ_U64(readahead_predict_read(&ra, &view, 0, 128u << 10, isize, true), 11);
	CHECK_EQ_U64(cache.page[11], 0);
	CHECK_EQ_U64(ra.prev_pos, isize);
	/* At or past EOF: nothing, and prev_pos stays. */
	CHECK_EQ_U64(readahead_predict_read(&ra, &view, isize, 4096, isize, true), 0);
	CHECK_EQ_U64(ra.prev_pos, isize);
	/* A random read crossing EOF reads only up to the last page. */
	cold(&ra);
	CHECK_EQ_U64(readahead_predict_read(&ra, &view, 8 * 4096, 128u << 10, isize, true), 3);
}

static void test_partially_cached(void)
{
	struct readahead_state ra;

	/* First half cached without markers: the stream starts at the first
	 * hole as a sequential miss (kernel). */
	cold(&ra);
	memset(cache.page, 1, FILE_PAGES / 2);
	CHECK_EQ_U64(read_sequential(&ra, 128u << 10, (48u << 20) + 4096), 6144);

	/* Every other page cached: page 0 is present, so the miss at page 1
	 * is not "start of file"; the history (page 0, cached from the
	 * start) is shorter than the request, so do_page_cache_ra() reads
	 * the rest of the request, skipping the present pages. */
	cold(&ra);
	for (uint64_t i = 0; i < 64; i += 2)
		cache.page[i] = 1;
	CHECK_EQ_U64(readahead_predict_read(&ra, &view, 0, 128u << 10, FILE_BYTES, true), 16);
	CHECK_EQ_U64(ra.size, 0);

	/* Ablation "CacheD": only the requested pages that are missing. */
	cold(&ra);
	cache.page[1] = 1;
	CHECK_EQ_U64(readahead_predict_read(&ra, &view, 0, 4 * 4096, FILE_BYTES, false), 3);
	CHECK_EQ_U64(ra.size, 0);
	CHECK_EQ_U64(ra.prev_pos, UINT64_MAX);
}

static void test_fast_path(void)
{
	struct readahead_state ra;

	/* First 4 KiB read: window [0, 4), PG_readahead on page 1. */
	cold(&ra);
	CHECK_EQ_U64(do_read(&ra, 0, 4096, FILE_BYTES), 4);
	CHECK(readahead_is_hit(&ra, 0, 4096));
	CHECK(readahead_is_hit(&ra, 100, 10));
	CHECK(!readahead_is_hit(&ra, 4096, 1));     /* the marker page */
	CHECK(!readahead_is_hit(&ra, 4000, 200));   /* reaches it */
	CHECK(!readahead_is_hit(&ra, 5 * 4096, 1)); /* not resident */
	CHECK(!readahead_is_hit(&ra, UINT64_MAX - 10, 5));
	CHECK(!readahead_is_hit(&ra, 0, UINT64_MAX));

	/* A streaming 4 KiB reader queries the view only at markers. */
	cold(&ra);
	uint64_t predictions = 0;
	for (uint64_t pos = 0; pos < FILE_BYTES; pos += 4096) {
		if (readahead_is_hit(&ra, pos, 4096)) {
			readahead_note_hit(&ra, pos, 4096);
		} else {
			readahead_predict_read(&ra, &view, pos, 4096, FILE_BYTES, true);
			predictions++;
		}
	}
	CHECK(predictions < 64);
	CHECK_EQ_U64(ra.prev_pos, FILE_BYTES);

	/* Turning the fast path off (resident_end = resident_first). */
	ra.resident_end = ra.resident_first;
	CHECK(!readahead_is_hit(&ra, 0, 1));
}

static void test_no_large_folios(void)
{
	struct readahead_state ra;

	/* Without large folios page_cache_ra_order() falls back to order-0
	 * do_page_cache_ra(): same pages for a whole file, the window ends
	 * still trimmed to 4 pages by the ra->order += 2 of the async path. */
	memset(&cache, 0, sizeof(cache));
	readahead_init(&ra, RA_PAGES, IO_PAGES, 0);
	CHECK_EQ_U64(read_sequential(&ra, 128u << 10, FILE_BYTES), FILE_PAGES);
	CHECK_EQ_U64(ra.order, 0);
	CHECK_EQ_U64(ra.size % 4, 0);
	/* Readahead off (read_ahead_kb 0): one page per missing page. */
	memset(&cache, 0, sizeof(cache));
	readahead_init(&ra, 0, IO_PAGES, FOLIO_ORDER);
	CHECK_EQ_U64(read_sequential(&ra, 128u << 10, 1u << 20), 256);
}

/* Issue #9 §3: a model that meets a stream mid-file (classified when a cap
 * arrives) adopts the kernel's window from the cached run ahead of the
 * reader: its first read predicts the kernel's next window, starting where
 * the cached run ends, and from then on every page the kernel reads. */
static void test_adopt_stream(void)
{
	struct readahead_state kernel, late;
	cold(&kernel);
	uint64_t pos = 20u << 20, size = 64u << 10;
	read_sequential(&kernel, size, pos);   /* the kernel, unwatched */
	uint64_t first = pos >> READAHEAD_PAGE_SHIFT, end = first;
	while (end < FILE_PAGES && cache.page[end])
		end++;
	CHECK(end > first);                    /* it read ahead of the reader */
	uint64_t cached = array_count(&cache, 0, FILE_PAGES);
	readahead_init(&late, RA_PAGES, IO_PAGES, FOLIO_ORDER);
	readahead_adopt_stream(&late, pos, end);
	uint64_t got = do_read(&late, pos, size, FILE_BYTES);
	CHECK(got > 0);                        /* the next window, predicted now */
	CHECK(cache.page[end]);                /* ... and it starts at `end` */
	for (uint64_t p = pos + size; p < FILE_BYTES; p += size)
		got += do_read(&late, p, size, FILE_BYTES);
	CHECK_EQ_U64(got, FILE_PAGES - cached);
	/* Nothing cached ahead: nothing to adopt, a fresh model. */
	readahead_init(&late, RA_PAGES, IO_PAGES, FOLIO_ORDER);
	readahead_adopt_stream(&late, pos, first);
	CHECK_EQ_U64(late.prev_pos, UINT64_MAX);
}

int main(void)
{
	test_adopt_stream();
	test_window_sizes();
	test_ramp_up();
	test_sequential();
	test_random();
	test_stride_and_streams();
	test_fadvise();
	test_eof();
	test_partially_cached();
	test_fast_path();
	test_no_large_folios();
	return 0;
}
