/*
 * agent.h - the inside of libdiscnice.so (DiscNice §5.1, "libDiscNice").
 *
 * Layers, each in its own file:
 *   interpose.c   the only file that defines libc names; every wrapper has
 *                 one shape: guard, hand over to io_*.c, errno preserved.
 *   agent.c       once-only start-up, fork handling, the class segment,
 *                 the re-entry guard, the trace.
 *   open_file.c   per-fd table of open file descriptions we account for.
 *   io*.c         the path of one call: predict (graybox/) -> ask the
 *                 policy (policy/) -> throttle -> the real call -> book;
 *                 io_read.c, io_write.c, io_copy.c, and io.c for what
 *                 they share (io_internal.h).
 *   pool.c        memory from mmap, for code a signal handler may run.
 *   io_stdio.c    the same for glibc stdio, whose internal reads and
 *                 writes never pass through the exported read/write.
 *   throttle.c    sleeping until the policy says go; chunking.
 *   writeback.c   paced writeback; cache_drop.c   --cache drop.
 * Every function here is internal (hidden visibility); the exported set
 * is libdiscnice.map.
 */
#ifndef DISCNICE_AGENT_H
#define DISCNICE_AGENT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include "discnice/segment.h"

/* The agent's process-wide state. */
struct agent {
	struct dn_segment *seg;     /* NULL: pass everything through       */
	struct dn_run *run;         /* this job's counters, or NULL        */
	uint64_t chunk_bytes;       /* largest piece of one throttled call */
	uint32_t predict_mask;
	int trace_fd;               /* -1 = no trace                       */
	bool have_cachestat;
	uint64_t writeback_expire_ns; /* dirty_expire + dirty_writeback    */
	bool predict_uncapped;      /* predict while no cap: --predict-uncapped,
	                             * --trace, --policy yield             */
	bool count_uncapped;        /* count, not predict, while no cap:
	                             * --policy manners (agent_counting)   */
	bool was_idle;              /* calls passed through since the last
	                             * capped one                          */
	bool cache_drop;            /* --cache drop: cache_drop.h          */
	bool dozing;                /* no cap seen yet: agent_dozing()     */
	char seg_path[DN_PATH_MAX]; /* the class's file, for the last exit  */
	ino_t seg_ino;              /* ... and its inode (a path is reused) */
};

extern struct agent agent;

/* The re-entry guard: true when this thread may run agent code now.  False
 * before start-up, when the agent is off, inside the agent itself (a libc
 * call the agent makes, or a signal handler's call that interrupted it,
 * must go straight to libc), and in a vfork or CLONE_VM child. */
bool agent_enter(void);
void agent_leave(void);

/*
 * No cost when no cap binds (issue #9 §3).  While the class has no cap
 * (--rate inf, or one lifted by `discnice set`) and nothing asked for
 * predictions, the data hooks pass straight to libc: no fstat at open, no
 * cachestat at the first read, no model.  Opens only clear the fd's slot;
 * a file is classified by its first hooked call once a cap is set
 * (open_file_acquire: position from lseek, as for an inherited fd).
 * agent_wake() runs when the first capped call follows idle ones: the
 * files known from before went unwatched meanwhile, so they are forgotten
 * and classified afresh; the supervisor's measured feedback (which starts
 * counting when the cap comes, tool_regulate.c) pays for any readahead the
 * kernel had under way.  Valid only after agent_enter().
 */
void agent_wake(void);
static inline bool agent_disk_capped(void)
{
	const struct dn_caps *c = &agent.seg->caps;
	return (__atomic_load_n(&c->read_bps, __ATOMIC_RELAXED) |
		__atomic_load_n(&c->write_bps, __ATOMIC_RELAXED) |
		__atomic_load_n(&c->total_bps, __ATOMIC_RELAXED)) != 0;
}

