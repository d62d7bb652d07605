/*
 * tool_targets.c - benice's and run --policy manners' targets kept across
 * runs (see tool_targets.h), with the library's file code
 * (src/manners/library/state_file.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manners/library/state_file.h"
#include "manners/settings.h"
#include "tool/tool_msg.h"
#include "tool/tool_targets.h"

#define TARGETS_FILE_PHASES_MAX 256

int targets_metric_name(const char *kind, const char *command, char *buf, size_t size)
{
	int rc;
	if (kind == NULL || buf == NULL || size == 0)
		return -EINVAL;
	if (strcmp(kind, "io") == 0)
		rc = snprintf(buf, size, "%s", TARGETS_METRIC_BENICE_IO);
	else if (strcmp(kind, "file") == 0)
		rc = snprintf(buf, size, "%s", TARGETS_METRIC_BENICE_FILE);
	else if (strcmp(kind, "cmd") == 0 && command != NULL)
		rc = snprintf(buf, size, "%s-%016llx", TARGETS_METRIC_BENICE_CMD,
			      (unsigned long long)state_file_hash(command));
	else if (strcmp(kind, "run") == 0)
		rc = snprintf(buf, size, "%s", TARGETS_METRIC_RUN);
	else
		return -EINVAL;
	return rc < 0 || (size_t)rc >= size ? -EINVAL : 0;
}

void targets_open(struct targets_store *s, bool persist, const char *state_file,
		  const char *program, const char *metric, uint64_t now_ns)
{
	memset(s, 0, sizeof *s);
	s->last_save_ns = now_ns;
	if (!persist)
		return;
	snprintf(s->metric, sizeof s->metric, "%s", metric);
	int rc = 0;
	if (state_file != NULL && state_file[0] != '\0') {
		if (snprintf(s->path, sizeof s->path, "%s", state_file) >= (int)sizeof s->path)
			rc = -ENAMETOOLONG;
	} else if (program == NULL) {
		rc = -ESRCH;
	} else {
		/* Links resolved, as /proc/PID/exe (--pid) and the library's
		 * /proc/self/exe show the program: /usr/bin/sh and dash are one. */
		char real[PATH_MAX];
		if (realpath(program, real) != NULL)
			program = real;
		rc = state_file_path_for(NULL, program, metric, s->path, sizeof s->path);
	}
	if (rc < 0) {
		warnf("no state file (%s): the calibrated target will not be kept",
		      rc == -ESRCH    ? "cannot tell the job's program"
		      : rc == -ENOENT ? "neither XDG_STATE_HOME nor HOME is an absolute path; "
					"give benice --state-file or run --manners-state-file"
				      : strerror(-rc));
		return;
	}
	s->persist = true;
	size_t count = 0;
	/* Room for as many phases as the library keeps (library.c), so that
	 * its files are refused for their metric, not their size. */
	static struct manners_saved_phase phases[TARGETS_FILE_PHASES_MAX];
	rc = state_file_load_metric(s->path, s->metric, phases, TARGETS_FILE_PHASES_MAX, &count);
	if (rc == -ENOENT)
		return;
	if (rc == -EBADMSG || rc == -ENOSPC || rc == -EFBIG || rc == -EPROTONOSUPPORT ||
	    rc == -EMEDIUMTYPE) {
		const char *why = rc == -EPROTONOSUPPORT ? "another version's state file"
				  : rc == -EMEDIUMTYPE ? "the targets of another progress metric"
							: "not a valid state file";
		warnf("ignoring %s: %s; it will be rewritten", s->path, why);
		s->rewrite = true;
		return;
	}
	if (rc < 0) {
		/* Unreadable where it is (a directory in the way, no
		 * permission, a symbolic link): writing there would fail too,
		 * so say it once, here, and keep nothing. */
		warnf("cannot read %s: %s; the calibrated target will not be kept", s->path,
		      rc == -EINVAL ? "not a regular file" : strerror(-rc));
		s->persist = false;
		return;
	}
	for (size_t k = 0; k < count; k++)
		if (phases[k].index == 0) {
			s->kept = phases[k];
			s->have_kept = true;
		}
}

bool targets_restore(struct targets_store *s, struct manners_phase_table *table, int count)
{
	if (!s->persist || !s->have_kept)
		return false;
	s->have_kept = false; /* once */
	if (s->kept.count != count) {
		warnf("ignoring %s: its target is for %d metric(s), this progress has %d; "
		      "calibrating afresh (it will be rewritten)", s->path, (int)s->kept.count, count);
		s->rewrite = true;
		return false;
	}
	struct manners_phase *phase;
	if (manners_phase_lookup(table, 0, count, &phase) < 0 ||
	    manners_state_restore(phase, &s->kept) < 0)
		return false;
	/* As library.c's phase_prepare(): a target kept from an earlier run
	 * is no loaded-start guess, so no probation (§4.3). */
	phase->calib.config.probation_ns = 0;
	s->restored = true;
	s->restored_samples = s->kept.samples;
	return true;
}

static void save(struct targets_store *s, const struct manners_phase *phase, uint64_t now_ns)
{
	struct manners_saved_phase saved;
	size_t count = 0;
	if (phase != NULL && phase->count > 0 && phase->calib.samples > 0) {
		manners_state_capture(&saved, phase);
		count = 1;
	}
	s->last_save_ns = now_ns;
	if (count == 0 && !s->rewrite)
		return; /* nothing learnt: leave what is there */
	int rc = state_file_save_metric(s->path, s->metric, &saved, count);
	if (rc < 0) {
		/* Once: the job runs on, calibrating as if nothing was kept. */
		warnf("cannot write %s: %s; the calibrated target will not be kept", s->path,
		      strerror(-rc));
		s->persist = false;
		return;
	}
	s->rewrite = s->changed = false;
}

void targets_update(struct targets_store *s, const struct manners_phase *phase, uint64_t now_ns)
{
	if (!s->persist)
		return;
	s->changed = true;
	if (now_ns - s->last_save_ns >= (uint64_t)MANNERS_SAVE_INTERVAL_DEFAULT)
		save(s, phase, now_ns);
}

void targets_close(struct targets_store *s, const struct manners_phase *phase, uint64_t now_ns)
{
	if (s->persist && (s->changed || s->rewrite))
		save(s, phase, now_ns);
}
