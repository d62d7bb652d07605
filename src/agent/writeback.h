/*
 * writeback.h - paced writeback, the agent's side (issue #9 §1): under a
 * write or total cap the agent starts the writeback of the pages the job
 * dirtied, a little behind the writer, so that the disk sees the cap
 * instead of the flusher's burst 30 s later.  Which pages and when:
 * policy/writeback_pacer.h.  --writeback kernel (DISCNICE_WRITEBACK=kernel)
 * leaves all of it to the kernel, as before.
 */
#ifndef DISCNICE_AGENT_WRITEBACK_H
#define DISCNICE_AGENT_WRITEBACK_H

#include <stdbool.h>
#include <stdint.h>

void writeback_init(void);
void writeback_before_fork(void);
void writeback_after_fork(bool child);

/* The job wrote bytes at pos of (dev, ino) through fd; fresh_bytes of
 * them newly dirtied (the write predictor's answer).  May start the
 * writeback of older pages.  Callers pass 0 fresh bytes for an overlayfs
 * file (open_file.h overlay): sync_file_range() of it acts on the
 * overlay's own mapping, which holds none of the pages, so it would start
 * nothing, and the pages go out with the kernel's writeback. */
void writeback_wrote(int fd, uint64_t dev, uint64_t ino, uint64_t pos, uint64_t bytes,
		     uint64_t fresh_bytes);
/* Before the program's close(fd) of (dev, ino): keep what is still queued
 * reachable.  Returns a descriptor of ours to close right after the
 * program's close (see writeback.c: POSIX locks), or -1. */
int writeback_closing(int fd, uint64_t dev, uint64_t ino);
/* After the program's close(fd): close what writeback_closing() returned. */
void writeback_closed(int own_fd);
/* At the program's opens, reads, writes and closes: a file it closed with
 * pages queued is let go once it has no name (its blocks were kept
 * allocated) or a second after the close (its pages sent now).  One load
 * when none is held. */
extern int writeback_held_fds;
void writeback_tend_now(void);
/* A write met ENOSPC or EDQUOT: let go at once of every held file that has
 * no name left (their blocks are freed).  True if any was: the write may
 * be tried again. */
bool writeback_release_nameless(void);
static inline void writeback_tend(void)
{
	if (__atomic_load_n(&writeback_held_fds, __ATOMIC_RELAXED))
		writeback_tend_now();
}
/* The file's dirty pages were cancelled or written (unlink, truncate,
 * fsync): nothing of it is left to pace. */
void writeback_forget(uint64_t dev, uint64_t ino);
/* exit() under --cache drop: send out everything still queued now (the
 * lag the writer leads by), so that cache_drop_exit() can drop it. */
void writeback_exit(void);
/* sync(2), syncfs(2): nothing at all is left to pace. */
void writeback_forget_all(void);

#endif
