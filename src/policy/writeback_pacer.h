/*
 * writeback_pacer.h - paced writeback: the disk sees the write cap
 * (issue #9 §1).
 *
 * The write predictor (DiscNice §4.4) charges a page when the job dirties
 * it, which is what the kernel counts in write_bytes.  The disk sees
 * nothing until the flusher writes the page back, dirty_expire_centisecs
 * (30 s) later and at full speed: a job held at 16 MiB/s hands the disk
 * its last 30 s of data in one burst.  The pacer keeps, per process, the
 * pages this job newly dirtied in the order it dirtied them, and starts
 * their writeback itself (sync_file_range(SYNC_FILE_RANGE_WRITE), done by
 * the agent) a little behind the writer: once more than `lag` pages are
 * waiting, the oldest `chunk` go out.  The job dirties at the cap, so the
 * disk writes at the cap, `lag` later.
 *
 * What the kernel's delay saves must stay saved:
 * - only newly dirtied pages are queued (a rewrite of a page still dirty
 *   is free, as without pacing: Region-Write);
 * - a file unlinked or truncated drops its queued pages (the kernel
 *   cancels dirty pages, truncate_inode_pages: Create-Delete);
 * - a file that keeps rewriting pages the pacer already sent out is a
 *   "rewriter": the pacer leaves it to the kernel, whose 30 s delay merges
 *   the rewrites.
 * The lag is in bytes, not time: a small file written and deleted, or a
 * few pages rewritten in place, never reaches it.
 *
 * Plain C, no I/O, no globals: the agent (src/agent/writeback.c) owns one
 * pacer under a lock and does the system calls this hands it.
 */
#ifndef DISCNICE_POLICY_WRITEBACK_PACER_H
#define DISCNICE_POLICY_WRITEBACK_PACER_H

#include <stdbool.h>
#include <stdint.h>

#define WB_FILES 16     /* files with pages queued or recently sent out */
#define WB_EXTENTS 64   /* queued ranges, oldest first                  */
/* Pages sent out and then dirtied again that make a file a rewriter:
 * a header patched at the end (tar, zip, media files) is not one. */
#define WB_REWRITER_PAGES 64

struct wb_file {
	bool used;
	bool held;          /* fd is the pacer's own (the program closed its) */
	bool rewriter;      /* left to the kernel from now on                 */
	int fd;             /* the program's fd, or the pacer's dup if held   */
	uint64_t dev, ino;
	uint32_t extents;   /* queue entries of this file                     */
	uint64_t queued;    /* newly dirtied pages of this file in the queue  */
	uint64_t sent_end;  /* pages below this were sent out at least once   */
	uint64_t resent;    /* pages queued again after being sent out        */
	uint64_t last_use;  /* a tick, to recycle the least recent            */
};

struct wb_extent {
	uint32_t file;      /* index into files                               */
	uint64_t first, end;/* pages [first, end)                             */
	uint64_t fresh;     /* of which newly dirtied (what the disk will see) */
};

struct wb_pacer {
	struct wb_file files[WB_FILES];
	struct wb_extent ring[WB_EXTENTS];
	uint32_t head, count;
	uint64_t queued;    /* pages in the queue, all files                  */
	uint64_t tick;
};

/* One piece of work for the agent. */
struct wb_flush {
	int fd;
	uint64_t dev, ino;  /* check the fd still names this file             */
	uint64_t first, end;/* pages to start writing back                    */
	int file;           /* index into files                               */
	bool last;          /* the file's last queued pages: if its fd is the
	                     * pacer's own, wb_pacer_release() it after       */
};

void wb_pacer_init(struct wb_pacer *p);

/* The job wrote pages [first, end) of (dev, ino) through fd and the write
 * predictor found `fresh` of them newly dirtied.  Returns true if they
 * were queued (false: not paced - a rewriter, tables full, nothing new). */
bool wb_pacer_note(struct wb_pacer *p, uint64_t dev, uint64_t ino, int fd, uint64_t first,
		   uint64_t end, uint64_t fresh);

/* The next piece to write back: the oldest queued pages, at most chunk of
 * them, when more than lag are queued (lag 0 with force: everything).
 * False when there is nothing to do. */
bool wb_pacer_next(struct wb_pacer *p, uint64_t lag, uint64_t chunk, struct wb_flush *out);

/* The program is closing fd, a description of (dev, ino).  Returns the
 * file (index) whose queued pages were reachable only through fd, or -1:
 * the agent dups fd and calls wb_pacer_hold(), or, with no descriptor to
 * spare, flushes them now (wb_pacer_take_file()).  A file with nothing
 * queued is forgotten.  *idle_own is set to a file of (dev, ino) whose
 * pages are all sent out but whose own fd was kept while the program had
 * the file open (wb_pacer_release() it after the program's close), or -1. */
int wb_pacer_closing(struct wb_pacer *p, int fd, uint64_t dev, uint64_t ino, int *idle_own);
void wb_pacer_hold(struct wb_pacer *p, int file, int own_fd);
/* Forget a file whose own fd the agent has closed (or never had). */
void wb_pacer_release(struct wb_pacer *p, int file);
/* Is file idle (nothing queued) and held on the pacer's own fd? */
bool wb_pacer_idle_own(const struct wb_pacer *p, int file);

/* All queued pages of one file, in one piece (closing without a spare
 * descriptor, or a flush before the program reopens it).  False if none. */
bool wb_pacer_take_file(struct wb_pacer *p, int file, struct wb_flush *out);

/* The file's dirty pages are gone or already on disk (unlink, truncate,
 * fsync): drop its queued pages.  Returns the file (index), or -1; the
 * agent then releases it if wb_pacer_idle_own(). */
int wb_pacer_forget(struct wb_pacer *p, uint64_t dev, uint64_t ino);

/* Which file (index) is (dev, ino), or -1. */
int wb_pacer_find(const struct wb_pacer *p, uint64_t dev, uint64_t ino);

#endif
