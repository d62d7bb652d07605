/*
 * layout_probe.c - FIEMAP's first extent (see layout_probe.h).
 *
 * src/graybox/extent_map.c keeps *logical* data ranges of sparse files for
 * the agent's read model; it has no use for disk addresses, so nothing of
 * it fits here but the ioctl, which is a dozen lines.
 */
#include "graybox/fldc/layout_probe.h"

#include <errno.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>

int layout_first_physical(int fd, uint64_t *physical)
{
	int saved = errno;
	/* A union, not a struct with the extent after the header: a struct
	 * ending in a flexible array may not be followed by more members in
	 * ISO C (clang says so). */
	union {
		struct fiemap map;
		char bytes[sizeof(struct fiemap) + sizeof(struct fiemap_extent)];
	} req;
	memset(&req, 0, sizeof req);
	req.map.fm_start = 0;
	req.map.fm_length = FIEMAP_MAX_OFFSET;
	req.map.fm_flags = 0;
	req.map.fm_extent_count = 1;
	int rc = 0;
	if (ioctl(fd, FS_IOC_FIEMAP, &req) != 0)
		rc = -errno;
	else if (req.map.fm_mapped_extents == 0 ||
		 (req.map.fm_extents[0].fe_flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC)))
		rc = -ENODATA;
	else
		*physical = req.map.fm_extents[0].fe_physical;
	errno = saved;
	return rc;
}
