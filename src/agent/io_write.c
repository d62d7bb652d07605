/*
 * io_write.c - the path of one write: the write-size predictor (DiscNice
 * §4.4, §5.2) counts pages newly dirtied, the quantity Linux charges to
 * write_bytes, keeps them in the update-region table until writeback, and
 * refunds dirty pages cancelled by truncate, unlink or rename.  The table's
 * memory comes from an mmap pool: a write may come from a signal handler.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/cache_drop.h"
#include "agent/io.h"
#include "agent/io_internal.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "agent/pool.h"
#include "agent/spin.h"
#include "agent/writeback.h"
#include "common/clock.h"
#include "graybox/cache_detector.h"
#include "graybox/device.h"
#include "graybox/readahead.h"
#include "graybox/region_table.h"

static struct region_table *regions;
static uint32_t regions_lock;   /* guards regions and region_pool */
static struct pool region_pool;
static uint64_t last_writeback_poll_ns;

int io_init(void)
{
	/* Never malloc: the write path must stay async-signal-safe. */
	const struct region_memory memory = { pool_alloc, pool_release, &region_pool };
	regions = region_table_new(&memory);
	writeback_init();
	cache_drop_init();
	return regions ? 0 : -ENOMEM;
}

/* fork: hold the region table still across it, so the child never gets a
 * table half-way through an update by another thread. */
void io_before_fork(void)
{
	writeback_before_fork();
	cache_drop_before_fork();
	spin_lock(&regions_lock);
}

void io_after_fork(bool child)
{
	if (child)
		regions_lock = 0;
	else
		spin_unlock(&regions_lock);
	cache_drop_after_fork(child);
	writeback_after_fork(child);
}

/* Paced writeback started the writeback of these pages: they are clean
 * now, and a write to them dirties them afresh (writeback.c). */
void io_regions_sent(uint64_t dev, uint64_t ino, uint64_t first_page, uint64_t pages)
{
	spin_lock(&regions_lock);
	region_table_clean(regions, dev, ino, first_page, pages);
	spin_unlock(&regions_lock);
}

static size_t write_piece(size_t count)
{
	const struct dn_caps *caps = &agent.seg->caps;
	if (!caps->write_bps && !caps->total_bps)
		return count;
	size_t piece = (size_t)throttle_piece_bytes();
	return piece && piece < count ? piece : count;
}

/* A partial write to a page that is neither cached nor beyond EOF makes
 * the kernel read it first (block_write_begin -> read-modify-write). */
static uint64_t partial_page_read(int fd, struct open_file *of, uint64_t page)
{
	if (!predicting(DN_PREDICT_CACHE) || page >= pages_of(of->isize))
		return 0;
	if (region_table_is_dirty(regions, of->dev, of->ino, page))
		return 0;
	if (of->backend == DN_CACHE_PROBE) {
		/* The probe reads the page if it is missing, so the kernel's
		 * read-modify-write will not: its read is the one to charge. */
		uint64_t before = of->probe.disk_pages;
		if (cache_probe_pages(fd, &of->probe, agent.seg->probe_threshold_ns, page, 1) < 0)
			return PAGE_SIZE;
		return (of->probe.disk_pages - before) << PAGE_SHIFT;
	}
	struct view_ctx v = { .fd = fd, .of = of, .use_cache = true };
	return detector_count(&v, page, 1) ? 0 : PAGE_SIZE;
}

/* Disk bytes of a write of [pos, pos + count): newly dirtied pages (and
 * read-modify-write reads into *read_bytes).  of is locked. */
uint64_t predict_write(int fd, struct open_file *of, uint64_t pos, uint64_t count,
			      uint64_t *read_bytes)
{
	*read_bytes = 0;
	if (!count || agent_counting())
		return 0;
	if (of->direct || !predicting(DN_PREDICT_WRITE))
		return count; /* no delayed write to model: every byte goes out */
	uint64_t first = pos >> PAGE_SHIFT, last = (pos + count - 1) >> PAGE_SHIFT;
	spin_lock(&regions_lock);
	if (pos & (PAGE_SIZE - 1))
		*read_bytes += partial_page_read(fd, of, first);
	if (((pos + count) & (PAGE_SIZE - 1)) && last != first)
		*read_bytes += partial_page_read(fd, of, last);
	int64_t fresh = region_table_dirty(regions, of->dev, of->ino, first, last - first + 1,
					   clock_now_ns());
	spin_unlock(&regions_lock);
	if (fresh < 0)
		fresh = (int64_t)(last - first + 1); /* out of memory: count all */
	return (uint64_t)fresh << PAGE_SHIFT;
}

