/*
 * device.c - device facts from sysfs (see device.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <linux/btrfs.h>
#include <linux/magic.h>

#include "graybox/device.h"

static long read_sysfs_long(const char *path)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

/* /sys/dev/block/MAJ:MIN/queue exists for a whole disk; a partition has
 * its queue one level up (/sys/dev/block/MAJ:MIN/../queue). */
static long queue_value(dev_t dev, const char *name)
{
	char path[PATH_MAX];
	long v;
	snprintf(path, sizeof path, "/sys/dev/block/%u:%u/queue/%s", major(dev), minor(dev), name);
	if ((v = read_sysfs_long(path)) >= 0)
		return v;
	snprintf(path, sizeof path, "/sys/dev/block/%u:%u/../queue/%s", major(dev), minor(dev), name);
	return read_sysfs_long(path);
}

static int kernel_at_least(int major_want, int minor_want)
{
	struct utsname u;
	int major_have = 0, minor_have = 0;
	if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major_have, &minor_have) != 2)
		return 0;
	return major_have > major_want || (major_have == major_want && minor_have >= minor_want);
}

/* log2(PMD size / page size), from the THP sysfs file; 9 when absent. */
static uint32_t pmd_order(void)
{
	long pmd = read_sysfs_long("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
	uint32_t order = 0;
	if (pmd <= 0)
		return 9;
	for (long pages = pmd / 4096; pages > 1; pages >>= 1)
		order++;
	return order;
}

/* A btrfs file's st_dev is an anonymous device (one per subvolume), with
 * no /sys/dev/block entry: its pages are read through a bdi of btrfs' own,
 * "btrfs-N" (super_setup_bdi() in btrfs_fill_super()), which open_ctree()
 * gives at least 4 MiB of readahead, times the number of devices.  sysfs
 * links it as /sys/fs/btrfs/FSID/bdi; the FSID comes from
 * BTRFS_IOC_FS_INFO, which needs no privilege (btrfs_ioctl_fs_info).  The
 * bdi's io_pages stays bdi_init()'s VM_READAHEAD_PAGES (128 KiB): btrfs
 * never sets it, and sysfs does not show it.  Returns -1 when fd is not on
 * btrfs or the bdi cannot be found. */
#define VM_READAHEAD_KB 128
static long btrfs_read_ahead_kb(int fd)
{
	struct btrfs_ioctl_fs_info_args fs;
	char path[96];
	int at;
	memset(&fs, 0, sizeof fs);
	if (ioctl(fd, BTRFS_IOC_FS_INFO, &fs) != 0)
		return -1;
	at = snprintf(path, sizeof path, "/sys/fs/btrfs/");
	for (unsigned i = 0; i < BTRFS_FSID_SIZE; i++)
		at += snprintf(path + at, sizeof path - (size_t)at, "%s%02x",
			       i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", fs.fsid[i]);
	snprintf(path + at, sizeof path - (size_t)at, "/bdi/read_ahead_kb");
	return read_sysfs_long(path);
}

/* An overlayfs file (a container's root, a podman or toolbox layer) has an
 * anonymous st_dev too, but its pages are the file beneath's: reads go to
 * it (ovl_read_iter() -> backing_file_read_iter()), with its readahead
 * and its device's bdi.  Which file system that is, no call says; but
 * ovl_statfs() answers with the upper (or first lower) layer's statfs -
 * its size in blocks and in inodes - and so does every mount of that file
 * system (f_fsid too, unless the overlay has a uuid of its own, uuid=on,
 * the default where the upper layer supports it).  /proc/self/mountinfo
 * lists the mounts with their st_dev (major:minor): on the host the
 * layers' own mount, in a container the bind mounts of /etc/hosts and the
 * like, which come from the same disk.  Only block-backed mounts (major !=
 * 0) are asked: a statfs of a dead NFS mount would never return.  Two file
 * systems of exactly the same size in blocks and inodes, and block size,
 * would be taken for one: the first listed.  Fills the mount's device and
 * its f_type. */
#define MOUNTINFO_LINE 4096

/* Undo mountinfo's octal escapes (\040 for a space) in place. */
static void mountinfo_unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

static bool same_file_system(const struct statfs *a, const struct statfs *b)
{
	static const fsid_t none;
	if (memcmp(&a->f_fsid, &none, sizeof none) != 0 &&
	    memcmp(&a->f_fsid, &b->f_fsid, sizeof a->f_fsid) == 0)
		return true;
	return a->f_blocks && a->f_blocks == b->f_blocks && a->f_files == b->f_files &&
	       a->f_bsize == b->f_bsize && a->f_frsize == b->f_frsize;
}

/* One line: "ID PARENT MAJ:MIN ROOT MOUNTPOINT ...".  True if its mount is
 * on a block device and is the overlay's file system.  The path may now
 * lead to another mount stacked on it (one that could hang, NFS): statx
 * without automount or sync first, and only the line's own mount (its
 * id, its device) is asked for its statfs. */
static bool mountinfo_line_matches(char *line, const struct statfs *ovl, dev_t *dev, long *f_type)
{
	unsigned maj, min;
	unsigned long long mnt_id;
	char *field[5];
	char *save = NULL, *tok = strtok_r(line, " ", &save);
	for (int i = 0; i < 5; i++) {
		if (!tok)
			return false;
		field[i] = tok;
		tok = strtok_r(NULL, " ", &save);
	}
	if (sscanf(field[0], "%llu", &mnt_id) != 1 ||
	    sscanf(field[2], "%u:%u", &maj, &min) != 2 || maj == 0)
		return false;
	mountinfo_unescape(field[4]);
	struct statx stx;
	if (statx(AT_FDCWD, field[4], AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC | AT_SYMLINK_NOFOLLOW,
		  STATX_MNT_ID, &stx) != 0 || !(stx.stx_mask & STATX_MNT_ID) ||
	    stx.stx_mnt_id != mnt_id || stx.stx_dev_major != maj || stx.stx_dev_minor != min)
		return false;
	struct statfs sfs;
	if (statfs(field[4], &sfs) != 0 || !same_file_system(ovl, &sfs) ||
	    sfs.f_type == (__typeof__(sfs.f_type))OVERLAYFS_SUPER_MAGIC)
		return false;
	*dev = makedev(maj, min);
	*f_type = (long)sfs.f_type;
	return true;
}

static int overlay_lower_device(const struct statfs *ovl, dev_t *dev, long *f_type)
{
	int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == EINTR || errno == EMFILE || errno == ENFILE ? -EAGAIN : -1;
	/* No stdio: this runs inside the agent's hooks, where malloc may be
	 * unsafe.  Lines longer than the buffer are skipped. */
	char buf[MOUNTINFO_LINE];
	size_t have = 0;
	bool skipping = false, found = false, failed = false;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		failed = n < 0;
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = '\0';
		char *line = buf, *nl;
		while (!found && (nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
			*nl = '\0';
			if (!skipping)
				found = mountinfo_line_matches(line, ovl, dev, f_type);
			skipping = false;
			line = nl + 1;
		}
		if (found)
			break;
		have -= (size_t)(line - buf);
		memmove(buf, line, have);
		if (have == sizeof buf - 1) {
			have = 0; /* a line too long: drop it up to its end */
			skipping = true;
		}
	}
	close(fd);
	return found ? 0 : failed ? -EAGAIN : -1;
}

bool device_fd_on_overlayfs(int fd)
{
	int saved = errno;
	struct statfs sfs;
	bool overlay = fstatfs(fd, &sfs) == 0 &&
		       sfs.f_type == (__typeof__(sfs.f_type))OVERLAYFS_SUPER_MAGIC;
	errno = saved;
	return overlay;
}

const char *device_fd_on_pseudo_fs(int fd)
{
	int saved = errno;
	struct statfs sfs;
	int got = fstatfs(fd, &sfs);
	errno = saved;
	if (got != 0)
		return NULL;
	switch ((unsigned long)sfs.f_type) {
	case PROC_SUPER_MAGIC: return "proc";
	case SYSFS_MAGIC: return "sysfs";
	case DEBUGFS_MAGIC: return "debugfs";
	case TRACEFS_MAGIC: return "tracefs";
	case SECURITYFS_MAGIC: return "securityfs";
	case CGROUP_SUPER_MAGIC: return "cgroup";
	case CGROUP2_SUPER_MAGIC: return "cgroup2";
	case BPF_FS_MAGIC: return "bpf";
	case PSTOREFS_MAGIC: return "pstore";
	case EFIVARFS_MAGIC: return "efivarfs";
	default: return NULL;
	}
}

int device_info_of_fd(int fd, dev_t dev, struct device_info *out)
{
	int saved = errno;
	struct statfs sfs;
	memset(out, 0, sizeof *out);
	if (fstatfs(fd, &sfs) != 0) {
		int rc = -errno;
		errno = saved;
		return rc;
	}
	if (sfs.f_type == (__typeof__(sfs.f_type))OVERLAYFS_SUPER_MAGIC) {
		long lower_type;
		int rc = overlay_lower_device(&sfs, &dev, &lower_type);
		if (rc != 0) {
			errno = saved;
			/* Not found: not a disk we can account.  Could not look
			 * (no descriptor to spare): ask again at the next file. */
			return rc == -EAGAIN ? -EAGAIN : 0;
		}
		sfs.f_type = (__typeof__(sfs.f_type))lower_type;
		out->overlay = 1;
	}
	/* Major 0 is an anonymous device (get_anon_bdev(): tmpfs, btrfs,
	 * overlayfs, NFS...): it has no queue in sysfs to look for. */
	long ra_kb = major(dev) ? queue_value(dev, "read_ahead_kb") : -1;
	long io_kb = major(dev) ? queue_value(dev, "max_sectors_kb") : -1;
	if (ra_kb < 0 && sfs.f_type == (__typeof__(sfs.f_type))BTRFS_SUPER_MAGIC) {
		/* This descriptor may not answer (O_PATH: EBADF; a seccomp
		 * filter) where the next one on the same device will: not a
		 * disk for now, and not to be cached (-EAGAIN). */
		if ((ra_kb = btrfs_read_ahead_kb(fd)) < 0) {
			errno = saved;
			return -EAGAIN;
		}
		io_kb = VM_READAHEAD_KB;
	}
	/* No queue directory: tmpfs, procfs, overlay's anonymous dev, NFS...
	 * Nothing there goes to a local disk we can account for. */
	if (ra_kb < 0) {
		errno = saved;
		return 0;
	}
	out->is_disk = 1;
	out->ra_pages = (uint32_t)(ra_kb / 4);
	out->io_pages = (uint32_t)((io_kb > 0 ? io_kb : ra_kb) / 4);
	/* Large folios for regular files: xfs since 5.18, ext4 since 6.16.
	 * The largest page-cache folio is a PMD (MAX_PAGECACHE_ORDER,
	 * include/linux/pagemap.h): order 9 on x86-64.  Getting this wrong
	 * misplaces readahead markers by whole folios (measured: -3% to -97%
	 * prediction error on ext4 with order 0). */
	if (sfs.f_type == (__typeof__(sfs.f_type))XFS_SUPER_MAGIC ||
	    (sfs.f_type == (__typeof__(sfs.f_type))EXT4_SUPER_MAGIC && kernel_at_least(6, 16)))
		out->max_folio_order = pmd_order();
	/* vfs_copy_file_range() splices (do_splice_direct) only where the
	 * filesystem has neither ->remap_file_range nor ->copy_file_range:
	 * XFS with reflink, btrfs, bcachefs, ZFS and ocfs2 clone instead,
	 * reading nothing; NFS, CIFS, ceph and FUSE may offload to the
	 * server.  Only those known to splice say so. */
	switch ((unsigned long)sfs.f_type) {
	case EXT4_SUPER_MAGIC:    /* ext2, ext3, ext4 */
	case MSDOS_SUPER_MAGIC:   /* vfat, msdos */
	case EXFAT_SUPER_MAGIC:
		out->copy_splices = 1;
		break;
	}
	errno = saved;
	return 0;
}
