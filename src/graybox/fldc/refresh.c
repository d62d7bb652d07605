/*
 * refresh.c - directory refresh (graybox-icl §4.2.1-4.2.2), the I/O half:
 * steps 1 and 4 (the directory looked at; the run: journal, copy, the last
 * look, the exchange).  Step 2 and the journal are in refresh_journal.c,
 * step 3 in refresh_scan.c, the copy of one entry in refresh_copy.c; the
 * order, the journal's text and the recovery table are pure, in
 * refresh_plan.c.  See refresh.h for the steps.
 *
 * Why each choice:
 *   - The copy is written with read(2)/write(2), never copy_file_range(2):
 *     on btrfs and XFS that may share the extents (a reflink), and the
 *     point of a refresh is new blocks allocated in creation order.
 *   - Holes are kept: SEEK_DATA/SEEK_HOLE find the data, ftruncate sets the
 *     size.  Preallocated but unwritten ranges read as holes too (or, once
 *     cached, as zeros, which are not written); they are reserved again
 *     from FIEMAP (copy_preallocation()).
 *   - Files are read with O_NOATIME where allowed (owner or CAP_FOWNER), so
 *     a refresh that stops half-way leaves the old files' access times as
 *     they were; the copy gets the times lstat saw before anything was read.
 *   - Everything is opened beneath DIR with openat2(RESOLVE_BENEATH |
 *     RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV) where the kernel has it, so a
 *     directory swapped for a symbolic link during the copy is not followed.
 *   - The exchange is renameat2(RENAME_EXCHANGE) (fs/namei.c: both names
 *     swap in one step), so at every instant DIR's name holds a complete
 *     tree: the old one until the exchange, the new one after it.
 */
#include "graybox/fldc/refresh_internal.h"
#include "graybox/device.h"
#include "graybox/fldc/refresh_lease.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers -------------------------------------------------------------------- */

int refresh_open_beneath(int root_fd, const char *path, int flags)
{
	if (!*path)
		path = ".";
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV,
	};
	long fd = syscall(SYS_openat2, root_fd, path, &how, sizeof how);
	if (fd < 0 && errno == ENOSYS)
		fd = openat(root_fd, path, flags | O_CLOEXEC | O_NOFOLLOW);
	return (int)fd;
}

/* O_NOATIME where the kernel allows it (fs/namei.c: may_open_noatime: the
 * owner or CAP_FOWNER), so that looking does not change the access time. */
int refresh_open_quietly(int root_fd, const char *path, int flags)
{
	int fd = refresh_open_beneath(root_fd, path, flags | O_NOATIME);
	if (fd < 0 && errno == EPERM)
		fd = refresh_open_beneath(root_fd, path, flags);
	return fd;
}

/* Open directory `index` of the old tree (src) or of the copy (dst). */
int refresh_open_dir(struct refresh *r, bool copy, size_t index)
{
	int root = openat(r->parent_fd, copy ? r->copy_name : r->name,
			  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0 || index == 0)
		return root;
	int fd = refresh_open_beneath(root, r->entries[index].path, O_RDONLY | O_DIRECTORY);
	int e = errno;
	close(root);
	errno = e;
	return fd;
}

/* ---- step 1: the directory ---------------------------------------------------- */

/* One field of a /proc/PID/mountinfo line, its \ooo escapes (space, tab,
 * newline, backslash: fs/proc_namespace.c mangle()) undone, into out; the
 * rest of the line after it. */
static const char *mountinfo_field(const char *at, char *out, size_t size)
{
	size_t n = 0;
	while (*at == ' ')
		at++;
	for (; *at && *at != ' ' && *at != '\n'; at++) {
		char c = *at;
		if (c == '\\' && at[1] >= '0' && at[1] <= '3' && at[2] >= '0' && at[2] <= '7' &&
		    at[3] >= '0' && at[3] <= '7') {
			c = (char)((at[1] - '0') * 64 + (at[2] - '0') * 8 + (at[3] - '0'));
			at += 3;
		}
		if (n + 1 < size)
			out[n++] = c;
	}
	out[n] = '\0';
	return at;
}

