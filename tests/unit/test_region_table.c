/* Description: update-region table (DiscNice §4.4, §5.2, Figs 7-8): dirty pages counted once, cleaned, truncated, expired; sparse and fast for appends. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "unit.h"
#include "graybox/region_table.h"

#define DEV 0x803u
#define INO 4242u

static double seconds_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Fig. 7/8: write 4 KiB to a new file (one page dirtied), then update 2 KiB
 * of it: the page is already dirty, so no new disk write is predicted. */
static void test_fig7_rewrite_is_free(void)
{
	struct region_table *t = region_table_new(NULL);
	CHECK(t);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 0, 1, 100), 1);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 0, 1, 200), 0); /* 2 KiB at 0 */
	CHECK_EQ_U64(region_table_file_pages(t, DEV, INO), 1);
	CHECK_EQ_U64(region_table_total_pages(t), 1);
	/* Same inode number on another device is another file. */
	CHECK_EQ_U64(region_table_dirty(t, DEV + 1, INO, 0, 1, 200), 1);
	CHECK_EQ_U64(region_table_total_pages(t), 2);
	/* A range that overlaps dirty pages counts only the new ones, across
	 * chunk boundaries (pages 60..70 span two 64-page chunks). */
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 60, 11, 300), 11);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 55, 20, 300), 9);
	CHECK(region_table_is_dirty(t, DEV, INO, 63) && region_table_is_dirty(t, DEV, INO, 64));
	CHECK(!region_table_is_dirty(t, DEV, INO, 54) && !region_table_is_dirty(t, DEV, INO, 75));
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 10, 0, 300), 0);
	region_table_free(t);
}

/* Once written back, a page is clean: writing it again dirties it again. */
static void test_rewrite_after_clean_counts_again(void)
{
	struct region_table *t = region_table_new(NULL);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 0, 128, 1), 128);
	CHECK_EQ_U64(region_table_clean(t, DEV, INO, 0, 64), 64);
	CHECK_EQ_U64(region_table_clean(t, DEV, INO, 0, 64), 0);
	CHECK_EQ_U64(region_table_file_pages(t, DEV, INO), 64);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 0, 128, 2), 64);
	/* A clean range bigger than the dirty state, and one reaching the end
	 * of the page space, take the other path. */
	CHECK_EQ_U64(region_table_clean(t, DEV, INO, 100, UINT64_MAX), 28);
	CHECK_EQ_U64(region_table_clean(t, DEV, INO, 0, 1u << 30), 100);
	CHECK_EQ_U64(region_table_file_pages(t, DEV, INO), 0);
	CHECK_EQ_U64(region_table_total_pages(t), 0);
	CHECK_EQ_U64(region_table_clean(t, DEV, INO, 0, 1), 0);
	region_table_free(t);
}

static int count_files(void *ctx, uint64_t dev, uint64_t ino, uint64_t pages)
{
	(void)dev;
	(void)ino;
	uint64_t *sum = ctx;
	sum[0]++;
	sum[1] += pages;
	return 0;
}

static int stop_at_first(void *ctx, uint64_t dev, uint64_t ino, uint64_t pages)
{
	(void)dev;
	(void)ino;
	(void)pages;
	(*(int *)ctx)++;
	return 1;
}

/* Truncation and unlink cancel dirty pages (cancelled_write_bytes,
 * folio_account_cleaned): the table returns how many. */
static void test_truncate_and_forget(void)
{
	struct region_table *t = region_table_new(NULL);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 0, 100, 1), 100);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO + 1, 0, 10, 1), 10);
	CHECK_EQ_U64(region_table_truncate(t, DEV, INO, 50), 50);
	CHECK_EQ_U64(region_table_file_pages(t, DEV, INO), 50);
	CHECK(region_table_is_dirty(t, DEV, INO, 49) && !region_table_is_dirty(t, DEV, INO, 50));
	CHECK_EQ_U64(region_table_truncate(t, DEV, INO, 50), 0);
	CHECK_EQ_U64(region_table_truncate(t, DEV, INO, 1000), 0);

	uint64_t sum[2] = { 0, 0 };
	region_table_each_file(t, count_files, sum);
	CHECK_EQ_U64(sum[0], 2);
	CHECK_EQ_U64(sum[1], 60);
	int calls = 0;
	region_table_each_file(t, stop_at_first, &calls);
	CHECK_EQ_U64(calls, 1);

	CHECK_EQ_U64(region_table_forget(t, DEV, INO), 50);
	CHECK_EQ_U64(region_table_forget(t, DEV, INO), 0);
	CHECK_EQ_U64(region_table_file_pages(t, DEV, INO), 0);
	sum[0] = sum[1] = 0;
	region_table_each_file(t, count_files, sum);
	CHECK_EQ_U64(sum[0], 1); /* files without dirty pages are not visited */
	CHECK_EQ_U64(sum[1], 10);
	CHECK_EQ_U64(region_table_total_pages(t), 10);

	region_table_clear(t);
	CHECK_EQ_U64(region_table_total_pages(t), 0);
	CHECK_EQ_U64(region_table_forget(t, DEV, INO + 1), 0);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO + 1, 0, 10, 1), 10);
	region_table_free(t);
	region_table_free(NULL);
}

