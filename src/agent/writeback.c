/*
 * writeback.c - paced writeback, the agent's side (see writeback.h and
 * policy/writeback_pacer.h for which pages go out when).
 *
 * How a range goes out: sync_file_range(fd, range, SYNC_FILE_RANGE_WRITE)
 * - the kernel's __filemap_fdatawrite_range(WB_SYNC_NONE): it starts the
 * writeback of the dirty pages in the range and returns; it neither waits
 * nor reads the file's writeback error (only the WAIT flags call
 * file_check_and_advance_wb_err()), so the program's own fsync() still
 * sees every error, as without us.  The pages become clean; a page dirtied
 * again is counted again by the kernel (folio_account_dirtied) and so by
 * the write predictor, whose table is told (io_regions_sent()).
 *
 * A file the program closes with pages still queued is reached through a
 * descriptor of ours, at most WB_HELD_MAX of them, in the private range
 * (private_fd.h); without one to spare its pages go out at the close.
 * Ours is a read-only description of its own (private_fd_reopen();
 * sync_file_range() asks no write access), never a dup of the
 * program's: a dup would keep the program's description open after its
 * close - a script it wrote then fails to run (ETXTBSY: a writer is
 * open), its flock() and leases stay held, and inotify's IN_CLOSE_WRITE
 * comes late.  A file we may not read has its pages go out at the close.
 * Closing a descriptor drops every POSIX (fcntl) lock the process holds on
 * the file, so ours is closed only when the program has no descriptor of
 * the file open (it can hold no lock then), or right after the program
 * itself closes one (its close has just dropped them anyway).
 *
 * Ours is kept no longer than the lag needs (writeback_tend(), at the
 * program's opens, reads, writes and closes, at most every WB_LOOK_NS):
 * once the file has no name left - another process removed it, `rm` run
 * by a script - ours alone kept its blocks allocated, and the script's
 * next write met ENOSPC where it had room without us (a write that meets
 * ENOSPC now looks at once and is tried again if that freed anything:
 * writeback_release_nameless()); and after WB_HOLD_MAX_NS its pages go
 * out and it is closed, so that a file system the job wrote to can be
 * unmounted.  A program that calls nothing more keeps at most WB_HELD_MAX
 * of them until it does or exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/cache_drop.h"
#include "agent/io_internal.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "agent/spin.h"
#include "agent/writeback.h"
#include "common/clock.h"
#include "common/private_fd.h"
#include "policy/writeback_pacer.h"

/* Descriptors of ours for files the program has closed. */
#define WB_HELD_MAX 6
/* ... each kept at most this long after the program's close: the lag is a
 * quarter second of the cap, and a file still queued a second later is
 * one the writer has left. */
#define WB_HOLD_MAX_NS (1000 * 1000 * 1000ull)
/* The writer leads the disk by a quarter second of the cap: what a file
 * written and deleted within it, or rewritten in place, saves is saved;
 * the flusher can find at most that much left behind at the end. */
#define WB_LAG_DIVISOR 4
#define WB_LAG_MIN_PAGES 64      /* 256 KiB */
#define WB_CHUNK_MIN_PAGES 16    /* 64 KiB  */
#define WB_CHUNK_MAX_PAGES 1024  /* 4 MiB   */

static struct wb_pacer pacer;
static uint32_t pacer_lock;
static bool paced;
int writeback_held_fds; /* writeback.h: a hint read without the lock */
static uint64_t held_since_ns[WB_FILES]; /* the program's close, per held file */
static uint64_t next_look_ns;            /* tend(): not before, unless forced */
#define WB_LOOK_NS (100 * 1000 * 1000ull)
static bool exiting;    /* writeback_exit(): cache_drop_exit() drops */

void writeback_init(void)
{
	wb_pacer_init(&pacer);
	const char *mode = getenv("DISCNICE_WRITEBACK");
	paced = !mode || strcmp(mode, "kernel") != 0;
}

