/*
 * refresh.c - directory refresh (graybox-icl §4.2.1-4.2.2), the I/O half;
 * the order, the journal's text and the recovery table are pure, in
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
#include "graybox/fldc/refresh.h"
#include "graybox/fldc/refresh_lease.h"
#include "common/proc_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

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

/* ---- small helpers --------------------------------------------------------- */

static enum refresh_status say(struct refresh_result *res, enum refresh_status status, int error,
			       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum refresh_status say(struct refresh_result *res, enum refresh_status status, int error,
			       const char *fmt, ...)
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
static void step(struct refresh *r)
{
	r->steps++;
	if (r->options.kill_at && r->steps == r->options.kill_at)
		raise(SIGKILL);
}

static bool stop_asked(const struct refresh *r)
{
	return r->options.stop && *r->options.stop;
}

static int open_beneath(int root_fd, const char *path, int flags)
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
static int open_quietly(int root_fd, const char *path, int flags)
{
	int fd = open_beneath(root_fd, path, flags | O_NOATIME);
	if (fd < 0 && errno == EPERM)
		fd = open_beneath(root_fd, path, flags);
	return fd;
}

/* Open directory `index` of the old tree (src) or of the copy (dst). */
static int open_dir_of(struct refresh *r, bool copy, size_t index)
{
	int root = openat(r->parent_fd, copy ? r->copy_name : r->name,
			  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0 || index == 0)
		return root;
	int fd = open_beneath(root, r->entries[index].path, O_RDONLY | O_DIRECTORY);
	int e = errno;
	close(root);
	errno = e;
	return fd;
}

static int statx_at(int dirfd, const char *name, struct statx *stx)
{
	return statx(dirfd, *name ? name : ".", AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH),
		     STATX_BASIC_STATS, stx);
}

static struct timespec ts_of(struct statx_timestamp t)
{
	return (struct timespec){ .tv_sec = t.tv_sec, .tv_nsec = t.tv_nsec };
}

static bool ts_equal(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static bool in_my_groups(gid_t gid)
{
	if (gid == getegid())
		return true;
	gid_t groups[256];
	int n = getgroups(256, groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

static const char *shown(const struct entry *e)
{
	return *e->path ? e->path : ".";
}

/* ---- step 1: the directory, the journal ------------------------------------ */

static int journal_lock_existing(struct refresh *r, bool create)
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
			r->journal_fd = fd;
			return 0;
		}
		close(fd);
	}
	return -EBUSY;
}

static int journal_read(struct refresh *r, struct refresh_result *res)
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
 * journal_write() creates it (O_EXCL), writes one version, fsyncs it and
 * renames it over the journal; a crash between the create and the rename
 * leaves it behind.  The journal is always there beside such a leftover:
 * refresh_run() creates and locks it (empty) before the first version is
 * written, and removes the leftover before the journal.  So a leftover is
 * recognised only while we hold the journal's lock (no other refresh is
 * writing one), and only as what journal_write() makes: a regular file of
 * ours with one name, holding nothing, zeros (a crash before the data
 * reached the disk) or a version of this directory's journal.  Anything
 * else at that name is somebody's file - perhaps a hard link to one that
 * matters: never opened for writing, never removed. */
enum journal_tmp_state { JOURNAL_TMP_NONE, JOURNAL_TMP_LEFTOVER, JOURNAL_TMP_FOREIGN };

static enum journal_tmp_state journal_tmp_state(const struct refresh *r)
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

/* Remove a leftover next version (journal_tmp_state); 0, or -EEXIST when
 * something else is at its name. */
