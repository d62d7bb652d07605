/*
 * refresh_copy.c - directory refresh, step 4's copy of one entry
 * (graybox-icl §4.2.1): new blocks written with read(2)/write(2) in plan
 * order (never a reflink), holes and preallocation kept, then the owner,
 * extended attributes, mode and times, each file and directory fsynced.
 */
#include "graybox/fldc/refresh_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

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
void refresh_drop_inherited_acls(int fd)
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
int refresh_drop_inherited_flags(int fd)
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

/* A copy's owner, extended attributes, mode and times, then fsync: a
 * file's once its data is written, a directory's once nothing is added
 * to it any more.  *failed names the step that failed. */
static int finish_metadata(int src, int dst, const struct entry *e, const char **failed)
{
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
	return rc;
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
	/* The size first: every write then lands inside the file.  Writes
	 * that extend it make XFS reserve speculative preallocation past EOF
	 * (xfs_iomap.c: xfs_iomap_prealloc_size), which a ftruncate() at the
	 * end then took inside: 28 MiB of a 50 MiB hole became an unwritten
	 * extent, and a later refresh kept it as the file's own
	 * preallocation. */
	off_t pos = 0, end = (off_t)size;
	rc = ftruncate(dst, end) < 0 ? -errno : 0;
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

int refresh_copy_entry(struct refresh *r, size_t i, int src_dir, int dst_dir, int dst_root,
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
		refresh_drop_inherited_acls(fd);
		*failed = "clearing the inode flags inherited by";
		int rc = refresh_drop_inherited_flags(fd);
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
	int src = refresh_open_quietly(src_dir, e->name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
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
	int rc = refresh_drop_inherited_flags(dst);
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
		rc = finish_metadata(src, dst, e, failed);
		if (rc == 0)
			step(r); /* the file on disk */
	}
	close(src);
	close(dst);
	return rc;
}

/* After every entry: each directory (deepest first, DIR's copy last) gets
 * its owner, extended attributes, mode and times (finish_metadata()) -
 * its mtime only now that nothing is added to it any more - and is
 * fsynced. */
int refresh_finish_dirs(struct refresh *r, const char **failed, size_t *at)
{
	for (size_t i = r->n_entries; i-- > 0;) {
		const struct entry *e = &r->entries[i];
		if (e->kind != REFRESH_KIND_DIR)
			continue;
		*at = i;
		int src = refresh_open_dir(r, false, i);
		if (src < 0)
			return -errno;
		int dst = refresh_open_dir(r, true, i);
		if (dst < 0) {
			int err = -errno;
			close(src);
			return err;
		}
		int rc = finish_metadata(src, dst, e, failed);
		close(src);
		close(dst);
		if (rc < 0)
			return rc;
		step(r);
	}
	return 0;
}