/* A copy measured, not predicted (io_copy.c: a file system that may clone
 * it): dirtied is the kernel's count of the bytes it dirtied.  One call
 * clones the whole range or splices all of it (vfs_copy_file_range() falls
 * back only when the remap moved nothing), so the table follows: a splice
 * dirtied the range; a clone flushed and dropped the destination's pages
 * first, and what it dirtied (btrfs' tree blocks, an inline extent's page)
 * is not the range.  Returns the bytes to charge, as predict_write() would
 * decide them.  of is locked. */
uint64_t io_write_measured(struct open_file *of, uint64_t pos, uint64_t count, uint64_t dirtied)
{
	if (!count || agent_counting())
		return 0;
	if (of->direct || !predicting(DN_PREDICT_WRITE))
		return count;
	uint64_t first = pos >> PAGE_SHIFT, pages = ((pos + count - 1) >> PAGE_SHIFT) - first + 1;
	spin_lock(&regions_lock);
	if (2 * dirtied >= count)
		region_table_dirty(regions, of->dev, of->ino, first, pages, clock_now_ns());
	else
		region_table_clean(regions, of->dev, of->ino, first, pages);
	spin_unlock(&regions_lock);
	return dirtied;
}

static void poll_file_writeback(void *ctx, int fd, struct open_file *of)
{
	(void)ctx;
	struct cache_stat cs;
	/* cachestat of an overlayfs file sees none of its pages, dirty or
	 * not: its table expires with the periodic writeback only. */
	if (of->overlay)
		return;
	spin_lock(&regions_lock);
	uint64_t dirty = region_table_file_pages(regions, of->dev, of->ino);
	spin_unlock(&regions_lock);
	/* cachestat's nr_dirty/nr_writeback: has the flusher been here? */
	if (!dirty || cache_stat_call(fd, 0, 0, &cs) != 0 || cs.nr_dirty || cs.nr_writeback)
		return;
	spin_lock(&regions_lock);
	region_table_clean(regions, of->dev, of->ino, 0, UINT64_MAX >> PAGE_SHIFT);
	spin_unlock(&regions_lock);
}

/* Regions clear when the kernel writes them back (§5.2): pages of open
 * files are checked with cachestat, the rest expire with the periodic
 * writeback.  At most every 100 ms. */