/* A page at 1 TiB, and one near the end of a 64-bit file, each cost one small
 * node: with a flat array (the prototype's wpos, §5.2) this would need
 * gigabytes, which ASan would refuse and the clock would show. */
static void test_sparse_huge_offsets(void)
{
	struct region_table *t = region_table_new(NULL);
	double start = seconds_now();
	uint64_t tib_page = (UINT64_C(1) << 40) / 4096;
	uint64_t last_page = UINT64_MAX / 4096;
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, tib_page, 1, 1), 1);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, last_page, 1, 1), 1);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, UINT64_MAX - 1, 5, 1), 1); /* clipped */
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 0, 1, 1), 1);
	CHECK(region_table_is_dirty(t, DEV, INO, tib_page));
	CHECK(!region_table_is_dirty(t, DEV, INO, tib_page - 1));
	CHECK(!region_table_is_dirty(t, DEV, INO, tib_page + 1));
	CHECK_EQ_U64(region_table_file_pages(t, DEV, INO), 4);
	CHECK_EQ_U64(region_table_truncate(t, DEV, INO, tib_page), 3);
	CHECK_EQ_U64(region_table_file_pages(t, DEV, INO), 1);
	CHECK(seconds_now() - start < 0.5);
	region_table_free(t);
}

/* Periodic writeback (dirty_expire_centisecs) cleans pages dirtied at or
 * before the cutoff; expiry is per 64-page chunk, by its newest page. */
static void test_expire_by_time(void)
{
	struct region_table *t = region_table_new(NULL);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 0, 10, 1000), 10);     /* chunk 0 */
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 64, 5, 2000), 5);      /* chunk 1 */
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO + 1, 0, 3, 3000), 3);
	CHECK_EQ_U64(region_table_expire(t, 999), 0);
	CHECK_EQ_U64(region_table_expire(t, 1000), 10);
	CHECK(!region_table_is_dirty(t, DEV, INO, 0) && region_table_is_dirty(t, DEV, INO, 64));
	/* Rewriting a dirty page does not make it younger (the kernel does not
	 * re-dirty it); dirtying a new page of the chunk does. */
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 64, 1, 2500), 0);
	CHECK_EQ_U64(region_table_expire(t, 2000), 5);
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO + 1, 3, 1, 4000), 1);
	CHECK_EQ_U64(region_table_expire(t, 3500), 0);
	CHECK_EQ_U64(region_table_expire(t, 4000), 4);
	CHECK_EQ_U64(region_table_total_pages(t), 0);
	region_table_free(t);
}

/* A 1 GiB file written in 4 KiB appends: 262144 calls, each O(1). */
static void test_sequential_appends_are_fast(void)
{
	struct region_table *t = region_table_new(NULL);
	double start = seconds_now();
	for (uint64_t page = 0; page < 262144; page++) {
		CHECK_EQ_U64(region_table_dirty(t, DEV, INO, page, 1, page), 1);
		/* the same page again, as a partial-page append would */
		CHECK_EQ_U64(region_table_dirty(t, DEV, INO, page, 1, page), 0);
	}
	double elapsed = seconds_now() - start;
	CHECK_EQ_U64(region_table_total_pages(t), 262144);
	/* A quadratic table would take minutes; the bound is loose on purpose. */
	if (elapsed > 1.0) {
		fprintf(stderr, "262144 appends took %.3f s\n", elapsed);
		exit(1);
	}
	CHECK_EQ_U64(region_table_expire(t, 131071), 131072);
	CHECK_EQ_U64(region_table_forget(t, DEV, INO), 131072);
	region_table_free(t);
}

/* Random operations against a plain bitmap (the prototype's wpos array). */
static void test_against_a_flat_bitmap(void)
{
	enum { FILES = 3, PAGES = 700, ROUNDS = 20000 };
	static unsigned char model[FILES][PAGES];
	memset(model, 0, sizeof(model));
	struct region_table *t = region_table_new(NULL);
	uint64_t seed = 0x9e3779b97f4a7c15u;
	for (int round = 0; round < ROUNDS; round++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		unsigned f = (unsigned)(seed % FILES);
		unsigned first = (unsigned)((seed >> 8) % PAGES);
		unsigned count = (unsigned)((seed >> 24) % 150);
		if (first + count > PAGES)
			count = PAGES - first;
		uint64_t want = 0;
		switch ((seed >> 40) % 8) {
		case 0: case 1: case 2: case 3:
			for (unsigned p = first; p < first + count; p++)
				if (!model[f][p]) {
					model[f][p] = 1;
					want++;
				}
			CHECK_EQ_U64(region_table_dirty(t, DEV, f, first, count, (uint64_t)round), want);
			break;
		case 4: case 5:
			for (unsigned p = first; p < first + count; p++)
				if (model[f][p]) {
					model[f][p] = 0;
					want++;
				}
			CHECK_EQ_U64(region_table_clean(t, DEV, f, first, count), want);
			break;
		case 6:
			for (unsigned p = first; p < PAGES; p++)
				if (model[f][p]) {
					model[f][p] = 0;
					want++;
				}
			CHECK_EQ_U64(region_table_truncate(t, DEV, f, first), want);
			break;
		default:
			for (unsigned p = 0; p < PAGES; p++)
				if (model[f][p]) {
					model[f][p] = 0;
					want++;
				}
			CHECK_EQ_U64(region_table_forget(t, DEV, f), want);
			break;
		}
		uint64_t total = 0;
		for (unsigned g = 0; g < FILES; g++) {
			uint64_t pages = 0;
			for (unsigned p = 0; p < PAGES; p++)
				pages += model[g][p];
			CHECK_EQ_U64(region_table_file_pages(t, DEV, g), pages);
			total += pages;
		}
		CHECK_EQ_U64(region_table_total_pages(t), total);
		unsigned p = (unsigned)((seed >> 48) % PAGES);
		CHECK_EQ_U64(region_table_is_dirty(t, DEV, f, p), model[f][p]);
	}
	region_table_free(t);
}

