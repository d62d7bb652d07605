/*
 * drop_behind.h - which page-cache pages a job may drop behind itself
 * (issue #9 item 4, `--cache drop`).
 *
 * A backup that streams 50 GB through the page cache pushes the
 * foreground's working set out of it.  Under --cache drop the agent drops
 * (posix_fadvise POSIX_FADV_DONTNEED, done by src/agent/cache_drop.c) the
 * pages the job itself brought into the cache, once it is done with them:
 *
 * - reads: only pages the gray-box predictor saw the job read in from disk
 *   (its misses: "missed" ranges), and only once the reader has passed them
 *   by `lag` pages - never readahead pages ahead of the reader, never pages
 *   that were cached before the job touched them (someone else's working
 *   set: they are never "missed");
 * - writes: pages paced writeback has sent to the disk (they are clean or
 *   under writeback; "written" ranges), `lag` pages behind the newest page
 *   sent, so the disk has had time to finish them;
 * - re-reads keep: a file the job reads again where it has read before (in
 *   the current sequential run), or whose dropped pages it reads in again,
 *   is kept from then on - its pending pages too.  A file the job maps is
 *   kept (drop_behind_keep).
 * Pages go out in batches of at least `batch` pages (one fadvise per batch,
 * so at most one per MiB for a 1 MiB batch), and whatever is left of a file
 * when the job closes it or exits (`all`).
 *
 * Plain C, no I/O, no globals: the agent owns one table under a lock and
 * does the system calls this hands it.  Units are pages, except read
 * positions (bytes: two reads of one page are a re-read only if their bytes
 * overlap, so a reader of unaligned pieces is not taken for a re-reader).
 */
#ifndef DISCNICE_POLICY_DROP_BEHIND_H
#define DISCNICE_POLICY_DROP_BEHIND_H

#include <stdbool.h>
#include <stdint.h>

#define DROP_PAGE_SHIFT 12 /* 4 KiB pages (the agent asserts it)   */
#define DROP_FILES 32     /* files remembered per process             */
#define DROP_PENDING 8    /* ranges brought in, not yet dropped, a file */
#define DROP_DROPPED 4    /* ranges dropped, remembered to see re-reads */

struct drop_range {
	uint64_t first, end;  /* pages [first, end) */
};

struct drop_pending {
	uint64_t first, end;
	bool written;         /* by paced writeback (else read in as a miss) */
};

struct drop_file {
	bool used;
	bool keep;            /* re-read or mapped: nothing more is dropped   */
	int fd;               /* the last descriptor seen (for the exit)      */
	uint64_t dev, ino;
	uint64_t run_first, run_end;   /* bytes: the current sequential run   */
	uint64_t read_high;   /* pages: the farthest any read reached          */
	uint64_t written_high;/* pages: the farthest paced writeback reached   */
	unsigned pending_count;
	struct drop_pending pending[DROP_PENDING];    /* oldest first         */
	unsigned dropped_count;
	struct drop_range dropped[DROP_DROPPED];
	uint64_t last_use;
};

struct drop_behind {
	struct drop_file files[DROP_FILES];
	uint64_t tick;
};

void drop_behind_init(struct drop_behind *d);

/* The file (index) of (dev, ino), or -1. */
int drop_behind_find(const struct drop_behind *d, uint64_t dev, uint64_t ino);
/* The same, taking a slot if it has none (a free one, else the least
 * recently used; what that one still had pending stays cached). */
int drop_behind_file(struct drop_behind *d, uint64_t dev, uint64_t ino, int fd);

/* The job is reading pages [first, end) in from disk (a miss: the
 * predictor's plan, pages that were not cached before). */
void drop_behind_missed(struct drop_behind *d, int file, uint64_t first, uint64_t end);
/* The job read `bytes` at byte `pos` (after the call: what it returned). */
void drop_behind_read(struct drop_behind *d, int file, uint64_t pos, uint64_t bytes);
/* Paced writeback sent pages [first, end) of the file to the disk. */
void drop_behind_written(struct drop_behind *d, int file, uint64_t first, uint64_t end);
/* Keep the file from now on (it is mapped): forget what is pending. */
void drop_behind_keep(struct drop_behind *d, int file);

/* The next range to drop: pending pages behind the reader (or the
 * writeback) by more than `lag`, when at least `batch` of them are ready in
 * one range, cut at a multiple of `align` pages (the largest page-cache
 * folio: the kernel drops only folios wholly inside the range); with
 * `all`, every pending page (close, exit).  False when there is nothing
 * to do.  The range is remembered as dropped. */
bool drop_behind_next(struct drop_behind *d, int file, uint64_t lag, uint64_t batch,
		      uint64_t align, bool all, struct drop_range *out);

/* Has the file anything pending? */
bool drop_behind_pending(const struct drop_behind *d, int file);

#endif