void writeback_before_fork(void)
{
	spin_lock(&pacer_lock);
}

void writeback_after_fork(bool child)
{
	if (!child) {
		spin_unlock(&pacer_lock);
		return;
	}
	/* The child inherited our descriptors (they are close-on-exec) but
	 * not the parent's queue: the parent paces its own pages. */
	for (int i = 0; i < WB_FILES; i++)
		if (pacer.files[i].used && pacer.files[i].held)
			private_fd_close(pacer.files[i].fd);
	wb_pacer_init(&pacer);
	writeback_held_fds = 0;
	pacer_lock = 0;
}

/* The binding cap on writes, bytes per second; 0 = none. */
static uint64_t write_cap(void)
{
	const struct dn_caps *caps = &agent.seg->caps;
	uint64_t w = caps->write_bps, t = caps->total_bps;
	return w && t ? (w < t ? w : t) : (w ? w : t);
}

static uint64_t clamp(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

struct open_probe {
	uint64_t dev, ino;
	bool open;
};

static void find_open(void *ctx, int fd, struct open_file *of)
{
	struct open_probe *p = ctx;
	(void)fd;
	if (of->dev == p->dev && of->ino == p->ino)
		p->open = true;
}

/* Start the writeback of one range (pacer_lock not held). */
static void flush_send(const struct wb_flush *fl)
{
	struct stat st;
	/* The program's descriptor may have been closed behind our back
	 * (close_range, a raw syscall) and its number reused. */
	if (fstat(fl->fd, &st) != 0 || (uint64_t)st.st_dev != fl->dev ||
	    (uint64_t)st.st_ino != fl->ino)
		return;
	if (st.st_nlink == 0)
		return; /* unlinked: its dirty pages die with the inode */
	uint64_t first = fl->first << PAGE_SHIFT, len = (fl->end - fl->first) << PAGE_SHIFT;
	if (sync_file_range(fl->fd, (off64_t)first, (off64_t)len, SYNC_FILE_RANGE_WRITE) != 0)
		return;
	io_regions_sent(fl->dev, fl->ino, fl->first, fl->end - fl->first);
	/* --cache drop: dropped two chunks later, when the disk at the cap
	 * has had 1/8 s to write them (cache_drop.c: why not a WAIT). */
	if (agent.cache_drop)
		cache_drop_written(fl->fd, fl->dev, fl->ino, fl->first, fl->end,
				   exiting ? UINT64_MAX
					   : 2 * clamp((write_cap() / 16) >> PAGE_SHIFT,
						       WB_CHUNK_MIN_PAGES, WB_CHUNK_MAX_PAGES));
}

/* Would closing a descriptor of ours of this file drop a POSIX lock the
 * program holds?  Our table of its open files misses those opened while
 * the agent dozed (agent_idle(), agent_slack(): open_file_forget()), so the
 * kernel is asked: F_OFD_GETLK, a write lock over the whole file, conflicts
 * with any record lock of anyone's, our process's POSIX ones included
 * (fcntl(2): OFD and process-associated locks conflict even within one
 * process).  Only "none at all" is certain to be safe. */
static bool file_locked(int own_fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
	return fcntl(own_fd, F_OFD_GETLK, &fl) != 0 || fl.l_type != F_UNLCK;
}

/* May our descriptor of file go now (pacer_lock held)? */
static bool closable(int file)
{
	struct open_probe probe = { pacer.files[file].dev, pacer.files[file].ino, false };
	open_file_each(find_open, &probe);
	return !probe.open && !file_locked(pacer.files[file].fd);
}

/* After the last queued range of a file went out: close our descriptor of
 * it, unless the program has the file open (pacer_lock held). */
static void release_if_idle(int file)
{
	if (file < 0 || !wb_pacer_idle_own(&pacer, file))
		return;
	if (!closable(file))
		return; /* closed with the program's next close of it, or by tend() */
	private_fd_close(pacer.files[file].fd);
	__atomic_store_n(&writeback_held_fds, writeback_held_fds - 1, __ATOMIC_RELAXED);
	wb_pacer_release(&pacer, file);
}

void writeback_wrote(int fd, uint64_t dev, uint64_t ino, uint64_t pos, uint64_t bytes,
		     uint64_t fresh_bytes)
{
	if (!paced || !bytes || !fresh_bytes)
		return;
	writeback_tend(); /* copy_file_range, sendfile: after the fact */
	uint64_t cap = write_cap();
	if (!cap)
		return;
	uint64_t lag = clamp((cap / WB_LAG_DIVISOR) >> PAGE_SHIFT, WB_LAG_MIN_PAGES, UINT64_MAX);
	uint64_t chunk = clamp((cap / 16) >> PAGE_SHIFT, WB_CHUNK_MIN_PAGES, WB_CHUNK_MAX_PAGES);
	int saved = errno;
	struct wb_flush fl;
	spin_lock(&pacer_lock);
	wb_pacer_note(&pacer, dev, ino, fd, pos >> PAGE_SHIFT, pages_of(pos + bytes),
		      pages_of(fresh_bytes));
	while (wb_pacer_next(&pacer, lag, chunk, &fl)) {
		spin_unlock(&pacer_lock);
		flush_send(&fl);
		spin_lock(&pacer_lock);
		if (fl.last)
			release_if_idle(fl.file);
	}
	spin_unlock(&pacer_lock);
	errno = saved;
}

int writeback_closing(int fd, uint64_t dev, uint64_t ino)
{
	if (!paced)
		return -1;
	int saved = errno, idle = -1, own = -1;
	struct wb_flush fl;
	bool flush_now = false;
	spin_lock(&pacer_lock);
	int need = wb_pacer_closing(&pacer, fd, dev, ino, &idle);
	struct statx stx;
	if (need >= 0 && statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_NLINK, &stx) == 0 &&
	    stx.stx_nlink == 0) {
		/* Removed already (by another process): nothing to send, and a
		 * descriptor of ours would keep its blocks allocated. */
		wb_pacer_forget(&pacer, dev, ino);
		wb_pacer_release(&pacer, need);
		need = -1;
	}
	if (need >= 0) {
		int own_fd = -1;
		if (writeback_held_fds < WB_HELD_MAX && !private_fd_scarce())
			own_fd = private_fd_reopen(fd);
		if (own_fd >= 0)
			own_fd = private_fd_move(own_fd);
		if (own_fd >= 0) {
			wb_pacer_hold(&pacer, need, own_fd);
			held_since_ns[need] = clock_now_ns();
			__atomic_store_n(&writeback_held_fds, writeback_held_fds + 1, __ATOMIC_RELAXED);
		} else {
			flush_now = wb_pacer_take_file(&pacer, need, &fl);
			wb_pacer_release(&pacer, need);
		}
	}
	if (idle >= 0) {
		own = pacer.files[idle].fd;
		__atomic_store_n(&writeback_held_fds, writeback_held_fds - 1, __ATOMIC_RELAXED);
		wb_pacer_release(&pacer, idle);
	}
	spin_unlock(&pacer_lock);
	if (flush_now)
		flush_send(&fl); /* fd is still the program's: its close comes next */
	errno = saved;
	return own;
}