static int journal_tmp_clear(struct refresh *r)
{
	switch (journal_tmp_state(r)) {
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
		say(res, status, EBUSY, "%s: a mount point; refresh works inside one filesystem",
		    r->path);
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
	int e = journal_lock_existing(r, false);
	if (e == -EBUSY) {
		say(res, status, EBUSY, "%s: another refresh of it is running (its journal %s is "
		    "locked)", r->path, r->journal_name);
		goto fail;
	}
	if (e < 0 && e != -ENOENT) {
		say(res, status, -e, "%s: its journal %s: %s", r->path, r->journal_name, strerror(-e));
		goto fail;
	}
	if (e == 0 && journal_read(r, res) < 0)
		goto fail;
	/* The journal's next version is written at its own name (O_EXCL);
	 * anything there that is not a crashed refresh's leftover is
	 * somebody's, as the copy's name is in refresh_scan(). */
	if (journal_tmp_state(r) == JOURNAL_TMP_FOREIGN) {
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

/* ---- the journal's writes ----------------------------------------------------- */

/* Write the next version beside it, lock it, fsync it, rename it over the
 * journal, fsync the parent: a crash leaves the old version or the new,
 * never a torn one.  The new version is locked before its name appears, so
 * a second refresh that opens the name finds it locked. */
static int journal_write(struct refresh *r, enum refresh_phase phase, uint64_t new_ino)
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

static int journal_remove(struct refresh *r)
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

static int remove_copy(struct refresh *r)
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
			int e = journal_remove(r);
			if (e < 0)
				return say(res, REFRESH_STUCK, -e, "%s: removing the empty journal %s: %s",
					   r->path, r->journal_name, strerror(-e));
		}
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
	int e = remove_copy(r);
	if (e == 0)
		e = journal_remove(r);
	if (e < 0)
		return say(res, REFRESH_STUCK, -e, "%s: recovering an interrupted refresh: removing "
			   "%s: %s; run 'discnice refresh --recover' again", r->path, r->copy_name,
			   strerror(-e));
	return say(res, REFRESH_OK, 0, "%s: an interrupted refresh (phase %s) was %s at %s was "
		   "removed", r->path, phase, what, r->copy_name);
}

/* ---- step 3: the scan ------------------------------------------------------------- */

static int entry_add(struct refresh *r, const char *dir_path, const char *name, size_t parent,
		     const struct statx *stx)
{
	if (r->n_entries == r->cap_entries) {
		size_t cap = r->cap_entries ? 2 * r->cap_entries : 256;
		struct entry *bigger = realloc(r->entries, cap * sizeof *bigger);
		if (!bigger)
			return -ENOMEM;
		r->entries = bigger;
		r->cap_entries = cap;
	}
	struct entry *e = &r->entries[r->n_entries];
	memset(e, 0, sizeof *e);
	size_t dl = strlen(dir_path), nl = strlen(name);
	e->path = malloc(dl + nl + 2);
	if (!e->path)
		return -ENOMEM;
	if (dl) {
		memcpy(e->path, dir_path, dl);
		e->path[dl] = '/';
		memcpy(e->path + dl + 1, name, nl + 1);
		e->name = e->path + dl + 1;
	} else {
		memcpy(e->path, name, nl + 1);
		e->name = e->path;
	}
	e->parent = parent;
	e->kind = S_ISDIR(stx->stx_mode) ? REFRESH_KIND_DIR
		  : S_ISLNK(stx->stx_mode) ? REFRESH_KIND_SYMLINK : REFRESH_KIND_FILE;
	e->mode = stx->stx_mode;
	e->uid = stx->stx_uid;
	e->gid = stx->stx_gid;
	e->nlink = stx->stx_nlink;
	e->ino = stx->stx_ino;
	e->size = stx->stx_size;
	e->atime = ts_of(stx->stx_atime);
	e->mtime = ts_of(stx->stx_mtime);
	e->ctime = ts_of(stx->stx_ctime);
	e->link_to = SIZE_MAX;
	r->n_entries++;
	return 0;
}

/* Can every extended attribute be set on the copy?  user.* always (the
 * copy is ours while we write it); the POSIX ACLs (system.posix_acl_*) by
 * the owner; trusted.* and security.* only as root (CAP_SYS_ADMIN,
 * CAP_SETFCAP); anything else (an NFSv4 ACL, a namespace we do not know):
 * no. */
static int xattrs_check(struct refresh *r, int fd, const char *proc_path, const struct entry *e,
			struct refresh_result *res)
{
	char names[65536];
	ssize_t n = fd >= 0 ? flistxattr(fd, names, sizeof names)
			    : llistxattr(proc_path, names, sizeof names);
	if (n < 0) {
		if (errno == ENOTSUP)
			return 0;
		say(res, REFRESH_REFUSED, errno, "%s: %s: cannot list its extended attributes (%s)",
		    r->path, shown(e), strerror(errno));
		return -1;
	}
	for (char *p = names; p < names + n; p += strlen(p) + 1) {
		bool ok = strncmp(p, "user.", 5) == 0 || strcmp(p, "system.posix_acl_access") == 0 ||
			  strcmp(p, "system.posix_acl_default") == 0 ||
			  (r->root && (strncmp(p, "trusted.", 8) == 0 || strncmp(p, "security.", 9) == 0));
		if (!ok) {
			say(res, REFRESH_REFUSED, EPERM, "%s: %s: has the extended attribute %s, which "
			    "refresh cannot copy%s", r->path, shown(e), p,
			    r->root ? "" : " (not root)");
			return -1;
		}
	}
	return 0;
}

static int scan_dir(struct refresh *r, int dir_fd, size_t dir_index, struct refresh_result *res);

/* Checks an entry (already added at index i) for what a faithful copy
 * needs; the directory's own fd is dir_fd. */
static int entry_check(struct refresh *r, int dir_fd, size_t i, const struct statx *stx,
		       struct refresh_result *res)
{
	const struct entry *e = &r->entries[i];
	/* Entries are opened by their path from DIR (open_beneath()): one
	 * longer than PATH_MAX was copied, then could not be opened for its
	 * metadata, and the refresh undone after all that work. */
	if (strlen(e->path) >= PATH_MAX)
		return say(res, REFRESH_REFUSED, ENAMETOOLONG, "%s: an entry's path in it is longer "
			   "than %d bytes, which refresh cannot name: %.64s...", r->path, PATH_MAX,
			   e->path), -1;
	const char *what = S_ISSOCK(e->mode) ? "a socket" : S_ISFIFO(e->mode) ? "a FIFO"
			   : S_ISCHR(e->mode) ? "a character device"
			   : S_ISBLK(e->mode) ? "a block device" : NULL;
	if (what)
		return say(res, REFRESH_REFUSED, EINVAL, "%s: %s is %s; refresh copies only regular "
			   "files, symbolic links and directories", r->path, shown(e), what), -1;
	if (makedev(stx->stx_dev_major, stx->stx_dev_minor) != r->dev ||
	    (stx->stx_attributes_mask & STATX_ATTR_MOUNT_ROOT &&
	     stx->stx_attributes & STATX_ATTR_MOUNT_ROOT && i > 0))
		return say(res, REFRESH_REFUSED, EXDEV, "%s: %s is a mount point: the directory "
			   "crosses filesystems", r->path, shown(e)), -1;
	if (!r->root && e->uid != geteuid())
		return say(res, REFRESH_REFUSED, EPERM, "%s: %s belongs to uid %u: only root can "
			   "give a copy another owner", r->path, shown(e), (unsigned)e->uid), -1;
	if (!r->root && !in_my_groups(e->gid))
		return say(res, REFRESH_REFUSED, EPERM, "%s: %s has group %u, not one of yours: "
			   "only root can give a copy that group", r->path, shown(e),
			   (unsigned)e->gid), -1;
	const char *name = i == 0 ? "" : e->name;
	if (e->kind == REFRESH_KIND_SYMLINK) {
		char proc_path[64 + PATH_MAX];
		snprintf(proc_path, sizeof proc_path, "/proc/self/fd/%d/%s", dir_fd, name);
		return xattrs_check(r, -1, proc_path, e, res);
	}
	/* O_NONBLOCK: a FIFO put at a file's name since it was stat'ed would
	 * block a plain open until some writer came (fs/fifo.c: fifo_open);
	 * the inode and type check below then sees the change.  The
	 * descriptor is only asked for flags and attributes, never read. */
	int fd = e->kind == REFRESH_KIND_DIR
			 ? (i == 0 ? dup(dir_fd) : open_quietly(dir_fd, name, O_RDONLY | O_DIRECTORY))
			 : open_quietly(dir_fd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return say(res, REFRESH_REFUSED, errno, "%s: %s: cannot read it (%s)", r->path,
			   shown(e), strerror(errno)), -1;
	int rc = -1;
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_ino != e->ino ||
	    (st.st_mode & S_IFMT) != (e->mode & S_IFMT)) {
		say(res, REFRESH_REFUSED, EAGAIN, "%s: %s changed while it was looked at; try again",
		    r->path, shown(e));
		goto out;
	}
	unsigned flags = 0;
	if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & ~FLAGS_OF_THE_FILESYSTEM)) {
		say(res, REFRESH_REFUSED, EPERM, "%s: %s has inode flags refresh does not copy "
		    "(see lsattr; 0x%x)%s", r->path, shown(e), flags & ~FLAGS_OF_THE_FILESYSTEM,
		    flags & (FS_IMMUTABLE_FL | FS_APPEND_FL) ? ": immutable or append-only" : "");
		goto out;
	}
	/* What FS_IOC_FSGETXATTR shows besides those flags: a project ID
	 * (project quotas: lsattr -p, xfs_io chproj) and XFS's own hints
	 * (extent size, filestream, no-defrag, realtime), which a copy would
	 * not have - its quota accounting and allocation would change
	 * silently.  FS_XFLAG_PREALLOC and HASATTR are the kernel's notes,
	 * not settings. */
	struct fsxattr fsx;
	const unsigned xfs_hints = FS_XFLAG_REALTIME | FS_XFLAG_RTINHERIT | FS_XFLAG_EXTSIZE |
				   FS_XFLAG_EXTSZINHERIT | FS_XFLAG_NODEFRAG | FS_XFLAG_FILESTREAM |
				   FS_XFLAG_NOSYMLINKS | FS_XFLAG_COWEXTSIZE;
	if (ioctl(fd, FS_IOC_FSGETXATTR, &fsx) == 0 &&
	    (fsx.fsx_projid != 0 || (fsx.fsx_xflags & xfs_hints))) {
		if (fsx.fsx_projid != 0)
			say(res, REFRESH_REFUSED, EPERM, "%s: %s has project ID %u (see lsattr -p), "
			    "which refresh does not copy", r->path, shown(e), fsx.fsx_projid);
		else
			say(res, REFRESH_REFUSED, EPERM, "%s: %s has XFS allocation hints refresh "
			    "does not copy (see xfs_io -c stat: xflags 0x%x)", r->path, shown(e),
			    fsx.fsx_xflags & xfs_hints);
		goto out;
	}
	if (xattrs_check(r, fd, NULL, e, res) < 0)
		goto out;
	rc = 0;
	if (e->kind == REFRESH_KIND_DIR)
		rc = scan_dir(r, fd, i, res) < 0 ? -1 : 0;