void poll_writeback(void)
{
	uint64_t now = clock_now_ns();
	uint64_t last = __atomic_load_n(&last_writeback_poll_ns, __ATOMIC_RELAXED);
	if (now - last < WRITEBACK_POLL_NS ||
	    !__atomic_compare_exchange_n(&last_writeback_poll_ns, &last, now, 0,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	spin_lock(&regions_lock);
	bool any = region_table_total_pages(regions) != 0;
	if (any && now > agent.writeback_expire_ns)
		region_table_expire(regions, now - agent.writeback_expire_ns);
	spin_unlock(&regions_lock);
	if (any)
		open_file_each(poll_file_writeback, NULL);
}

static void write_done(int fd, uint64_t pos, ssize_t done, bool moves_offset)
{
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return;
	if (done >= 0) {
		if (pos + (uint64_t)done > of->isize)
			of->isize = pos + (uint64_t)done;
		if (moves_offset)
			of->pos = pos + (uint64_t)done;
	} else if (moves_offset) {
		of->pos_known = false;
	}
	open_file_release(of);
}

/* Where a write on this description lands. */
uint64_t write_pos(int fd, struct open_file *of, bool moves_offset, off_t offset)
{
	if (of->append) {
		refresh_size(fd, of); /* O_APPEND: at EOF, wherever others left it */
		return of->isize;
	}
	return moves_offset ? current_pos(fd, of) : (uint64_t)offset;
}

/* A write that failed for want of room (r < 0: it moved nothing) only
 * because of a file we held open after the program removed it
 * (writeback.c): freed now, so the same call is made again, and fails
 * only where it would have without us.  Ends: each true frees a file. */
static bool full_for_us(ssize_t r)
{
	return r < 0 && (errno == ENOSPC || errno == EDQUOT) && writeback_release_nameless();
}

ssize_t io_write(int fd, const void *buf, size_t count, const off_t *offset)
{
	int saved = errno;
	if (io_call_refused(buf, count, offset))
		return offset ? libc_real.pwrite64(fd, buf, count, *offset)
			      : libc_real.write(fd, buf, count);
	if (count > IO_MAX_RW_COUNT)
		count = IO_MAX_RW_COUNT; /* all one call moves (vfs_write()) */
	/* A socket under a network cap (io_net.c); else a file, if the disk
	 * path watches it. */
	enum open_file_net net = offset ? OPEN_FILE_NET_NONE : io_net_kind(fd);
	if (net)
		return io_net_write(fd, net, buf, count);
	if (!agent_disk_watches(fd)) {
		errno = saved;
		return offset ? libc_real.pwrite64(fd, buf, count, *offset)
			      : libc_real.write(fd, buf, count);
	}
	bool moves_offset = !offset;
	writeback_tend(); /* held files looked at (writeback.c); ENOSPC below looks at once */
	struct open_file *of = open_file_acquire(fd);
	if (!of) {
		errno = saved;
		return moves_offset ? libc_real.write(fd, buf, count)
				    : libc_real.pwrite64(fd, buf, count, *offset);
	}
	size_t piece = piece_for(fd, of, write_piece(count), count, true), done = 0;
	open_file_release(of);
	/* A write the kernel would cut short at RLIMIT_FSIZE returns the
	 * bytes up to it (generic_write_check_limits()); only a write that
	 * starts at or past it gets SIGXFSZ.  A piece of ours that ends at the
	 * limit must end the call there, or the next piece starts at it and
	 * the program is killed where it would have had a short count. */
	uint64_t fsize_limit = UINT64_MAX;
	struct rlimit fsize;
	if (piece < count && getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY)
		fsize_limit = (uint64_t)fsize.rlim_cur;

	/* Writers sharing the description keep their records whole: a write
	 * cut into pieces takes its range first (io_range_take()).  O_APPEND
	 * writes are never cut (piece_for()). */
	struct io_range range = { 0, -1 };
	if (moves_offset && piece < count && io_range_take(fd, &count, &range))
		moves_offset = false;
	off_t base = offset ? *offset : range.base;

	ssize_t result = 0;
	int err = saved;
	do {
		size_t n = count - done < piece ? count - done : piece;
		uint64_t pos = moves_offset ? 0 : (uint64_t)(base + (off_t)done);
		uint64_t predicted = 0, rmw = 0, dev = 0, ino = 0;
		bool overlay = false;
		of = open_file_acquire(fd);
		if (of) {
			pos = write_pos(fd, of, moves_offset, (off_t)pos);
			if (done && pos >= fsize_limit) {
				open_file_release(of);
				break;
			}
			predicted = predict_write(fd, of, pos, n, &rmw);
			dev = of->dev;
			ino = of->ino;
			overlay = of->overlay;
			open_file_release(of);
		}
		/* (Never cut when the user interrupts the job, as a read is:
		 * stdio drops its buffer on a write's EINTR, and a job that
		 * catches SIGTERM to save its work would lose it.) */
		uint64_t delay = throttle_charge(rmw, predicted);
		ssize_t r;
		do {
			errno = saved;
			r = moves_offset ? libc_real.write(fd, (const char *)buf + done, n)
					 : libc_real.pwrite64(fd, (const char *)buf + done, n,
							      (off_t)pos);
		} while (full_for_us(r));
		if (r < 0) {
			err = errno;
			write_done(fd, pos, r, moves_offset);
			if (!done)
				result = -1;
			break;
		}
		write_done(fd, pos, r, moves_offset);
		writeback_wrote(fd, dev, ino, pos, (uint64_t)r, overlay ? 0 : predicted);
		AGENT_COUNT(file_write_bytes, (uint64_t)r);
		if (predicted || delay || rmw)
			agent_trace("write", (uint64_t)r, predicted + rmw, delay);
		done += (size_t)r;
		if ((size_t)r < n)
			break;
	} while (done < count);
	if (range.end >= 0)
		io_range_done(fd, &range, done, false);
	poll_writeback();
	if (result < 0) {
		errno = err;
		return -1;
	}
	errno = saved;
	return (ssize_t)done;
}

ssize_t io_writev(int fd, const struct iovec *iov, int iovcnt, const off_t *offset, int flags)
{
	int saved = errno;
	enum open_file_net net = offset || flags ? OPEN_FILE_NET_NONE : io_net_kind(fd);
	if (net)
		return io_net_writev(fd, iov, iovcnt);
	if (!agent_disk_watches(fd)) {
		errno = saved;
		return libc_real.pwritev64v2(fd, iov, iovcnt, offset ? *offset : -1, flags);
	}
	bool moves_offset = !offset;
	writeback_tend();
	uint64_t predicted = 0, rmw = 0, pos = 0, delay = 0, dev = 0, ino = 0;
	bool overlay = false;
	size_t total = 0;
	struct open_file *of = NULL;
	if (open_file_maybe_disk(fd) && iov_total_checked(iov, iovcnt, &total))
		of = open_file_acquire(fd);
	if (of) {
		pos = (flags & RWF_APPEND) ? (refresh_size(fd, of), of->isize)
					   : write_pos(fd, of, moves_offset, offset ? *offset : 0);
		predicted = predict_write(fd, of, pos, total, &rmw);
		dev = of->dev;
		ino = of->ino;
		overlay = of->overlay;
		open_file_release(of);
		delay = throttle_charge(rmw, predicted);
	}
	ssize_t r;
	do {
		errno = saved;
		r = libc_real.pwritev64v2(fd, iov, iovcnt, offset ? *offset : -1, flags);
	} while (full_for_us(r));
	if (!of)
		return r;
	int err = errno;
	write_done(fd, pos, r, moves_offset);
	if (r > 0) {
		writeback_wrote(fd, dev, ino, pos, (uint64_t)r, overlay ? 0 : predicted);
		AGENT_COUNT(file_write_bytes, (uint64_t)r);
	}
	if (predicted || delay || rmw)
		agent_trace("writev", r > 0 ? (uint64_t)r : 0, predicted + rmw, delay);
	poll_writeback();
	errno = r < 0 ? err : saved;
	return r;
}

/* Dirty pages of a file that is truncated or gone are cancelled, not
 * written (truncate_inode_pages -> folio_account_cleaned): refund them. */
static void book_cancel(uint64_t dev, uint64_t ino, uint64_t first_page, uint64_t dirty_pages)
{
	spin_lock(&regions_lock);
	uint64_t known = first_page ? region_table_truncate(regions, dev, ino, first_page)
				    : region_table_forget(regions, dev, ino);
	spin_unlock(&regions_lock);
	/* cachestat counted every dirty page, ours and other processes' (the
	 * kernel counts them all in this task's cancelled_write_bytes, and
	 * the job's sum once the task is reaped); the table is the fallback
	 * when it could not.  Pages we never charged (dirtied while the class
	 * had no cap, or through a mapping) are refunded too, as the kernel
	 * cancels them: the supervisor keeps its books signed for that. */
	writeback_forget(dev, ino);
	uint64_t pages = dirty_pages != UINT64_MAX ? dirty_pages : known;
	if (pages) {
		AGENT_COUNT(cancelled_write_bytes, pages << PAGE_SHIFT);
		throttle_refund(pages << PAGE_SHIFT);
		agent_trace("cancel", 0, pages << PAGE_SHIFT, 0);
	}
}

/* Dirty pages of an open file from first_page on, by cachestat(2);
 * UINT64_MAX when the kernel cannot tell us. */
static uint64_t dirty_pages_from(int fd, uint64_t first_page, uint64_t dev)
{
	struct cache_stat cs;
	if (cache_stat_call(fd, first_page << PAGE_SHIFT, 0, &cs) != 0)
		return UINT64_MAX;
	/* On overlayfs (an anonymous device) cachestat asks the overlay's own
	 * mapping, which holds none of the file's pages (cache_detector.c):
	 * the table decides. */
	if (!cs.nr_dirty && major((dev_t)dev) == 0 && device_fd_on_overlayfs(fd))
		return UINT64_MAX;
	return cs.nr_dirty;
}

/* No cap and no page in the table: a truncate or unlink cancels nothing
 * we would refund (issue #9 §3: no per-file work while idle). */
static bool nothing_to_cancel(void)
{
	if (!agent_idle())
		return false;
	spin_lock(&regions_lock);
	bool empty = region_table_total_pages(regions) == 0;
	spin_unlock(&regions_lock);
	return empty;
}

void io_victim_note_fd(int fd, uint64_t new_size, struct io_victim *victim)
{
	int saved = errno;
	struct stat st;
	victim->valid = 0;
	if (nothing_to_cancel()) {
		errno = saved;
		return;
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		victim->valid = 1;
		victim->dev = st.st_dev;
		victim->ino = st.st_ino;
		victim->first_page = pages_of(new_size);
		victim->dirty_pages = predicting(DN_PREDICT_WRITE)
					      ? dirty_pages_from(fd, victim->first_page, st.st_dev) : 0;
	}
	errno = saved;
}

void io_victim_note_path(int dirfd, const char *path, uint64_t new_size, bool unlinking,
			 struct io_victim *victim)
{
	int saved = errno;
	struct stat st;
	victim->valid = 0;
	if (!path || !predicting(DN_PREDICT_WRITE) || nothing_to_cancel() ||
	    fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
	    (unlinking && st.st_nlink != 1)) {
		errno = saved;
		return;
	}
	victim->valid = 1;
	victim->dev = st.st_dev;
	victim->ino = st.st_ino;
	victim->first_page = pages_of(new_size);
	victim->dirty_pages = UINT64_MAX;
	/* A page dirtied longer ago than periodic writeback has been written
	 * back (§5.2): only a recently modified file is worth opening. */
	uint64_t age_ns = (uint64_t)(time(NULL) - st.st_mtime) * NS_PER_SEC;
	if ((uint64_t)st.st_size > new_size && age_ns <= agent.writeback_expire_ns) {
		int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd >= 0) {
			victim->dirty_pages = dirty_pages_from(fd, victim->first_page, st.st_dev);
			libc_real.close(fd);
		}
	} else if ((uint64_t)st.st_size <= new_size) {
		victim->dirty_pages = 0;
	}
	errno = saved;
}

void io_victim_truncated(const struct io_victim *victim, uint64_t new_size)
{
	(void)new_size;
	if (victim->valid)
		book_cancel(victim->dev, victim->ino, victim->first_page, victim->dirty_pages);
}

void io_truncated_fd(int fd, const struct io_victim *victim, uint64_t new_size)
{
	int saved = errno;
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		of->isize = new_size;
		of->ra.resident_end = of->ra.resident_first;
		of->model_end = of->model_first;
		open_file_release(of);
	}
	io_victim_truncated(victim, new_size);
	errno = saved;
}

