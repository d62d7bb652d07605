/*
 * gbp.h - the best order to read files in (libgraybox.so.0): the gray-box
 * file-cache content detector, FCCD (graybox-icl §4.1.2), and file layout
 * detector, FLDC (§4.2.2), composed as in §4.2.4.  See gbp(3).
 *
 * The paper's usage template (§4.1.2): the application names the files it
 * wants to read; the library returns (file, offset, length) pieces in the
 * predicted best order - the pieces in the page cache first, then the
 * rest - and the application reads them in that order.  What is in cache
 * is learnt per file from cachestat(2) or mincore(2) where the kernel
 * answers for that file, else from one-byte probes: by default the
 * paper's timed reads, sorted by time and split into "in cache" and "not"
 * by 2-means clustering (a threshold only where the kernel counted no
 * read: the device's calibrated one from the calibration file, measured
 * and stored there when missing - gbp(3)); or, asked for, reads with
 * RWF_NOWAIT, which the kernel answers "cached" or "would wait" (EAGAIN).
 *
 * The ABI: plain C, fixed-width types.  struct gbp_options starts with its
 * own size so it can grow; struct gbp_extent is fixed for version 0.
 * Functions return 0 or a negative errno value; none of them aborts,
 * prints, raises a signal or changes errno.  They are thread-safe (no
 * global state but the probe's descriptor count of cache_detector.c; the
 * calibration file is replaced atomically, so two writers lose one's
 * entry, never the file).
 */
#ifndef DISCNICE_GBP_H
#define DISCNICE_GBP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GBP_VERSION_MAJOR 0
#define GBP_VERSION_MINOR 1

/* The order (struct gbp_options.order). */
enum gbp_order {
	GBP_ORDER_MEMORY = 0,           /* most cached first (FCCD, §4.1.2)              */
	GBP_ORDER_INODE = 1,            /* by (device, i-number) (FLDC, §4.2.2)           */
	GBP_ORDER_PHYSICAL = 2,         /* by the disk address of the first extent
					 * (FIEMAP); i-number where FIEMAP has none    */
	GBP_ORDER_COMPOSE = 3,          /* in-cache first, then the rest; each group in
					 * i-number order (§4.2.4)                      */
	GBP_ORDER_COMPOSE_PHYSICAL = 4  /* the same, each group in physical order        */
};

/* How the page cache is asked (struct gbp_options.backend).  Values 0-3
 * are those of discnice's cache detector (segment.h, dn_cache_backend);
 * NOWAIT is gbp's alone. */
enum gbp_backend {
	GBP_BACKEND_AUTO = 0,      /* cachestat or mincore where the kernel answers
				    * for the file (you own it or may write it),
				    * else timed probes: works for any readable
				    * file (gbp(3) compares them with nowait)     */
	GBP_BACKEND_PROBE = 1,     /* timed one-byte reads (the paper's method)     */
	GBP_BACKEND_CACHESTAT = 2, /* cachestat(2), Linux >= 6.5                    */
	GBP_BACKEND_MINCORE = 3,   /* mmap(PROT_NONE) + mincore(2)                  */
	GBP_BACKEND_NOWAIT = 4     /* one-byte preadv2(RWF_NOWAIT) reads: a hit is
				    * the kernel's answer for the probed page; a
				    * miss starts reading that page, which
				    * gbp_order() waits for before it returns and
				    * drops again.  Where the file system or kernel
				    * has no nowait reads, timed probes (the
				    * piece's backend then says PROBE)            */
};

/* struct gbp_options.flags */
#define GBP_WHOLE_FILES (1u << 0)  /* one extent per file, not per access unit
				    * (without it, access units in a row that are
				    * all hole, two or more, are one extent, with
				    * GBP_EXACT and cached_fraction 1: a hole
				    * reads as zeros with no disk I/O)          */

/* The default access unit (§4.1.2: 20 MB "delivers near-peak performance
 * from the disk"); a quarter of it, rounded up to whole pages, is the
 * prediction unit, 5 MiB as the paper's - one probe each, four per access
 * unit (fewer where a quarter is less than a page). */
#define GBP_ACCESS_UNIT_DEFAULT (UINT64_C(20) << 20)