out:
	close(fd);
	return rc;
}

/* The entries of one directory: read, stat'ed, sorted into plan order,
 * appended; then each is checked, subdirectories recursively (so the
 * entries array holds every directory's children together, in creation
 * order, parents before children). */
static int scan_dir(struct refresh *r, int dir_fd, size_t dir_index, struct refresh_result *res)
{
	int depth = 0;
	for (size_t p = dir_index; p != 0; p = r->entries[p].parent)
		depth++;
	if (depth > DEPTH_MAX)
		return say(res, REFRESH_REFUSED, ELOOP, "%s: nested deeper than %d directories",
			   r->path, DEPTH_MAX), -1;
	int fd = dup(dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return say(res, REFRESH_REFUSED, errno, "%s: %s: %s", r->path,
			   shown(&r->entries[dir_index]), strerror(errno)), -1;
	}
	rewinddir(d);
	struct refresh_plan_entry *plan = NULL;
	struct statx *stats = NULL;
	char **names = NULL;
	size_t n = 0, cap = 0;
	int rc = -1;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			if (errno) {
				say(res, REFRESH_REFUSED, errno, "%s: %s: %s", r->path,
				    shown(&r->entries[dir_index]), strerror(errno));
				goto out;
			}
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			struct refresh_plan_entry *p2 = realloc(plan, cap * sizeof *p2);
			if (p2)
				plan = p2;
			struct statx *s2 = realloc(stats, cap * sizeof *s2);
			if (s2)
				stats = s2;
			char **n2 = realloc(names, cap * sizeof *n2);
			if (n2)
				names = n2;
			if (!p2 || !s2 || !n2) {
				say(res, REFRESH_REFUSED, ENOMEM, "out of memory");
				goto out;
			}
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			say(res, REFRESH_REFUSED, ENOMEM, "out of memory");
			goto out;
		}
		n++;
		if (statx(dir_fd, de->d_name, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS,
			  &stats[n - 1]) < 0) {
			say(res, REFRESH_REFUSED, errno, "%s: %s/%s: %s", r->path,
			    shown(&r->entries[dir_index]), de->d_name, strerror(errno));
			goto out;
		}
		const struct statx *s = &stats[n - 1];
		plan[n - 1] = (struct refresh_plan_entry){
			.name = names[n - 1],
			.kind = S_ISDIR(s->stx_mode) ? REFRESH_KIND_DIR
				: S_ISLNK(s->stx_mode) ? REFRESH_KIND_SYMLINK : REFRESH_KIND_FILE,
			.size = s->stx_size, .ino = s->stx_ino,
			.mtime_ns = (int64_t)s->stx_mtime.tv_sec * 1000000000 + s->stx_mtime.tv_nsec,
			.id = n - 1,
		};
	}
	refresh_plan_sort(plan, n, r->options.order);
	size_t first = r->n_entries;
	for (size_t k = 0; k < n; k++) {
		/* (entries[dir_index] may move as the array grows: no pointer kept) */
		if (entry_add(r, r->entries[dir_index].path, plan[k].name, dir_index,
			      &stats[plan[k].id]) < 0) {
			say(res, REFRESH_REFUSED, ENOMEM, "out of memory");
			goto out;
		}
	}
	for (size_t k = 0; k < n; k++)
		if (entry_check(r, dir_fd, first + k, &stats[plan[k].id], res) < 0)
			goto out;
	rc = 0;
out:
	closedir(d);
	for (size_t k = 0; k < n; k++)
		free(names[k]);
	free(names);
	free(plan);
	free(stats);
	return rc;
}

/* Hard links: every name of a file with st_nlink > 1 must be inside DIR,
 * or the copy would split the group (a faithful copy cannot link to a file
 * it does not copy).  The later names link to the first. */
struct ino_index { uint64_t ino; size_t index; };

