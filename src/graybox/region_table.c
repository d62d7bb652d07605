/*
 * region_table.c - the write-size predictor's update-region table
 * (DiscNice §4.4, §5.2, Figs 7-8), made sparse.
 *
 * The prototype kept one boolean per 4 KiB page in a flat array per file and
 * noted that "to deal with huge files, wpos should be implemented as a tree
 * structure" (§5.2).  Here a file's dirty pages live in chunks of 64
 * consecutive pages (one 64-bit bitmap each), and every chunk of every file
 * sits in one hash table keyed by (file, chunk index).  So:
 *
 *   - memory is proportional to the chunks touched, never to the file size:
 *     a write at offset 1 TiB costs one chunk node;
 *   - dirtying, cleaning or testing a page is O(1) expected, so a sequential
 *     writer (262144 four-KiB appends per GiB) pays a hash lookup per call;
 *   - truncate, forget and expire walk the file's (or the table's) chunk
 *     lists, which are as long as the dirty state, not the file.
 *
 * Expiry is at chunk granularity: a chunk remembers only when its newest page
 * was dirtied, and region_table_expire() cleans a chunk once that time is at
 * or before the cutoff.  A page dirtied early in a chunk that keeps being
 * written stays dirty in the table a little longer than in the page cache.
 * The kernel is no finer: periodic writeback picks whole inodes by the time
 * the inode first became dirty (inode->dirtied_when, wb_writeback() in
 * fs/fs-writeback.c), so per-page times would buy precision the kernel does
 * not have, at 8 bytes per page.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graybox/region_table.h"

#define CHUNK_PAGES 64u
#define FILE_BUCKETS_INITIAL 16u
#define CHUNK_BUCKETS_INITIAL 64u

struct file_regions;

/* 64 consecutive pages of one file: pages index*64 .. index*64+63. */
struct chunk {
	struct chunk *hash_next;
	struct chunk *file_prev;
	struct chunk *file_next;
	struct file_regions *file;
	uint64_t index;
	uint64_t dirty;     /* bit i set: page index*64 + i is dirty        */
	uint64_t newest_ns; /* when the most recently dirtied page was      */
};

struct file_regions {
	struct file_regions *hash_next;
	struct chunk *chunks; /* every chunk of this file, unordered */
	uint64_t dev;
	uint64_t ino;
	uint64_t pages;       /* dirty pages of this file               */
	uint64_t chunk_count;
};

struct region_table {
	struct region_memory memory;
	struct file_regions **files;
	size_t file_buckets; /* power of two */
	size_t file_count;
	struct chunk **chunks;
	size_t chunk_buckets; /* power of two */
	size_t chunk_count;
	uint64_t total_pages;
};

/* splitmix64's finaliser: cheap, and sequential chunk indexes spread well. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	x ^= x >> 31;
	return x;
}

static size_t file_slot(const struct region_table *table, uint64_t dev, uint64_t ino)
{
	return (size_t)(mix64(dev ^ mix64(ino)) & (table->file_buckets - 1));
}

static size_t chunk_slot_in(size_t buckets, const struct file_regions *file, uint64_t index)
{
	return (size_t)(mix64((uint64_t)(uintptr_t)file ^ mix64(index)) & (buckets - 1));
}

static size_t chunk_slot(const struct region_table *table, const struct file_regions *file,
			 uint64_t index)
{
	return chunk_slot_in(table->chunk_buckets, file, index);
}

/* Bits lo .. hi-1 of a chunk, 0 <= lo < hi <= 64. */
static uint64_t bit_range(unsigned lo, unsigned hi)
{
	uint64_t upto_hi = hi >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << hi) - 1;
	return upto_hi & ~((UINT64_C(1) << lo) - 1);
}

/* The bits of chunk `index` that fall in pages [first, end). */
static uint64_t chunk_mask(uint64_t index, uint64_t first, uint64_t end)
{
	uint64_t base = index * CHUNK_PAGES;
	unsigned lo = first > base ? (unsigned)(first - base) : 0;
	unsigned hi = end - base < CHUNK_PAGES ? (unsigned)(end - base) : CHUNK_PAGES;
	return bit_range(lo, hi);
}

static unsigned popcount64(uint64_t x)
{
	return (unsigned)__builtin_popcountll(x);
}

static void *libc_alloc(void *ctx, size_t bytes)
{
	(void)ctx;
	return calloc(1, bytes);
}

static void libc_release(void *ctx, void *p, size_t bytes)
{
	(void)ctx;
	(void)bytes;
	free(p);
}

static void *table_alloc(struct region_table *table, size_t bytes)
{
	return table->memory.alloc(table->memory.ctx, bytes);
}

static void table_release(struct region_table *table, void *p, size_t bytes)
{
	if (p)
		table->memory.release(table->memory.ctx, p, bytes);
}

