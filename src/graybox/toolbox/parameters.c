/*
 * parameters.c - a parameter from the calibration file, or measured now
 * (graybox-icl §5; see parameters.h).
 */
#include "graybox/toolbox/parameters.h"

#include <errno.h>

#include "graybox/toolbox/calibration_file.h"
#include "graybox/toolbox/microbench.h"

/* MAC's quick self-measurement: a few hundred pages, ~1 ms. */
#define QUICK_PAGES 256u

const char *parameter_source_name(enum parameter_source source)
{
	switch (source) {
	case PARAMETER_FILE:
		return "file";
	case PARAMETER_MEASURED:
		return "measured";
	case PARAMETER_GIVEN:
		return "given";
	case PARAMETER_DEFAULT:
	default:
		return "default";
	}
}

int64_t parameters_probe_threshold(const char *path, bool measure, enum parameter_source *source)
{
	uint32_t major, minor;
	char name[32];
	struct calibration_entry entry;
	struct microbench_probe_threshold measured;

	int rc = calibration_file_device(path, &major, &minor, name, sizeof name);
	if (rc < 0)
		return rc;
	rc = calibration_file_lookup(CALIBRATION_DEVICE, major, minor, &entry);
	if (rc == 0 && entry.value[CALIBRATION_PROBE_THRESHOLD_NS]) {
		*source = PARAMETER_FILE;
		return (int64_t)entry.value[CALIBRATION_PROBE_THRESHOLD_NS];
	}
	if (!measure)
		return rc < 0 ? rc : -ENOENT;
	int64_t threshold = microbench_probe_threshold(path, &measured);
	if (threshold <= 0)
		return threshold < 0 ? threshold : -EIO;
	/* A fresh entry without the probe keeps its other values; a stale
	 * one's are stale and go. */
	if (rc != 0)
		calibration_entry_init(&entry, CALIBRATION_DEVICE, major, minor, name);
	calibration_file_stamp(&entry);
	entry.quick = true;
	entry.value[CALIBRATION_PROBE_HIT_NS] = measured.hit_median_ns;
	entry.value[CALIBRATION_PROBE_MISS_NS] = measured.miss_median_ns;
	entry.value[CALIBRATION_PROBE_THRESHOLD_NS] = (uint64_t)threshold;
	calibration_file_keep(&entry);   /* a cache: failing to keep it is no error */
	*source = PARAMETER_MEASURED;
	return threshold;
}

uint64_t parameters_page_threshold(enum parameter_source *source)
{
	struct calibration_entry entry;
	if (calibration_file_lookup(CALIBRATION_MACHINE, 0, 0, &entry) == 0 &&
	    entry.value[CALIBRATION_PAGE_THRESHOLD_NS]) {
		*source = PARAMETER_FILE;
		return entry.value[CALIBRATION_PAGE_THRESHOLD_NS];
	}
	/* §4.3.2: "it measures the time of repeated accesses to a few pages
	 * that are likely to be in memory; the time for a non-resident page
	 * is simply considered to be anything 'significantly' larger".  A
	 * fresh page's first touch (allocate+zero) is the slowest thing a
	 * page in memory does, so "larger" is counted from it. */
	struct microbench_memory memory;
	if (microbench_memory(QUICK_PAGES, &memory) == 0 && memory.alloc_zero.median_ns) {
		uint64_t t = PARAMETERS_PAGE_SLOW_FACTOR * memory.alloc_zero.median_ns;
		uint64_t floor = PARAMETERS_PAGE_SLOW_FACTOR * memory.in_memory.p99_ns;
		*source = PARAMETER_MEASURED;
		return t > floor ? t : floor;
	}
	*source = PARAMETER_DEFAULT;
	return PARAMETERS_PAGE_THRESHOLD_DEFAULT_NS;
}