static int compare_ino_index(const void *a, const void *b)
{
	const struct ino_index *x = a, *y = b;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

static int hard_links_check(struct refresh *r, struct refresh_result *res)
{
	size_t n = 0;
	for (size_t i = 0; i < r->n_entries; i++)
		if (r->entries[i].kind != REFRESH_KIND_DIR && r->entries[i].nlink > 1)
			n++;
	if (n == 0)
		return 0;
	struct ino_index *links = malloc(n * sizeof *links);
	if (!links)
		return say(res, REFRESH_REFUSED, ENOMEM, "out of memory"), -1;
	n = 0;
	for (size_t i = 0; i < r->n_entries; i++)
		if (r->entries[i].kind != REFRESH_KIND_DIR && r->entries[i].nlink > 1)
			links[n++] = (struct ino_index){ r->entries[i].ino, i };
	qsort(links, n, sizeof *links, compare_ino_index);
	int rc = 0;
	for (size_t a = 0; a < n;) {
		size_t b = a;
		while (b < n && links[b].ino == links[a].ino)
			b++;
		const struct entry *first = &r->entries[links[a].index];
		if (b - a != first->nlink) {
			say(res, REFRESH_REFUSED, EMLINK, "%s: %s has %u hard links, %zu of them "
			    "outside the directory: a copy cannot keep them linked", r->path,
			    first->path, first->nlink, first->nlink - (b - a));
			rc = -1;
			break;
		}
		for (size_t k = a + 1; k < b; k++)
			r->entries[links[k].index].link_to = links[a].index;
		a = b;
	}
	free(links);
	return rc;
}

static int compare_ino(const void *a, const void *b)
{
	const struct ino_index *x = a, *y = b;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static const struct entry *entry_of_ino(const struct refresh *r, const struct ino_index *inos,
					dev_t dev, uint64_t ino)
{
	if (dev != r->dev)
		return NULL;
	struct ino_index key = { ino, 0 };
	const struct ino_index *p = bsearch(&key, inos, r->n_entries, sizeof *inos, compare_ino);
	return p ? &r->entries[p->index] : NULL;
}

/* Is pid (named comm) a refresh, as this process is?  Two refreshes of one
 * tree started in the same instant each find the other holding DIR open,
 * before either has its journal locked (refresh_run); that one is named
 * for what it is.  The same program name (/proc/PID/comm) and "refresh"
 * for its subcommand (argv[1]: not 'discnice run -- make refresh'). */
static bool is_refresh_process(long pid, const char *comm)
{
	char mine[64], path[64], args[4096];
	if (strcmp(proc_comm(0, mine, sizeof mine), "?") == 0 || strcmp(mine, comm) != 0)
		return false;
	snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
	ssize_t n = proc_read_small(path, args, sizeof args);
	size_t second = n > 0 ? strlen(args) + 1 : 0;
	return second && second < (size_t)n && strcmp(args + second, "refresh") == 0;
}

/* Open files: a process holding one of DIR's files (or its working
 * directory, root or a mapping inside DIR) would go on using the old
 * inode after the exchange - its writes lost when the old tree is
 * removed.  /proc/PID/fd, cwd, root and maps of every process we may look
 * at; the others are counted (not root: other users' processes).
 * (A thread that unshared its descriptor table has its own
 * /proc/PID/task/TID/fd; those are not looked at.) */
static int open_files_check(struct refresh *r, struct refresh_result *res)
{
	struct ino_index *inos = malloc((r->n_entries ? r->n_entries : 1) * sizeof *inos);
	if (!inos)
		return say(res, REFRESH_REFUSED, ENOMEM, "out of memory"), -1;
	for (size_t i = 0; i < r->n_entries; i++)
		inos[i] = (struct ino_index){ r->entries[i].ino, i };
	qsort(inos, r->n_entries, sizeof *inos, compare_ino_index);
	DIR *proc = opendir("/proc");
	if (!proc) {
		free(inos);
		return say(res, REFRESH_REFUSED, errno, "/proc: %s: cannot check for open files",
			   strerror(errno)), -1;
	}
	pid_t self = getpid();
	unsigned unchecked = 0;
	char path[128], how[320] = "";
	const struct entry *hit = NULL;
	long pid = 0;
	struct dirent *de;
	while (!hit && (de = readdir(proc))) {
		char *end;
		pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0 || pid == self)
			continue;
		static const char *const dirs[] = { "cwd", "root" };
		for (int k = 0; k < 2 && !hit; k++) {
			struct stat st;
			snprintf(path, sizeof path, "/proc/%ld/%s", pid, dirs[k]);
			if (stat(path, &st) == 0 && (hit = entry_of_ino(r, inos, st.st_dev, st.st_ino)))
				snprintf(how, sizeof how, "its %s directory is there",
					 k == 0 ? "working" : "root");
		}
		snprintf(path, sizeof path, "/proc/%ld/fd", pid);
		int fd_dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd_dir < 0) {
			if (errno == EACCES || errno == EPERM)
				unchecked++;
			continue;
		}
		DIR *fds = fdopendir(fd_dir);
		if (!fds) {
			close(fd_dir);
			continue;
		}
		struct dirent *fe;
		while (!hit && (fe = readdir(fds))) {
			struct stat st;
			if (fe->d_name[0] != '.' && fstatat(fd_dir, fe->d_name, &st, 0) == 0 &&
			    (hit = entry_of_ino(r, inos, st.st_dev, st.st_ino)))
				snprintf(how, sizeof how, "it has it open (descriptor %s)", fe->d_name);
		}
		closedir(fds);
		snprintf(path, sizeof path, "/proc/%ld/maps", pid);
		FILE *maps = hit ? NULL : fopen(path, "re");
		if (maps) {
			char line[4096 + 128];
			while (!hit && fgets(line, sizeof line, maps)) {
				unsigned major, minor;
				unsigned long long ino;
				if (sscanf(line, "%*s %*s %*s %x:%x %llu", &major, &minor, &ino) == 3 &&
				    ino && (hit = entry_of_ino(r, inos, makedev(major, minor), ino)))
					snprintf(how, sizeof how, "it has it mapped");
			}
			fclose(maps);
		}
	}
	closedir(proc);
	free(inos);
	res->unchecked_processes = unchecked;
	if (!hit)
		return 0;
	char comm[64];
	proc_comm((pid_t)pid, comm, sizeof comm);
	if (is_refresh_process(pid, comm))
		say(res, REFRESH_REFUSED, EBUSY, "%s: another refresh is running (process %ld; "
		    "%s: %s)", r->path, pid, shown(hit), how);
	else
		say(res, REFRESH_REFUSED, EBUSY, "%s: %s is in use by process %ld (%s): %s",
		    r->path, shown(hit), pid, comm, how);
	return -1;
}

