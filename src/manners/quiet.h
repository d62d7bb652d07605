/*
 * quiet.h - the end of contention, seen sooner than the next testpoint
 * (issue #10 §4, beyond the paper: §9.4's suspension overshoot).
 *
 * Exponential suspension (§4.1) adapts the background to the time scale of
 * the foreground's activity, and pays for it after the activity ends: the
 * background sleeps out whatever suspension it was in, up to the limit
 * (220 s in §9.4's trace).  The paper had no cheaper signal.  Linux has
 * one: the machine's own counters of CPU time (/proc/stat) and of each
 * disk's work (/proc/diskstats).  While the background is suspended it
 * uses neither, so what they show is everybody else.  When both stay near
 * zero for quiet_ns the foreground has stopped, and the suspension may end
 * now.
 *
 * A disk is quiet only when all three of its counters say so: its busy
 * time (io_ticks), the requests it completed and the bytes it moved.  Busy
 * time alone is not enough.  It counts only while a request is in the
 * device's queue, so a device that serves each request at once but whose
 * bandwidth is limited elsewhere (a blkio or io.max throttle, a virtual
 * disk capped by its host, storage behind a network) looks idle when it is
 * saturated: the emulated 50 MB/s disk of bench/manners.py's disk scenario
 * showed 1-3 % busy while a foreground read 48 MiB/s from it, and the look
 * back forgave 10 of jdupes' 12 poor judgments beside it.  Stacked devices
 * (a loop device on a disk, dm, md) count their traffic twice: only ever
 * towards "busy".
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

#include "common/machine_activity.h"

/* One look at the machine: cumulative counters. */
struct manners_activity {
	int64_t now_ns;
	uint64_t cpu_busy_ns;  /* all CPUs: time not idle and not waiting for I/O */
	uint64_t disk_busy_ns; /* io_ticks of every disk, summed                  */
	/* The regulated job's own CPU time (cumulative), left out of
	 * cpu_busy_ns; 0 where the caller cannot tell, which is right only
	 * for samples taken while the job is suspended. */
	uint64_t own_cpu_ns;
	uint64_t disk_ios;     /* requests completed, every disk (cumulative) */
	uint64_t disk_bytes;   /* bytes moved, every disk (cumulative)        */
};

#define MANNERS_QUIET_NS_DEFAULT       (INT64_C(1000) * 1000000) /* 1 s */
#define MANNERS_QUIET_CPU_DEFAULT      0.10 /* CPUs' worth of busy time      */
#define MANNERS_QUIET_DISK_DEFAULT     0.05 /* fraction of the time busy     */
/* and at most this many requests and bytes a second.  What stays under
 * them: an idle Debian VM (0-6 requests and 0-36 KiB a second, its
 * journal), and a job's own bookkeeping - a progress file replaced 20
 * times a second costs 20 requests and 80 KiB a second on ext4, whose
 * rename starts the new file's writeback (auto_da_alloc) - which must not
 * make the job look contended with itself.  What does not: a foreground
 * reading sequentially (48 MiB/s on bench/manners.py's emulated disk) or
 * at random at an HDD's 150 requests a second. */
#define MANNERS_QUIET_DISK_IOPS_DEFAULT 50.0
#define MANNERS_QUIET_DISK_BPS_DEFAULT  (1024.0 * 1024.0)
/* How often a regulator looks at the machine during a suspension. */
#define MANNERS_QUIET_STEP_NS          (INT64_C(100) * 1000000) /* 0.1 s */

struct manners_quiet {
	int64_t quiet_ns;   /* how long the machine must stay quiet         */
	double cpu_max;     /* at most this many CPUs busy on average         */
	double disk_max;    /* and the disks' busy time at most this fraction */
	double disk_iops_max; /* and at most this many requests a second    */
	double disk_bps_max;  /* and at most this many bytes a second       */
	struct manners_activity last;
	int have_last;
	int64_t quiet_since_ns; /* start of the quiet stretch, or -1 */
};

/* The look of `machine` (machine_activity_read()) at now_ns, with the
 * job's own CPU time (0 where unknown: see own_cpu_ns). */
struct manners_activity manners_activity_of(const struct machine_activity *machine, int64_t now_ns,
					    uint64_t own_cpu_ns);

/* 0, or -EINVAL for quiet_ns <= 0 or a negative threshold.  The request
 * and byte limits take the defaults above; a caller may change them. */
int manners_quiet_init(struct manners_quiet *q, int64_t quiet_ns, double cpu_max, double disk_max);

/* A suspension begins: what came before it says nothing. */
void manners_quiet_reset(struct manners_quiet *q);

/*
 * One sample, taken during a suspension.  Returns 1 when the machine has
 * been quiet for quiet_ns up to this sample (the suspension may end), 0
 * otherwise, -EINVAL for a sample that goes back in time.
 */
int manners_quiet_feed(struct manners_quiet *q, const struct manners_activity *now);

/*
 * The look back (not in the paper either).  The sign test judges a job
 * alone "poor" in a fraction alpha of its judgments (§6.1), and each such
 * judgment costs a suspension; the paper's eq. 3 puts the cost at about 1 %
 * only because it counts a suspension of 2^k testpoint intervals, and a
 * first suspension of one interval (0.1 - 0.25 s here) gives the foreground
 * little.  So when a judgment comes, look back: was the machine quiet -
 * everybody's CPU time less the job's own, and the disks' busy time - from
 * sample a to sample b?  Then the slow stretch was noise, not contention
 * (nobody was there to contend with), and the suspension may end at once.
 * Only a span of quiet_ns .. 2 quiet_ns counts: a longer one would average
 * a foreground's burst away.  A job that uses the disk itself never looks
 * quiet here (its own busy time cannot be told apart), and keeps the
 * paper's rule.  1 quiet, 0 not (or no such span), -EINVAL for NULLs.
 */
int manners_quiet_between(const struct manners_quiet *q, const struct manners_activity *a,
			  const struct manners_activity *b);

/*
 * The samples a look back needs: taken at testpoints, kept at least
 * quiet_ns / MANNERS_QUIET_SPACING apart so that the ring reaches back
 * MANNERS_QUIET_SEEN / MANNERS_QUIET_SPACING = 4 quiet_ns at any testpoint
 * rate.  Zero it to start.
 */
#define MANNERS_QUIET_SEEN 64
#define MANNERS_QUIET_SPACING 16

struct manners_quiet_history {
	struct manners_activity seen[MANNERS_QUIET_SEEN];
	unsigned next, count; /* the newest is before next */
};

/* Does a sample taken now belong in the history (is it far enough from
 * the newest)?  1 or 0; lets a caller skip reading the counters. */
int manners_quiet_history_wants(const struct manners_quiet_history *h,
				const struct manners_quiet *q, int64_t now_ns);

/* Keeps the sample if manners_quiet_history_wants() it. */
void manners_quiet_history_add(struct manners_quiet_history *h, const struct manners_quiet *q,
			       const struct manners_activity *sample);

/* The look back from the newest sample: manners_quiet_between() from the
 * newest sample at least quiet_ns older.  1 quiet, 0 not or unknown. */
int manners_quiet_history_quiet(const struct manners_quiet_history *h,
				const struct manners_quiet *q);

#endif
