/*
 * open_file.h - the agent's view of open file descriptions.
 *
 * The kernel keeps readahead state per open file description (struct
 * file_ra_state lives in struct file), so do we: dup'd fds share one
 * struct open_file.  An fd we never saw opened (inherited across exec,
 * redirected by the shell) is classified lazily on first use.
 *
 * Lookup is lock-free: a two-level table of atomic pointers indexed by fd.
 * Structs are never returned to the system, only recycled, so a thread that
 * raced with close() holds valid memory; it detects the race by re-reading
 * the table under the struct's lock (open_file_acquire()).
 */
#ifndef DISCNICE_OPEN_FILE_H
#define DISCNICE_OPEN_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>


#include "discnice/segment.h"
#include "graybox/cache_detector.h"
#include "graybox/extent_map.h"
#include "graybox/readahead.h"
#include "policy/drop_behind.h"

/*
 * Runs of pages someone else left cached in a file the job streams
 * through (an earlier reader's: file(1), head, a thumbnailer, dd skip=,
 * an interrupted copy, this job's own earlier open), with the pages after
 * them not cached: the file's first pages, or a run met mid-file.  That
 * reader's PG_readahead markers may lie in them, unknown to the model: a
 * read crossing one makes the kernel read a window from the end of the run
 * by itself (page_cache_async_ra() with no matching state) and stay a
 * window ahead of the model from then on, every window found cached
 * (io_read_watch.c watch_run and what follows it).
 */
struct stream_watch {
	/* The two windows' worth of pages from first, the run's end (later:
	 * past the kernel's window there), are watched until the reader is
	 * past the run: cached is their cached count at the last look, plus
	 * what the model predicted there since.  A rise beyond it is the
	 * kernel's window (io_read_watch.c watch_look).  first 0: not watching. */
	uint64_t first;
	uint64_t cached;
	/* ... and of pages theirs_lo on in the span, those cached then in
	 * pieces another open file's taker read in (io_read_watch.c watch_count) */
	uint64_t theirs_cached, theirs_lo;
	uint64_t until;        /* the run's end: the reader past it, watching ends */
	/* Under a read cap the window after the run is read in by us, paced,
	 * before the reader can reach the earliest page that marker may be on
	 * (io_read_watch.c preread_after_run): from page preread_from on, in
	 * proportion to the reader's way through the run from its first
	 * page, preread_base. */
	bool preread_due;
	uint64_t preread_base, preread_from;
	/* The pages read so, [first, end), until the call that read them has
	 * checked they are all still there (io_read_prefetch.c preread_repair), which
	 * sets preread_done: from then on the watch looks only every
	 * WATCH_LOOK_STRIDE pages of the reader's way, from page looked
	 * (io_read_watch.c watch_due). */
	uint64_t preread_first, preread_end;
	bool preread_done;
	uint64_t looked;
	/* The end of the highest range the model predicted missing (and so
	 * brought in: the kernel for it, our prefetch or pre-read): a stream
	 * that goes on past it onto cached pages meets someone else's run
	 * (io_read_watch.c meets_foreign_run).  0: the model has predicted no miss. */
	uint64_t model_high;
	/* ... and met one: its calls are checked for reads of the kernel's
	 * own (io_read.c io_unseen_wanted) until the reader is past page
	 * foreign_until, where no marker of that reader's can reach; what
	 * they charged since the last prediction, in pages, is taken off a
	 * rise the watch sees (unseen_pages; a prediction with pages there
	 * always looks, io_read_watch.c watch_due). */
	bool foreign_met;
	uint64_t foreign_until;
	uint64_t unseen_pages;
};

struct open_file {
	uint32_t lock;           /* spin lock, held only for bookkeeping    */
	uint32_t refs;           /* fds in the table pointing here          */
	uint64_t dev, ino;
	uint64_t isize;          /* size as last seen                       */
	uint64_t eof_pos;        /* where a read last came back short       */
	uint64_t pos;            /* the file offset as we believe it         */
	bool pos_known;          /* ... and believed since the last fork:    */
	uint32_t pos_generation; /*   open_file_positions_valid()            */
	bool direct;             /* O_DIRECT: no page cache                 */
	bool append;             /* O_APPEND: writes go to EOF, never split */
	bool write_only;         /* O_WRONLY: a read is EBADF, never split  */
	bool unlinked;           /* its last link is gone: last close cancels */
	uint32_t backend;        /* enum dn_cache_backend, never AUTO        */
	struct readahead_state ra;
	/* Pages the model predicted the kernel brought in, [first, end):
	 * resident as far as the model knows, whatever a detector that
	 * cannot see pages still being read (mincore) or whose probes are
	 * older than the read (probe) says. */
	uint64_t model_first, model_end;
	/* Under a read cap the agent reads the model's windows in itself, a
	 * piece at a time just ahead of the program (io_read.c, prefetch): the
	 * ranges still owed, and the predicted bytes not yet charged; each
	 * range with when it was last planned (CLOCK_MONOTONIC). */
	unsigned owed_count;
	struct { uint64_t first, end, plan_ns; } owed[8];
	uint64_t owed_bytes;
	/* The kernel read this file ahead by itself (no read cap) since the
	 * agent last paced it: its windows carry PG_readahead markers, and the
	 * next marker hit would start a whole window at once. */
	bool kernel_paced;
	/* Classified mid-file (inherited, or opened while idle): the model
	 * adopts the kernel's stream at the first prediction. */
	bool adopt;
	/* A copy from it (copy_file_range, splice, sendfile) has worked: the
	 * next is counted before it is made, not after (io_copy.c). */
	bool copy_worked;
	/* Its filesystem's copy_file_range reads through the page cache
	 * (device.h copy_splices); else copies are measured (io_copy.c). */
	bool copy_splices;
	/* On overlayfs (device.h overlay): its own mapping holds no pages,
	 * so sync_file_range() of it starts nothing (writeback.c). */
	bool overlay;
	struct stream_watch watch;
	/* --cache drop: the job read pages of this description in from disk,
	 * so its reads go to cache_drop_read() (until then they need not);
	 * the ranges the last prediction found missing, for the call's end. */
	bool drop_tracked;
	unsigned drop_missed_count;
	struct drop_range drop_missed[8];
	struct cache_probe probe;
	struct open_file *next_free;
	uint64_t dio_align;      /* O_DIRECT alignment; 0 unknown, UINT64_MAX none known */
	uint32_t dio_len_align;  /* ... of a call's length (stx_dio_offset_align) */
	/* A file with fewer blocks than its size may have holes, which cost
	 * no disk I/O to read (graybox/extent_map.h): where its data is. */
	bool sparse;
	struct extent_map extents;
};

