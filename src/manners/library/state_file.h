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
 */
#ifndef DISCNICE_MANNERS_LIBRARY_STATE_FILE_H
#define DISCNICE_MANNERS_LIBRARY_STATE_FILE_H

#include <stddef.h>

#include "manners/settings.h"
#include "manners/state_format.h"

/* The state file's path into buf[size].  0, -ENAMETOOLONG, -ENOENT (no
 * $HOME and no $XDG_STATE_HOME). */
int state_file_path(const struct manners_settings *settings, char *buf, size_t size);

/*
 * Reads and parses the file.  0; -ENOENT when there is none; the parser's
 * -EBADMSG / -EPROTONOSUPPORT / -ENOSPC; -EFBIG for a file too large to be
 * ours; another -errno when it cannot be read.
 */
int state_file_load(const char *path, struct manners_saved_phase *phases, size_t capacity,
		    size_t *count);

/* Writes the file atomically (a temporary file, fsync, rename), making its
 * directory (0700) if needed.  0 or -errno. */
int state_file_save(const char *path, const struct manners_saved_phase *phases, size_t count);

#endif
