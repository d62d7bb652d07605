/*
 * device.h - what the model needs to know about the device under a file:
 * is it a real block device (not tmpfs/proc/a pipe), its readahead window
 * (queue/read_ahead_kb -> bdi->ra_pages) and optimal I/O size
 * (queue/max_sectors_kb -> bdi->io_pages), whether the filesystem
 * caches in large folios (ext4 since 6.16, xfs), and whether its
 * copy_file_range is a splice through the page cache.
 */
#ifndef DISCNICE_DEVICE_H
#define DISCNICE_DEVICE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct device_info {
	uint32_t is_disk;         /* backed by a block device we can account */
	uint32_t ra_pages;
	uint32_t io_pages;
	uint32_t max_folio_order; /* 0 when the mapping has no large folios   */
	uint32_t copy_splices;    /* copy_file_range reads through the page
				   * cache: the filesystem neither clones
				   * nor offloads it                        */
	uint32_t overlay;         /* an overlayfs file: the facts are those
				   * of the file system beneath; its own
				   * mapping holds no pages (cachestat and
				   * sync_file_range see none)             */
};

/* Look up the device of an open file (fstatfs + sysfs).  Returns 0 or
 * -errno; -EAGAIN when this descriptor could not tell what another on the
 * same device may (a btrfs file opened O_PATH): do not cache the answer. */
int device_info_of_fd(int fd, dev_t dev, struct device_info *out);

/* Is fd a file seen through overlayfs?  Its own mapping holds none of its
 * pages (they are the file beneath's), so cachestat and sync_file_range
 * of it see nothing; its mmap, and so mincore, reach the real pages. */
bool device_fd_on_overlayfs(int fd);

/* Is fd a file or directory of a pseudo file system (proc, sysfs,
 * debugfs, tracefs, securityfs, cgroup, bpf, pstore, efivarfs), whose
 * sizes say nothing of the content (/proc's files are 0 bytes long and
 * read as text, sysfs's 4096 whatever they hold), with no page cache to
 * order by and nothing to copy faithfully?  Its name ("sysfs"), else
 * NULL.  errno is kept. */
const char *device_fd_on_pseudo_fs(int fd);

#endif