static void leases_release(struct leases *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->fds[i] >= 0)
			close(l->fds[i]);
	free(l->fds);
	*l = (struct leases){ 0 };
}

/* The old tree (DIR) or the copy.  0; -EAGAIN with *busy the entry in use
 * (open, mapped or executing somewhere); another -errno when the tree
 * cannot be opened.  A file the kernel will not lease to us (not ours
 * without CAP_LEASE, a filesystem without leases, out of descriptors) is
 * counted in l->refused and left to the /proc look. */
static int leases_take(struct refresh *r, bool copy, struct leases *l, size_t *busy)
{
	*l = (struct leases){ 0 };
	if (!(l->fds = malloc((r->n_entries ? r->n_entries : 1) * sizeof *l->fds)))
		return -ENOMEM;
	l->n = r->n_entries;
	for (size_t i = 0; i < l->n; i++)
		l->fds[i] = -1;
	int root = open_dir_of(r, copy, 0);
	if (root < 0)
		return -errno;
	int rc = 0;
	for (size_t i = 1; i < l->n && rc == 0; i++) {
		const struct entry *e = &r->entries[i];
		if (e->kind != REFRESH_KIND_FILE || e->link_to != SIZE_MAX)
			continue;
		/* O_NONBLOCK: somebody else's lease on it fails our open with
		 * EWOULDBLOCK (fs/locks.c: __break_lease) - in use - instead of
		 * waiting for their break. */
		int fd = open_quietly(root, e->path, O_RDONLY | O_NONBLOCK);
		int err = fd < 0 ? (errno == EWOULDBLOCK ? -EAGAIN : -errno) : refresh_lease_take(fd);
		if (err == 0) {
			l->fds[i] = fd;
			continue;
		}
		if (fd >= 0)
			close(fd);
		if (err == -EAGAIN) {
			*busy = i;
			rc = -EAGAIN;
		} else if (err == -ENOENT) {
			rc = 0; /* gone: tree_changed() says so */
		} else if (l->refused++ == 0) {
			l->refused_error = -err;
		}
	}
	close(root);
	return rc;
}

/* The first entry whose lease an open(2) has begun to break, or SIZE_MAX. */
static size_t leases_broken(const struct leases *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->fds[i] >= 0 && refresh_lease_broken(l->fds[i]))
			return i;
	return SIZE_MAX;
}

enum refresh_status refresh_scan(struct refresh *r, struct refresh_result *res)
{
	memset(res, 0, sizeof *res);
	struct statx stx;
	int dir_fd = open_quietly(r->parent_fd, r->name, O_RDONLY | O_DIRECTORY);
	if (dir_fd < 0)
		return say(res, REFRESH_REFUSED, errno, "%s: %s", r->path, strerror(errno));
	if (statx(dir_fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &stx) < 0 ||
	    stx.stx_ino != r->dir_ino) {
		close(dir_fd);
		return say(res, REFRESH_REFUSED, EAGAIN, "%s: changed while it was looked at; try "
			   "again", r->path);
	}
	if (fstatat(r->parent_fd, r->copy_name, &(struct stat){ 0 }, AT_SYMLINK_NOFOLLOW) == 0 ||
	    errno != ENOENT) {
		close(dir_fd);
		return say(res, REFRESH_REFUSED, EEXIST, "%s: %s exists beside it and no journal "
			   "says it is a refresh's: move it away first", r->path, r->copy_name);
	}
	if (entry_add(r, "", "", 0, &stx) < 0) {
		close(dir_fd);
		return say(res, REFRESH_REFUSED, ENOMEM, "out of memory");
	}
	/* DIR itself: its xattrs, flags and owner; then its tree. */
	if (entry_check(r, dir_fd, 0, &stx, res) < 0 || hard_links_check(r, res) < 0 ||
	    open_files_check(r, res) < 0) {
		close(dir_fd);
		return REFRESH_REFUSED;
	}
	close(dir_fd);
	/* /proc showed what we may see; a lease taken and given back at once
	 * asks the kernel about every process, other users' too. */
	struct leases probe;
	size_t busy = 0;
	int leased = leases_take(r, false, &probe, &busy);
	size_t refused = probe.refused;
	int refused_error = probe.refused_error;
	leases_release(&probe);
	if (leased == -EAGAIN)
		return say(res, REFRESH_REFUSED, EBUSY, "%s: %s is in use by a process refresh cannot "
			   "see (open, mapped or running: the kernel refused a write lease)", r->path,
			   shown(&r->entries[busy]));
	if (leased < 0)
		return say(res, REFRESH_REFUSED, -leased, "%s: %s", r->path, strerror(-leased));
	memset(&r->counts, 0, sizeof r->counts);
	for (size_t i = 0; i < r->n_entries; i++) {
		const struct entry *e = &r->entries[i];
		if (e->kind == REFRESH_KIND_DIR)
			r->counts.dirs++;
		else if (e->link_to != SIZE_MAX)
			r->counts.hard_links++;
		else if (e->kind == REFRESH_KIND_SYMLINK)
			r->counts.symlinks++;
		else {
			r->counts.files++;
			r->counts.bytes += e->size;
		}
	}
	unsigned unchecked = res->unchecked_processes;
	res->counts = r->counts;
	res->unchecked_processes = unchecked;
	res->unleased_files = refused;
	res->unleased_error = refused_error;
	res->status = REFRESH_OK;
	return REFRESH_OK;
}

size_t refresh_entry_count(const struct refresh *r)
{
	return r->n_entries;
}

void refresh_entry(const struct refresh *r, size_t i, const char **path, enum refresh_kind *kind,
		   uint64_t *size, size_t *link_to)
{
	const struct entry *e = &r->entries[i];
	*path = e->path;
	*kind = e->kind;
	*size = e->size;
	*link_to = e->link_to;
}

/* ---- step 4: the copy ------------------------------------------------------------ */

static int copy_xattrs(int src_fd, int dst_fd, const char *src_path, const char *dst_path)
{
	char names[65536], value[65536];
	ssize_t n = src_fd >= 0 ? flistxattr(src_fd, names, sizeof names)
				: llistxattr(src_path, names, sizeof names);
	if (n < 0)
		return errno == ENOTSUP ? 0 : -errno;
	for (char *p = names; p < names + n; p += strlen(p) + 1) {
		ssize_t len = src_fd >= 0 ? fgetxattr(src_fd, p, value, sizeof value)
					  : lgetxattr(src_path, p, value, sizeof value);
		if (len < 0) {
			if (errno == ENODATA)
				continue; /* removed meanwhile: the recheck sees the change */
			return -errno;
		}
		int rc = dst_fd >= 0 ? fsetxattr(dst_fd, p, value, (size_t)len, 0)
				     : lsetxattr(dst_path, p, value, (size_t)len, 0);
		if (rc < 0)
			return -errno;
	}
	return 0;
}

