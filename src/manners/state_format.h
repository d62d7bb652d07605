/*
 * state_format.h - the text format of the testpoint library's state file:
 * calibrated targets kept across runs of a program (MS Manners §7.1: "the
 * library persistently maintains target rates").  Pure: text in, text out;
 * the file itself (where, when, atomically) is library/state_file.c.
 *
 * Format, version 1 (manners(3), FILES):
 *
 *     discnice-manners-targets 1
 *     # comment lines and blank lines are ignored
 *     phase INDEX COUNT SAMPLES RATE REGRESS_SAMPLES X[COUNT*COUNT] Y[COUNT]
 *
 * one phase line per phase index (§4.4), fields separated by one space:
 *   INDEX            the phase index given to manners_testpoint (int)
 *   COUNT            its number of metrics, 1 .. 8
 *   SAMPLES          measurements averaged into the target (§4.3)
 *   RATE             for COUNT 1, the target rate in units per second
 *                    (eq. 4); 0 otherwise
 *   REGRESS_SAMPLES  for COUNT > 1, the testpoints in the regression
 *   X, Y             its averaged sufficient statistics (eq. 11, 12), row
 *                    by row; zeros for COUNT 1
 * Numbers are C decimal (%.17g, so doubles round-trip exactly).  A file
 * whose first line differs, or with any other line, is rejected whole.
 *
 * One optional line, at most once, says what the targets measure:
 *
 *     metric NAME
 *
 * NAME is 1 .. MANNERS_STATE_METRIC_MAX - 1 characters of [A-Za-z0-9._-].
 * The library's own files have none: their phases are the progress units
 * of manners_testpoint().  `discnice benice` and `discnice run --policy
 * manners` measure progress they choose themselves (bytes of /proc io, a
 * counter file, MiB of file I/O: src/tool/tool_targets.h), so they name
 * it, and a file of another metric - a target in bytes per second offered
 * to a counter of lines - is refused like a foreign file, never loaded.
 */
#ifndef DISCNICE_MANNERS_STATE_FORMAT_H
#define DISCNICE_MANNERS_STATE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "manners/regress.h"

#define MANNERS_STATE_MAGIC   "discnice-manners-targets"
#define MANNERS_STATE_VERSION 1
#define MANNERS_STATE_METRIC_MAX 64

/* What is kept of one phase: enough to resume calibration where it was. */
struct manners_saved_phase {
	int32_t index;
	int32_t count;
	uint64_t samples;
	double rate;
	uint64_t regress_samples;
	double x[MANNERS_REGRESS_MAX][MANNERS_REGRESS_MAX];
	double y[MANNERS_REGRESS_MAX];
};

/* The phase's calibration, as kept. */
void manners_state_capture(struct manners_saved_phase *saved, const struct manners_phase *phase);

/*
 * Seeds a phase just created (manners_phase_lookup) with what was kept of
 * the same index and count: its calibration continues from there.  0, or
 * -EINVAL when index or count differ.
 */
int manners_state_restore(struct manners_phase *phase, const struct manners_saved_phase *saved);

/* 1 if the phase can be written and read back: its count in range, its
 * rate and sums finite and non-negative where they must be; else 0. */
int manners_state_valid(const struct manners_saved_phase *p);

/*
 * The file's text for count phases into buf[size], NUL-terminated: its
 * length, -ENOSPC when it does not fit, -EINVAL for a bad phase.
 */
int manners_state_format(const struct manners_saved_phase *phases, size_t count, char *buf,
			 size_t size);

/* The same with a "metric NAME" line (metric NULL or "": none, as above);
 * -EINVAL for a NAME that is not 1 .. 63 of [A-Za-z0-9._-]. */
int manners_state_format_metric(const char *metric, const struct manners_saved_phase *phases,
				size_t count, char *buf, size_t size);

/* 1 when name may be a metric line's NAME, else 0. */
int manners_state_metric_valid(const char *name);

/*
 * Parses text[length] into phases[capacity]; *count gets the number.
 * 0; -EPROTONOSUPPORT for a header of another version (or another file
 * altogether: -EBADMSG); -EBADMSG for any malformed line, a value out of
 * range or a duplicate index; -ENOSPC for more phases than capacity.
 */
int manners_state_parse(const char *text, size_t length, struct manners_saved_phase *phases,
			size_t capacity, size_t *count);

/*
 * The same for a reader of the given metric (NULL or "": the library's, a
 * file without a metric line): -EMEDIUMTYPE, with nothing parsed, for a
 * well-formed file of another metric (its line differs, is missing, or is
 * there when none is expected); two metric lines, or a bad NAME, are
 * -EBADMSG.  manners_state_parse() is this with metric NULL.
 */
int manners_state_parse_metric(const char *text, size_t length, const char *metric,
			       struct manners_saved_phase *phases, size_t capacity, size_t *count);

#endif
