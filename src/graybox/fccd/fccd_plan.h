/*
 * fccd_plan.h - gbp's engine: examine files (open, stat, the page cache
 * through cache_detector.h, FIEMAP through layout_probe.h) and order their
 * pieces (fccd_order.h, layout_order.h).  The library's gbp_order() and
 * the `discnice gbp` command both call this; it is the only part of the
 * FCCD and FLDC orders that does I/O.
 */
#ifndef DISCNICE_FCCD_PLAN_H
#define DISCNICE_FCCD_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "discnice/gbp.h"
#include "graybox/fccd/fccd_order.h"
#include "graybox/toolbox/cluster.h"
#include "graybox/toolbox/parameters.h"

/* What the examination found beyond the pieces, for --json and the
 * benchmarks. */
struct fccd_plan_stats {
	uint64_t seed;              /* the probe points' seed used            */
	uint64_t chunk_length;      /* the access unit, record-aligned        */
	uint64_t prediction_unit;
	uint64_t probes;            /* probes made, timed and nowait          */
	uint64_t nowait_probes;     /* of them, RWF_NOWAIT ones               */
	uint64_t probe_hits;        /* of all, hits (classified or the kernel's) */
	uint64_t probe_read_pages;  /* pages the probes made the kernel read
				     * (ru_inblock; 0 where it does not count) */
	uint64_t examine_ns;        /* wall time of all the cache questions:
				     * probes, cachestat, mincore               */
	uint64_t files_exact;       /* files answered by cachestat/mincore    */
	uint64_t files_probed;      /* by timed probes                        */
	uint64_t files_nowait;      /* by RWF_NOWAIT probes                   */
	uint64_t nowait_fallbacks;  /* files where nowait reads are not
				     * supported: probed by timing instead     */
	uint64_t nowait_settled;    /* pages nowait misses read in, waited for
				     * and dropped again (fccd_plan.c)         */
	uint64_t files_not_probed;  /* smaller than a page (Heisenberg)        */
	struct fccd_probe_verdict probe_verdict; /* timed probes' hits: how decided */
	/* Where a hit/miss threshold decided (probe_verdict.threshold_needed;
	 * its value is probe_verdict.miss_ns): PARAMETER_FILE or _MEASURED,
	 * the calibrated probe threshold of probe_threshold_device (st_dev of
	 * the files with the most timed probes); PARAMETER_DEFAULT, the fixed
	 * factor over the known hits (device 0). */
	enum parameter_source probe_threshold_source;
	uint64_t probe_threshold_device;
	struct cluster_split cache_split;   /* on the pieces' cached fractions  */
	/* Every probe with its verdict (offset, times, hit); the extent
	 * index refers to no returned piece.  free() it. */
	struct fccd_probe_sample *samples;
	size_t n_samples;
};

/* gbp_order() (gbp.h) with its documented results, plus *stats (may be
 * NULL).  Validates options. */
int fccd_plan(const char *const *paths, size_t n_paths, const struct gbp_options *options,
	      struct gbp_extent **extents, size_t *n_extents, struct fccd_plan_stats *stats);

#endif
