/*
 * pool.h - memory the agent takes from the kernel, never from malloc.
 *
 * The hooks run wherever the program calls read() or write(): inside a
 * signal handler that interrupted malloc, in a child forked from such a
 * handler, in a vfork child.  POSIX lists write() as async-signal-safe, so
 * the agent behind it must be too: no malloc (its arena lock may be held by
 * the interrupted frame, issue #8 item 1), no stdio, no lock an interrupted
 * frame can hold.  A pool hands out zeroed memory from mmap(2) - a system
 * call, safe anywhere - keeping freed small blocks on free lists.
 *
 * Not thread-safe: its user serialises (the region table's lock, io.c).
 */
#ifndef DISCNICE_AGENT_POOL_H
#define DISCNICE_AGENT_POOL_H

#include <stddef.h>

#define POOL_CLASSES 4 /* blocks of 64, 128, 256, 512 bytes */

struct pool {
	void *free_list[POOL_CLASSES];
	char *slab, *slab_end; /* the unused tail of the newest slab */
};

/* Zeroed memory of `bytes`, or NULL.  Blocks above the largest class are
 * whole mappings of their own. */
void *pool_alloc(void *pool, size_t bytes);
/* Give back a block allocated with the same `bytes`. */
void pool_release(void *pool, void *p, size_t bytes);

#endif
