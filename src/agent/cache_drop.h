/*
 * cache_drop.h - --cache drop, the agent's side (issue #9 item 4): the
 * pages the job brought into the page cache, by reads (its misses) or by
 * writes (after paced writeback sent them out), are dropped behind it with
 * posix_fadvise(POSIX_FADV_DONTNEED), so a backup streaming 50 GB does not
 * push the foreground's working set out.  Which pages and when:
 * policy/drop_behind.h.  DISCNICE_CACHE=drop turns it on (set by
 * `discnice run --cache drop`); with keep (the default) none of this runs:
 * the callers test agent.cache_drop first.
 */
#ifndef DISCNICE_AGENT_CACHE_DROP_H
#define DISCNICE_AGENT_CACHE_DROP_H

#include <stdbool.h>
#include <stdint.h>

struct drop_range;

/* Read DISCNICE_CACHE: sets agent.cache_drop (and, under drop, the
 * predictors run uncapped too: the misses are theirs). */
void cache_drop_init(void);
void cache_drop_before_fork(void);
void cache_drop_after_fork(bool child);

/* The job read `bytes` at pos of (dev, ino) through fd, and pages
 * missed[0..n) of it were read in from disk for it (misses).  Returns true
 * if it dropped pages, *dropped = the span of what it dropped. */
bool cache_drop_read(int fd, uint64_t dev, uint64_t ino, uint64_t pos, uint64_t bytes,
		     const struct drop_range *missed, unsigned n, struct drop_range *dropped);
/* Paced writeback sent pages [first, end) of (dev, ino) out through fd
 * (writeback.c); lag: pages sent after them before they are dropped. */
void cache_drop_written(int fd, uint64_t dev, uint64_t ino, uint64_t first, uint64_t end,
			uint64_t lag);
/* The job maps (dev, ino): keep it. */
void cache_drop_mapped(uint64_t dev, uint64_t ino);
/* The program closes its last descriptor of a description of (dev, ino)
 * (fd still open): drop what is left of it. */
void cache_drop_closing(int fd, uint64_t dev, uint64_t ino);
/* exit(): drop what is left of every file (fds still open). */
void cache_drop_exit(void);

#endif
