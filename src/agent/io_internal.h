/*
 * io_internal.h - what the io_*.c files share (see io.h for the layers):
 *   io.c        flags, offsets, pieces, iovecs; calls that move no data
 *   io_read.c   cache view, read-size predictor glue, prefetch, io_read
 *   io_write.c  write-size predictor glue, writeback, cancellations
 *   io_copy.c   sendfile, copy_file_range, splice
 *   io_net.c    sockets: the network's caps and window (rate-windows §5)
 * Functions that take a struct open_file expect its lock held.
 */
#ifndef DISCNICE_IO_INTERNAL_H
#define DISCNICE_IO_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "agent/agent.h"
#include "agent/io.h"  /* struct io_unseen_check */
#include "agent/open_file.h"
#include "graybox/readahead.h"

#define PAGE_SHIFT READAHEAD_PAGE_SHIFT
#define PAGE_SIZE  READAHEAD_PAGE_SIZE
#define WRITEBACK_POLL_NS (100 * 1000 * 1000ull) /* issue #2: at most every 100 ms */
#define DIR_SLOW_MIN_NS (100 * 1000ull)
/* The pipe a kernel copy goes through: PIPE_DEF_BUFFERS pages. */
#define SPLICE_READ_BYTES (16 * PAGE_SIZE)
/* A random read of up to this many pages is read in by the agent itself. */
#define SMALL_READ_PAGES 4

/* On every call's path: inline, across the files. */
static inline bool predicting(uint32_t bit)
{
	return (agent.predict_mask & bit) != 0;
}

static inline uint64_t pages_of(uint64_t bytes)
{
	return (bytes + PAGE_SIZE - 1) >> PAGE_SHIFT;
}

/* The supervisor charges what the kernel counted beyond our predictions
 * (--feedback on, segment.h DN_RUN_FEEDBACK). */
static inline bool feedback_charges(void)
{
	return agent.run && (__atomic_load_n(&agent.run->state, __ATOMIC_RELAXED) & DN_RUN_FEEDBACK);
}

/* A cap on reads or on all I/O: reads go in paced pieces. */
static inline bool read_capped(void)
{
	return agent.seg->caps.read_bps || agent.seg->caps.total_bps;
}

/* io_net.c: a policed socket under a network cap (NONE: not one, or no
 * network cap), and read/write/readv/writev on one. */
enum open_file_net io_net_kind(int fd);
ssize_t io_net_read(int fd, enum open_file_net kind, void *buf, size_t count);
ssize_t io_net_write(int fd, enum open_file_net kind, const void *buf, size_t count);
ssize_t io_net_readv(int fd, const struct iovec *iov, int iovcnt);
ssize_t io_net_writev(int fd, const struct iovec *iov, int iovcnt);
/* sendfile and splice with a socket at one end: the length cut to one
 * piece and a send charged before; a receive charged after. */
struct io_net_copy {
	enum open_file_net in_kind, out_kind;
	int in_fd, out_fd, flags;
	uint64_t charged;
	bool refused;   /* no room (non-blocking, or at the socket's SO_SNDTIMEO):
			 * EAGAIN, or EINTR after a handler; errno set, nothing done */
};
size_t io_net_copy_begin(int in_fd, int out_fd, size_t len, bool nonblocking,
			 struct io_net_copy *copy);
void io_net_copy_done(const struct io_net_copy *copy, ssize_t copied);

/* io_write.c */
void io_regions_sent(uint64_t dev, uint64_t ino, uint64_t first_page, uint64_t pages);

/* io.c */
void refresh_size(int fd, struct open_file *of);
uint64_t current_pos(int fd, struct open_file *of);
size_t piece_for(int fd, struct open_file *of, size_t piece, size_t count, bool writing);
/* The most one read(2) or write(2) moves (include/linux/fs.h MAX_RW_COUNT). */
#define IO_MAX_RW_COUNT ((size_t)(INT_MAX & ~(PAGE_SIZE - 1)))
struct io_range {
	off_t base, end; /* the call's bytes of the shared position */
};
bool io_range_take(int fd, size_t *count, struct io_range *range);
void io_range_done(int fd, const struct io_range *range, size_t done, bool short_read);
/* The bytes of an iovec, at most IO_MAX_RW_COUNT as the kernel moves;
 * false if the kernel refuses it before any I/O (then the call is made
 * plainly). */
