/*
 * io.c - what every path of an intercepted call shares: flags, offsets,
 * how a call may be cut, a checked iovec; and the bookkeeping of calls that
 * move no data (open, dup, F_SETFL, lseek, mmap, directory reads) and of
 * stdio's buffer traffic (io_stdio.c).  The read path is io_read.c, the
 * write path io_write.c, kernel-side copies io_copy.c (DiscNice Fig. 5:
 * predict -> policy -> throttle -> the real call -> book).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/cache_drop.h"
#include "agent/io.h"
#include "agent/io_internal.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "agent/spin.h"
#include "agent/writeback.h"
#include "common/clock.h"
#include "common/shared_position.h"
#include "graybox/cache_detector.h"
#include "graybox/readahead.h"


void refresh_size(int fd, struct open_file *of)
{
	struct stat st;
	if (fstat(fd, &st) == 0) {
		if ((uint64_t)st.st_size != of->isize)
			extent_map_clear(&of->extents); /* written: holes may be filled */
		of->isize = (uint64_t)st.st_size;
		of->sparse = open_file_may_be_sparse(&st);
	}
}

/*
 * Before a call is cut into pieces, ask the kernel for the description's
 * flags: O_APPEND and O_DIRECT live in the open file description, which
 * fcntl(F_SETFL) changes through any fd that shares it - a dup, a child's
 * copy - without our seeing it (issue #8 item 4).  One fcntl per call that
 * would be split, none on the common path.  of is locked.
 */
static void refresh_flags(int fd, struct open_file *of)
{
	int flags = fcntl(fd, F_GETFL); /* our own wrapper: the guard makes it plain */
	if (flags >= 0)
		open_file_set_flags(of, flags);
}

/*
 * The alignment O_DIRECT needs of every piece's offset, length and buffer
 * (issue #8 item 9): statx(STATX_DIOALIGN) gives the file's
 * (fs/stat.c, ext4_getattr -> stx_dio_offset_align, stx_dio_mem_align,
 * Linux 6.1).  Pieces are whole multiples of the larger, and at least a
 * page; 0 when the kernel cannot tell: then the call is not cut at all.
 */
static uint64_t direct_alignment(int fd, struct open_file *of)
{
	if (!of->dio_align) {
		struct statx stx;
		uint64_t align = 0;
		if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
		    (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
			of->dio_len_align = stx.stx_dio_offset_align;
			align = PAGE_SIZE;
			if (stx.stx_dio_offset_align > align)
				align = stx.stx_dio_offset_align;
			if (stx.stx_dio_mem_align > align)
				align = stx.stx_dio_mem_align;
		}
		of->dio_align = align ? align : UINT64_MAX;
	}
	return of->dio_align == UINT64_MAX ? 0 : of->dio_align;
}

/* The piece a call of `count` bytes on this description may be cut to:
 * never an O_APPEND write (its atomicity is the program's to rely on), nor
 * a read of a write-only description (EBADF, from the kernel, whole), and
 * O_DIRECT only on its alignment.  of is locked. */
size_t piece_for(int fd, struct open_file *of, size_t piece, size_t count, bool writing)
{
	if (piece >= count)
		return count;
	refresh_flags(fd, of);
	if (writing ? of->append : of->write_only)
		return count;
	if (of->direct) {
		uint64_t align = direct_alignment(fd, of);
		/* A length off the kernel's alignment for it (the offset's,
		 * stx_dio_offset_align) is refused as a whole (EINVAL, nothing
		 * moved): cut, its aligned pieces went through and only the
		 * last failed - a partial write where the program would see
		 * none.  Whole, the kernel decides.  (A length on it but off
		 * our pieces' larger alignment is cut, its remainder last.)
		 * (A misaligned offset or buffer fails at the first piece,
		 * as the whole call would.) */
		if (!align || !of->dio_len_align || count % of->dio_len_align)
			return count;
		piece -= piece % align;
		if (piece < align)
			piece = (size_t)align;
		return piece < count ? piece : count;
	}
	return piece;
}

/*
 * One read(2) or write(2) on a description other processes share happens
 * whole: the kernel holds the description's position lock for the call
 * (fdget_pos(), FMODE_ATOMIC_POS), so two writers' records never mix
 * (`( a & b ) > out`) and two readers never get interleaved parts.  Our
 * pieces are separate calls, and another process's could come between
 * them.  So a call cut into pieces first takes its whole range from the
 * shared position, as the kernel's would - one lseek(fd, count, SEEK_CUR),
 * under the same lock - and its pieces go there with pread()/pwrite().
 * The count is the kernel's: at most MAX_RW_COUNT (rw_verify_area()).
 * What the call does not move it gives back (io_range_done()).
 * false: no such range (not seekable), the call goes on as it was.
 */
