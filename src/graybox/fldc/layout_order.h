/*
 * layout_order.h - the file layout detector's order (graybox-icl §4.2.2):
 * files by i-number, or by where their data starts on the disk, and the
 * composition with the cache detector (§4.2.4).  Pure logic: the keys
 * (st_dev, st_ino, FIEMAP's first physical address) are read by
 * layout_probe.c; this only sorts.
 *
 * Why i-number (§4.2.1): an FFS-like file system (ext4's block groups
 * descend from FFS's cylinder groups) allocates the inodes of files made
 * one after the other in one directory near each other, and their data
 * blocks in the same order, so i-number order approximates disk order
 * with nothing but stat().  Physical order reads the disk address itself
 * (FS_IOC_FIEMAP, no privilege needed) where the file system gives it; a
 * file without it (FIEMAP unsupported, delayed allocation not yet placed,
 * no data) falls back to its i-number, after the files whose address is
 * known on the same device.
 */
#ifndef DISCNICE_LAYOUT_ORDER_H
#define DISCNICE_LAYOUT_ORDER_H

#include <stdbool.h>
#include <stddef.h>

#include "discnice/gbp.h"

/* Sort pieces by layout: errors last; with in_cache_first the pieces with
 * GBP_IN_CACHE before the others (§4.2.4: "first access those files in
 * cache and then access the rest according to their i-number ordering");
 * then by device, then (by_physical) known physical address before
 * unknown and by address, then by i-number, then file index and offset -
 * a total order, so the result is the same on every run. */
void layout_order_sort(struct gbp_extent *pieces, size_t n, bool by_physical, bool in_cache_first);

#endif
