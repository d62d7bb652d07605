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
	bool was_idle;              /* calls passed through since the last
	                             * capped one                          */
	bool cache_drop;            /* --cache drop: cache_drop.h          */
	char seg_path[DN_PATH_MAX]; /* the class's file, for the last exit  */
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
static inline bool agent_idle(void)
{
	if (agent.predict_uncapped)
		return false;
	const struct dn_caps *c = &agent.seg->caps;
	if (__atomic_load_n(&c->read_bps, __ATOMIC_RELAXED) |
	    __atomic_load_n(&c->write_bps, __ATOMIC_RELAXED) |
	    __atomic_load_n(&c->total_bps, __ATOMIC_RELAXED)) {
		if (__builtin_expect(__atomic_load_n(&agent.was_idle, __ATOMIC_RELAXED), 0))
			agent_wake();
		return false;
	}
	if (!__atomic_load_n(&agent.was_idle, __ATOMIC_RELAXED))
		__atomic_store_n(&agent.was_idle, true, __ATOMIC_RELAXED);
	return true;
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

/* agent_enter() for the hooks that predict and throttle: false (guard
 * down) also while idle. */
static inline bool agent_enter_data(void)
{
	if (!agent_enter())
		return false;
	agent_suspension_point();
	if (agent_idle()) {
		agent_leave();
		return false;
	}
	return true;
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
 * drops behind) nor while predictions are asked for (--trace,
 * --predict-uncapped, yield).
 */
static inline bool agent_slack(void)
{
	return agent.run && !agent.predict_uncapped && !agent.cache_drop &&
	       (__atomic_load_n(&agent.run->state, __ATOMIC_RELAXED) & DN_RUN_SLACK);
}

/* agent_enter_data() for a call on fd: false also while slack lets an fd
 * never classified pass (open_file_seen()). */
bool open_file_seen(int fd);
static inline bool agent_enter_fd(int fd)
{
	if (!agent_enter_data())
		return false;
	if (__builtin_expect(agent_slack(), 0) && !open_file_seen(fd)) {
		agent_leave();
		return false;
	}
	return true;
}

/* The same for a copy between two fds: it passes when neither is known. */
static inline bool agent_enter_fds(int a, int b)
{
	if (!agent_enter_data())
		return false;
	if (__builtin_expect(agent_slack(), 0) && !open_file_seen(a) && !open_file_seen(b)) {
		agent_leave();
		return false;
	}
	return true;
}

enum { AGENT_GUARD_FREE = 0, AGENT_GUARD_IN_AGENT = 1, AGENT_GUARD_VFORKED = 2 };
extern __thread int agent_guard __attribute__((tls_model("initial-exec")));
/* The child of a fork from a signal handler: locks may be broken (spin.h). */
extern bool agent_locks_abandoned;

/* fork: pthread_atfork handlers, also run around clone() without CLONE_VM. */
void agent_before_fork(void);
void agent_after_fork_parent(void);
void agent_after_fork_child(void);
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
/* Refund cancelled delayed writes (a negative charge, never a sleep). */
void throttle_refund(uint64_t write_bytes);
/* Largest piece one call may be cut into (chunking, throttle.c). */
uint64_t throttle_piece_bytes(void);

#endif
