/*
 * layout_probe.h - where a file's data starts on its disk, for physical
 * order (layout_order.h): FS_IOC_FIEMAP asked for the first extent only.
 */
#ifndef DISCNICE_LAYOUT_PROBE_H
#define DISCNICE_LAYOUT_PROBE_H

#include <stdint.h>

/* The physical byte address of the first data extent of the open file fd:
 * 0 and *physical set, or -errno: -EOPNOTSUPP / -ENOTTY where the file
 * system has no FIEMAP (tmpfs, many network and FUSE file systems),
 * -ENODATA for a file with no extent yet (empty, all hole) or whose first
 * extent has no address yet (FIEMAP_EXTENT_UNKNOWN or _DELALLOC:
 * delayed allocation, not yet written back).  Never syncs the file (no FIEMAP_FLAG_SYNC: asking for an
 * order must not cause writes). */
int layout_first_physical(int fd, uint64_t *physical);

#endif
