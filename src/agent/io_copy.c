/*
 * io_copy.c - copies inside the kernel (sendfile, copy_file_range, splice):
 * either end may be a disk file; the source is predicted like a read, the
 * destination like a write.
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
#include "agent/io.h"
#include "agent/io_internal.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "agent/spin.h"
#include "agent/writeback.h"
#include "common/clock.h"
#include "graybox/cache_detector.h"
#include "graybox/readahead.h"


/*
 * Copies inside the kernel: the source is predicted before the call, like a
 * read of what the call can copy (never past the source's EOF, whatever
 * length the caller asked: cp asks for SSIZE_MAX); the destination after
 * it, from the bytes really copied (the write predictor needs positions,
 * not cache state).  Under a cap the length is cut to one chunk: these
 * calls may copy less than asked, and every caller loops.
 */
struct copy_plan {
	bool out_disk;
	uint64_t out_pos;
	uint64_t in_pos;    /* --cache drop */
	uint64_t reads, writes;
	uint64_t prefetched;  /* of reads: read in by us before the call */
	uint64_t delay;
	struct io_unseen_check unseen;
	/* The source's read model before the prediction, put back if the
	 * call copies nothing (see copy_done()). */
	bool in_modelled;
	struct readahead_state in_ra;
	uint64_t in_model_first, in_model_end;
	struct stream_watch in_watch;
	bool pay_after;     /* the first copy from the source, uncapped:
			     * counted once it worked */
	bool out_measured;  /* the copy may clone: its writes are the
			     * thread's write blocks around the call */
	uint64_t oublock;
};

static size_t copy_begin(int in_fd, const off_t *off_in, int out_fd, const off_t *off_out,
			 size_t len, bool may_clone, struct copy_plan *plan)
{
	memset(plan, 0, sizeof *plan);
	struct copy_read source = { 0 };
	const struct dn_caps *caps = &agent.seg->caps;
	if ((caps->read_bps || caps->write_bps || caps->total_bps) && len > throttle_piece_bytes())
		len = (size_t)throttle_piece_bytes();
	struct open_file *of = open_file_acquire(in_fd);
	if (of) {
		uint64_t pos = off_in ? (uint64_t)*off_in : current_pos(in_fd, of);
		plan->in_pos = pos;
		if (may_clone && !of->copy_splices) {
			/* A filesystem that may clone or offload copy_file_range
			 * (device.h copy_splices) reads nothing for a clone:
			 * predicted and read in by prefetch, a 48 MiB clone on XFS
			 * at 4 MB/s read the whole file in 12.6 s for nothing.  So
			 * the copy is not predicted: the thread's read blocks
			 * around the call say what it read (io_unseen_settle(),
			 * charged after it, as the probe backend's calls are). */
			plan->unseen.on = true;
			open_file_release(of);
			of = NULL;
		}
	}
	if (of) {
		uint64_t pos = plan->in_pos;
		if (pos + len > of->isize)
			refresh_size(in_fd, of);
		uint64_t left = pos < of->isize ? of->isize - pos : 0;
		plan->in_modelled = true;
		bool capped = read_capped();
		plan->pay_after = !capped && !of->copy_worked;
		plan->in_ra = of->ra;
		plan->in_model_first = of->model_first;
		plan->in_model_end = of->model_end;
		plan->in_watch = of->watch;
		/* The kernel moves a copy through a pipe (do_splice_direct ->
		 * filemap_splice_read): the page cache sees reads of at most
		 * the pipe's 16 pages, not one read of the whole length. */
		plan->reads = io_copy_read_plan(in_fd, of, pos, len < left ? len : left,
						capped, &source);
		plan->unseen.on = io_unseen_wanted(of);
		open_file_release(of);
	}
	of = open_file_acquire(out_fd);
	if (of) {
		plan->out_disk = true;
		/* The same for the destination, by its own file system: a
		 * clone dirties next to nothing, and predicted, `cat src >
		 * dst` of 48 MiB on XFS or btrfs under --write-rate 8MB/s
		 * slept 6.3 s for writes nobody made.  The thread's write
		 * blocks around the call say what it dirtied. */
		plan->out_measured = may_clone && !of->copy_splices;
		plan->out_pos = off_out ? (uint64_t)*off_out : write_pos(out_fd, of, true, 0);
		open_file_release(of);
	}
	/* The first copy from a source may fail before it reads anything
	 * (below).  Uncapped, its prediction is counted once it worked.
	 * Capped, it is paid by prefetch like any other, even the first: the
	 * pages read in for a copy that fails are the ones cp's fallback
	 * read(2) wants next (copy_done() keeps their charge), and a first
	 * copy left to the kernel read a window whose marker the kernel set:
	 * now and then, as the timing fell, the kernel read the file's last
	 * window by itself from it, unpredicted (cp at 3MiB/s with --feedback
	 * off, 1 run in 15: 1.8 of 9 MiB, +24 % over the cap). */
	if (!plan->pay_after && plan->in_modelled) {
		uint64_t charged;
		plan->delay = io_copy_read_pay(in_fd, &source, &charged);
		plan->prefetched = charged - source.direct;
		plan->reads = charged;
	}
	/* What the call itself reads: all but what prefetch read in. */
	io_unseen_begin(&plan->unseen, false, plan->reads - plan->prefetched);
	plan->oublock = plan->out_measured ? io_thread_blocks(true) : UINT64_MAX;
	return len;
}

