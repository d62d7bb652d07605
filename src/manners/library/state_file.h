/*
 * state_file.h - where a program's calibrated targets are kept between
 * runs, and reading and writing that file (MS Manners §7.1).  The text
 * format is src/manners/state_format.h.
 *
 * The paper keeps the file beside the program's executable; a user's
 * program directory is often not writable (/usr/bin), so here it is
 *     $XDG_STATE_HOME/discnice/manners/NAME-HASH.targets
 * ($XDG_STATE_HOME defaults to ~/.local/state), NAME the basename of the
 * program and HASH 16 hex digits of FNV-1a 64 of its full path, so two
 * programs of one name do not share targets.  The program is
 * /proc/self/exe unless the setting "program" names it (an interpreted
 * job: the Python binding names its script).
 *
 * `discnice benice` and `discnice run --policy manners` keep their targets
 * beside the library's, one file per program and metric (the progress they
 * measure: src/tool/tool_targets.h), as
 *     $XDG_STATE_HOME/discnice/manners/NAME-HASH.METRIC.targets
 * with NAME and HASH as above, and a "metric METRIC" line inside
 * (state_format.h), so that a program regulated by the library, by benice
 * and by run keeps three targets in three units, none overwriting another.
 * The tool is linked with this file (Makefile), not with the library.
 */
#ifndef DISCNICE_MANNERS_LIBRARY_STATE_FILE_H
#define DISCNICE_MANNERS_LIBRARY_STATE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "manners/settings.h"
#include "manners/state_format.h"

/* The state file's path into buf[size].  0, -ENAMETOOLONG, -ENOENT (no
 * $HOME and no $XDG_STATE_HOME). */
int state_file_path(const struct manners_settings *settings, char *buf, size_t size);

/*
 * The same from its parts: state_dir ("" or NULL: $XDG_STATE_HOME's, as
 * above), program (its full path; names and hashes the file) and metric
 * (NULL or "": the library's NAME-HASH.targets; else a name of
 * state_format.h's metric line: NAME-HASH.METRIC.targets).  0,
 * -ENAMETOOLONG, -ENOENT (no $HOME and no $XDG_STATE_HOME), -EINVAL for a
 * bad metric.
 */
int state_file_path_for(const char *state_dir, const char *program, const char *metric, char *buf,
			size_t size);

/* FNV-1a 64 of text: the HASH of the file names above. */
uint64_t state_file_hash(const char *text);

/*
 * Reads and parses the file.  0; -ENOENT when there is none; the parser's
 * -EBADMSG / -EPROTONOSUPPORT / -ENOSPC; -EFBIG for a file too large to be
 * ours; -EINVAL for one that is not a regular file (a FIFO there is never
 * waited on); another -errno when it cannot be read.
 */
int state_file_load(const char *path, struct manners_saved_phase *phases, size_t capacity,
		    size_t *count);

/* The same for a reader of metric (manners_state_parse_metric(): -EMEDIUMTYPE
 * for a file of another metric); state_file_load() is metric NULL. */
int state_file_load_metric(const char *path, const char *metric,
			   struct manners_saved_phase *phases, size_t capacity, size_t *count);

/* Writes the file atomically (a temporary file, fsync, rename), making its
 * directory (0700) if needed.  0 or -errno. */
int state_file_save(const char *path, const struct manners_saved_phase *phases, size_t count);

/* The same with a metric line (NULL: none, as state_file_save()). */
int state_file_save_metric(const char *path, const char *metric,
			   const struct manners_saved_phase *phases, size_t count);

#endif
