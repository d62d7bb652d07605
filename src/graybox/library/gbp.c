/*
 * gbp.c - libgraybox's FCCD/FLDC order API (include/discnice/gbp.h): the
 * exported names, over the engine in src/graybox/fccd/fccd_plan.c that
 * `discnice gbp` uses too.  Built -fvisibility=hidden; only what is marked
 * GBP_EXPORT and matched by libgraybox.map leaves the library.
 */
#include <stdlib.h>

#include "discnice/gbp.h"
#include "graybox/fccd/fccd_plan.h"

#define GBP_EXPORT __attribute__((visibility("default")))

GBP_EXPORT int gbp_order(const char *const *paths, size_t n_paths,
			 const struct gbp_options *options, struct gbp_extent **extents,
			 size_t *n_extents)
{
	return fccd_plan(paths, n_paths, options, extents, n_extents, NULL);
}

GBP_EXPORT void gbp_free(struct gbp_extent *extents)
{
	free(extents);
}

GBP_EXPORT const char *gbp_backend_name(uint32_t backend)
{
	switch (backend) {
	case GBP_BACKEND_AUTO:
		return "auto";
	case GBP_BACKEND_PROBE:
		return "probe";
	case GBP_BACKEND_CACHESTAT:
		return "cachestat";
	case GBP_BACKEND_MINCORE:
		return "mincore";
	case GBP_BACKEND_NOWAIT:
		return "nowait";
	default:
		return NULL;
	}
}