/* A directory we make may inherit its parent's default ACL (the top one
 * from DIR's parent): the copy must carry only what the original has. */
static void drop_inherited_acls(int fd)
{
	fremovexattr(fd, "system.posix_acl_default");
	fremovexattr(fd, "system.posix_acl_access");
}

/* A file or directory we make inherits some of its directory's inode
 * flags - chattr +d, +A, +S, +D, +j, ... (ext4: __ext4_new_inode ->
 * ext4_mask_flags, EXT4_FL_INHERITED) - the top one from DIR's parent.
 * The original has none but the filesystem's own (entry_check() refuses
 * any other), so the copy must not either: clear them at once, before
 * its data is written.  A flag the kernel will not clear (+j without
 * CAP_SYS_RESOURCE) fails the copy, which is then undone.  (A symbolic
 * link may inherit +d and +A too; it cannot be opened to clear them.) */
static int drop_inherited_flags(int fd)
{
	unsigned flags = 0;
	if (ioctl(fd, FS_IOC_GETFLAGS, &flags) < 0)
		return 0; /* no inode flags on this filesystem */
	if (!(flags & ~FLAGS_OF_THE_FILESYSTEM))
		return 0;
	flags &= FLAGS_OF_THE_FILESYSTEM;
	return ioctl(fd, FS_IOC_SETFLAGS, &flags) < 0 ? -errno : 0;
}

/* A copy's metadata goes on in this order: owner, extended attributes,
 * mode, times.  A chown clears what would let the new owner gain
 * privilege: the file capabilities (security.capability, removed by
 * fs/attr.c: notify_change -> security_inode_killpriv ->
 * cap_inode_killpriv) and the set-user-ID and set-group-ID bits
 * (fs/attr.c: setattr_should_drop_suidgid).  So the owner comes first,
 * the attributes and the mode after it, and the times last (setting
 * anything else moves the ctime only). */
static int set_owner(int fd, const struct entry *e)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if ((st.st_uid != e->uid || st.st_gid != e->gid) && fchown(fd, e->uid, e->gid) < 0)
		return -errno;
	return 0;
}

static int set_mode_times(int fd, const struct entry *e)
{
	if (fchmod(fd, e->mode & 07777) < 0)
		return -errno;
	struct timespec times[2] = { e->atime, e->mtime };
	if (futimens(fd, times) < 0)
		return -errno;
	return 0;
}

/* Call fn for each preallocated but unwritten extent of src
 * (FIEMAP_EXTENT_UNWRITTEN: ext4, XFS, btrfs' prealloc), in file order,
 * past EOF too.  0, fn's first non-zero answer, or -errno; a file system
 * without FIEMAP has none. */
static int for_each_unwritten(int src, int (*fn)(void *ctx, uint64_t first, uint64_t len),
			      void *ctx)
{
	enum { BATCH = 32 };
	union {
		struct fiemap map;
		char bytes[sizeof(struct fiemap) + BATCH * sizeof(struct fiemap_extent)];
	} u;
	uint64_t start = 0;
	for (;;) {
		memset(&u, 0, sizeof u);
		u.map.fm_start = start;
		u.map.fm_length = FIEMAP_MAX_OFFSET - start;
		u.map.fm_extent_count = BATCH;
		if (ioctl(src, FS_IOC_FIEMAP, &u.map) < 0)
			return errno == EOPNOTSUPP || errno == ENOTTY || errno == EINVAL ? 0 : -errno;
		if (u.map.fm_mapped_extents == 0)
			return 0;
		const struct fiemap_extent *fe = u.map.fm_extents;
		for (unsigned i = 0; i < u.map.fm_mapped_extents; i++) {
			if (fe[i].fe_flags & FIEMAP_EXTENT_UNWRITTEN) {
				int rc = fn(ctx, fe[i].fe_logical, fe[i].fe_length);
				if (rc)
					return rc;
			}
			if (fe[i].fe_flags & FIEMAP_EXTENT_LAST)
				return 0;
		}
		const struct fiemap_extent *last = &fe[u.map.fm_mapped_extents - 1];
		uint64_t next = last->fe_logical + last->fe_length;
		if (next <= start)
			return 0;
		start = next;
	}
}

/* The unwritten extents inside the size, for copy_data(). */
struct unwritten {
	uint64_t size;
	size_t n, cap;
	struct { uint64_t first, end; } *span;
};

static int unwritten_add(void *ctx, uint64_t first, uint64_t len)
{
	struct unwritten *u = ctx;
	if (first >= u->size)
		return 1; /* past EOF: the rest is too */
	uint64_t end = u->size - first < len ? u->size : first + len;
	if (u->n && u->span[u->n - 1].end == first) {
		u->span[u->n - 1].end = end;
		return 0;
	}
	if (u->n == u->cap) {
		size_t cap = u->cap ? 2 * u->cap : 16;
		void *grown = realloc(u->span, cap * sizeof *u->span);
		if (!grown)
			return 1; /* the spans so far; the rest is written as data */
		u->span = grown;
		u->cap = cap;
	}
	u->span[u->n].first = first;
	u->span[u->n].end = end;
	u->n++;
	return 0;
}

/* Is [at, at + len) inside one unwritten span?  *next: where the search
 * starts, moved on as the copy goes forward. */
static bool unwritten_covers(const struct unwritten *u, size_t *next, uint64_t at, uint64_t len)
{
	while (*next < u->n && u->span[*next].end <= at)
		++*next;
	return *next < u->n && u->span[*next].first <= at && at + len <= u->span[*next].end;
}