bool io_range_take(int fd, size_t *count, struct io_range *range)
{
	int saved = errno;
	if (*count > IO_MAX_RW_COUNT)
		*count = IO_MAX_RW_COUNT;
	off_t end = libc_real.lseek64(fd, (off_t)*count, SEEK_CUR);
	errno = saved;
	if (end < (off_t)*count)
		return false;
	range->end = end;
	range->base = end - (off_t)*count;
	return true;
}

/* The position a call that took its range leaves is the kernel's: after
 * what it moved (shared_position_give_back()).  A short read is at the
 * file's end only if the file ends there (fstat): a read cut short by a
 * signal gives back as a cut call does.  The position we believed is not
 * ours to know any more. */
void io_range_done(int fd, const struct io_range *range, size_t done, bool short_read)
{
	int saved = errno;
	struct shared_range_end end = { range->base, range->end, done, false };
	if (range->base + (off_t)done < range->end) {
		struct stat st;
		end.at_eof = short_read && fstat(fd, &st) == 0 &&
			     range->base + (off_t)done >= st.st_size;
		int64_t arg;
		off_t now = libc_real.lseek64(fd, 0, SEEK_CUR);
		switch (now < 0 ? SHARED_KEEP : shared_position_give_back(&end, now, &arg)) {
		case SHARED_KEEP:
			break;
		case SHARED_SET:
			libc_real.lseek64(fd, arg, SEEK_SET);
			break;
		case SHARED_BACK:
			libc_real.lseek64(fd, -arg, SEEK_CUR);
			break;
		}
	}
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		of->pos_known = false;
		open_file_release(of);
	}
	errno = saved;
}

/* Where the next read()/write() on this description starts. */
uint64_t current_pos(int fd, struct open_file *of)
{
	if (!open_file_pos_valid(of)) {
		off_t pos = libc_real.lseek64(fd, 0, SEEK_CUR);
		if (pos < 0)
			return 0;
		open_file_pos_set(of, (uint64_t)pos);
	}
	return of->pos;
}

/*
 * The kernel checks a read(2) or write(2) whole before it moves a byte:
 * access_ok() (arch/x86/include/asm/uaccess_64.h) fails a buffer that
 * wraps or ends past the top of user space (EFAULT), rw_verify_area()
 * (fs/read_write.c) a count above SSIZE_MAX (EINVAL) and an offset that
 * the count carries past LLONG_MAX (EINVAL); only then is the count cut to
 * MAX_RW_COUNT.  Our pieces would each be checked alone, and the first
 * would move bytes - past the end of the caller's buffer - where the call
 * fails.  Such a call goes to the kernel whole.  The top of user space is
 * 4-level paging's, 2^47 less a page, where 6.12 and later draw the line
 * (valid_user_address(): USER_PTR_MAX); 6.4 to 6.11 take any address
 * below 2^63 there, and 5-level paging maps above it where a program asks.
 * A call past it that the kernel takes goes whole too: the same result,
 * unregulated.
 */
#define USER_SPACE_TOP (((uintptr_t)1 << 47) - PAGE_SIZE)

bool io_call_refused(const void *buf, size_t count, const off_t *offset)
{
	uintptr_t start = (uintptr_t)buf, end = start + count;
	if (end < start || end > USER_SPACE_TOP || count > (size_t)SSIZE_MAX)
		return true;
	return offset && (*offset < 0 || (uint64_t)*offset + count > (uint64_t)INT64_MAX);
}

/*
 * The bytes an iovec asks for, read without trusting it (issue #8 item
 * 10): the kernel validates the program's iovec (import_iovec() ->
 * -EFAULT, -EINVAL), the agent must not dereference it first.  The array
 * is copied through process_vm_readv(2), which reports EFAULT instead of
 * faulting, in batches on the stack.  Returns false when the call should
 * go to the kernel unaccounted: a count out of range, unreadable memory,
 * a total over SSIZE_MAX (EINVAL from the kernel), or no process_vm_readv
 * (a seccomp filter).
 */
bool iov_total_checked(const struct iovec *iov, int iovcnt, size_t *total)
{
	*total = 0;
	if (iovcnt <= 0 || iovcnt > IOV_MAX)
		return false;
	struct iovec batch[64];
	pid_t self = getpid();
	size_t sum = 0;
	for (int i = 0; i < iovcnt; i += 64) {
		size_t n = (size_t)(iovcnt - i < 64 ? iovcnt - i : 64);
		struct iovec local = { batch, n * sizeof batch[0] };
		struct iovec remote = { (void *)(iov + i), n * sizeof batch[0] };
		if (process_vm_readv(self, &local, 1, &remote, 1, 0) != (ssize_t)local.iov_len)
			return false;
		/* Each segment is checked as a buffer (iovec_from_user(),
		 * lib/iov_iter.c); the sum is cut to MAX_RW_COUNT. */
		for (size_t k = 0; k < n; k++) {
			if (batch[k].iov_len > (size_t)SSIZE_MAX - sum ||
			    io_call_refused(batch[k].iov_base, batch[k].iov_len, NULL))
				return false;
			sum += batch[k].iov_len;
		}
	}
	*total = sum < IO_MAX_RW_COUNT ? sum : IO_MAX_RW_COUNT;
	return true;
}

