/*
 * timeshare.h - MS Manners' time-multiplex isolation among regulated
 * threads (MS Manners §4.5, §7.1), the pure decision logic only.
 *
 * Only one regulated thread runs at a time, from one testpoint to its next,
 * so that low-importance threads do not slow each other and mistake that
 * for contention (§4.5: mutual suspension under exponential back-off is
 * unfair or unstable).  Among the threads whose suspension has ended, the
 * supervisor picks by decay-usage scheduling (§7.1, Hellerstein [7]) and
 * favours high-priority threads.  A thread that does not come back to a
 * testpoint within hung_ns is presumed hung: another is picked, and when
 * the hung one does come back, its measurement is to be discarded (§7.1).
 *
 * Where the paper is vague, and what is chosen here:
 *  - Decay usage.  Each thread's usage is the time it ran; all usages halve
 *    every half_life_ns (in whole steps, so no libm is needed: this code may
 *    be linked into the agent).  The pick is the eligible thread with the
 *    least usage / weight.
 *  - Priority.  weight = 2^priority, priority clamped to -8 .. 8: two
 *    backlogged threads of priority p and p + 1 share running time 1 : 2.
 *    The paper only says high priority is favoured (§7.1, §9.5).
 *  - Ties go to the lower slot, so the schedule is deterministic.
 *
 * The caller owns the threads' slots (fixed storage, no allocation) and
 * passes every time in ns; it does the blocking.  Ids are slot numbers.
 */
#ifndef DISCNICE_MANNERS_TIMESHARE_H
#define DISCNICE_MANNERS_TIMESHARE_H

#include <stddef.h>
#include <stdint.h>

#define MANNERS_PRIORITY_MIN (-8)
#define MANNERS_PRIORITY_MAX 8

enum manners_share_state {
	MANNERS_SHARE_FREE = 0,
	MANNERS_SHARE_WAITING, /* at a testpoint, may run from eligible_ns */
	MANNERS_SHARE_RUNNING, /* released; owes its next testpoint */
	MANNERS_SHARE_HUNG,    /* ran past hung_ns; others go on without it */
};

struct manners_share_thread {
	int state;
	int priority;
	double usage_ns;     /* decayed running time */
	int64_t eligible_ns; /* end of its suspension */
	int64_t since_ns;    /* when it was released */
};

struct manners_timeshare {
	struct manners_share_thread *threads;
	size_t capacity;
	int running;          /* id of the running thread, -1 when none */
	int64_t half_life_ns; /* usage halves this often */
	int64_t hung_ns;      /* a run longer than this is presumed hung */
	int64_t decayed_ns;   /* time of the last halving */
	int decay_started;
};

/* 0, or -EINVAL for NULL slots, capacity 0 or above INT32_MAX, times <= 0. */
int manners_timeshare_init(struct manners_timeshare *share, struct manners_share_thread *slots,
			   size_t capacity, int64_t half_life_ns, int64_t hung_ns);

/* A new thread, waiting and eligible at once: its id, or -ENOSPC. */
int manners_timeshare_add(struct manners_timeshare *share, int priority);

/* The thread is gone (it exited); if it was running, nobody is now. */
int manners_timeshare_remove(struct manners_timeshare *share, int id);

/* Priority clamped to MANNERS_PRIORITY_MIN .. MAX.  0 or -EINVAL. */
int manners_timeshare_set_priority(struct manners_timeshare *share, int id, int priority);

/*
 * Thread id reached a testpoint at now_ns and may run again from
 * eligible_ns (now_ns, or later after a suspension).  Charges its run.
 * Returns 1 when the thread had been presumed hung, so this testpoint's
 * progress measurement must be discarded (§7.1), 0 otherwise, -EINVAL for
 * a bad id or a thread that is already waiting.
 */
int manners_timeshare_arrive(struct manners_timeshare *share, int id, int64_t now_ns,
			     int64_t eligible_ns);

/*
 * Thread id, the one running, is alive at now_ns though it has come to no
 * testpoint: it is charged for its run so far, and its hung deadline
 * starts again from now_ns.  For a regulator that watches its "thread"
 * from outside (`discnice benice`, whose job's counter may move less often
 * than the hung threshold): it knows the job runs, which a library thread
 * can say only at a testpoint.  0; -ESRCH when id is not the one running
 * (waiting, or presumed hung: others run); -EINVAL for a bad id.
 */
int manners_timeshare_touch(struct manners_timeshare *share, int id, int64_t now_ns);

/*
 * Picks the thread to release at now_ns and marks it running: its id.
 * Otherwise *wake_ns says when to ask again, and the return is -EBUSY (a
 * thread is running: wake at its hung deadline) or -EAGAIN (nobody
 * eligible: wake at the earliest end of a suspension; INT64_MAX if nobody
 * waits at all).
 */
int manners_timeshare_pick(struct manners_timeshare *share, int64_t now_ns, int64_t *wake_ns);

#endif
