/*
 * refresh_scan.c - directory refresh, step 3 (graybox-icl §4.2.1): every
 * entry of DIR, checked for what a copy could not keep faithfully
 * (refused before anything is touched), put in plan order; hard links
 * kept whole; files in use refused, as /proc shows them and as the
 * kernel's write leases do (refresh_lease.h), which refresh_run() takes
 * again for its last look.
 */
#include "graybox/fldc/refresh_internal.h"
#include "graybox/fldc/refresh_lease.h"
#include "common/proc_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

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
	/* Entries are opened by their path from DIR (refresh_open_beneath()):
	 * one longer than PATH_MAX was copied, then could not be opened for
	 * its metadata, and the refresh undone after all that work. */
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
			 ? (i == 0 ? dup(dir_fd) : refresh_open_quietly(dir_fd, name, O_RDONLY | O_DIRECTORY))
			 : refresh_open_quietly(dir_fd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
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
int refresh_open_files_check(struct refresh *r, struct refresh_result *res)
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

void refresh_leases_release(struct leases *l)
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
int refresh_leases_take(struct refresh *r, bool copy, struct leases *l, size_t *busy)
{
	*l = (struct leases){ 0 };
	if (!(l->fds = malloc((r->n_entries ? r->n_entries : 1) * sizeof *l->fds)))
		return -ENOMEM;
	l->n = r->n_entries;
	for (size_t i = 0; i < l->n; i++)
		l->fds[i] = -1;
	int root = refresh_open_dir(r, copy, 0);
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
		int fd = refresh_open_quietly(root, e->path, O_RDONLY | O_NONBLOCK);
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
size_t refresh_leases_broken(const struct leases *l)
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
	int dir_fd = refresh_open_quietly(r->parent_fd, r->name, O_RDONLY | O_DIRECTORY);
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
	    refresh_open_files_check(r, res) < 0) {
		close(dir_fd);
		return REFRESH_REFUSED;
	}
	close(dir_fd);
	/* /proc showed what we may see; a lease taken and given back at once
	 * asks the kernel about every process, other users' too. */
	struct leases probe;
	size_t busy = 0;
	int leased = refresh_leases_take(r, false, &probe, &busy);
	size_t refused = probe.refused;
	int refused_error = probe.refused_error;
	refresh_leases_release(&probe);
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