void io_opened(int fd, int flags)
{
	int saved = errno;
	if (agent_idle() || agent_slack())
		open_file_forget(fd); /* classified when a cap needs it */
	else
		open_file_track(fd, flags, true);
	writeback_tend(); /* files closed a while ago let go (writeback.c) */
	errno = saved;
}

void io_dup(int oldfd, int newfd)
{
	int saved = errno;
	open_file_dup(oldfd, newfd);
	errno = saved;
}

void io_flags_set(int fd, int flags)
{
	int saved = errno;
	struct open_file *of = open_file_peek(fd);
	if (of) {
		open_file_set_flags(of, flags);
		open_file_release(of);
	}
	errno = saved;
}

void io_seeked(int fd, off_t result)
{
	struct open_file *of = open_file_peek(fd);
	if (!of)
		return;
	if (result >= 0)
		open_file_pos_set(of, (uint64_t)result);
	else
		of->pos_known = false;
	open_file_release(of);
}

void io_mapped(int fd, size_t length, int prot)
{
	int saved = errno;
	struct open_file *of = open_file_acquire(fd);
	if (of) {
		uint64_t dev = of->dev, ino = of->ino;
		open_file_release(of);
		/* --cache drop: the job may touch the mapping at any time. */
		if (agent.cache_drop)
			cache_drop_mapped(dev, ino);
		/* Faults on the mapping read through filemap_fault, which we
		 * cannot see: account the mapping so the report shows it. */
		AGENT_COUNT(mmapped_bytes, length);
		agent_trace((prot & PROT_WRITE) ? "mmap-rw" : "mmap", length, 0, 0);
	}
	errno = saved;
}

void io_dir_read(int fd, uint64_t started_ns, long bytes, int64_t measured_bytes)
{
	if (bytes <= 0 || !predicting(DN_PREDICT_CACHE))
		return;
	int saved = errno;
	uint64_t charged = 0;
	if (measured_bytes >= 0) {
		/* getdents64 called directly: the kernel told us (getrusage
		 * ru_inblock around the call) what it read for it. */
		charged = (uint64_t)measured_bytes;
	} else {
		/* readdir: directory blocks live in the block device's cache,
		 * which no syscall lets us query, and glibc refills its buffer
		 * out of sight.  Time the call instead (gray-box, as §4.2 times
		 * probes): a cached refill of 32 KiB of entries stays well
		 * under DIR_SLOW_MIN_NS, a block read from the disk does not. */
		uint64_t slow = agent.seg->probe_threshold_ns * 10;
		if (slow < DIR_SLOW_MIN_NS)
			slow = DIR_SLOW_MIN_NS;
		if (clock_now_ns() - started_ns > slow) {
			struct stat st;
			if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
				charged = pages_of((uint64_t)bytes) << PAGE_SHIFT;
		}
	}
	if (charged) {
		AGENT_COUNT(dir_read_bytes, charged);
		uint64_t delay = throttle_charge_done(charged, 0);
		agent_trace("getdents", (uint64_t)bytes, charged, delay);
	}
	errno = saved;
}

void io_charge_read_at(int fd, uint64_t pos, uint64_t count, const char *op,
		       struct io_unseen_check *unseen)
{
	/* Paid as read(2) pays: under a read cap the model's windows are
	 * read in by the agent, paced, before the refill. */
	uint64_t predicted, delay;
	if (!io_read_pay(fd, pos, count, &predicted, &delay, unseen))
		return;
	/* --cache drop: booked before the refill it predicts (the lag covers
	 * the difference). */
	if (agent.cache_drop)
		io_read_dropped(fd, pos, count);
	AGENT_COUNT(file_read_bytes, count);
	if (predicted || delay)
		agent_trace(op, count, predicted, delay);
}

void io_charge_write_at(int fd, uint64_t pos, uint64_t count, const char *op)
{
	uint64_t rmw = 0;
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return;
	uint64_t predicted = predict_write(fd, of, pos, count, &rmw);
	if (pos + count > of->isize)
		of->isize = pos + count;
	of->pos_known = false;
	uint64_t dev = of->dev, ino = of->ino;
	bool overlay = of->overlay;
	open_file_release(of);
	uint64_t delay = throttle_charge_done(rmw, predicted); /* libc wrote it already */
	writeback_wrote(fd, dev, ino, pos, count, overlay ? 0 : predicted);
	AGENT_COUNT(file_write_bytes, count);
	if (predicted || delay || rmw)
		agent_trace(op, count, predicted + rmw, delay);
	poll_writeback();
}