bool iov_total_checked(const struct iovec *iov, int iovcnt, size_t *total);
/* True if the kernel refuses read(2)/write(2) of [buf, buf + count) (at
 * *offset, if given) before any I/O: the call is made whole, plainly. */
bool io_call_refused(const void *buf, size_t count, const off_t *offset);

/* io_read.c.  The page cache as the model sees it during one call: the
 * cache detector's answer, plus the pages the model itself predicted the
 * kernel brings in during this call (not in the cache yet when we ask). */
struct view_ctx {
	int fd;
	struct open_file *of;
	bool use_cache;
	unsigned overlays;
	struct { uint64_t first, end; } overlay[8];
	/* Pages the detector found all cached during this call (see
	 * detector_count()); zero-initialised = none. */
	uint64_t known_first, known_end;
	bool asked_whole;
};
uint64_t detector_count(struct view_ctx *v, uint64_t first, uint64_t count);
struct read_plan;
uint64_t predict_read(int fd, struct open_file *of, uint64_t pos, uint64_t count,
		      struct read_plan *plan);
bool read_capped(void);
/* Pay for a read of [pos, pos + count) of fd that libc is about to make
 * behind our back (a stdio refill: the offset is unknown afterwards):
 * under a read cap by reading the model's windows in, paced; else by
 * charging the prediction.  False when fd is no disk file; else *slept
 * gets the ns slept and *predicted the bytes charged.  unseen (or NULL)
 * is set up for io_unseen_settle() after the call. */
bool io_read_pay(int fd, uint64_t pos, uint64_t count, uint64_t *predicted, uint64_t *slept,
		 struct io_unseen_check *unseen);
/* How a planned read is paid by prefetch (io_read.c plan_read(), pay_read()). */
struct read_pay {
	uint64_t need_first; /* the call's first page                     */
	uint64_t need_end;   /* read in all owed below this page          */
	uint64_t probed;     /* the probes' own reads, charged first       */
	bool preread_check;  /* the window after a cached start is all in:
			      * check it (preread_repair())                */
};
/* A kernel copy's source, predicted in the kernel's splice steps and paid
 * as a read (io_copy.c): io_copy_read_plan() with of locked returns the
 * bytes predicted; io_copy_read_pay(), of unlocked, pays them - direct
 * charged as such, the rest by prefetch - and returns the ns slept, with
 * *charged the bytes charged. */
struct copy_read {
	uint64_t direct;     /* predicted bytes not paid by prefetch       */
	bool by_prefetch;
	struct read_pay pay;
};
uint64_t io_copy_read_plan(int fd, struct open_file *of, uint64_t pos, uint64_t len, bool capped,
			   struct copy_read *c);
uint64_t io_copy_read_pay(int fd, const struct copy_read *c, uint64_t *charged);
/* The probe backend's check of one call (io_read.c io_unseen_settle()): is
 * it wanted for this file (of locked); then, just before the call, after
 * paying for it (by_prefetch: its pages were read in already; else the
 * call reads predicted bytes itself), io_unseen_begin(); after it,
 * io_unseen_settle() (io.h). */
bool io_unseen_wanted(const struct open_file *of);
void io_unseen_begin(struct io_unseen_check *c, bool by_prefetch, uint64_t predicted);
/* --cache drop: the job read bytes at pos of fd (after a call predicted
 * with predict_read): hand its misses to cache_drop_read(). */
void io_read_dropped(int fd, uint64_t pos, uint64_t bytes);

/* io_write.c */
uint64_t predict_write(int fd, struct open_file *of, uint64_t pos, uint64_t count,
		       uint64_t *read_bytes);
uint64_t io_write_measured(struct open_file *of, uint64_t pos, uint64_t count, uint64_t dirtied);
uint64_t io_thread_blocks(bool written); /* io_read.c: getrusage(RUSAGE_THREAD) */
uint64_t write_pos(int fd, struct open_file *of, bool moves_offset, off_t offset);
void poll_writeback(void);

#endif