static inline bool agent_idle(void)
{
	if (agent.predict_uncapped)
		return false;
	if (agent_disk_capped()) {
		if (__builtin_expect(__atomic_load_n(&agent.was_idle, __ATOMIC_RELAXED), 0))
			agent_wake();
		return false;
	}
	if (!__atomic_load_n(&agent.was_idle, __ATOMIC_RELAXED))
		__atomic_store_n(&agent.was_idle, true, __ATOMIC_RELAXED);
	return !agent.count_uncapped;
}

/*
 * Counting only (--policy manners with no cap; DISCNICE_PREDICT_UNCAPPED=
 * count).  MS Manners' progress is the job's file bytes (tool_manners.c),
 * so the data hooks must see every call on a file - but no cap needs the
 * disk model: predict_read() and predict_write() answer 0 at once, and
 * stdio asks the kernel for no offset.  The model's cost (a cachestat per
 * refill, an lseek per stdio buffer) was what the job paid alone (§9.3).
 * A cap that comes later finds was_idle set and starts every model afresh
 * (agent_wake), as after idle calls.  Valid after agent_idle() said false.
 */
static inline bool agent_counting(void)
{
	return agent.count_uncapped && __atomic_load_n(&agent.was_idle, __ATOMIC_RELAXED);
}

/* --policy manners (segment.h dn_run.suspend_until_ns): a suspension the
 * supervisor ordered is waited out at the next hooked I/O call, before the
 * call (suspension.c).  One relaxed load per call otherwise. */
void agent_suspension_wait(void);
static inline void agent_suspension_point(void)
{
	if (agent.run && __builtin_expect(__atomic_load_n(&agent.run->suspend_until_ns,
							  __ATOMIC_RELAXED) != 0, 0))
		agent_suspension_wait();
}

/*
 * Slack (issue #9 item 3; segment.h DN_RUN_SLACK): while the supervisor
 * finds every cap far from binding, the files opened meanwhile are not
 * classified and calls on them pass to libc - what no cap costs - and the
 * supervisor's feedback charges the disk bytes they cause.  A file
 * classified before keeps its books.  Why writes may go unpaced then: the
 * slack budget is at least 256 MiB per window and the job dirties at most
 * a quarter of it unseen, so what the flusher later writes at once stays
 * under the cap.  Never under --cache drop (it must see the reads it
 * drops behind), nor while predictions are asked for (--trace,
 * --predict-uncapped, yield), nor under --policy manners (its progress is
 * the bytes of every file call: agent_counting).
 */
static inline bool agent_slack(void)
{
	return agent.run && !agent.predict_uncapped && !agent.count_uncapped && !agent.cache_drop &&
	       (__atomic_load_n(&agent.run->state, __ATOMIC_RELAXED) & DN_RUN_SLACK);
}

/* Whether the disk path takes a call on fd now: not while idle, nor while
 * slack lets an fd never classified pass (open_file_seen()).  Valid only
 * after agent_enter(). */
bool open_file_seen(int fd);
bool open_file_maybe_net(int fd);
static inline bool agent_disk_watches(int fd)
{
	if (agent_idle())
		return false;
	return !(__builtin_expect(agent_slack(), 0) && !open_file_seen(fd));
}

/*
 * The network has caps of its own (segment.h net_caps; the scavenger's
 * rate counts as a send cap, net_delay.c), and the disk's
 * idle and slack modes are about the disk: a socket call is taken while a
 * network cap is set whatever they say, and a disk file's call is left to
 * libc while they say so.  One relaxed load per cap.
 */
static inline bool agent_net_capped(void)
{
	const struct dn_caps *c = &agent.seg->net_caps;
	return (__atomic_load_n(&c->read_bps, __ATOMIC_RELAXED) |
		__atomic_load_n(&c->write_bps, __ATOMIC_RELAXED) |
		__atomic_load_n(&c->total_bps, __ATOMIC_RELAXED) |
		__atomic_load_n(&agent.seg->scavenger.target_ns, __ATOMIC_RELAXED)) != 0;
}