/* Look at the held files: let go of the nameless ones and of those held
 * WB_HOLD_MAX_NS.  At most every WB_LOOK_NS unless forced (a write met
 * ENOSPC), claimed without the lock; the look's system calls run outside
 * it (spin.h: never across a real call), each file checked again under it
 * before it goes.  Returns how many nameless files were let go. */
static unsigned tend(bool force)
{
	if (!paced)
		return 0;
	int saved = errno;
	uint64_t now = clock_now_ns();
	uint64_t due = __atomic_load_n(&next_look_ns, __ATOMIC_RELAXED);
	if (!force && (now < due || !__atomic_compare_exchange_n(&next_look_ns, &due,
								 now + WB_LOOK_NS, false,
								 __ATOMIC_RELAXED, __ATOMIC_RELAXED))) {
		errno = saved;
		return 0;
	}
	struct held_look {
		int file, fd;
		uint64_t ino;
		bool gone;
	} look[WB_FILES];
	int n = 0;
	spin_lock(&pacer_lock);
	for (int i = 0; i < WB_FILES; i++)
		if (pacer.files[i].used && pacer.files[i].held)
			look[n++] = (struct held_look){ i, pacer.files[i].fd, pacer.files[i].ino, false };
	spin_unlock(&pacer_lock);
	/* Nameless?  AT_STATX_DONT_SYNC: NFS's getattr would otherwise write
	 * the file's dirty pages back and wait. */
	for (int k = 0; k < n; k++) {
		struct statx stx;
		/* (A number closed and taken by another file meanwhile, or
		 * that fails: judged again at the next look.) */
		look[k].gone = statx(look[k].fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC,
				     STATX_NLINK | STATX_INO, &stx) == 0 &&
			       stx.stx_ino == look[k].ino && stx.stx_nlink == 0;
	}
	unsigned nameless = 0;
	for (int k = 0; k < n; k++) {
		int i = look[k].file;
		struct wb_file *f = &pacer.files[i];
		struct wb_flush fl;
		bool send = false;
		int own = -1;
		spin_lock(&pacer_lock);
		if (f->used && f->held && f->fd == look[k].fd && f->ino == look[k].ino &&
		    (look[k].gone || now - held_since_ns[i] >= WB_HOLD_MAX_NS)) {
			/* Nameless: its dirty pages die with the inode (nothing
			 * to send).  Else what is still queued goes out now. */
			if (look[k].gone)
				wb_pacer_forget(&pacer, f->dev, f->ino);
			else
				send = wb_pacer_take_file(&pacer, i, &fl);
			if (closable(i)) {
				own = f->fd;
				nameless += look[k].gone;
				__atomic_store_n(&writeback_held_fds, writeback_held_fds - 1,
						 __ATOMIC_RELAXED);
				wb_pacer_release(&pacer, i);
			} else {
				/* The program has it open, or holds a lock on it:
				 * closed at its close of it, or looked at again in
				 * a second. */
				held_since_ns[i] = now;
			}
		}
		spin_unlock(&pacer_lock);
		if (send)
			flush_send(&fl);
		if (own >= 0)
			private_fd_close(own);
	}
	errno = saved;
	return nameless;
}

