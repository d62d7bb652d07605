/*
 * pool.c - zeroed memory from mmap(2), for code that may run inside a
 * signal handler (see pool.h).
 *
 * Small blocks (the region table's chunk and file records, 48-64 bytes,
 * and its first bucket arrays) come in four size classes cut from 64 KiB
 * slabs and go back onto a free list per class; they are never returned to
 * the system (a job's dirty state is bounded by its dirty pages).  Larger
 * blocks (bucket arrays that grew) are mappings of their own and are
 * unmapped when released.
 */
#include <string.h>
#include <sys/mman.h>

#include "agent/pool.h"

#define POOL_MIN_SHIFT 6u                  /* 64 bytes */
#define POOL_SLAB_BYTES (64u * 1024u)
#define POOL_PAGE 4096u

static int size_class(size_t bytes)
{
	for (int c = 0; c < POOL_CLASSES; c++)
		if (bytes <= (size_t)1 << (POOL_MIN_SHIFT + (unsigned)c))
			return c;
	return -1;
}

static size_t mapping_bytes(size_t bytes)
{
	return (bytes + POOL_PAGE - 1) & ~(size_t)(POOL_PAGE - 1);
}

void *pool_alloc(void *ctx, size_t bytes)
{
	struct pool *pool = ctx;
	int c = size_class(bytes);
	if (c < 0) {
		void *p = mmap(NULL, mapping_bytes(bytes), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return p == MAP_FAILED ? NULL : p; /* fresh mappings are zero */
	}
	size_t block = (size_t)1 << (POOL_MIN_SHIFT + (unsigned)c);
	void *p = pool->free_list[c];
	if (p) {
		pool->free_list[c] = *(void **)p;
		memset(p, 0, block);
		return p;
	}
	if ((size_t)(pool->slab_end - pool->slab) < block) {
		/* The tail of the old slab (less than one block) is lost. */
		void *slab = mmap(NULL, POOL_SLAB_BYTES, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (slab == MAP_FAILED)
			return NULL;
		pool->slab = slab;
		pool->slab_end = pool->slab + POOL_SLAB_BYTES;
	}
	p = pool->slab;
	pool->slab += block; /* blocks are carved in order: every one is aligned to 64 */
	return p;
}

void pool_release(void *ctx, void *p, size_t bytes)
{
	struct pool *pool = ctx;
	if (!p)
		return;
	int c = size_class(bytes);
	if (c < 0) {
		munmap(p, mapping_bytes(bytes));
		return;
	}
	*(void **)p = pool->free_list[c];
	pool->free_list[c] = p;
}
