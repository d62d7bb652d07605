/*
 * tool_targets.h - the calibrated targets of `discnice benice` and
 * `discnice run --policy manners`, kept across runs (issue #10: "Targets
 * persist across restarts, per program, under $XDG_STATE_HOME"; MS Manners
 * §7.1: "the library persistently maintains target rates").
 *
 * Same files, format and rules as the testpoint library's
 * (src/manners/library/state_file.h, src/manners/state_format.h,
 * library.c), so there is one documented format (manners(3), FILES):
 *  - the file is $XDG_STATE_HOME/discnice/manners/NAME-HASH.METRIC.targets,
 *    NAME and HASH those of the job's program (its executable's full path,
 *    links resolved as in /proc/PID/exe; a script with "#!" is its own
 *    program), METRIC what the progress
 *    counts (targets_metric_name()), also written inside as a "metric"
 *    line: a target of bytes per second is never loaded for a counter of
 *    lines, nor the library's own for either;
 *  - loaded before the job starts; a phase restored from it goes on
 *    calibrating from the samples kept - past the bootstrap if the run that
 *    saved it got past it - and skips probation (§4.3), as library.c's
 *    phase_prepare() does;
 *  - saved every MANNERS_SAVE_INTERVAL_DEFAULT (60 s) while it changes, and
 *    at the end, atomically (rename);
 *  - a corrupt file, another version's, or another metric's: one warning,
 *    ignored, and rewritten at the next save.
 * A state-file problem never stops the job: at worst it calibrates afresh.
 * Two runs of one program at once: the last to save wins (each file is
 * whole, never a mix).
 */
#ifndef DISCNICE_TOOL_TARGETS_H
#define DISCNICE_TOOL_TARGETS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "manners/regress.h"
#include "manners/state_format.h"

/* The metric names (state_format.h's metric line, the file's METRIC). */
#define TARGETS_METRIC_BENICE_IO   "benice-io"    /* rchar + wchar, bytes  */
#define TARGETS_METRIC_BENICE_FILE "benice-file"  /* the program's counter */
#define TARGETS_METRIC_BENICE_CMD  "benice-cmd"   /* + "-" HASH of COMMAND */
#define TARGETS_METRIC_RUN         "run-manners"  /* MiB read, MiB written */

struct targets_store {
	bool persist;              /* false: off, or no file could be named */
	char path[PATH_MAX];
	char metric[MANNERS_STATE_METRIC_MAX];
	struct manners_saved_phase kept; /* phase 0, the only one the tools use */
	bool have_kept;            /* the file had it                        */
	bool restored;             /* it seeded the controller               */
	uint64_t restored_samples;
	bool rewrite;              /* the file was bad: write it even unchanged */
	bool changed;
	uint64_t last_save_ns;
};

/*
 * The metric of a benice progress source into buf[size]: kind "io",
 * "file" or "cmd" (tool_progress.h), command its COMMAND for "cmd" (whose
 * text decides what is counted, so it is part of the name: benice-cmd-
 * and 16 hex digits of its FNV-1a 64).  0, or -EINVAL.
 */
int targets_metric_name(const char *kind, const char *command, char *buf, size_t size);

/*
 * Names the file and loads it.  persist false: nothing is read or written.
 * state_file: the file to use ("" or NULL: named after program and metric
 * under $XDG_STATE_HOME).  program: the job's executable (full path); NULL
 * when it cannot be told, which with no state_file keeps nothing.  Every
 * problem is at most one warning (discnice: ...), never an error.
 */
void targets_open(struct targets_store *s, bool persist, const char *state_file,
		  const char *program, const char *metric, uint64_t now_ns);

/*
 * Phase 0 of count metrics made in the controller's table and seeded with
 * what was kept: true when it was (no bootstrap left if it was over, no
 * probation); false when nothing was kept, or it was for another number of
 * metrics (one warning; calibrated afresh and rewritten).
 */
bool targets_restore(struct targets_store *s, struct manners_phase_table *table, int count);

/* After a testpoint: phase 0 (NULL or empty: nothing yet) captured, and
 * saved when MANNERS_SAVE_INTERVAL_DEFAULT has passed since the last save. */
void targets_update(struct targets_store *s, const struct manners_phase *phase, uint64_t now_ns);

/* At the end: captured and saved if anything changed (or the file was bad). */
void targets_close(struct targets_store *s, const struct manners_phase *phase, uint64_t now_ns);

#endif