struct region_table *region_table_new(const struct region_memory *memory)
{
	static const struct region_memory libc_memory = { libc_alloc, libc_release, NULL };
	if (!memory)
		memory = &libc_memory;
	struct region_table *table = memory->alloc(memory->ctx, sizeof(*table));
	if (!table)
		return NULL;
	memset(table, 0, sizeof(*table));
	table->memory = *memory;
	table->files = table_alloc(table, FILE_BUCKETS_INITIAL * sizeof(*table->files));
	table->chunks = table_alloc(table, CHUNK_BUCKETS_INITIAL * sizeof(*table->chunks));
	if (!table->files || !table->chunks) {
		table_release(table, table->files, FILE_BUCKETS_INITIAL * sizeof(*table->files));
		table_release(table, table->chunks, CHUNK_BUCKETS_INITIAL * sizeof(*table->chunks));
		memory->release(memory->ctx, table, sizeof(*table));
		return NULL;
	}
	table->file_buckets = FILE_BUCKETS_INITIAL;
	table->chunk_buckets = CHUNK_BUCKETS_INITIAL;
	return table;
}

static struct file_regions *file_find(const struct region_table *table, uint64_t dev,
				      uint64_t ino)
{
	struct file_regions *file = table->files[file_slot(table, dev, ino)];
	while (file && (file->dev != dev || file->ino != ino))
		file = file->hash_next;
	return file;
}

static struct chunk *chunk_find(const struct region_table *table,
				const struct file_regions *file, uint64_t index)
{
	struct chunk *chunk = table->chunks[chunk_slot(table, file, index)];
	while (chunk && (chunk->file != file || chunk->index != index))
		chunk = chunk->hash_next;
	return chunk;
}

/* Double the file hash when it is fuller than one file per bucket.  Failure
 * to grow is harmless (chains get longer), so it is not reported. */
static void files_grow(struct region_table *table)
{
	if (table->file_count < table->file_buckets || table->file_buckets > SIZE_MAX / 4)
		return;
	size_t buckets = table->file_buckets * 2;
	struct file_regions **files = table_alloc(table, buckets * sizeof(*files));
	if (!files)
		return;
	struct file_regions **old = table->files;
	size_t old_buckets = table->file_buckets;
	table->files = files;
	table->file_buckets = buckets;
	for (size_t i = 0; i < old_buckets; i++) {
		struct file_regions *file = old[i];
		while (file) {
			struct file_regions *next = file->hash_next;
			size_t slot = file_slot(table, file->dev, file->ino);
			file->hash_next = files[slot];
			files[slot] = file;
			file = next;
		}
	}
	table_release(table, old, old_buckets * sizeof(*old));
}

static void chunks_grow(struct region_table *table, size_t wanted)
{
	size_t buckets = table->chunk_buckets;
	while (wanted > buckets && buckets <= SIZE_MAX / 4 / sizeof(struct chunk *))
		buckets *= 2;
	if (buckets == table->chunk_buckets)
		return;
	struct chunk **chunks = table_alloc(table, buckets * sizeof(*chunks));
	if (!chunks)
		return;
	for (size_t i = 0; i < table->chunk_buckets; i++) {
		struct chunk *chunk = table->chunks[i];
		while (chunk) {
			struct chunk *next = chunk->hash_next;
			size_t slot = chunk_slot_in(buckets, chunk->file, chunk->index);
			chunk->hash_next = chunks[slot];
			chunks[slot] = chunk;
			chunk = next;
		}
	}
	table_release(table, table->chunks, table->chunk_buckets * sizeof(*table->chunks));
	table->chunks = chunks;
	table->chunk_buckets = buckets;
}

/* Unlink an empty file record from the hash and free it. */
static void file_remove(struct region_table *table, struct file_regions *file)
{
	struct file_regions **link = &table->files[file_slot(table, file->dev, file->ino)];
	while (*link != file)
		link = &(*link)->hash_next;
	*link = file->hash_next;
	table->file_count--;
	table_release(table, file, sizeof(*file));
}

static void chunk_link(struct region_table *table, struct file_regions *file,
		       struct chunk *chunk, uint64_t index)
{
	size_t slot = chunk_slot(table, file, index);
	chunk->file = file;
	chunk->index = index;
	chunk->dirty = 0;
	chunk->newest_ns = 0;
	chunk->hash_next = table->chunks[slot];
	table->chunks[slot] = chunk;
	chunk->file_prev = NULL;
	chunk->file_next = file->chunks;
	if (file->chunks)
		file->chunks->file_prev = chunk;
	file->chunks = chunk;
	file->chunk_count++;
	table->chunk_count++;
}

