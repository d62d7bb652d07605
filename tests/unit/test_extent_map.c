/* Description: extent map of a sparse file (issue #8 item 11): data extents merge, holes are what is known and not data, overflow never invents a hole. */
#include <stdint.h>

#include "unit.h"
#include "graybox/extent_map.h"

/* Data pages of [first, end) by walking the segments. */
static uint64_t data_pages(const struct extent_map *m, uint64_t first, uint64_t end)
{
	uint64_t n = 0, a, b;
	for (uint64_t pos = first; extent_map_next_data(m, pos, end, &a, &b); pos = b)
		n += b - a;
	return n;
}

int main(void)
{
	struct extent_map m;
	extent_map_clear(&m);
	CHECK(!extent_map_knows(&m, 0, 1));

	/* An all-hole file: the whole range known, no data. */
	extent_map_learn(&m, 0, 16384);
	CHECK(extent_map_knows(&m, 0, 16384));
	CHECK(!extent_map_knows(&m, 0, 16385));
	CHECK_EQ_U64(data_pages(&m, 0, 16384), 0);

	/* Islands, given out of order, touching ones merged, clipped. */
	extent_map_learn(&m, 100, 1000);
	extent_map_add(&m, 500, 600);
	extent_map_add(&m, 50, 150);     /* clipped to 100..150 */
	extent_map_add(&m, 600, 610);    /* merges with 500..600 */
	extent_map_add(&m, 990, 2000);   /* clipped to 990..1000 */
	CHECK_EQ_U64(m.count, 3);
	CHECK_EQ_U64(data_pages(&m, 100, 1000), 50 + 110 + 10);
	CHECK_EQ_U64(data_pages(&m, 120, 505), 30 + 5);
	CHECK_EQ_U64(data_pages(&m, 150, 500), 0);
	extent_map_add(&m, 140, 520);    /* bridges two */
	CHECK_EQ_U64(m.count, 2);
	CHECK_EQ_U64(data_pages(&m, 100, 1000), 510 + 10);

	/* More extents than fit: the known range stops at the first lost. */
	extent_map_learn(&m, 0, 100000);
	for (uint64_t i = 0; i < EXTENT_MAP_MAX + 5; i++)
		extent_map_add(&m, i * 100, i * 100 + 10);
	CHECK_EQ_U64(m.count, EXTENT_MAP_MAX);
	CHECK_EQ_U64(m.known_end, EXTENT_MAP_MAX * 100);
	CHECK(extent_map_knows(&m, 0, EXTENT_MAP_MAX * 100));
	CHECK(!extent_map_knows(&m, 0, EXTENT_MAP_MAX * 100 + 1));
	CHECK_EQ_U64(data_pages(&m, 0, EXTENT_MAP_MAX * 100), EXTENT_MAP_MAX * 10);
	return 0;
}