/* After a copy the offsets of the descriptions that moved are unknown:
 * cheaper to ask the kernel next time than to mirror every rule. */
static void copy_done(int in_fd, const off_t *off_in, int out_fd, const off_t *off_out,
		      ssize_t copied, struct copy_plan *plan, const char *op)
{
	struct open_file *of;
	uint64_t rmw = 0;
	/* A copy that moved nothing read nothing: copy_file_range() between
	 * file systems (EXDEV) or to /dev/null (EINVAL), which cp tries
	 * first and then falls back to read(2) from the same offset.  Left
	 * as predicted, the model took the failed call's window for read,
	 * found every later read inside its windows, and predicted ~nothing
	 * for the rest of the file (cp src /dev/null: 3.25 of 143 MiB).  So
	 * the source's model is put back, and the charge taken back - but for
	 * what prefetch read in: that was read, and is cached now. */
	if (copied <= 0 && plan->in_modelled && (of = open_file_acquire(in_fd))) {
		/* The pages of its windows are ours all the same: read in by
		 * prefetch, or owed to it still (of->owed).  Taken for someone
		 * else's run at the fallback's first read (watch_run()), the
		 * chunk prefetch had read was charged again: `cp` of a cold
		 * 34 MiB file to /dev/null at 9M with --feedback off, 35 MiB
		 * predicted in every run, the job 2.9-3.1 % under its cap. */
		uint64_t high = of->watch.model_high;
		of->ra = plan->in_ra;
		of->model_first = plan->in_model_first;
		of->model_end = plan->in_model_end;
		of->watch = plan->in_watch;
		if (plan->prefetched && high > of->watch.model_high)
			of->watch.model_high = high;
		open_file_release(of);
		if (!plan->pay_after)
			throttle_unpredict_read(plan->reads - plan->prefetched);
		plan->reads = plan->prefetched;
	} else if (copied > 0 && plan->pay_after) {
		if ((of = open_file_acquire(in_fd))) {
			of->copy_worked = true;
			open_file_release(of);
		}
		plan->delay += throttle_charge_done(plan->reads, 0);
	}
	/* First: the write predictor below may read (read-modify-write). */
	if (copied > 0)
		plan->delay += io_unseen_settle(in_fd, &plan->unseen);
	if (!off_in && (of = open_file_acquire(in_fd))) {
		of->pos_known = false;
		open_file_release(of);
	}
	if (plan->out_disk && (of = open_file_acquire(out_fd))) {
		if (copied > 0 && plan->out_measured) {
			/* Cloned: next to nothing dirtied.  Spliced after all
			 * (XFS made without reflink): the pages, counted. */
			uint64_t now = io_thread_blocks(true), dirtied = 0;
			if (now != UINT64_MAX && plan->oublock != UINT64_MAX && now > plan->oublock)
				dirtied = (now - plan->oublock) * 512;
			plan->writes = io_write_measured(of, plan->out_pos, (uint64_t)copied, dirtied);
		} else if (copied > 0) {
			plan->writes = predict_write(out_fd, of, plan->out_pos, (uint64_t)copied, &rmw);
		}
		if (!off_out)
			of->pos_known = false;
		refresh_size(out_fd, of);
		uint64_t dev = of->dev, ino = of->ino;
		bool overlay = of->overlay;
		open_file_release(of);
		if (copied > 0)
			AGENT_COUNT(file_write_bytes, (uint64_t)copied);
		plan->delay += throttle_charge_done(rmw, plan->writes);
		if (copied > 0)
			writeback_wrote(out_fd, dev, ino, plan->out_pos, (uint64_t)copied,
					overlay ? 0 : plan->writes);
	}
	if (copied > 0 && open_file_maybe_disk(in_fd)) {
		AGENT_COUNT(file_read_bytes, (uint64_t)copied);
		if (agent.cache_drop)
			io_read_dropped(in_fd, plan->in_pos, (uint64_t)copied);
	}
	if (plan->reads || plan->writes || plan->delay || rmw)
		agent_trace(op, copied > 0 ? (uint64_t)copied : 0, plan->reads + plan->writes + rmw,
			    plan->delay);
}