static void mark_unlinked(void *ctx, int fd, struct open_file *of)
{
	struct io_victim *victim = ctx;
	(void)fd;
	if (of->dev == victim->dev && of->ino == victim->ino) {
		of->unlinked = true;
		victim->valid = 2;
	}
}

void io_victim_gone(const struct io_victim *victim)
{
	if (!victim->valid)
		return;
	int saved = errno;
	/* While we hold it open the inode lives on, dirty pages and all: its
	 * pages are cancelled at our last close (io_close). */
	struct io_victim probe = *victim;
	open_file_each(mark_unlinked, &probe);
	if (probe.valid == 1)
		book_cancel(victim->dev, victim->ino, 0, victim->dirty_pages);
	errno = saved;
}

int io_close(int fd)
{
	int saved = errno;
	writeback_tend();
	struct io_victim doomed = { 0, 0, 0, 0, 0 };
	uint64_t dev = 0, ino = 0;
	bool drop_rest = false;
	struct open_file *of = open_file_peek(fd);
	if (of) {
		dev = of->dev;
		ino = of->ino;
		/* --cache drop: the description's last fd goes. */
		drop_rest = agent.cache_drop && of->refs == 1;
		if (of->unlinked && of->refs == 1) {
			/* Our last reference to an unlinked file: closing it
			 * frees the inode and cancels its dirty pages. */
			doomed.valid = 1;
			doomed.dev = of->dev;
			doomed.ino = of->ino;
			doomed.dirty_pages = predicting(DN_PREDICT_WRITE)
						     ? dirty_pages_from(fd, 0, of->dev) : 0;
		}
		open_file_release(of);
	}
	int own = of ? writeback_closing(fd, dev, ino) : -1;
	if (drop_rest)
		cache_drop_closing(fd, dev, ino);
	open_file_forget(fd);
	io_net_closed(fd);
	errno = saved;
	int r = libc_real.close(fd);
	if (own >= 0 || doomed.valid) {
		int err = errno;
		writeback_closed(own);
		if (doomed.valid)
			book_cancel(doomed.dev, doomed.ino, 0, doomed.dirty_pages);
		errno = err;
	}
	return r;
}

void io_synced_fd(int fd)
{
	int saved = errno;
	struct open_file *of = open_file_peek(fd);
	if (of) {
		/* fsync returned: every dirty page of the file is on disk. */
		uint64_t dev = of->dev, ino = of->ino;
		spin_lock(&regions_lock);
		region_table_clean(regions, dev, ino, 0, UINT64_MAX >> PAGE_SHIFT);
		spin_unlock(&regions_lock);
		open_file_release(of);
		writeback_forget(dev, ino);
	}
	errno = saved;
}

void io_synced_all(void)
{
	spin_lock(&regions_lock);
	region_table_clear(regions);
	spin_unlock(&regions_lock);
	writeback_forget_all();
}
