/*
 * layout_order.c - i-number and physical order, and the composed order
 * (graybox-icl §4.2.2, §4.2.4; see layout_order.h).
 */
#include "graybox/fldc/layout_order.h"

#include <stdlib.h>

struct sort_mode {
	bool by_physical;
	bool in_cache_first;
};

static int cmp_u64(uint64_t a, uint64_t b)
{
	return (a > b) - (a < b);
}

static int compare_layout(const void *pa, const void *pb, void *arg)
{
	const struct gbp_extent *a = pa, *b = pb;
	const struct sort_mode *mode = arg;
	int c;
	int ea = !!(a->flags & GBP_ERROR), eb = !!(b->flags & GBP_ERROR);
	if (ea != eb)
		return ea - eb;
	if (mode->in_cache_first) {
		int ca = !(a->flags & GBP_IN_CACHE), cb = !(b->flags & GBP_IN_CACHE);
		if (ca != cb)
			return ca - cb;
	}
	if ((c = cmp_u64(a->device, b->device)))
		return c;
	if (mode->by_physical) {
		int ua = a->physical == UINT64_MAX, ub = b->physical == UINT64_MAX;
		if (ua != ub)
			return ua - ub;
		if ((c = cmp_u64(a->physical, b->physical)))
			return c;
	}
	if ((c = cmp_u64(a->inode, b->inode)))
		return c;
	if ((c = cmp_u64(a->file, b->file)))
		return c;
	return cmp_u64(a->offset, b->offset);
}

void layout_order_sort(struct gbp_extent *pieces, size_t n, bool by_physical, bool in_cache_first)
{
	struct sort_mode mode = { by_physical, in_cache_first };
	if (n > 1)
		qsort_r(pieces, n, sizeof *pieces, compare_layout, &mode);
}