/* One mountinfo line: is it a mount of device dev?  Then its root in the
 * filesystem and its mount point (PATH_MAX each). */
static bool mount_of(const char *line, dev_t dev, char *root, char *point)
{
	unsigned id, parent, major, minor;
	int used = 0;
	if (sscanf(line, "%u %u %u:%u%n", &id, &parent, &major, &minor, &used) != 4 ||
	    makedev(major, minor) != dev)
		return false;
	mountinfo_field(mountinfo_field(line + used, root, PATH_MAX), point, PATH_MAX);
	return true;
}

/* Is path `inner` path `outer` or below it? */
static bool path_within(const char *inner, const char *outer)
{
	size_t n = strlen(outer);
	if (n == 1 && outer[0] == '/')
		return inner[0] == '/';
	return strncmp(inner, outer, n) == 0 && (inner[n] == '\0' || inner[n] == '/');
}

/*
 * DIR, or a directory in it, bind-mounted somewhere else (a container's
 * volume, mount --bind DIR/sub /srv/view): that mount holds the old
 * tree's inode, which the exchange moves to the copy's name and the end
 * removes - the mount is left on a deleted, empty directory, and writes
 * through it fail.  Found in this process's mount table: a mount of DIR's
 * filesystem whose root is DIR's path in it, or below.  (Mounts in other
 * mount namespaces are not seen.)  0, or 1 with *where set.
 */
static int bound_elsewhere(const char *dir_abs, dev_t dev, char *where, size_t size)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return 0;
	char *line = NULL;
	size_t cap = 0;
	char root[PATH_MAX], point[PATH_MAX], in_fs[PATH_MAX] = "";
	size_t best = 0;
	/* First: the mount DIR is reached through, and DIR's path in its
	 * filesystem. */
	while (getline(&line, &cap, f) > 0) {
		if (!mount_of(line, dev, root, point))
			continue;
		size_t len = strlen(point);
		if (!path_within(dir_abs, point) || len < best)
			continue;
		best = len;
		const char *rest = dir_abs + (len == 1 ? 0 : len);
		snprintf(in_fs, sizeof in_fs, "%s%s", strcmp(root, "/") == 0 ? "" : root, rest);
	}
	int found = 0;
	if (in_fs[0]) {
		rewind(f);
		while (!found && getline(&line, &cap, f) > 0) {
			if (!mount_of(line, dev, root, point))
				continue;
			/* A mount inside DIR is the scan's to refuse (it
			 * crosses filesystems): only mounts elsewhere here. */
			if (path_within(root, in_fs) && !path_within(point, dir_abs)) {
				snprintf(where, size, "%s", point);
				found = 1;
			}
		}
	}
	free(line);
	fclose(f);
	return found;
}

enum refresh_status refresh_begin(const char *path, const struct refresh_options *options,
				  struct refresh **out, struct refresh_result *res)
{
	memset(res, 0, sizeof *res);
	*out = NULL;
	struct refresh *r = calloc(1, sizeof *r);
	if (!r)
		return say(res, REFRESH_REFUSED, ENOMEM, "out of memory");
	r->options = *options;
	r->parent_fd = r->journal_fd = -1;
	r->root = geteuid() == 0;