/*
 * Dozing (issue #9 §3: no cost when no cap binds).  From start-up until the
 * process first sees a cap - disk, network or scavenger - the data and file
 * hooks (read, write, open, close, dup, fcntl, lseek, stdio, sockets...)
 * are the plain call after this one check: a few relaxed loads of the
 * class's caps, no guard, no fd table, not even the slot clearing of idle
 * mode (agent_idle, above).  A disk cap in slack (far from binding,
 * agent_slack, above) counts as none: slack leaves every file opened meanwhile to the kernel anyway, and
 * a dozing process has classified none.  Not while the class asks the
 * agent for more than caps: predictions (--trace, --predict-uncapped, the
 * yield policy), counting (--policy manners) or --cache drop, which all
 * watch every call.
 *
 * It ends for good at the first hooked call that finds a cap that is not
 * slack (agent_enter calls agent_doze_end): the fd table is forgotten and
 * was_idle is set, so every file is classified afresh when it is next
 * used, as after idle calls (agent_wake).  Once only, which keeps the rest
 * simple: a process that has been capped has tables (paced writeback, the
 * cache-drop ledger, the delayed-write books of unlinked files) that a
 * dozing close or unlink would leave stale; after a cap is lifted it runs
 * idle, as before.  A vfork or CLONE_VM child may doze too: it only reads.
 */
static inline bool agent_doze_allowed(void)
{
	/* agent_slack() is the run's slack bit here: its other conditions
	 * are those under which agent.dozing was set. */
	return !agent_net_capped() && (!agent_disk_capped() || agent_slack());
}

static inline bool agent_dozing(void)
{
	return __atomic_load_n(&agent.dozing, __ATOMIC_RELAXED) && agent_doze_allowed();
}

void agent_doze_end(void);

/* agent_enter() for the hooks that keep the fd table and the delayed-write
 * books (open, close, dup, fcntl, lseek, truncate, unlink, rename, fsync,
 * fclose): none of it is needed while dozing. */
static inline bool agent_enter_file(void)
{
	return !agent_dozing() && agent_enter();
}

/* agent_enter() for the hooks that predict and throttle: false (guard
 * down) also while idle. */
static inline bool agent_enter_data(void)
{
	if (agent_dozing() || !agent_enter())
		return false;
	agent_suspension_point();
	if (agent_idle()) {
		agent_leave();
		return false;
	}
	return true;
}

/* agent_enter() for calls only disk files make (pread, pwrite, fadvise,
 * readahead, copy_file_range): the disk path must watch the fd. */
static inline bool agent_enter_disk_fd(int fd)
{
	if (agent_dozing() || !agent_enter())
		return false;
	agent_suspension_point();
	if (agent_disk_watches(fd))
		return true;
	agent_leave();
	return false;
}

static inline bool agent_enter_disk_fds(int a, int b)
{
	if (agent_dozing() || !agent_enter())
		return false;
	agent_suspension_point();
	if (agent_disk_watches(a) || agent_disk_watches(b))
		return true;
	agent_leave();
	return false;
}

/* agent_enter() for a call on fd that may be a disk file or a socket
 * (read, write, their v variants): true when the disk path watches fd or
 * fd may be a policed socket under a network cap. */
static inline bool agent_enter_fd(int fd)
{
	if (agent_dozing() || !agent_enter())
		return false;
	agent_suspension_point();
	if (agent_disk_watches(fd) || (agent_net_capped() && open_file_maybe_net(fd)))
		return true;
	agent_leave();
	return false;
}

/* The same for a copy between two fds. */
static inline bool agent_enter_fds(int a, int b)
{
	if (agent_dozing() || !agent_enter())
		return false;
	agent_suspension_point();
	if (agent_disk_watches(a) || agent_disk_watches(b) ||
	    (agent_net_capped() && (open_file_maybe_net(a) || open_file_maybe_net(b))))
		return true;
	agent_leave();
	return false;
}

