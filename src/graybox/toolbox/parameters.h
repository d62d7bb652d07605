/*
 * parameters.h - the performance parameters a gray-box layer asks for,
 * from the calibration file when it holds a fresh value, else measured
 * now (graybox-icl §5: "Each ICL can then search this file for the
 * desired information; if it does not yet exist, the ICL must determine
 * the best way to acquire the information and whether or not it should
 * update the common repository").  The answers to the last question:
 *
 *   probe threshold  measured now (microbench_probe_threshold(), ~0.1 s)
 *                    and stored as a quick device entry: every `discnice
 *                    run` after it reuses it, and gbp (fccd_plan.c) where
 *                    the kernel counted no read of its timed probes -
 *                    libgraybox's gbp_order() too: this measurement is
 *                    `discnice calibrate`'s own, no lesser answer, and
 *                    8 MiB written per call would be too dear to repeat.
 *   page threshold   MAC's quick self-measurement of §4.3.2 (a few pages
 *                    that are in memory; "slow" is anything significantly
 *                    larger), not stored: it never touches a disk, so it
 *                    is a lesser answer than `discnice calibrate`'s, and a
 *                    library should not write into its host's home.
 */
#ifndef DISCNICE_TOOLBOX_PARAMETERS_H
#define DISCNICE_TOOLBOX_PARAMETERS_H

#include <stdbool.h>
#include <stdint.h>

enum parameter_source {
	PARAMETER_FILE,        /* a fresh entry of the calibration file    */
	PARAMETER_MEASURED,    /* measured now (and stored, for the probe) */
	PARAMETER_DEFAULT,     /* nothing worked: a built-in guess         */
	PARAMETER_GIVEN,       /* given by the caller (memprobe --threshold) */
};

const char *parameter_source_name(enum parameter_source source);

/* The cache probe's hit/miss threshold for files on path's filesystem,
 * in ns, from the file or, with measure, measured on a scratch file in
 * path (then a directory) and stored.  Returns > 0, or -errno when
 * neither worked (no fresh entry and not measured; tmpfs, path not
 * writable). */
int64_t parameters_probe_threshold(const char *path, bool measure, enum parameter_source *source);

/* "Significantly larger" (§4.3.2) for MAC's quick self-measurement: a
 * page is slow when its write takes this many times the median
 * allocate+zero time of fresh pages. */
#define PARAMETERS_PAGE_SLOW_FACTOR 10u
/* When even the quick measurement fails: a swap-in from a disk takes
 * tens of microseconds, a first touch about one. */
#define PARAMETERS_PAGE_THRESHOLD_DEFAULT_NS 10000u

/* MAC's in-memory/out-of-memory threshold in ns: the machine entry's
 * page_threshold_ns if fresh, else the quick self-measurement.  Never
 * fails (the default as the last resort). */
uint64_t parameters_page_threshold(enum parameter_source *source);

#endif
