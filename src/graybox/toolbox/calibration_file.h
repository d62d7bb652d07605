/*
 * calibration_file.h - where the calibration file lives and how it is
 * read and replaced (the format is calibration.h's).
 *
 * One file per user: $XDG_STATE_HOME/discnice/calibration, or
 * ~/.local/state/discnice/calibration when XDG_STATE_HOME is unset or not
 * absolute (XDG Base Directory 0.8: state "that should persist between
 * (application) restarts, but that is not important or portable enough";
 * a measurement of this machine is exactly that).  Not the runtime dir:
 * it would be lost at every reboot, and a disk does not change at reboot.
 * The directory is made 0700, the file 0600.  A save writes a temporary
 * file beside it, fsyncs it and renames it over the old one, so a reader
 * sees the old file or the new, never a part; two writers at once lose
 * one's update, never the file.
 *
 * Functions return 0 or -errno and keep errno.
 */
#ifndef DISCNICE_TOOLBOX_CALIBRATION_FILE_H
#define DISCNICE_TOOLBOX_CALIBRATION_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "graybox/toolbox/calibration.h"

/* The file's path (-ENOENT when neither XDG_STATE_HOME nor a home
 * directory is known, -ENAMETOOLONG). */
int calibration_file_path(char *buf, size_t size);

/* Read the whole file.  -ENOENT if there is none; -EINVAL if it is not a
 * regular file (a FIFO put there is never waited on); -EBADMSG etc. as calibration_parse() (then
 * *bad_line, if given, says where). */
int calibration_file_load(struct calibration *out, unsigned *bad_line);

/* Replace the file atomically with `cal`. */
int calibration_file_save(const struct calibration *cal);

/* Add or replace one entry: the file is read (a missing or malformed one,
 * or one that is no regular file, counts as empty and is replaced), the
 * entry put, the file saved.  The file is left as it is, and the error
 * returned, when a newer discnice wrote it (a larger format version:
 * -EPROTONOSUPPORT) or when it cannot be read (-EACCES, -EFBIG, -EIO...). */
int calibration_file_store(const struct calibration_entry *entry);

/* The same for a measurement made on the way (gbp's probe threshold, MAC's
 * page threshold), kept as a cache: only into a file that reads whole or
 * is missing.  A malformed file, or one that is no regular file, is left
 * as it is (-EBADMSG, -EINVAL...): its other entries (a machine entry)
 * were lost to one bad line; `discnice calibrate`, which says it replaces
 * it, does that (calibration_file_store()).  Comments are never kept by
 * a rewrite: the file is discnice's, written whole. */
int calibration_file_keep(const struct calibration_entry *entry);

/* May a file that calibration_file_load() answered `loaded` for be
 * replaced?  Yes if it read (0), or is missing, malformed or no regular
 * file; never one a newer discnice wrote, nor one that could not be
 * read (it may hold anything). */
bool calibration_file_replaceable(int loaded);

/* The fresh entry for that scope (and device): 0; -ENOENT when there is
 * no file or no entry, -ESTALE when the entry is stale
 * (calibration_entry_fresh()), -EBADMSG when the file is malformed.  *out
 * is filled whenever an entry was found, stale or not. */
int calibration_file_lookup(enum calibration_scope scope, uint32_t dev_major, uint32_t dev_minor,
			    struct calibration_entry *out);

/* Stamp an entry with now: measured, kernel (uname -r), boot_id. */
void calibration_file_stamp(struct calibration_entry *entry);

/* The device a path's filesystem lives on: st_dev's numbers and the name
 * /sys/dev/block gives it ("-" when it has none: tmpfs, overlay, btrfs'
 * anonymous devices). */
int calibration_file_device(const char *path, uint32_t *dev_major, uint32_t *dev_minor,
			    char *name, size_t name_size);

/* The kernel release now (uname -r), for calibration_entry_fresh(). */
void calibration_file_kernel(char *buf, size_t size);

#endif