void writeback_tend_now(void)
{
	tend(false);
}

bool writeback_release_nameless(void)
{
	return __atomic_load_n(&writeback_held_fds, __ATOMIC_RELAXED) && tend(true) > 0;
}

void writeback_closed(int own_fd)
{
	if (own_fd >= 0) {
		int saved = errno;
		private_fd_close(own_fd);
		errno = saved;
	}
}

void writeback_exit(void)
{
	if (!paced)
		return;
	int saved = errno;
	struct wb_flush fl;
	spin_lock(&pacer_lock);
	exiting = true;
	while (wb_pacer_next(&pacer, 0, WB_CHUNK_MAX_PAGES, &fl)) {
		spin_unlock(&pacer_lock);
		flush_send(&fl);
		spin_lock(&pacer_lock);
	}
	spin_unlock(&pacer_lock);
	errno = saved;
}

void writeback_forget(uint64_t dev, uint64_t ino)
{
	if (!paced)
		return;
	spin_lock(&pacer_lock);
	release_if_idle(wb_pacer_forget(&pacer, dev, ino));
	spin_unlock(&pacer_lock);
}

void writeback_forget_all(void)
{
	if (!paced)
		return;
	spin_lock(&pacer_lock);
	for (int i = 0; i < WB_FILES; i++)
		if (pacer.files[i].used)
			release_if_idle(wb_pacer_forget(&pacer, pacer.files[i].dev, pacer.files[i].ino));
	spin_unlock(&pacer_lock);
}