/* agent_enter() for calls that only sockets make (send*, recv*) and for
 * the waits of event loops (poll, select, epoll_wait): true while a
 * network cap is set. */
static inline bool agent_enter_net(void)
{
	if (agent_dozing() || !agent_enter())
		return false;
	agent_suspension_point();
	if (agent_net_capped())
		return true;
	agent_leave();
	return false;
}

enum { AGENT_GUARD_FREE = 0, AGENT_GUARD_IN_AGENT = 1, AGENT_GUARD_VFORKED = 2 };
extern __thread int agent_guard __attribute__((tls_model("initial-exec")));

/* The agent's sleeps (throttle, network window, --policy manners
 * suspension): clock_nanosleep(CLOCK_MONOTONIC, flags, ts), with the
 * thread marked asleep meanwhile, holding no lock (spin.h).  A signal
 * handler that runs then and leaves by siglongjmp() never returns to the
 * agent: agent_left_by_jump(), from the longjmp hooks (interpose.c),
 * ends the call for it - the guard set, the call's socket duplicate
 * open, the thread would stay unregulated and a connection open.  A
 * handler that interrupted the agent elsewhere (a lock may be held) is
 * left as before: that thread runs unregulated from there. */
int agent_sleep(int flags, const struct timespec *ts);
void agent_left_by_jump(void);
/* The child of a fork from a signal handler: locks may be broken (spin.h). */
extern bool agent_locks_abandoned;

/* fork: pthread_atfork handlers, also run around clone() without CLONE_VM. */
void agent_before_fork(void);
void agent_after_fork_parent(void);
void agent_after_fork_child(void);
/* From the _exit and _Exit hooks (interpose.c): a run --exec job's
 * process leaving without exit() ends its run (agent.c). */
void agent_exit_now(void);
/* clone(2) for interpose.c: keeps a CLONE_VM child out of our tables and
 * runs the fork handlers around a fork-like one. */
int agent_clone(int (*real)(int (*)(void *), void *, int, void *, ...), int (*fn)(void *),
		void *stack, int flags, void *arg, pid_t *ptid, void *tls, pid_t *ctid);

/* Set up once (constructor, or lazily from the first hooked call). */
void agent_init(void);

/* A class counter and this run's counter together. */
void agent_count(size_t field_offset, uint64_t value);
#define AGENT_COUNT(field, value) \
	agent_count(offsetof(struct dn_counters, field), (value))

/* One trace record, if --trace is on. */
void agent_trace(const char *op, uint64_t file_bytes, uint64_t predicted_bytes,
		 uint64_t delay_ns);

/* The throttle: charge predicted disk bytes to the class window, sleeping
 * first as long as the policy says, and count them as predicted
 * (throttle.c).  Returns ns slept. */
uint64_t throttle_charge(uint64_t read_bytes, uint64_t write_bytes);
/* The same for I/O made already (a copy paid after it worked, what the
 * kernel says a call read beyond its charge): counted first, since the
 * kernel has counted it, then slept for. */
uint64_t throttle_charge_done(uint64_t read_bytes, uint64_t write_bytes);
/* Sleep ns (for a prefetch piece another thread has in hand), as a charge
 * sleeps; false when the call is cut meanwhile.  Adds the ns to *slept. */
bool throttle_pause(uint64_t ns, uint64_t *slept);
/* Refund cancelled delayed writes (a negative charge, never a sleep). */
void throttle_refund(uint64_t write_bytes);
/* Take back a read charged moments ago that the kernel says it did not
 * submit: the window and the predicted count both (never a sleep). */
void throttle_unpredict_read(uint64_t read_bytes);
/* read says how much the call has moved before it pays for a piece (0:
 * its first), which makes that payment cuttable; right after it,
 * throttle_take_cut() says whether it was cut because the user interrupted
 * the job, and ends the cuttable stretch (throttle.c).  Charges outside it
 * are never cut. */