/* The program's offset, read without trusting the pointer (as io.c's
 * iov_total_checked() reads an iovec): an address it cannot read is the
 * kernel's EFAULT to return, not a fault of ours.  *copy points to the
 * value read, or is NULL for a NULL offset.  false: unreadable. */
static bool offset_read(const off_t *offset, off_t *value, const off_t **copy)
{
	*copy = NULL;
	if (!offset)
		return true;
	struct iovec local = { value, sizeof *value };
	struct iovec remote = { (void *)offset, sizeof *value };
	if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof *value)
		return false;
	*copy = value;
	return true;
}

/* The disk path of a copy runs only where it watches an end (agent.h:
 * idle, slack); the network's where a socket end is policed (io_net.c). */
static bool copy_disk_watches(int in_fd, int out_fd)
{
	return agent_disk_watches(in_fd) || agent_disk_watches(out_fd);
}

ssize_t io_sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	int saved = errno;
	struct copy_plan plan;
	struct io_net_copy net;
	/* sendfile has no flag of its own: the socket's O_NONBLOCK decides. */
	count = io_net_copy_begin(in_fd, out_fd, count, false, &net);
	if (net.refused)
		return -1; /* EAGAIN: the window's, as the socket's own */
	off_t in_value;
	const off_t *in_copy;
	bool disk = copy_disk_watches(in_fd, out_fd) && offset_read(offset, &in_value, &in_copy);
	if (disk)
		count = copy_begin(in_fd, in_copy, out_fd, NULL, count, false, &plan);
	errno = saved;
	ssize_t r = libc_real.sendfile64(out_fd, in_fd, offset, count);
	int err = errno;
	if (disk)
		copy_done(in_fd, in_copy, out_fd, NULL, r, &plan, "sendfile");
	io_net_copy_done(&net, r);
	errno = r < 0 ? err : saved;
	return r;
}

/* copy_file_range and splice: the same signature, the same path. */
static ssize_t copy_between(ssize_t (*real)(int, off_t *, int, off_t *, size_t, unsigned),
			    const char *op, int in_fd, off_t *off_in, int out_fd, off_t *off_out,
			    size_t len, unsigned flags)
{
	int saved = errno;
	struct copy_plan plan;
	struct io_net_copy net;
	/* splice(SPLICE_F_NONBLOCK) does not wait on the pipe, but a socket
	 * end still follows its own O_NONBLOCK (may_wait asks it). */
	len = io_net_copy_begin(in_fd, out_fd, len, false, &net);
	if (net.refused)
		return -1; /* EAGAIN: the window's, as the socket's own */
	off_t in_value, out_value;
	const off_t *in_copy, *out_copy;
	bool disk = copy_disk_watches(in_fd, out_fd) && offset_read(off_in, &in_value, &in_copy) &&
		    offset_read(off_out, &out_value, &out_copy);
	if (disk)
		len = copy_begin(in_fd, in_copy, out_fd, out_copy, len, real == libc_real.copy_file_range,
				 &plan);
	errno = saved;
	ssize_t r = real(in_fd, off_in, out_fd, off_out, len, flags);
	int err = errno;
	if (disk)
		copy_done(in_fd, in_copy, out_fd, out_copy, r, &plan, op);
	io_net_copy_done(&net, r);
	errno = r < 0 ? err : saved;
	return r;
}

ssize_t io_copy_file_range(int in_fd, off_t *off_in, int out_fd, off_t *off_out, size_t len,
			   unsigned flags)
{
	return copy_between(libc_real.copy_file_range, "copy_file_range", in_fd, off_in, out_fd,
			    off_out, len, flags);
}

ssize_t io_splice(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len, unsigned flags)
{
	return copy_between(libc_real.splice, "splice", fd_in, off_in, fd_out, off_out, len, flags);
}
