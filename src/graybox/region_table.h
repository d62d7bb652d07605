/*
 * region_table.h - the write-size predictor's update-region table
 * (DiscNice §4.4, §5.2, Figs 7-8), made sparse.
 *
 * Linux counts a write in /proc/PID/io write_bytes when it dirties a page
 * (folio_account_dirtied), not when the page reaches the disk; a page that is
 * already dirty is not counted again, and truncating or unlinking dirty
 * pages counts them as cancelled_write_bytes (folio_account_cleaned).  The
 * table mirrors exactly that: per file (device, inode), the set of pages this
 * process believes dirty.
 *
 * Sparse: a file costs memory in proportion to the pages it touched, not its
 * size (a 100 GiB file with one dirty page costs one small node).
 * Pure logic: no I/O, no globals.  Memory comes from the caller's
 * allocator (struct region_memory): the agent's hooks run inside signal
 * handlers and fork children, where malloc may hold a lock the interrupted
 * frame took, so the agent hands in one that asks the kernel (src/agent/
 * pool.c); NULL means libc's malloc (the unit tests, the supervisor).
 * Not thread-safe: the caller serialises (allocator calls included).
 */
#ifndef DISCNICE_REGION_TABLE_H
#define DISCNICE_REGION_TABLE_H

#include <stdint.h>
#include <stddef.h>

struct region_table;

struct region_memory {
	void *(*alloc)(void *ctx, size_t bytes);                 /* zeroed, or NULL */
	void (*release)(void *ctx, void *p, size_t bytes);       /* bytes as allocated */
	void *ctx;
};

struct region_table *region_table_new(const struct region_memory *memory);
void region_table_free(struct region_table *table);

/* Mark pages [first_page, first_page + page_count) of file (dev, ino) dirty.
 * Returns how many of them were not dirty before (the newly dirtied pages),
 * or -ENOMEM (then nothing is recorded and the caller should count all). */
int64_t region_table_dirty(struct region_table *table, uint64_t dev, uint64_t ino,
			   uint64_t first_page, uint64_t page_count, uint64_t now_ns);

/* Pages of file (dev, ino) at or after first_page are truncated away:
 * remove them and return how many dirty pages were cancelled. */
uint64_t region_table_truncate(struct region_table *table, uint64_t dev, uint64_t ino,
			       uint64_t first_page);

/* The file is gone (unlinked, last link) - equivalent to truncate at 0. */
uint64_t region_table_forget(struct region_table *table, uint64_t dev, uint64_t ino);

/* The kernel wrote back pages [first_page, first_page + page_count) of the
 * file: they are clean; returns how many were dirty in the table. */
uint64_t region_table_clean(struct region_table *table, uint64_t dev, uint64_t ino,
			    uint64_t first_page, uint64_t page_count);

/* Clean every page dirtied at or before cutoff_ns (periodic writeback:
 * dirty_expire_centisecs).  Returns pages cleaned. */
uint64_t region_table_expire(struct region_table *table, uint64_t cutoff_ns);

/* Everything written back (sync(2)). */
void region_table_clear(struct region_table *table);

/* Dirty pages recorded for the file, and in total. */
uint64_t region_table_file_pages(const struct region_table *table, uint64_t dev, uint64_t ino);
uint64_t region_table_total_pages(const struct region_table *table);

/* Is page `page` of the file dirty in the table? */
int region_table_is_dirty(const struct region_table *table, uint64_t dev, uint64_t ino,
			  uint64_t page);

/* Visit the files that have dirty pages (for writeback polling); stop when
 * fn returns non-zero. */
void region_table_each_file(const struct region_table *table,
			    int (*fn)(void *ctx, uint64_t dev, uint64_t ino, uint64_t pages),
			    void *ctx);

#endif