/* Many files: the file hash grows and every file stays reachable. */
static void test_many_files(void)
{
	struct region_table *t = region_table_new(NULL);
	for (uint64_t ino = 0; ino < 5000; ino++)
		CHECK_EQ_U64(region_table_dirty(t, DEV, ino, ino * 1000, 2, 1), 2);
	for (uint64_t ino = 0; ino < 5000; ino++)
		CHECK(region_table_is_dirty(t, DEV, ino, ino * 1000 + 1));
	uint64_t sum[2] = { 0, 0 };
	region_table_each_file(t, count_files, sum);
	CHECK_EQ_U64(sum[0], 5000);
	CHECK_EQ_U64(sum[1], 10000);
	CHECK_EQ_U64(region_table_expire(t, 1), 10000);
	region_table_free(t);
}

/* The caller's allocator (the agent's is an mmap pool that is safe in a
 * signal handler): every block goes back with the size it was taken with,
 * nothing is left over, and a failing allocator records nothing and says
 * -ENOMEM (the caller then counts the whole write). */
struct counting_memory {
	long long blocks, bytes;
	int fail_after; /* -1: never */
	int bad_release;
};

static void *counting_alloc(void *ctx, size_t bytes)
{
	struct counting_memory *m = ctx;
	if (m->fail_after == 0)
		return NULL;
	if (m->fail_after > 0)
		m->fail_after--;
	size_t *p = calloc(1, bytes + 16);
	if (!p)
		return NULL;
	p[0] = bytes;
	m->blocks++;
	m->bytes += (long long)bytes;
	return (char *)p + 16;
}

static void counting_release(void *ctx, void *p, size_t bytes)
{
	struct counting_memory *m = ctx;
	size_t *base = (size_t *)((char *)p - 16);
	if (base[0] != bytes)
		m->bad_release++;
	m->blocks--;
	m->bytes -= (long long)base[0];
	free(base);
}

static void test_caller_memory(void)
{
	struct counting_memory m = { 0, 0, -1, 0 };
	const struct region_memory memory = { counting_alloc, counting_release, &m };
	struct region_table *t = region_table_new(&memory);
	CHECK(t != NULL);
	for (uint64_t ino = 0; ino < 300; ino++)
		CHECK_EQ_U64(region_table_dirty(t, DEV, ino, ino * 4096, 200, 1), 200);
	CHECK(m.blocks > 300);
	CHECK_EQ_U64(region_table_truncate(t, DEV, 7, 0), 200);
	CHECK_EQ_U64(region_table_clean(t, DEV, 8, 0, UINT64_MAX >> 12), 200);
	CHECK_EQ_U64(region_table_expire(t, 1), 298 * 200);
	CHECK_EQ_U64(region_table_dirty(t, DEV, 1, 0, 64 * 100, 2), 6400);
	region_table_free(t);
	CHECK_EQ_U64(m.blocks, 0);
	CHECK_EQ_U64(m.bytes, 0);
	CHECK_EQ_U64(m.bad_release, 0);

	m.fail_after = 3;
	t = region_table_new(&memory);
	CHECK(t != NULL);
	CHECK(region_table_dirty(t, DEV, INO, 0, 64 * 10, 1) == -ENOMEM);
	CHECK_EQ_U64(region_table_total_pages(t), 0);
	m.fail_after = -1;
	CHECK_EQ_U64(region_table_dirty(t, DEV, INO, 0, 64 * 10, 1), 640);
	region_table_free(t);
	CHECK_EQ_U64(m.blocks, 0);
	CHECK_EQ_U64(m.bad_release, 0);
}

int main(void)
{
	test_caller_memory();
	test_fig7_rewrite_is_free();
	test_rewrite_after_clean_counts_again();
	test_truncate_and_forget();
	test_sparse_huge_offsets();
	test_expire_by_time();
	test_sequential_appends_are_fast();
	test_against_a_flat_bitmap();
	test_many_files();
	return 0;
}
