/*
 * refresh_internal.h - what the four parts of directory refresh share
 * (graybox-icl §4.2.1; the steps are in refresh.h).  Not installed, not
 * part of any library's interface:
 *   refresh.c          steps 1 and 4: the directory looked at, the run
 *                      (journal, copy, the last look, the exchange), the end;
 *   refresh_journal.c  the crash safety: the journal's versions, removing
 *                      a tree, and step 2, recovery;
 *   refresh_scan.c     step 3: every entry checked, files in use, leases;
 *   refresh_copy.c     step 4's copy of one entry, faithful, in new blocks.
 */
#ifndef DISCNICE_FLDC_REFRESH_INTERNAL_H
#define DISCNICE_FLDC_REFRESH_INTERNAL_H

#include "graybox/fldc/refresh.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#define COPY_BUFFER (256 * 1024)
#define DEPTH_MAX 256
/* ext4/ext2 inode flags that the filesystem sets itself (extents, hashed
 * directory, inline data, huge file): not the user's chattr attributes. */
#define FLAGS_OF_THE_FILESYSTEM (FS_EXTENT_FL | FS_INDEX_FL | FS_INLINE_DATA_FL | FS_HUGE_FILE_FL)

struct entry {
	char *path;            /* relative to DIR; "" for DIR itself          */
	const char *name;      /* the last component, inside path             */
	size_t parent;         /* index of the directory holding it           */
	enum refresh_kind kind;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	uint32_t nlink;
	uint64_t ino, size;
	struct timespec atime, mtime, ctime;
	size_t link_to;        /* SIZE_MAX, or the first name of its hard-link group */
};

/* Write leases on every regular file of one tree (refresh_lease.h): the
 * kernel's word that no process of any user has one open, and its notice
 * when one starts to.  Each inode once (a hard link's first name). */
struct leases {
	int *fds;          /* per entry, -1 where none                    */
	size_t n;
	size_t refused;    /* files the kernel would not lease to us      */
	int refused_error; /* the first such refusal's errno              */
};

struct refresh {
	struct refresh_options options;
	char *path;                  /* canonical DIR                           */
	char name[REFRESH_NAME_MAX + 1];
	char journal_name[REFRESH_NAME_MAX + 1];
	char journal_tmp_name[REFRESH_NAME_MAX + 1];
	char copy_name[REFRESH_NAME_MAX + 1];
	int parent_fd;
	int journal_fd;              /* locked (flock LOCK_EX) while >= 0      */
	bool journal_loaded;         /* a non-empty journal was read            */
	struct refresh_journal journal;
	dev_t dev;
	uint64_t dir_ino;
	bool root;                   /* euid 0: may chown, may copy trusted.* */
	struct entry *entries;
	size_t n_entries, cap_entries;
	struct refresh_counts counts;
	unsigned long steps;
	char *buffer;
	struct leases leases[2];     /* the old tree's, the copy's: held from
				      * the last look until after the exchange;
				      * undo() and refresh_end() release them */
};

/* ---- small helpers ---------------------------------------------------------- */

static inline enum refresh_status say(struct refresh_result *res, enum refresh_status status,
				      int error, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline enum refresh_status say(struct refresh_result *res, enum refresh_status status,
				      int error, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(res->message, sizeof res->message, fmt, ap);
	va_end(ap);
	res->status = status;
	res->error = error;
	return status;
}

/* The testing hook and the count (refresh.h: kill_at). */
static inline void step(struct refresh *r)
{
	r->steps++;
	if (r->options.kill_at && r->steps == r->options.kill_at)
		raise(SIGKILL);
}

static inline int statx_at(int dirfd, const char *name, struct statx *stx)
{
	return statx(dirfd, *name ? name : ".", AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH),
		     STATX_BASIC_STATS, stx);
}

static inline struct timespec ts_of(struct statx_timestamp t)
{
	return (struct timespec){ .tv_sec = t.tv_sec, .tv_nsec = t.tv_nsec };
}

static inline bool ts_equal(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static inline const char *shown(const struct entry *e)
{
	return *e->path ? e->path : ".";
}

/* refresh.c: opened beneath DIR, never through a symbolic link */
int refresh_open_beneath(int root_fd, const char *path, int flags);
int refresh_open_quietly(int root_fd, const char *path, int flags);
int refresh_open_dir(struct refresh *r, bool copy, size_t index);

/* refresh_journal.c */
int refresh_journal_lock(struct refresh *r, bool create);
int refresh_journal_read(struct refresh *r, struct refresh_result *res);
enum refresh_journal_tmp_state { JOURNAL_TMP_NONE, JOURNAL_TMP_LEFTOVER, JOURNAL_TMP_FOREIGN };
enum refresh_journal_tmp_state refresh_journal_tmp_state(const struct refresh *r);
int refresh_journal_write(struct refresh *r, enum refresh_phase phase, uint64_t new_ino);
int refresh_journal_remove(struct refresh *r);
/* The tree at the copy's name: the partial copy, or the old tree after
 * the exchange. */
int refresh_remove_copy(struct refresh *r);

/* refresh_scan.c (refresh_scan() itself is in refresh.h) */
int refresh_open_files_check(struct refresh *r, struct refresh_result *res);
int refresh_leases_take(struct refresh *r, bool copy, struct leases *l, size_t *busy);
size_t refresh_leases_broken(const struct leases *l);
void refresh_leases_release(struct leases *l);

/* refresh_copy.c */
void refresh_drop_inherited_acls(int fd);
int refresh_drop_inherited_flags(int fd);
int refresh_copy_entry(struct refresh *r, size_t i, int src_dir, int dst_dir, int dst_root,
		       const char **failed);
int refresh_finish_dirs(struct refresh *r, const char **failed, size_t *at);

#endif