/* The description's flags changed (F_SETFL, or read back with F_GETFL):
 * O_APPEND and O_DIRECT are the ones we act on.  of is locked. */
void open_file_set_flags(struct open_file *of, int flags);
/* Does this fstat say the file may have holes? */
struct stat;
bool open_file_may_be_sparse(const struct stat *st);

/* Sentinels in a slot instead of a struct:
 *   NOT_DISK    seen; neither a disk file nor a policed socket: straight
 *               through;
 *   NET_STREAM  a policed stream socket (TCP over IPv4/IPv6; AF_UNIX
 *               SOCK_STREAM under --net-unix): src/agent/io_net.c;
 *   NET_DGRAM   a policed datagram socket (UDP, SEQPACKET, ...): delayed
 *               whole, never split;
 *   NOT_NET     not a socket, classified only that far (the network was
 *               capped while the disk path was idle or slack left the fd
 *               alone): for the disk path it is as good as never seen.
 * Sockets are classified once per fd - getsockopt(SO_DOMAIN, SO_TYPE) -
 * and dup'd fds share the sentinel, as they share a description. */
#define OPEN_FILE_NOT_DISK   ((struct open_file *)1)
#define OPEN_FILE_NET_STREAM ((struct open_file *)2)
#define OPEN_FILE_NET_DGRAM  ((struct open_file *)3)
#define OPEN_FILE_NOT_NET    ((struct open_file *)4)
static inline bool open_file_is_struct(const struct open_file *of)
{
	return (uintptr_t)of > (uintptr_t)OPEN_FILE_NOT_NET;
}
enum open_file_net { OPEN_FILE_NET_NONE = 0, OPEN_FILE_NET_IS_STREAM, OPEN_FILE_NET_IS_DGRAM };
/* What kind of policed socket fd is (NONE: not one), classifying an fd
 * never seen (fstat, then getsockopt) as far as that needs. */
enum open_file_net open_file_net_kind(int fd);
/* Unlocked: may fd be a policed socket (never seen, or known to be one)? */
bool open_file_maybe_net(int fd);
/* AF_UNIX sockets count as network (--net-unix, DN_FLAG_NET_UNIX). */
extern bool open_file_net_unix;

/* Classify fd (after open - fresh - or lazily): a regular file on a block
 * device gets a struct, anything else the sentinel.  Replaces what was
 * there. */
void open_file_track(int fd, int open_flags, bool fresh);

/* For an fd: the struct with its lock held, or NULL when the fd is not a
 * disk file (lazily classifying an fd never seen).  Release with
 * open_file_release(). */
struct open_file *open_file_acquire(int fd);
/* The same for an fd already classified; NULL for one never seen (a call
 * that only updates what is known: close, lseek, F_SETFL, fsync). */
struct open_file *open_file_peek(int fd);
void open_file_release(struct open_file *of);

/* Cheap unlocked check for the hot path: may this fd be a disk file? */
bool open_file_maybe_disk(int fd);
/* Unlocked: has this fd been classified (a struct or the sentinel)? */
bool open_file_seen(int fd);

/* dup/dup2/dup3/F_DUPFD: newfd shares oldfd's description. */
void open_file_dup(int oldfd, int newfd);
/* close(fd) or fd replaced: forget it. */
void open_file_forget(int fd);
/* close_range(2)/closefrom(3): forget fds first..last. */
void open_file_forget_range(unsigned first, unsigned last);

/* Call fn for every tracked description, each with its lock held. */
void open_file_each(void (*fn)(void *ctx, int fd, struct open_file *of), void *ctx);

/* After fork or vfork, in both processes: offsets are now shared with
 * another process, so none we knew holds.  Lock-free (a fork from a signal
 * handler may come while this thread holds a file's lock): it only moves
 * the generation that open_file_pos_valid() compares. */
void open_file_forget_positions(void);
extern uint32_t open_file_generation;
static inline bool open_file_pos_valid(const struct open_file *of)
{
	return of->pos_known &&
	       of->pos_generation == __atomic_load_n(&open_file_generation, __ATOMIC_ACQUIRE);
}
static inline void open_file_pos_set(struct open_file *of, uint64_t pos)
{
	of->pos = pos;
	of->pos_known = true;
	of->pos_generation = __atomic_load_n(&open_file_generation, __ATOMIC_ACQUIRE);
}

/* In a fork child: locks held by threads that do not exist there are
 * released. */
void open_file_after_fork_child(void);

#endif