static void chunk_unlink(struct region_table *table, struct chunk *chunk)
{
	struct file_regions *file = chunk->file;
	struct chunk **link = &table->chunks[chunk_slot(table, file, chunk->index)];
	while (*link != chunk)
		link = &(*link)->hash_next;
	*link = chunk->hash_next;
	if (chunk->file_prev)
		chunk->file_prev->file_next = chunk->file_next;
	else
		file->chunks = chunk->file_next;
	if (chunk->file_next)
		chunk->file_next->file_prev = chunk->file_prev;
	file->chunk_count--;
	table->chunk_count--;
	table_release(table, chunk, sizeof(*chunk));
}

/* Clear `bits` of a chunk; frees the chunk when it empties (and the file
 * when its last page goes).  Returns the pages that were dirty. */
static uint64_t chunk_clean(struct region_table *table, struct chunk *chunk, uint64_t bits)
{
	struct file_regions *file = chunk->file;
	uint64_t cleaned = popcount64(chunk->dirty & bits);
	chunk->dirty &= ~bits;
	file->pages -= cleaned;
	table->total_pages -= cleaned;
	if (!chunk->dirty)
		chunk_unlink(table, chunk);
	if (!file->chunks)
		file_remove(table, file);
	return cleaned;
}

static void chunk_pool_free(struct region_table *table, struct chunk *pool)
{
	while (pool) {
		struct chunk *next = pool->hash_next;
		table_release(table, pool, sizeof(*pool));
		pool = next;
	}
}

int64_t region_table_dirty(struct region_table *table, uint64_t dev, uint64_t ino,
			   uint64_t first_page, uint64_t page_count, uint64_t now_ns)
{
	if (page_count == 0)
		return 0;
	uint64_t end = page_count > UINT64_MAX - first_page ? UINT64_MAX : first_page + page_count;
	uint64_t first_chunk = first_page / CHUNK_PAGES;
	uint64_t last_chunk = (end - 1) / CHUNK_PAGES;
	struct file_regions *file = file_find(table, dev, ino);

	/* Allocate everything first, so a failure records nothing (the caller
	 * then counts the whole write as newly dirty, the safe direction). */
	uint64_t missing = 0;
	for (uint64_t index = first_chunk;; index++) {
		if (!file || !chunk_find(table, file, index))
			missing++;
		if (index == last_chunk)
			break;
	}
	struct file_regions *new_file = NULL;
	if (!file) {
		new_file = table_alloc(table, sizeof(*new_file));
		if (!new_file)
			return -ENOMEM;
	}
	struct chunk *pool = NULL;
	for (uint64_t i = 0; i < missing; i++) {
		struct chunk *chunk = table_alloc(table, sizeof(*chunk));
		if (!chunk) {
			chunk_pool_free(table, pool);
			table_release(table, new_file, sizeof(*new_file));
			return -ENOMEM;
		}
		chunk->hash_next = pool;
		pool = chunk;
	}

	if (!file) {
		file = new_file;
		file->dev = dev;
		file->ino = ino;
		files_grow(table);
		size_t slot = file_slot(table, dev, ino);
		file->hash_next = table->files[slot];
		table->files[slot] = file;
		table->file_count++;
	}
	if (table->chunk_count + missing > table->chunk_buckets)
		chunks_grow(table, table->chunk_count + missing);

	uint64_t added = 0;
	for (uint64_t index = first_chunk;; index++) {
		struct chunk *chunk = chunk_find(table, file, index);
		if (!chunk) {
			chunk = pool;
			pool = pool->hash_next;
			chunk_link(table, file, chunk, index);
		}
		uint64_t fresh = chunk_mask(index, first_page, end) & ~chunk->dirty;
		if (fresh) {
			/* Only a clean->dirty transition is "dirtied" (and counted
			 * by folio_account_dirtied); rewriting a dirty page leaves
			 * its age alone, as the kernel does. */
			chunk->dirty |= fresh;
			if (now_ns > chunk->newest_ns)
				chunk->newest_ns = now_ns;
			added += popcount64(fresh);
		}
		if (index == last_chunk)
			break;
	}
	file->pages += added;
	table->total_pages += added;
	return (int64_t)added;
}

uint64_t region_table_truncate(struct region_table *table, uint64_t dev, uint64_t ino,
			       uint64_t first_page)
{
	struct file_regions *file = file_find(table, dev, ino);
	if (!file)
		return 0;
	uint64_t cancelled = 0;
	struct chunk *chunk = file->chunks;
	while (chunk) {
		/* chunk_clean may free the chunk and, with the last one, the file. */
		struct chunk *next = chunk->file_next;
		if (chunk->index >= first_page / CHUNK_PAGES)
			cancelled += chunk_clean(table, chunk,
						 chunk_mask(chunk->index, first_page, UINT64_MAX));
		chunk = next;
	}
	return cancelled;
}