struct gbp_options {
	uint32_t size;          /* sizeof(struct gbp_options), for growth        */
	uint32_t order;         /* enum gbp_order                                */
	uint32_t backend;       /* enum gbp_backend (ignored by INODE, PHYSICAL) */
	uint32_t flags;         /* GBP_WHOLE_FILES                               */
	uint64_t access_unit;   /* bytes; 0 = GBP_ACCESS_UNIT_DEFAULT; rounded
				 * down to a multiple of record_size (record_size
				 * itself when that is larger)                    */
	uint64_t record_size;   /* extents start at multiples of it; 0 = 1 byte  */
	uint64_t seed;          /* where in each prediction unit to probe; 0 =
				 * fresh randomness (§4.1.2: random probe points) */
};

/* struct gbp_extent.flags */
#define GBP_IN_CACHE   (1u << 0)   /* 2-means of the pieces' cached fractions
				    * put it with the cached ones              */
#define GBP_EXACT      (1u << 1)   /* cached_fraction from cachestat/mincore:
				    * the kernel's page counts (never set for
				    * probes, nowait ones included), or an
				    * empty file or a run of hole (nothing to
				    * read: 1.0)                               */
#define GBP_NOT_PROBED (1u << 2)   /* smaller than a page and only probes could
				    * tell: a probe would read it all in
				    * (Heisenberg, §4.1.4); ordered last, as the
				    * paper's "fake high probe-time"            */
#define GBP_ERROR      (1u << 3)   /* the file could not be examined: error     */

struct gbp_extent {
	uint32_t file;            /* index into the paths given                */
	uint32_t flags;           /* GBP_IN_CACHE, GBP_EXACT, ...              */
	int32_t error;            /* -errno with GBP_ERROR, else 0             */
	uint32_t backend;         /* enum gbp_backend used; AUTO only where
				   * none was (the layout orders, GBP_ERROR)   */
	uint64_t offset;          /* bytes                                     */
	uint64_t length;          /* bytes; 0 for an empty file or an error    */
	double cached_fraction;   /* estimated share of its pages cached, 0..1
				   * (probes: the share of its probes that hit);
				   * -1 unknown (not probed, layout orders)     */
	uint64_t probe_ns;        /* total time of its probes (timed or nowait) */
	uint32_t probes;          /* how many                                  */
	uint32_t reserved;
	uint64_t device;          /* st_dev                                    */
	uint64_t inode;           /* st_ino                                    */
	uint64_t physical;        /* FIEMAP fe_physical of the first extent;
				   * UINT64_MAX unknown                         */
};

/*
 * Examine paths[0 .. n_paths) and return their pieces in the best order:
 * *extents (malloc'ed, free with gbp_free()) holds *n_extents entries.
 * Every byte of every regular file given appears in exactly one extent;
 * extents of one file do not overlap, and each starts at a multiple of
 * record_size.  A file that cannot be examined (missing, unreadable, not a
 * regular file, or the backend asked for does not answer for it) gives
 * one extent with GBP_ERROR and its -errno (-ENOENT, -EACCES, -EISDIR,
 * -EINVAL for a FIFO, device or socket, or a file of a pseudo file system
 * such as /proc or /sys, -EOPNOTSUPP: cachestat/mincore refused, -ESTALE:
 * replaced between stat(2) and open(2)), placed after all the others in
 * the order given; the other files are still ordered.  options may be
 * NULL (defaults).
 *
 * Returns 0, or -EINVAL (paths NULL with n_paths > 0, the out pointers
 * NULL, an unknown order, backend or flag, options->size too small, an
 * access_unit other than 0 below one page), -ENOMEM, -EOVERFLOW (more
 * than UINT32_MAX files).  n_paths 0 returns 0 and no extents.  On
 * any failure *extents is NULL and *n_extents 0 (those of them given).
 *
 * Probing reads one byte per prediction unit of each file whose cache
 * state the kernel will not tell: a timed probe's page then is cached; a
 * nowait probe that missed has its page read and dropped again.
 */
int gbp_order(const char *const *paths, size_t n_paths, const struct gbp_options *options,
	      struct gbp_extent **extents, size_t *n_extents);

void gbp_free(struct gbp_extent *extents);

/* "auto", "probe", "cachestat", "mincore", "nowait"; NULL for an unknown
 * value. */
const char *gbp_backend_name(uint32_t backend);

#ifdef __cplusplus
}
#endif

#endif
