/*
 * shared_position.c - see shared_position.h.
 */
#include "common/shared_position.h"

enum shared_give_back shared_position_give_back(const struct shared_range_end *r, int64_t now,
						int64_t *arg)
{
	int64_t moved = r->base + (int64_t)r->done;
	if (moved >= r->end)
		return SHARED_KEEP;
	if (r->at_eof) {
		/* Below zero the kernel refuses it (EINVAL): the program
		 * moved the position itself meanwhile. */
		*arg = r->end - moved;
		return now >= *arg ? SHARED_BACK : SHARED_KEEP;
	}
	*arg = moved;
	return now == r->end ? SHARED_SET : SHARED_KEEP;
}
