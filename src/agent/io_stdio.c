/*
 * io_stdio.c - glibc stdio, whose buffer refills and flushes call the
 * kernel through internal aliases (__read, __write via the FILE's jump
 * table), never through the exported read/write we interpose.
 *
 * Reads are predicted before the call: when the buffer cannot satisfy the
 * request, glibc refills it from the kernel offset, one buffer (or the
 * direct remainder of a large fread) at a time.  Writes are booked after
 * the call, from how much the buffer drained: the write-size predictor
 * needs only positions, not cache state, so booking late loses no
 * accuracy, and the throttle then delays the next call instead of this
 * one.  Cost: one lseek per refill or flush, none per buffered call, and
 * none while only counting (--policy manners with no cap): the bytes are
 * booked at offset 0, which no model reads (agent.h agent_counting).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/io.h"
#include "agent/agent.h"
#include "agent/cache_drop.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"

static long long buffered_input(const FILE *fp)
{
	return fp->_IO_read_end - fp->_IO_read_ptr;
}

static long long pending_output(const FILE *fp)
{
	return fp->_IO_write_ptr > fp->_IO_write_base ? fp->_IO_write_ptr - fp->_IO_write_base : 0;
}

int io_stdio_before_read(FILE *fp, size_t want, struct io_stdio_state *st)
{
	int saved = errno;
	st->unseen.on = false;
	st->fd = fp ? fp->_fileno : -1;
	if (st->fd < 0 || !open_file_maybe_disk(st->fd) ||
	    (agent_slack() && !open_file_seen(st->fd)))
		return 0;
	long long have = buffered_input(fp);
	/* want == 0: a line-oriented read; it refills only when no newline
	 * is buffered. */
	if (want == 0) {
		if (have > 0 && memchr(fp->_IO_read_ptr, '\n', (size_t)have))
			return 0;
		want = (size_t)have + 1;
	}
	if ((long long)want <= have)
		return 0;
	/* Counting only (agent.h agent_counting): the bytes, not where. */
	off_t kernel = agent_counting() ? 0 : libc_real.lseek64(st->fd, 0, SEEK_CUR);
	if (kernel < 0) {
		errno = saved;
		return 0;
	}
	long long bufsize = fp->_IO_buf_end - fp->_IO_buf_base;
	if (bufsize <= 0)
		bufsize = 4096; /* not yet allocated: _IO_file_doallocate uses st_blksize */
	long long missing = (long long)want - have;
	long long refill = missing > bufsize ? missing : bufsize;
	io_charge_read_at(st->fd, (uint64_t)kernel, (uint64_t)refill, "stdio-read", &st->unseen);
	errno = saved;
	return 1;
}

void io_stdio_after_read(const struct io_stdio_state *st)
{
	if (st->unseen.on)
		(void)io_unseen_settle(st->fd, &st->unseen);
}

int io_stdio_before_write(FILE *fp, struct io_stdio_state *st)
{
	st->fd = fp ? fp->_fileno : -1;
	if (st->fd < 0 || !open_file_maybe_disk(st->fd) ||
	    (agent_slack() && !open_file_seen(st->fd))) {
		st->fd = -1;
		return 0;
	}
	st->pending = pending_output(fp);
	st->kernel_pos = -1;
	return 1;
}

void io_stdio_after_write(FILE *fp, const struct io_stdio_state *st, long long added)
{
	if (st->fd < 0)
		return;
	int saved = errno;
	long long flushed = st->pending + (added > 0 ? added : 0) - pending_output(fp);
	if (flushed > 0) {
		off_t kernel = agent_counting() ? flushed : libc_real.lseek64(st->fd, 0, SEEK_CUR);
		if (kernel >= flushed)
			io_charge_write_at(st->fd, (uint64_t)(kernel - flushed), (uint64_t)flushed,
					   "stdio-write");
	}
	errno = saved;
}

void io_stdio_after_close(const struct io_stdio_state *st)
{
	if (st->fd < 0)
		return;
	int saved = errno;
	/* fclose closed the fd inside libc: forget it, and book what the
	 * final flush wrote, at the offset noted before the call. */
	if (st->pending > 0 && st->kernel_pos >= 0)
		io_charge_write_at(st->fd, (uint64_t)st->kernel_pos, (uint64_t)st->pending,
				   "stdio-close");
	open_file_forget(st->fd);
	errno = saved;
}

int io_stdio_before_close(FILE *fp, struct io_stdio_state *st)
{
	int saved = errno;
	/* --cache drop: fclose closes inside libc, past our close(). */
	struct open_file *of;
	if (agent.cache_drop && fp && fp->_fileno >= 0 && (of = open_file_peek(fp->_fileno))) {
		uint64_t dev = of->dev, ino = of->ino;
		bool last = of->refs == 1;
		open_file_release(of);
		if (last)
			cache_drop_closing(fp->_fileno, dev, ino);
	}
	if (!io_stdio_before_write(fp, st))
		return 0;
	if (st->pending > 0)
		st->kernel_pos = agent_counting() ? 0 : libc_real.lseek64(st->fd, 0, SEEK_CUR);
	errno = saved;
	return 1;
}
