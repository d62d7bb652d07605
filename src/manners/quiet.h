/*
 * quiet.h - the end of contention, seen sooner than the next testpoint
 * (issue #10 §4, beyond the paper: §9.4's suspension overshoot).
 *
 * Exponential suspension (§4.1) adapts the background to the time scale of
 * the foreground's activity, and pays for it after the activity ends: the
 * background sleeps out whatever suspension it was in, up to the limit
 * (220 s in §9.4's trace).  The paper had no cheaper signal.  Linux has
 * one: the machine's own counters of CPU time (/proc/stat) and of each
 * disk's busy time (io_ticks, /proc/diskstats).  While the background is
 * suspended it uses neither, so what they show is everybody else.  When
 * both stay near zero for quiet_ns the foreground has stopped, and the
 * suspension may end now.
 *
 * This may only shorten a suspension, never cause one (the rule):
 * a busy machine leaves the suspension as the controller ordered it, and
 * the next testpoint judges as always.  What it cannot see: contention on
 * a resource whose use shows in neither counter (a remote server, a lock);
 * those suspensions run their course, as in the paper.
 *
 * Pure: the caller samples the counters and passes them in.
 */
#ifndef DISCNICE_MANNERS_QUIET_H
#define DISCNICE_MANNERS_QUIET_H

#include <stdint.h>

/* One look at the machine: cumulative counters. */
struct manners_activity {
	int64_t now_ns;
	uint64_t cpu_busy_ns;  /* all CPUs: time not idle and not waiting for I/O */
	uint64_t disk_busy_ns; /* io_ticks of every disk, summed                  */
};

#define MANNERS_QUIET_NS_DEFAULT       (INT64_C(1000) * 1000000) /* 1 s */
#define MANNERS_QUIET_CPU_DEFAULT      0.10 /* CPUs' worth of busy time      */
#define MANNERS_QUIET_DISK_DEFAULT     0.05 /* fraction of the time busy     */

struct manners_quiet {
	int64_t quiet_ns;   /* how long the machine must stay quiet         */
	double cpu_max;     /* at most this many CPUs busy on average         */
	double disk_max;    /* and the disks' busy time at most this fraction */
	struct manners_activity last;
	int have_last;
	int64_t quiet_since_ns; /* start of the quiet stretch, or -1 */
};

/* 0, or -EINVAL for quiet_ns <= 0 or a negative threshold. */
int manners_quiet_init(struct manners_quiet *q, int64_t quiet_ns, double cpu_max, double disk_max);

/* A suspension begins: what came before it says nothing. */
void manners_quiet_reset(struct manners_quiet *q);

/*
 * One sample, taken during a suspension.  Returns 1 when the machine has
 * been quiet for quiet_ns up to this sample (the suspension may end), 0
 * otherwise, -EINVAL for a sample that goes back in time.
 */
int manners_quiet_feed(struct manners_quiet *q, const struct manners_activity *now);

#endif