uint64_t region_table_forget(struct region_table *table, uint64_t dev, uint64_t ino)
{
	return region_table_truncate(table, dev, ino, 0);
}

uint64_t region_table_clean(struct region_table *table, uint64_t dev, uint64_t ino,
			    uint64_t first_page, uint64_t page_count)
{
	struct file_regions *file = file_find(table, dev, ino);
	if (!file || page_count == 0)
		return 0;
	uint64_t end = page_count > UINT64_MAX - first_page ? UINT64_MAX : first_page + page_count;
	uint64_t first_chunk = first_page / CHUNK_PAGES;
	uint64_t last_chunk = (end - 1) / CHUNK_PAGES;
	uint64_t cleaned = 0;

	/* Look the range's chunks up one by one when the range is smaller than
	 * the file's dirty state, else walk the file's chunks: either way the
	 * cost follows the dirty state, not the range a caller names. */
	if (last_chunk - first_chunk < file->chunk_count) {
		for (uint64_t index = first_chunk;; index++) {
			struct chunk *chunk = chunk_find(table, file, index);
			if (chunk) {
				uint64_t mask = chunk_mask(index, first_page, end);
				/* Cleaning the file's last page frees the file. */
				int file_goes = file->chunk_count == 1 && !(chunk->dirty & ~mask);
				cleaned += chunk_clean(table, chunk, mask);
				if (file_goes)
					break;
			}
			if (index == last_chunk)
				break;
		}
		return cleaned;
	}
	struct chunk *chunk = file->chunks;
	while (chunk) {
		struct chunk *next = chunk->file_next;
		if (chunk->index >= first_chunk && chunk->index <= last_chunk)
			cleaned += chunk_clean(table, chunk, chunk_mask(chunk->index, first_page, end));
		chunk = next;
	}
	return cleaned;
}

uint64_t region_table_expire(struct region_table *table, uint64_t cutoff_ns)
{
	uint64_t cleaned = 0;
	for (size_t i = 0; i < table->file_buckets; i++) {
		struct file_regions *file = table->files[i];
		while (file) {
			struct file_regions *next_file = file->hash_next;
			struct chunk *chunk = file->chunks;
			while (chunk) {
				struct chunk *next = chunk->file_next;
				if (chunk->newest_ns <= cutoff_ns)
					cleaned += chunk_clean(table, chunk, ~UINT64_C(0));
				chunk = next;
			}
			file = next_file;
		}
	}
	return cleaned;
}

void region_table_clear(struct region_table *table)
{
	for (size_t i = 0; i < table->file_buckets; i++) {
		struct file_regions *file = table->files[i];
		while (file) {
			struct file_regions *next_file = file->hash_next;
			struct chunk *chunk = file->chunks;
			while (chunk) {
				struct chunk *next = chunk->file_next;
				table_release(table, chunk, sizeof(*chunk));
				chunk = next;
			}
			table_release(table, file, sizeof(*file));
			file = next_file;
		}
		table->files[i] = NULL;
	}
	for (size_t i = 0; i < table->chunk_buckets; i++)
		table->chunks[i] = NULL;
	table->file_count = 0;
	table->chunk_count = 0;
	table->total_pages = 0;
}

void region_table_free(struct region_table *table)
{
	if (!table)
		return;
	region_table_clear(table);
	table_release(table, table->files, table->file_buckets * sizeof(*table->files));
	table_release(table, table->chunks, table->chunk_buckets * sizeof(*table->chunks));
	struct region_memory memory = table->memory;
	memory.release(memory.ctx, table, sizeof(*table));
}

uint64_t region_table_file_pages(const struct region_table *table, uint64_t dev, uint64_t ino)
{
	const struct file_regions *file = file_find(table, dev, ino);
	return file ? file->pages : 0;
}

uint64_t region_table_total_pages(const struct region_table *table)
{
	return table->total_pages;
}

int region_table_is_dirty(const struct region_table *table, uint64_t dev, uint64_t ino,
			  uint64_t page)
{
	const struct file_regions *file = file_find(table, dev, ino);
	if (!file)
		return 0;
	const struct chunk *chunk = chunk_find(table, file, page / CHUNK_PAGES);
	return chunk && (chunk->dirty >> (page % CHUNK_PAGES)) & 1;
}

void region_table_each_file(const struct region_table *table,
			    int (*fn)(void *ctx, uint64_t dev, uint64_t ino, uint64_t pages),
			    void *ctx)
{
	for (size_t i = 0; i < table->file_buckets; i++)
		for (const struct file_regions *file = table->files[i]; file; file = file->hash_next)
			if (fn(ctx, file->dev, file->ino, file->pages))
				return;
}
