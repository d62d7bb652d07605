/*
 * extent_map.c - see extent_map.h.
 */
#include <string.h>

#include "graybox/extent_map.h"

void extent_map_clear(struct extent_map *map)
{
	memset(map, 0, sizeof *map);
}

void extent_map_learn(struct extent_map *map, uint64_t known_first, uint64_t known_end)
{
	extent_map_clear(map);
	map->known_first = known_first;
	map->known_end = known_end > known_first ? known_end : known_first;
}

void extent_map_add(struct extent_map *map, uint64_t first, uint64_t end)
{
	if (first < map->known_first)
		first = map->known_first;
	if (end > map->known_end)
		end = map->known_end;
	if (first >= end)
		return;
	/* Insert in order, merging with neighbours that touch it. */
	unsigned i = 0;
	while (i < map->count && map->data[i].end < first)
		i++;
	unsigned j = i;
	while (j < map->count && map->data[j].first <= end) {
		if (map->data[j].first < first)
			first = map->data[j].first;
		if (map->data[j].end > end)
			end = map->data[j].end;
		j++;
	}
	if (j == i && map->count == EXTENT_MAP_MAX) {
		/* No room: the known range ends where this extent starts
		 * (with the extents after it), so the map never claims a hole
		 * it did not see. */
		map->known_end = first;
		map->count = i;
		return;
	}
	/* Replace data[i..j) with the merged extent. */
	unsigned removed = j - i;
	if (removed == 0) {
		memmove(&map->data[i + 1], &map->data[i], (map->count - i) * sizeof map->data[0]);
		map->count++;
	} else if (removed > 1) {
		memmove(&map->data[i + 1], &map->data[j], (map->count - j) * sizeof map->data[0]);
		map->count -= removed - 1;
	}
	map->data[i].first = first;
	map->data[i].end = end;
}

bool extent_map_knows(const struct extent_map *map, uint64_t first, uint64_t end)
{
	return map->known_end > map->known_first && first >= map->known_first &&
	       end <= map->known_end;
}

bool extent_map_next_data(const struct extent_map *map, uint64_t pos, uint64_t end,
			  uint64_t *seg_first, uint64_t *seg_end)
{
	for (unsigned i = 0; pos < end && i < map->count; i++) {
		if (map->data[i].end <= pos)
			continue;
		if (map->data[i].first >= end)
			return false;
		*seg_first = map->data[i].first > pos ? map->data[i].first : pos;
		*seg_end = map->data[i].end < end ? map->data[i].end : end;
		return true;
	}
	return false;
}
