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
	struct {
		struct fiemap map;
		struct fiemap_extent extent[1];
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
		 (req.extent[0].fe_flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC)))
		rc = -ENODATA;
	else
		*physical = req.extent[0].fe_physical;
	errno = saved;
	return rc;
}
