/*
 * refresh_journal.c - directory refresh's crash safety, which the paper
 * left open (graybox-icl §4.2.1, footnote 4): the journal beside DIR,
 * written a whole version at a time (each version fsynced, then renamed
 * over the last), the removal of a tree, and step 2, recovery, which reads
 * the journal and what is at DIR's name and the copy's, and finishes or
 * undoes an interrupted refresh (the decision table is refresh_plan.c's).
 */
#include "graybox/fldc/refresh_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the journal ---------------------------------------------------------------- */

int refresh_journal_lock(struct refresh *r, bool create)
{
	for (int attempt = 0; attempt < 100; attempt++) {
		int fd = openat(r->parent_fd, r->journal_name,
				O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;
			close(fd);
			return e == EWOULDBLOCK ? -EBUSY : -e;
		}
		/* A journal removed or replaced while we waited is not the journal:
		 * lock the one that is there now. */
		struct stat held, named;
		if (fstat(fd, &held) == 0 &&
		    fstatat(r->parent_fd, r->journal_name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
		    held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
			/* Only our own journal is trusted, as the next version's
			 * name is (refresh_journal_tmp_state()): one another user
			 * put beside DIR could make root's --recover remove any
			 * tree of that user's at the copy's name, or report a
			 * refresh that never happened. */
			if (held.st_uid != geteuid()) {
				close(fd);
				return -EPERM;
			}
			/* 0600 whatever the umask: made 0400 (umask 0377), a
			 * later --recover by its owner could not open it. */
			if ((held.st_mode & 07777) != 0600)
				(void)fchmod(fd, 0600);
			r->journal_fd = fd;
			return 0;
		}
		close(fd);
	}
	return -EBUSY;
}

int refresh_journal_read(struct refresh *r, struct refresh_result *res)
{
	char text[2048];
	ssize_t n = pread(r->journal_fd, text, sizeof text, 0);
	if (n < 0)
		return -errno;
	r->journal_loaded = false;
	if (n == 0)
		return 0;
	if ((size_t)n == sizeof text || refresh_journal_parse(text, (size_t)n, &r->journal) < 0 ||
	    strcmp(r->journal.name, r->name) != 0) {
		say(res, REFRESH_REFUSED, EINVAL,
		    "%s: the refresh journal %s beside it is not one this version of discnice "
		    "wrote; look at it, and remove it if it is stale", r->path, r->journal_name);
		return -EINVAL;
	}
	r->journal_loaded = true;
	return 0;
}

/* What is at the journal's next-version name, .NAME.discnice-refresh.tmp?
 * refresh_journal_write() creates it (O_EXCL), writes one version, fsyncs
 * it and renames it over the journal; a crash between the create and the
 * rename leaves it behind.  The journal is always there beside such a
 * leftover: refresh_run() creates and locks it (empty) before the first
 * version is written, and removes the leftover before the journal.  So a
 * leftover is recognised only while we hold the journal's lock (no other
 * refresh is writing one), and only as what refresh_journal_write()
 * makes: a regular file of ours with one name, holding nothing, zeros (a
 * crash before the data reached the disk) or a version of this
 * directory's journal.  Anything else at that name is somebody's file -
 * perhaps a hard link to one that matters: never opened for writing,
 * never removed. */
enum refresh_journal_tmp_state refresh_journal_tmp_state(const struct refresh *r)
{
	struct stat st;
	if (fstatat(r->parent_fd, r->journal_tmp_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? JOURNAL_TMP_NONE : JOURNAL_TMP_FOREIGN;
	if (r->journal_fd < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
	    st.st_uid != geteuid() || st.st_size >= 2048)
		return JOURNAL_TMP_FOREIGN;
	/* O_NONBLOCK: a FIFO put there since the look above must not hang us. */
	int fd = openat(r->parent_fd, r->journal_tmp_name,
			O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return JOURNAL_TMP_FOREIGN;
	char text[2048];
	struct stat held;
	ssize_t n = fstat(fd, &held) == 0 && held.st_ino == st.st_ino && held.st_dev == st.st_dev
			    ? pread(fd, text, sizeof text, 0) : -1;
	close(fd);
	if (n < 0 || (size_t)n == sizeof text)
		return JOURNAL_TMP_FOREIGN;
	bool zeros = true;
	for (ssize_t i = 0; i < n && zeros; i++)
		zeros = text[i] == '\0';
	if (zeros)
		return JOURNAL_TMP_LEFTOVER;
	struct refresh_journal journal;
	if (refresh_journal_parse(text, (size_t)n, &journal) == 0 && strcmp(journal.name, r->name) == 0)
		return JOURNAL_TMP_LEFTOVER;
	return JOURNAL_TMP_FOREIGN;
}

/* Remove a leftover next version (refresh_journal_tmp_state); 0, or -EEXIST when
 * something else is at its name. */
static int journal_tmp_clear(struct refresh *r)
{
	switch (refresh_journal_tmp_state(r)) {
	case JOURNAL_TMP_NONE:
		return 0;
	case JOURNAL_TMP_LEFTOVER:
		if (unlinkat(r->parent_fd, r->journal_tmp_name, 0) < 0 && errno != ENOENT)
			return -errno;
		return 0;
	case JOURNAL_TMP_FOREIGN:
		break;
	}
	return -EEXIST;
}

/* ---- the journal's writes ----------------------------------------------------- */

/* Write the next version beside it, lock it, fsync it, rename it over the
 * journal, fsync the parent: a crash leaves the old version or the new,
 * never a torn one.  The new version is locked before its name appears, so
 * a second refresh that opens the name finds it locked. */
int refresh_journal_write(struct refresh *r, enum refresh_phase phase, uint64_t new_ino)
{
	r->journal.phase = phase;
	r->journal.order = r->options.order;
	snprintf(r->journal.name, sizeof r->journal.name, "%s", r->name);
	r->journal.dev = (uint64_t)r->dev;
	r->journal.old_ino = r->dir_ino;
	r->journal.new_ino = new_ino;
	r->journal.pid = getpid();
	char text[2048];
	int len = refresh_journal_format(&r->journal, text, sizeof text);
	if (len < 0)
		return len;
	/* O_EXCL: the name is ours only if we make the file; whatever else is
	 * there (a user's file, a hard link to one) is never truncated. */
	int e = journal_tmp_clear(r);
	if (e < 0)
		return e;
	int fd = openat(r->parent_fd, r->journal_tmp_name,
			O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	(void)fchmod(fd, 0600); /* the journal it becomes: whatever the umask */
	errno = 0;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0 || write(fd, text, (size_t)len) != len ||
	    fsync(fd) < 0 ||
	    renameat(r->parent_fd, r->journal_tmp_name, r->parent_fd, r->journal_name) < 0 ||
	    fsync(r->parent_fd) < 0)
		e = errno ? -errno : -EIO;
	if (e < 0) {
		/* Remove what we made, if the name is still it (and not yet
		 * renamed over the journal). */
		struct stat made, named;
		if (fstat(fd, &made) == 0 &&
		    fstatat(r->parent_fd, r->journal_tmp_name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
		    made.st_ino == named.st_ino && made.st_dev == named.st_dev)
			unlinkat(r->parent_fd, r->journal_tmp_name, 0);
		close(fd);
		return e;
	}
	if (r->journal_fd >= 0)
		close(r->journal_fd);
	r->journal_fd = fd;
	r->journal_loaded = true;
	step(r);
	return 0;
}

int refresh_journal_remove(struct refresh *r)
{
	/* A leftover next version first, while the journal (and its lock)
	 * still vouch for it; something else there is left alone. */
	journal_tmp_clear(r);
	if (unlinkat(r->parent_fd, r->journal_name, 0) < 0 && errno != ENOENT)
		return -errno;
	if (fsync(r->parent_fd) < 0)
		return -errno;
	if (r->journal_fd >= 0)
		close(r->journal_fd);
	r->journal_fd = -1;
	r->journal_loaded = false;
	step(r);
	return 0;
}

/* ---- removing a tree (the partial copy, or the old one) ----------------------- */

/* The directory parent_fd/name to read, not followed if a link, and (dev
 * non-zero) only on that device (-EXDEV); NULL with *error set. */
static DIR *opendir_at(int parent_fd, const char *name, dev_t dev, int *error)
{
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		*error = -errno;
		return NULL;
	}
	struct stat st;
	if (dev && (fstat(fd, &st) < 0 || st.st_dev != dev)) {
		close(fd);
		*error = -EXDEV;
		return NULL;
	}
	DIR *d = fdopendir(fd);
	if (!d) {
		*error = -errno;
		close(fd);
	}
	return d;
}

/* rm -r of parent_fd/name, never leaving its filesystem; each entry removed
 * is a step.  A directory we may not write (a mode like 0555 copied from the
 * original) is made writable first: it is ours, or we are root. */
static int remove_tree_at(struct refresh *r, int parent_fd, const char *name, dev_t dev, int depth)
{
	if (depth > DEPTH_MAX)
		return -ELOOP;
	int e = 0;
	DIR *d = opendir_at(parent_fd, name, dev, &e);
	if (!d)
		return e;
	int fd = dirfd(d);
	bool made_writable = false;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			if (errno)
				e = -errno;
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		struct stat child;
		if (fstatat(fd, de->d_name, &child, AT_SYMLINK_NOFOLLOW) < 0) {
			e = -errno;
			break;
		}
		if (S_ISDIR(child.st_mode)) {
			e = remove_tree_at(r, fd, de->d_name, dev, depth + 1);
			if (e < 0)
				break;
			continue;
		}
		int rc = unlinkat(fd, de->d_name, 0);
		if (rc < 0 && errno == EACCES && !made_writable) {
			made_writable = true;
			if (fchmod(fd, 0700) == 0)
				rc = unlinkat(fd, de->d_name, 0);
		}
		if (rc < 0) {
			e = -errno;
			break;
		}
		step(r);
	}
	closedir(d);
	if (e < 0)
		return e;
	if (unlinkat(parent_fd, name, AT_REMOVEDIR) < 0) {
		if (errno != EACCES || depth == 0)
			return -errno;
		/* Its parent is read-only (a mode like 0555 copied or kept): make
		 * it writable - it is going too.  Never DIR's own parent. */
		if (fchmod(parent_fd, 0700) < 0 || unlinkat(parent_fd, name, AT_REMOVEDIR) < 0)
			return -errno;
	}
	step(r);
	return 0;
}

int refresh_remove_copy(struct refresh *r)
{
	int e = remove_tree_at(r, r->parent_fd, r->copy_name, r->dev, 0);
	if (e == -ENOENT)
		e = 0;
	if (e == 0 && fsync(r->parent_fd) < 0)
		e = -errno;
	return e;
}

/* ---- step 2: recovery ------------------------------------------------------------ */

static enum refresh_found found_at(const struct refresh *r, const char *name)
{
	struct stat st;
	if (fstatat(r->parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? REFRESH_FOUND_NOTHING : REFRESH_FOUND_OTHER;
	if (!S_ISDIR(st.st_mode))
		return REFRESH_FOUND_NOT_DIR;
	if ((uint64_t)st.st_dev != r->journal.dev)
		return REFRESH_FOUND_OTHER;
	if (st.st_ino == r->journal.old_ino)
		return REFRESH_FOUND_OLD;
	if (r->journal.new_ino && st.st_ino == r->journal.new_ino)
		return REFRESH_FOUND_NEW;
	return REFRESH_FOUND_OTHER;
}

static const char *found_name(enum refresh_found f)
{
	switch (f) {
	case REFRESH_FOUND_NOTHING: return "nothing";
	case REFRESH_FOUND_OLD: return "the old directory";
	case REFRESH_FOUND_NEW: return "the new directory";
	case REFRESH_FOUND_OTHER: return "a directory the journal does not know";
	case REFRESH_FOUND_NOT_DIR: return "something that is not a directory";
	}
	return "?";
}

static bool ts_after(struct timespec a, struct timespec b)
{
	return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
}

/* Was anything in the tree at dir_fd/name changed after `t` - an entry's
 * change time later (a write, a new name, a chmod), or the top's (depth
 * 0) modification time (an entry made or removed in it; its change time
 * moved with the exchange itself)?  1 with the entry's name in what, 0,
 * or -errno. */
static int tree_changed_after(int dir_fd, const char *name, struct timespec t, int depth,
			      char *what, size_t size)
{
	struct stat st;
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (ts_after(depth == 0 ? st.st_mtim : st.st_ctim, t)) {
		snprintf(what, size, "%s", name);
		return 1;
	}
	if (!S_ISDIR(st.st_mode))
		return 0;
	if (depth > DEPTH_MAX)
		return -ELOOP;
	int rc = 0;
	DIR *d = opendir_at(dir_fd, name, 0, &rc);
	if (!d)
		return rc;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		rc = tree_changed_after(dirfd(d), de->d_name, t, depth + 1, what, size);
	}
	closedir(d);
	return rc;
}

enum refresh_status refresh_recover(struct refresh *r, bool dry_run, struct refresh_result *res)
{
	memset(res, 0, sizeof *res);
	if (!r->journal_loaded) {
		if (r->journal_fd >= 0 && !dry_run) {
			/* An empty journal: a crash before its first write; nothing was
			 * done.  Remove it. */
			int e = refresh_journal_remove(r);
			if (e < 0)
				return say(res, REFRESH_STUCK, -e, "%s: removing the empty journal %s: %s",
					   r->path, r->journal_name, strerror(-e));
		}
		/* Something at the copy's name that no journal explains: the
		 * refresh itself refuses while it is there (refresh_scan()),
		 * so "nothing to do" would leave the user stuck unwarned. */
		if (found_at(r, r->copy_name) != REFRESH_FOUND_NOTHING)
			return say(res, REFRESH_REFUSED, EEXIST, "%s: no interrupted refresh is "
				   "journalled, but %s exists beside it, which no journal explains: "
				   "nothing touched; look at it, and move it away if it is stale",
				   r->path, r->copy_name);
		return say(res, REFRESH_OK, 0, "%s: no interrupted refresh", r->path);
	}
	enum refresh_found at_name = found_at(r, r->name), at_copy = found_at(r, r->copy_name);
	enum refresh_recovery decision =
		refresh_recovery_decide(r->journal.phase, at_name, at_copy);
	const char *phase = refresh_phase_name(r->journal.phase);
	if (decision == REFRESH_RECOVER_REFUSE)
		return say(res, REFRESH_REFUSED, EINVAL,
			   "%s: the journal %s (phase %s) does not match what is there (%s at the "
			   "name, %s at %s); nothing touched - look at them by hand",
			   r->path, r->journal_name, phase, found_name(at_name), found_name(at_copy),
			   r->copy_name);
	/* Phase "copied" and the trees exchanged: a crash came in the moment
	 * after the exchange, when refresh looks whether a file of either
	 * tree was opened and may exchange back.  Whatever tree recovery
	 * would remove - the old one at the copy's name, or the new one
	 * after an exchange back - may have been written to since the
	 * journal said "copied" (an opener of an old file waits out the
	 * lease, then writes): then it is nobody's partial copy, and which
	 * tree to keep is the user's call.  The journal's change time
	 * (renamed into place after its write) is when it said so. */
	struct stat jst;
	if (r->journal.phase == REFRESH_PHASE_COPIED && r->journal_fd >= 0 &&
	    fstat(r->journal_fd, &jst) == 0 &&
	    (at_copy == REFRESH_FOUND_OLD || at_copy == REFRESH_FOUND_NEW)) {
		char changed[NAME_MAX + 1] = "";
		int c = tree_changed_after(r->parent_fd, r->copy_name, jst.st_ctim, 0, changed,
					   sizeof changed);
		if (c != 0)
			return say(res, REFRESH_REFUSED, c < 0 ? -c : EBUSY,
				   "%s: the journal %s (phase copied) says the %s tree at %s is "
				   "to be removed, but %s in it was changed after the copy was made "
				   "(%s): nothing touched - keep what you want of it, remove it, then "
				   "run 'discnice refresh --recover %s'", r->path, r->journal_name,
				   at_copy == REFRESH_FOUND_OLD ? "old" : "new", r->copy_name,
				   changed[0] ? changed : "something",
				   c < 0 ? strerror(-c) : "written by someone while refresh stopped",
				   r->path);
	}
	const char *what = decision == REFRESH_RECOVER_UNDO
				   ? "undone: the exchange had not happened; the partial copy"
				   : "finished: the new directory is in place; the old one";
	if (dry_run)
		return say(res, REFRESH_OK, 0, "%s: an interrupted refresh (phase %s) would be %s at "
			   "%s would be removed", r->path, phase, what, r->copy_name);
	int e = refresh_remove_copy(r);
	if (e == 0)
		e = refresh_journal_remove(r);
	if (e < 0)
		return say(res, REFRESH_STUCK, -e, "%s: recovering an interrupted refresh: removing "
			   "%s: %s; run 'discnice refresh --recover' again", r->path, r->copy_name,
			   strerror(-e));
	return say(res, REFRESH_OK, 0, "%s: an interrupted refresh (phase %s) was %s at %s was "
		   "removed", r->path, phase, what, r->copy_name);
}