enum { THROTTLE_NOT_CUT, THROTTLE_CUT_SHORT, THROTTLE_CUT_EINTR };
void throttle_call_moved(uint64_t moved);
int throttle_take_cut(void);
bool throttle_cut_pending(void);
/* A handler left our sleep by longjmp: no call is in progress any more. */
void throttle_call_abandoned(void);
/* Largest piece one call may be cut into (chunking, throttle.c). */
uint64_t throttle_piece_bytes(void);
/* The cap a read is charged against, bytes/s (the smaller of the read and
 * total caps); 0: reads are not capped. */
uint64_t throttle_read_cap(void);

/* The network's window (throttle.c; segment.h net_caps, net_window). */
bool throttle_net_capped(void);
/* The largest piece of one stream call in this direction; UINT64_MAX when
 * no cap binds it. */
uint64_t throttle_net_piece(bool receiving);
/* How a network charge may wait: may_wait(how, &deadline) is asked once,
 * only when the window says wait.  false (a non-blocking call): with
 * refused set and nothing charged yet, nothing is charged and *refused is
 * set (the caller returns EAGAIN, io_net.c); else the rest is charged at
 * once (debt, waited off at the next poll/select/epoll wait of any thread).
 * With stop_at_signal a signal handler that runs during the sleep ends it,
 * nothing more is charged and *interrupted is set (for a receive, with
 * timed_out NULL, the rest is charged at once, a debt, and *interrupted
 * set if given).
 * A blocking socket's own timeout (SO_SNDTIMEO, SO_RCVTIMEO): may_wait
 * sets deadline (CLOCK_MONOTONIC ns, counted from since_ns, when the
 * program's call began; 0 = none), and no sleep goes past it.  There, with
 * timed_out set, what this charge charged is given back and *timed_out is
 * set (a send stops, as the kernel's does at its timeout); with it NULL
 * the rest is charged at once (a receive: its bytes are already taken).
 * Under a deadline a signal handler ends the sleep as with
 * stop_at_signal: the kernel restarts no socket call that has a timeout
 * (signal(7); sock_intr_errno). */
struct throttle_net_wait {
	bool (*may_wait)(const struct throttle_net_wait *how, uint64_t *deadline_ns);
	int fd, flags;
	bool stop_at_signal;
	bool *interrupted;
	bool *refused;
	uint64_t since_ns;
	bool *timed_out;
};
/* Charge received and sent bytes, waiting first as the policy says (how
 * may be NULL: always wait).  Returns ns slept. */
uint64_t throttle_net_charge(uint64_t recv_bytes, uint64_t send_bytes,
			     const struct throttle_net_wait *how);
/* Give back bytes charged but not moved (a send that failed or came up
 * short). */
void throttle_net_refund(uint64_t recv_bytes, uint64_t send_bytes);
/* ns until these bytes would conform (no charge). */
uint64_t throttle_net_delay(uint64_t recv_bytes, uint64_t send_bytes);

/*
 * No sleep for room in a window is longer than this: the delay is
 * computed again after it.  The caps can change under a sleeper -
 * `discnice set`, the yield policy lifting its hold - and a sleep computed
 * at the old cap is not the new one's: a job asleep at 100k/s when set
 * back to 10M slept on for 9.6 s, one at 1 B/s for 291 hours.  A look
 * costs the lock and a policy pass, tens of nanoseconds, ten times a
 * second.
 */
#define THROTTLE_LOOK_NS (100 * 1000 * 1000ull)

/* The scavenger (net_delay.c; segment.h dn_scavenger): after a stream
 * send that moved `sent` bytes on fd, count them and, at most once per
 * SCAVENGER_INTERVAL_NS class-wide, sample fd's queueing delay
 * (TCP_INFO) into the class's controller.  Nothing when the scavenger is
 * off or fd is not TCP; errno preserved. */
void net_delay_after_send(int fd, uint64_t sent);

#endif
