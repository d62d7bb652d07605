/*
 * extent_map.h - where a sparse file has data, for the read predictors.
 *
 * Reading a hole costs no disk I/O: the filesystem's read_folio zero-fills
 * the page without submitting a bio (ext4_mpage_readpages(), iomap's
 * iomap_readpage_iter() for IOMAP_HOLE / IOMAP_UNWRITTEN), and the kernel
 * counts a task's read_bytes at bio submission (submit_bio() ->
 * task_io_account_read()).  So for the cache view a page in a hole is as
 * good as cached (issue #8 item 11).
 *
 * One map per open file remembers, for a range of pages it has learnt
 * (from FIEMAP, in the agent), the data extents inside it; everything else
 * in the range is hole.  Pure logic: no I/O, no globals.
 */
#ifndef DISCNICE_EXTENT_MAP_H
#define DISCNICE_EXTENT_MAP_H

#include <stdbool.h>
#include <stdint.h>

#define EXTENT_MAP_MAX 16

struct extent_map {
	uint64_t known_first, known_end; /* pages whose layout is known       */
	unsigned count;                  /* data extents, sorted, disjoint     */
	struct { uint64_t first, end; } data[EXTENT_MAP_MAX];
};

/* Nothing known. */
void extent_map_clear(struct extent_map *map);

/* Learn [known_first, known_end): the data extents of that range are added
 * one by one with extent_map_add() (in pages, any order, clipped to the
 * range; overlapping or adjacent ones merge).  When more extents come than
 * fit, the known range ends where the last one kept ends. */
void extent_map_learn(struct extent_map *map, uint64_t known_first, uint64_t known_end);
void extent_map_add(struct extent_map *map, uint64_t first, uint64_t end);

/* Is [first, end) inside the known range? */
bool extent_map_knows(const struct extent_map *map, uint64_t first, uint64_t end);

/* The first data segment in [pos, end), clipped to it: true and
 * *seg_first and *seg_end set, or false when the rest of [pos, end) is hole.
 * Only meaningful where extent_map_knows(). */
bool extent_map_next_data(const struct extent_map *map, uint64_t pos, uint64_t end,
			  uint64_t *seg_first, uint64_t *seg_end);

#endif