static bool all_zero(const char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/*
 * The data, hole by hole.  SEEK_DATA counts an unwritten extent's pages
 * as data once they are in the page cache (ext4_iomap/iomap_seek_data
 * look there: a program may have written them, not yet on disk), and a
 * file that was read - a backup, `sha256sum` - has its reserved space
 * cached as zero pages.  Copied as data, a 10 GiB reservation cost 10 GiB
 * of writes, and the copy's space became written zeros.  So a chunk of
 * zeros wholly inside an unwritten extent is not written: the copy
 * reserves that space again (copy_preallocation()), and it reads as the
 * same zeros.  A chunk with any other byte is data, written.
 */
static int copy_data(struct refresh *r, int src, int dst, uint64_t size)
{
	struct unwritten u = { .size = size };
	size_t next = 0;
	int rc = for_each_unwritten(src, unwritten_add, &u);
	if (rc < 0) {
		free(u.span);
		return rc;
	}
	rc = 0;
	off_t pos = 0, end = (off_t)size;
	while (pos < end && rc == 0) {
		off_t data = lseek(src, pos, SEEK_DATA);
		if (data < 0) {
			if (errno == ENXIO)
				break; /* a hole to the end */
			if (errno != EINVAL) {
				rc = -errno;
				break;
			}
			data = pos; /* no SEEK_DATA: all data */
		}
		if (data >= end)
			break;
		off_t hole = lseek(src, data, SEEK_HOLE);
		if (hole < 0 || hole > end)
			hole = end;
		for (off_t at = data; at < hole && rc == 0;) {
			size_t want = (size_t)(hole - at) < COPY_BUFFER ? (size_t)(hole - at) : COPY_BUFFER;
			ssize_t got = pread(src, r->buffer, want, at);
			if (got < 0) {
				if (errno != EINTR)
					rc = -errno;
				continue;
			}
			if (got == 0) {
				rc = -EAGAIN; /* shrank: the recheck would refuse it anyway */
				break;
			}
			if (unwritten_covers(&u, &next, (uint64_t)at, (uint64_t)got) &&
			    all_zero(r->buffer, (size_t)got)) {
				at += got;
				continue;
			}
			for (ssize_t done = 0; done < got;) {
				ssize_t w = pwrite(dst, r->buffer + done, (size_t)(got - done), at + done);
				if (w < 0) {
					if (errno == EINTR)
						continue;
					rc = -errno;
					break;
				}
				done += w;
			}
			at += got;
		}
		pos = hole;
	}
	free(u.span);
	if (rc == 0 && ftruncate(dst, end) < 0)
		rc = -errno;
	return rc;
}

/* Preallocated but unwritten ranges (fallocate(1), a database's or a VM
 * image's reserved space, and FALLOC_FL_KEEP_SIZE past EOF) read as holes,
 * so copy_data() leaves them out; a refresh that turned reserved space
 * into holes could make a later write fail with ENOSPC.  FIEMAP says where
 * they are, and fallocate with FALLOC_FL_KEEP_SIZE reserves the same
 * ranges in the copy, beside its data (already allocated there: fallocate
 * leaves it alone).  A file system without FIEMAP has nothing to say, and
 * keeps nothing. */
struct reserve {
	int dst;
	uint64_t size;
	bool past_eof;
};

static int reserve_again(void *ctx, uint64_t first, uint64_t len)
{
	const struct reserve *v = ctx;
	if (!v->past_eof)
		len = first >= v->size ? 0 : v->size - first < len ? v->size - first : len;
	if (len && fallocate(v->dst, FALLOC_FL_KEEP_SIZE, (off_t)first, (off_t)len) < 0)
		return errno == EOPNOTSUPP ? 1 : -errno;
	return 0;
}

static int copy_preallocation(int src, int dst, uint64_t size)
{
	/* Past EOF, XFS also keeps blocks of its own choosing for a file being
	 * written (speculative preallocation, trimmed at close unless the
	 * file is marked preallocated): reserved in the copy by fallocate,
	 * they would stay for good.  There only a file that says it was
	 * preallocated (FS_XFLAG_PREALLOC, set by fallocate) keeps them. */
	struct reserve v = { .dst = dst, .size = size, .past_eof = true };
	struct statfs sfs;
	struct fsxattr fsx;
	if (fstatfs(src, &sfs) == 0 && sfs.f_type == (__typeof__(sfs.f_type))XFS_SUPER_MAGIC)
		v.past_eof = ioctl(src, FS_IOC_FSGETXATTR, &fsx) == 0 &&
			     (fsx.fsx_xflags & FS_XFLAG_PREALLOC);
	int rc = for_each_unwritten(src, reserve_again, &v);
	return rc < 0 ? rc : 0;
}

static int copy_entry(struct refresh *r, size_t i, int src_dir, int dst_dir, int dst_root,
		      const char **failed)
{
	const struct entry *e = &r->entries[i];
	*failed = "copying";
	if (e->link_to != SIZE_MAX) {
		*failed = "linking";
		if (linkat(dst_root, r->entries[e->link_to].path, dst_dir, e->name, 0) < 0)
			return -errno;
		step(r);
		return 0;
	}
	if (e->kind == REFRESH_KIND_DIR) {
		if (mkdirat(dst_dir, e->name, 0700) < 0)
			return -errno;
		int fd = openat(dst_dir, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		drop_inherited_acls(fd);
		*failed = "clearing the inode flags inherited by";
		int rc = drop_inherited_flags(fd);
		close(fd);
		if (rc < 0)
			return rc;
		step(r);
		return 0;
	}
	if (e->kind == REFRESH_KIND_SYMLINK) {
		char *target = malloc(e->size + 2);
		if (!target)
			return -ENOMEM;
		ssize_t n = readlinkat(src_dir, e->name, target, e->size + 1);
		if (n < 0 || (uint64_t)n != e->size) {
			free(target);
			return n < 0 ? -errno : -EAGAIN;
		}
		target[n] = '\0';
		int rc = symlinkat(target, dst_dir, e->name);
		free(target);
		if (rc < 0)
			return -errno;
		char src_path[64 + PATH_MAX], dst_path[64 + PATH_MAX];
		snprintf(src_path, sizeof src_path, "/proc/self/fd/%d/%s", src_dir, e->name);
		snprintf(dst_path, sizeof dst_path, "/proc/self/fd/%d/%s", dst_dir, e->name);
		/* Owner, attributes, times: the order of set_owner(). */
		*failed = "setting the owner of";
		struct stat made;
		if (fstatat(dst_dir, e->name, &made, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
		if ((made.st_uid != e->uid || made.st_gid != e->gid) &&
		    fchownat(dst_dir, e->name, e->uid, e->gid, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
		*failed = "copying the extended attributes of";
		if ((rc = copy_xattrs(-1, -1, src_path, dst_path)) < 0)
			return rc;
		*failed = "setting the times of";
		struct timespec times[2] = { e->atime, e->mtime };
		if (utimensat(dst_dir, e->name, times, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
		step(r);
		return 0;
	}
	/* O_NONBLOCK, then the inode checked: a FIFO put at the name since the
	 * scan would block a plain open (fs/fifo.c: fifo_open).  Cleared
	 * again before reading; for a regular file it changes nothing
	 * there, but says what is meant. */
	int src = open_quietly(src_dir, e->name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (src < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	struct stat st;
	if (fstat(src, &st) < 0 || (uint64_t)st.st_ino != e->ino || !S_ISREG(st.st_mode)) {
		close(src);
		return -EAGAIN;
	}
	int src_flags = fcntl(src, F_GETFL);
	if (src_flags < 0 || fcntl(src, F_SETFL, src_flags & ~O_NONBLOCK) < 0) {
		int err = -errno;
		close(src);
		return err;
	}
	int dst = openat(dst_dir, e->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (dst < 0) {
		int err = -errno;
		close(src);
		return err;
	}
	*failed = "clearing the inode flags inherited by";
	int rc = drop_inherited_flags(dst);
	if (rc == 0) {
		*failed = "copying";
		rc = copy_data(r, src, dst, e->size);
	}
	if (rc == 0) {
		*failed = "reserving the preallocated space of";
		rc = copy_preallocation(src, dst, e->size);
	}
	if (rc == 0) {
		step(r); /* the file written */
		*failed = "setting the owner of";
		rc = set_owner(dst, e);
	}
	if (rc == 0) {
		*failed = "copying the extended attributes of";
		rc = copy_xattrs(src, dst, NULL, NULL);
	}
	if (rc == 0) {
		*failed = "setting the mode and times of";
		rc = set_mode_times(dst, e);
	}
	if (rc == 0) {
		*failed = "syncing";
		rc = fsync(dst) < 0 ? -errno : 0;
		if (rc == 0)
			step(r); /* the file on disk */
	}
	close(src);
	close(dst);
	return rc;
}

/* After every entry: each directory (deepest first, DIR's copy last) gets
 * its owner, extended attributes, mode and times (set_owner()) - its mtime only now that
 * nothing is added to it any more - and is fsynced. */
static int finish_dirs(struct refresh *r, const char **failed, size_t *at)
{
	for (size_t i = r->n_entries; i-- > 0;) {
		const struct entry *e = &r->entries[i];
		if (e->kind != REFRESH_KIND_DIR)
			continue;
		*at = i;
		int src = open_dir_of(r, false, i);
		if (src < 0)
			return -errno;
		int dst = open_dir_of(r, true, i);
		if (dst < 0) {
			int err = -errno;
			close(src);
			return err;
		}
		*failed = "setting the owner of";
		int rc = set_owner(dst, e);
		if (rc == 0) {
			*failed = "copying the extended attributes of";
			rc = copy_xattrs(src, dst, NULL, NULL);
		}
		if (rc == 0) {
			*failed = "setting the mode and times of";
			rc = set_mode_times(dst, e);
		}
		if (rc == 0) {
			*failed = "syncing";
			rc = fsync(dst) < 0 ? -errno : 0;
		}
		close(src);
		close(dst);
		if (rc < 0)
			return rc;
		step(r);
	}
	return 0;
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
	int root = open_dir_of(r, copy, 0);
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
	leases_release(&r->leases[0]);
	leases_release(&r->leases[1]);
	int e = remove_copy(r);
	if (e == 0)
		e = journal_remove(r);
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
		int e = journal_lock_existing(r, true);
		if (e < 0)
			return say(res, REFRESH_REFUSED, -e, "%s: %s", r->path,
				   e == -EBUSY ? "another refresh of it started meanwhile"
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
	int e = journal_write(r, REFRESH_PHASE_COPYING, 0);
	if (e < 0) {
		/* Failed, not refused (exit 1, not 2): nothing was changed yet. */
		int gone = journal_remove(r);
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
	drop_inherited_acls(dst_root);
	if ((e = drop_inherited_flags(dst_root)) < 0) {
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
			src_dir = open_dir_of(r, false, en->parent);
			dst_dir = src_dir >= 0 ? open_dir_of(r, true, en->parent) : -1;
			open_parent = en->parent;
			if (src_dir < 0 || dst_dir < 0) {
				e = -errno;
				failed = "opening the directory of";
				failed_at = i;
				break;
			}
		}
		e = copy_entry(r, i, src_dir, dst_dir, dst_root, &failed);
		failed_at = i;
	}
	if (src_dir >= 0)
		close(src_dir);
	if (dst_dir >= 0)
		close(dst_dir);
	close(dst_root);
	if (e == 0)
		e = finish_dirs(r, &failed, &failed_at);
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
	e = journal_write(r, REFRESH_PHASE_COPIED, copy_st.st_ino);
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
	e = leases_take(r, false, old_leases, &busy);
	if (e == 0 && (e = leases_take(r, true, new_leases, &busy)) == -EAGAIN)
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
	if (open_files_check(r, &open_check) < 0)
		return undo(r, res, EBUSY, "%s (opened during the refresh)", open_check.message);
	if ((busy = leases_broken(old_leases)) != SIZE_MAX)
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
	size_t old_open = leases_broken(old_leases), new_open = leases_broken(new_leases);
	if (old_open != SIZE_MAX && new_open == SIZE_MAX) {
		int back = renameat2(r->parent_fd, r->name, r->parent_fd, r->copy_name,
				     RENAME_EXCHANGE);
		int err = errno;
		leases_release(new_leases); /* the opener goes on, to the old file */
		leases_release(old_leases);
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
	leases_release(new_leases);
	leases_release(old_leases);
	if (fsync(r->parent_fd) < 0)
		return say(res, REFRESH_STUCK, errno, "%s: syncing its parent after the exchange: %s; "
			   "run 'discnice refresh --recover %s'", r->path, strerror(errno), r->path);
	step(r);
	e = journal_write(r, REFRESH_PHASE_EXCHANGED, copy_st.st_ino);
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
	e = remove_copy(r);
	if (e == 0)
		e = journal_remove(r);
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
	leases_release(&r->leases[0]);
	leases_release(&r->leases[1]);
	if (r->journal_fd >= 0)
		close(r->journal_fd);
	if (r->parent_fd >= 0)
		close(r->parent_fd);
	free(r);
}