	/* A symbolic link is not the directory: refreshing its target would put
	 * the journal beside the target, where nobody looks. */
	char *trimmed = strdup(path);
	if (!trimmed) {
		free(r);
		return say(res, REFRESH_REFUSED, ENOMEM, "out of memory");
	}
	for (size_t n = strlen(trimmed); n > 1 && trimmed[n - 1] == '/'; n--)
		trimmed[n - 1] = '\0';
	struct stat st;
	enum refresh_status status = REFRESH_REFUSED;
	if (lstat(trimmed, &st) < 0) {
		say(res, status, errno, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (S_ISLNK(st.st_mode)) {
		say(res, status, ENOTDIR, "%s: a symbolic link; give the directory itself", path);
		goto fail;
	}
	if (!S_ISDIR(st.st_mode)) {
		say(res, status, ENOTDIR, "%s: not a directory", path);
		goto fail;
	}
	r->path = realpath(trimmed, NULL);
	if (!r->path) {
		say(res, status, errno, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (strcmp(r->path, "/") == 0) {
		say(res, status, EBUSY, "/: refusing to refresh the root directory");
		goto fail;
	}
	char *slash = strrchr(r->path, '/');
	size_t name_len = strlen(slash + 1);
	if (name_len > REFRESH_DIR_NAME_MAX) {
		say(res, status, ENAMETOOLONG, "%s: the name is longer than %zu bytes, too long for "
		    "the journal's name beside it", r->path, (size_t)REFRESH_DIR_NAME_MAX);
		goto fail;
	}
	memcpy(r->name, slash + 1, name_len + 1);
	snprintf(r->journal_name, sizeof r->journal_name, ".%s" REFRESH_JOURNAL_SUFFIX, r->name);
	snprintf(r->journal_tmp_name, sizeof r->journal_tmp_name, ".%s" REFRESH_JOURNAL_TMP_SUFFIX,
		 r->name);
	snprintf(r->copy_name, sizeof r->copy_name, ".%s" REFRESH_COPY_SUFFIX, r->name);
	{
		char *parent = slash == r->path ? strdup("/") : strndup(r->path, (size_t)(slash - r->path));
		if (!parent) {
			say(res, status, ENOMEM, "out of memory");
			goto fail;
		}
		r->parent_fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		int e = errno;
		free(parent);
		if (r->parent_fd < 0) {
			say(res, status, e, "%s: its parent directory: %s", r->path, strerror(e));
			goto fail;
		}
	}
	/* sysfs, /proc: every size is made up and nothing there is a file
	 * to rewrite (a dry run planned "3 files (12.00 KiB)", then the run
	 * stopped at EACCES). */
	const char *pseudo = device_fd_on_pseudo_fs(r->parent_fd);
	if (pseudo) {
		say(res, status, EINVAL, "%s: on %s, a pseudo file system: nothing there can be "
		    "rewritten", r->path, pseudo);
		goto fail;
	}
	struct statx dir, parent;
	if (statx_at(r->parent_fd, r->name, &dir) < 0 || statx_at(r->parent_fd, "", &parent) < 0) {
		say(res, status, errno, "%s: %s", r->path, strerror(errno));
		goto fail;
	}
	if (!S_ISDIR(dir.stx_mode)) {
		say(res, status, ENOTDIR, "%s: not a directory", r->path);
		goto fail;
	}
	/* A mount point: its name and its tree are on two filesystems, and
	 * renameat2 cannot move a mount (EXDEV/EBUSY) - and should not. */
	if ((dir.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT &&
	     dir.stx_attributes & STATX_ATTR_MOUNT_ROOT) ||
	    dir.stx_dev_major != parent.stx_dev_major || dir.stx_dev_minor != parent.stx_dev_minor) {
		say(res, status, EBUSY, "%s: a mount point (or a btrfs subvolume); refresh works "
		    "inside one filesystem", r->path);
		goto fail;
	}
	r->dev = makedev(dir.stx_dev_major, dir.stx_dev_minor);
	r->dir_ino = dir.stx_ino;
	char bound[PATH_MAX];
	if (bound_elsewhere(r->path, r->dev, bound, sizeof bound)) {
		say(res, status, EBUSY, "%s: it, or a directory in it, is also mounted at %s (a bind "
		    "mount), which would be left on the old tree, deleted: unmount that first",
		    r->path, bound);
		goto fail;
	}
	struct statvfs vfs;
	if (fstatvfs(r->parent_fd, &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) {
		say(res, status, EROFS, "%s: on a read-only filesystem", r->path);
		goto fail;
	}
	/* The copy, the journal and the exchange are made in the parent. */
	if (faccessat(r->parent_fd, ".", W_OK | X_OK, AT_EACCESS) < 0) {
		say(res, status, errno, "%s: no permission to create the copy beside it, in its "
		    "parent directory (%s)", r->path, strerror(errno));
		goto fail;
	}
	if ((parent.stx_mode & S_ISVTX) && !r->root && dir.stx_uid != geteuid() &&
	    parent.stx_uid != geteuid()) {
		say(res, status, EPERM, "%s: in a sticky directory and not yours: it cannot be "
		    "renamed", r->path);
		goto fail;
	}
	int e = refresh_journal_lock(r, false);
	if (e == -EBUSY) {
		say(res, status, EBUSY, "%s: another refresh of it is running (its journal %s is "
		    "locked)", r->path, r->journal_name);
		goto fail;
	}
	if (e == -EPERM) {
		struct stat js;
		say(res, status, EPERM, "%s: the refresh journal %s beside it belongs to uid %ld, "
		    "not to you: refresh trusts only its own; run it as that user, or look at it "
		    "and remove it if it is stale", r->path, r->journal_name,
		    fstatat(r->parent_fd, r->journal_name, &js, AT_SYMLINK_NOFOLLOW) == 0
			    ? (long)js.st_uid : -1L);
		goto fail;
	}
	if (e < 0 && e != -ENOENT) {
		say(res, status, -e, "%s: its journal %s: %s", r->path, r->journal_name, strerror(-e));
		goto fail;
	}
	if (e == 0 && refresh_journal_read(r, res) < 0)
		goto fail;
	/* The journal's next version is written at its own name (O_EXCL);
	 * anything there that is not a crashed refresh's leftover is
	 * somebody's, as the copy's name is in refresh_scan(). */
	if (refresh_journal_tmp_state(r) == JOURNAL_TMP_FOREIGN) {
		say(res, status, EEXIST, "%s: %s exists beside it and %s: move it away first",
		    r->path, r->journal_tmp_name, r->journal_fd >= 0
			    ? "is not what an interrupted refresh leaves there"
			    : "no journal says it is a refresh's");
		goto fail;
	}
	free(trimmed);
	*out = r;
	return REFRESH_OK;
fail:
	free(trimmed);
	refresh_end(r);
	return status;
}

bool refresh_pending(const struct refresh *r, struct refresh_journal *journal)
{
	if (r->journal_loaded && journal)
		*journal = r->journal;
	return r->journal_loaded;
}

const char *refresh_path(const struct refresh *r)
{
	return r->path;
}

/* ---- step 4: the run --------------------------------------------------------- */

static bool stop_asked(const struct refresh *r)
{
	return r->options.stop && *r->options.stop;
}

/* Did anything in the old tree change since the scan (an entry added,
 * removed, written, chmod'ed)?  Every entry's ctime catches all of those
 * (a directory's when an entry is added or removed).  Or, with `copy`,
 * after an exchange back: was the new tree changed while it stood at
 * DIR's name - an entry made, moved in or removed in one of its
 * directories, whose modification times are the old tree's until then?
 * (Its files opened are the leases' to say.)  1 and *what, 0, or -errno. */
static int tree_changed(struct refresh *r, bool copy, const char **what)
{
	int root = refresh_open_dir(r, copy, 0);
	if (root < 0)
		return -errno;
	int rc = 0;
	for (size_t i = 0; i < r->n_entries && rc == 0; i++) {
		const struct entry *e = &r->entries[i];
		struct statx stx;
		if (copy && e->kind != REFRESH_KIND_DIR)
			continue;
		if (statx_at(root, e->path, &stx) < 0 ||
		    !ts_equal(ts_of(stx.stx_mtime), e->mtime) ||
		    (!copy && (stx.stx_ino != e->ino || stx.stx_size != e->size ||
			       stx.stx_nlink != e->nlink || !ts_equal(ts_of(stx.stx_ctime), e->ctime)))) {
			*what = *e->path || !copy ? shown(e) : "the top directory";
			rc = 1;
		}
	}
	close(root);
	return rc;
}

static enum refresh_status undo(struct refresh *r, struct refresh_result *res, int error,
				const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum refresh_status undo(struct refresh *r, struct refresh_result *res, int error,
				const char *fmt, ...)
{
	char why[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	refresh_leases_release(&r->leases[0]);
	refresh_leases_release(&r->leases[1]);
	int e = refresh_remove_copy(r);
	if (e == 0)
		e = refresh_journal_remove(r);
	if (e < 0)
		return say(res, REFRESH_STUCK, error, "%s; undoing it failed too (%s): run 'discnice "
			   "refresh --recover %s'", why, strerror(-e), r->path);
	return say(res, REFRESH_UNDONE, error, "%s; undone, the directory is as it was", why);
}

enum refresh_status refresh_run(struct refresh *r, struct refresh_result *res)
{
	struct refresh_counts counts = r->counts;
	memset(res, 0, sizeof *res);
	res->counts = counts;
	if (r->journal_fd < 0) {
		int e = refresh_journal_lock(r, true);
		if (e < 0)
			return say(res, REFRESH_REFUSED, -e, "%s: %s", r->path,
				   e == -EBUSY ? "another refresh of it started meanwhile"
				   : e == -EPERM ? "another user's refresh journal appeared beside it "
						   "meanwhile"
						 : strerror(-e));
	}
	struct stat jst;
	if (fstat(r->journal_fd, &jst) == 0 && jst.st_size > 0 && !r->journal_loaded)
		return say(res, REFRESH_REFUSED, EBUSY, "%s: an interrupted refresh appeared "
			   "meanwhile; run 'discnice refresh --recover' first", r->path);
	if (r->journal_loaded)
		return say(res, REFRESH_REFUSED, EBUSY, "%s: an interrupted refresh is journalled; "
			   "recover it first", r->path);
	if (!r->buffer && !(r->buffer = malloc(COPY_BUFFER)))
		return say(res, REFRESH_REFUSED, ENOMEM, "out of memory");

	/* copying: from here on a crash leaves a journal that says so. */
	int e = refresh_journal_write(r, REFRESH_PHASE_COPYING, 0);
	if (e < 0) {
		/* Failed, not refused (exit 1, not 2): nothing was changed yet. */
		int gone = refresh_journal_remove(r);
		if (gone < 0)
			return say(res, REFRESH_STUCK, -e, "%s: writing the journal %s: %s; removing it "
				   "failed too (%s): run 'discnice refresh --recover %s'", r->path,
				   r->journal_name, strerror(-e), strerror(-gone), r->path);
		return say(res, REFRESH_UNDONE, -e, "%s: writing the journal %s: %s; nothing was "
			   "changed", r->path, r->journal_name, strerror(-e));
	}
	if (mkdirat(r->parent_fd, r->copy_name, 0700) < 0)
		return undo(r, res, errno, "%s: making %s: %s", r->path, r->copy_name,
			    strerror(errno));
	int dst_root = openat(r->parent_fd, r->copy_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dst_root < 0)
		return undo(r, res, errno, "%s: %s: %s", r->path, r->copy_name, strerror(errno));
	refresh_drop_inherited_acls(dst_root);
	if ((e = refresh_drop_inherited_flags(dst_root)) < 0) {
		close(dst_root);
		return undo(r, res, -e, "%s: clearing the inode flags %s inherited from the parent "
			    "directory: %s", r->path, r->copy_name, strerror(-e));
	}
	struct stat copy_st;
	fstat(dst_root, &copy_st);
	step(r);
	int src_dir = -1, dst_dir = -1;
	size_t open_parent = SIZE_MAX;
	const char *failed = "copying";
	size_t failed_at = 0;
	e = 0;
	for (size_t i = 1; i < r->n_entries && e == 0; i++) {
		if (stop_asked(r)) {
			e = -EINTR;
			failed = "stopped by a signal before";
			failed_at = i;
			break;
		}
		const struct entry *en = &r->entries[i];
		if (en->parent != open_parent) {
			if (src_dir >= 0)
				close(src_dir);
			if (dst_dir >= 0)
				close(dst_dir);
			src_dir = refresh_open_dir(r, false, en->parent);
			dst_dir = src_dir >= 0 ? refresh_open_dir(r, true, en->parent) : -1;
			open_parent = en->parent;
			if (src_dir < 0 || dst_dir < 0) {
				e = -errno;
				failed = "opening the directory of";
				failed_at = i;
				break;
			}
		}
		e = refresh_copy_entry(r, i, src_dir, dst_dir, dst_root, &failed);
		failed_at = i;
	}
	if (src_dir >= 0)
		close(src_dir);
	if (dst_dir >= 0)
		close(dst_dir);
	close(dst_root);
	if (e == 0)
		e = refresh_finish_dirs(r, &failed, &failed_at);
	if (e == 0 && fsync(r->parent_fd) < 0) {
		e = -errno;
		failed = "syncing the parent of";
		failed_at = 0;
	}
	if (e < 0) {
		if (e == -EAGAIN)
			return undo(r, res, EAGAIN, "%s: %s changed during the refresh", r->path,
				    shown(&r->entries[failed_at]));
		return undo(r, res, -e, "%s: %s %s: %s", r->path, failed,
			    shown(&r->entries[failed_at]), strerror(-e));
	}
	step(r); /* the parent synced: the copy's name is on disk */

	/* copied: the new tree is complete and on disk. */
	e = refresh_journal_write(r, REFRESH_PHASE_COPIED, copy_st.st_ino);
	if (e < 0)
		return undo(r, res, -e, "%s: writing the journal %s: %s", r->path, r->journal_name,
			    strerror(-e));
	/* The last look before the exchange: anything written, added or opened
	 * since the scan would be lost with the old tree. */
	if (stop_asked(r))
		return undo(r, res, EINTR, "%s: stopped by a signal", r->path);
	/* Leases on both trees' files first, so that an open(2) that starts
	 * after the look below is seen (refresh_lease.h); both, so that we
	 * know which way it is safe to go if one comes during the exchange.
	 * Every undo() from here releases them. */
	struct leases *old_leases = &r->leases[0], *new_leases = &r->leases[1];
	size_t busy = 0;
	e = refresh_leases_take(r, false, old_leases, &busy);
	if (e == 0 && (e = refresh_leases_take(r, true, new_leases, &busy)) == -EAGAIN)
		busy = SIZE_MAX; /* our copy open elsewhere: somebody is in it */
	if (e == -EAGAIN)
		return undo(r, res, EBUSY, "%s: %s was opened during the refresh (the kernel "
			    "refused a write lease)", r->path,
			    busy == SIZE_MAX ? r->copy_name : shown(&r->entries[busy]));
	if (e < 0)
		return undo(r, res, -e, "%s: %s", r->path, strerror(-e));
	const char *what = NULL;
	int changed = tree_changed(r, false, &what);
	if (changed != 0)
		return undo(r, res, changed < 0 ? -changed : EAGAIN, "%s: %s changed during the "
			    "refresh", r->path, what ? what : ".");
	struct refresh_result open_check = { 0 };
	if (refresh_open_files_check(r, &open_check) < 0)
		return undo(r, res, EBUSY, "%s (opened during the refresh)", open_check.message);
	if ((busy = refresh_leases_broken(old_leases)) != SIZE_MAX)
		return undo(r, res, EBUSY, "%s: %s is being opened (opened during the refresh)",
			    r->path, shown(&r->entries[busy]));

	if (renameat2(r->parent_fd, r->name, r->parent_fd, r->copy_name, RENAME_EXCHANGE) < 0)
		return undo(r, res, errno, "%s: renameat2(RENAME_EXCHANGE): %s", r->path,
			    strerror(errno));
	step(r);
	/* An open(2) that looked the name up just before the exchange reaches
	 * break_lease() on the OLD file just after it: give it the grace to
	 * arrive, then look.  If it did, exchange back (the journal still says
	 * "copied", which recovery handles both ways) and undo: its opener
	 * gets the old file, which stays.  Unless the new tree was opened
	 * too: then both are somebody's, and the old one is kept. */
	unsigned grace_ms = r->options.lease_grace_ms ? r->options.lease_grace_ms
						      : REFRESH_LEASE_GRACE_MS;
	nanosleep(&(struct timespec){ grace_ms / 1000, (long)(grace_ms % 1000) * 1000000L }, NULL);
	size_t old_open = refresh_leases_broken(old_leases);
	size_t new_open = refresh_leases_broken(new_leases);
	if (old_open != SIZE_MAX && new_open == SIZE_MAX) {
		int back = renameat2(r->parent_fd, r->name, r->parent_fd, r->copy_name,
				     RENAME_EXCHANGE);
		int err = errno;
		refresh_leases_release(new_leases); /* the opener goes on, to the old file */
		refresh_leases_release(old_leases);
		if (back < 0)
			return say(res, REFRESH_STUCK, err, "%s: %s was opened during the exchange, "
				   "and exchanging back failed: %s; run 'discnice refresh --recover %s'",
				   r->path, shown(&r->entries[old_open]), strerror(err), r->path);
		if (fsync(r->parent_fd) < 0)
			return say(res, REFRESH_STUCK, errno, "%s: syncing its parent after "
				   "exchanging back: %s; run 'discnice refresh --recover %s'", r->path,
				   strerror(errno), r->path);
		/* Someone may have put something in the new tree meanwhile
		 * (mv x DIR/): it is not the partial copy any more, and
		 * removing it would lose that. */
		const char *added = NULL;
		if (tree_changed(r, true, &added) != 0)
			return say(res, REFRESH_STUCK, EBUSY, "%s: %s was opened during the exchange; "
				   "exchanged back, the old tree is in place; but %s of the new "
				   "tree was changed meanwhile, and the new tree is kept at %s: "
				   "move what was put there into %s, remove the rest, then run "
				   "'discnice refresh --recover %s'", r->path,
				   shown(&r->entries[old_open]), added ? added : ".", r->copy_name,
				   r->path, r->path);
		return undo(r, res, EBUSY, "%s: %s was opened during the exchange; exchanged back",
			    r->path, shown(&r->entries[old_open]));
	}
	refresh_leases_release(new_leases);
	refresh_leases_release(old_leases);
	if (fsync(r->parent_fd) < 0)
		return say(res, REFRESH_STUCK, errno, "%s: syncing its parent after the exchange: %s; "
			   "run 'discnice refresh --recover %s'", r->path, strerror(errno), r->path);
	step(r);
	e = refresh_journal_write(r, REFRESH_PHASE_EXCHANGED, copy_st.st_ino);
	if (e < 0)
		return say(res, REFRESH_STUCK, -e, "%s: the new directory is in place, but writing "
			   "the journal failed (%s); run 'discnice refresh --recover %s'", r->path,
			   strerror(-e), r->path);
	if (old_open != SIZE_MAX) /* and new_open too: not exchanged back */
		return say(res, REFRESH_STUCK, EBUSY, "%s: %s of the old tree and %s of the new one "
			   "were both opened during the exchange; the new tree is in place and the "
			   "old one kept at %s: save what its opener wrote there, then run "
			   "'discnice refresh --recover %s'", r->path, shown(&r->entries[old_open]),
			   shown(&r->entries[new_open]), r->copy_name, r->path);
	/* The old tree, now at the copy's name. */
	e = refresh_remove_copy(r);
	if (e == 0)
		e = refresh_journal_remove(r);
	if (e < 0)
		return say(res, REFRESH_STUCK, -e, "%s: the new directory is in place, but removing "
			   "the old one (%s) failed: %s; run 'discnice refresh --recover %s'", r->path,
			   r->copy_name, strerror(-e), r->path);
	res->steps = r->steps;
	return say(res, REFRESH_OK, 0, "%s: refreshed", r->path);
}

void refresh_end(struct refresh *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_entries; i++)
		free(r->entries[i].path);
	free(r->entries);
	free(r->buffer);
	free(r->path);
	refresh_leases_release(&r->leases[0]);
	refresh_leases_release(&r->leases[1]);
	if (r->journal_fd >= 0)
		close(r->journal_fd);
	if (r->parent_fd >= 0)
		close(r->parent_fd);
	free(r);
}
