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
	/* The job's own disk bytes (read_bytes + write_bytes of its tree,
	 * cumulative); 0 where the caller cannot tell. */
	uint64_t own_disk_bytes;
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

/* The samples of a suspension that manners_quiet_feed() keeps: at least
 * quiet_ns / MANNERS_QUIET_WINDOW_SPACING apart, so that the ring always
 * holds one quiet_ns old or more (32 of them reach back 31/16 quiet_ns). */
#define MANNERS_QUIET_WINDOW 32
#define MANNERS_QUIET_WINDOW_SPACING 16

struct manners_quiet {
	int64_t quiet_ns;   /* how long the machine must stay quiet         */
	double cpu_max;     /* at most this many CPUs busy on average         */
	double disk_max;    /* and the disks' busy time at most this fraction */
	double disk_iops_max; /* and at most this many requests a second    */
	double disk_bps_max;  /* and at most this many bytes a second       */
	struct manners_activity kept[MANNERS_QUIET_WINDOW]; /* this suspension's */
	unsigned next, count; /* the newest is before next */
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
 *
 * Quiet is judged as the look back below judges it: on the counters'
 * growth over the whole last quiet_ns (from the newest kept sample at
 * least that old), against the limits times its length.  Not step by
 * step: /proc/stat counts CPU time in ticks of 10 ms, so one tick of a
 * daemon (or of the regulator itself) in a step of 20 ms reads as half a
 * CPU, and on a Debian VM no second went by without one - measured, a
 * disk job alone suspended 28 s on a machine doing nothing, never ended
 * early.  A foreground busy within the last quiet_ns still shows: 0.1 s
 * of a CPU in it is 0.1 CPU on average, the limit.
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

struct manners_busy;

/* The look back from the newest sample: manners_quiet_between() from the
 * newest sample at least quiet_ns older.  1 quiet, 0 not or unknown.
 * Never quiet while `busy` (the quick polls' state below; NULL where they
 * are off) says others use a CPU now: the span ends at the newest sample,
 * up to quiet_ns / MANNERS_QUIET_SPACING old, and a rival that came in its
 * last quarter averages under cpu_max over a second - measured, the fifth
 * poor judgment after a rival came was forgiven so. */
int manners_quiet_history_quiet(const struct manners_quiet_history *h,
				const struct manners_quiet *q, const struct manners_busy *busy);

/*
 * Quick polls (not in the paper either): the start of CPU contention, seen
 * sooner.  The sign test needs m = 5 testpoints below target to judge
 * progress poor (eq. 1), and each costs the foreground a testpoint interval
 * of contention; at §4.1's "few hundred milliseconds" that is over a second
 * per first judgment, and half a second per probe after each suspension -
 * most of what a background still costs a foreground of a few seconds.
 * Shorter testpoints decide sooner but measure less: a disk job's progress
 * comes in bursts of requests, and 50 ms samples of it are mostly noise (a
 * 10 s foreground beside jdupes: +22.9 % at 250 ms polls, +28.7 % at
 * 50 ms).  A CPU-bound job's is smooth: the scheduler shares a CPU in
 * slices of a few ms, so 50 ms shows the shared rate steadily (an 8 s
 * foreground beside a pinned checksummer: +16.6 % at 250 ms, +4.6 % at
 * 50 ms; bench/results/2026-11-24-vm-manners-poll-cpu.md).
 *
 * So a regulator polls quickly only while somebody else uses a CPU:
 * everybody's CPU time less the job's own, over the last span_ns, at least
 * `cpus` CPUs' worth.  This decides only how often the job's own progress
 * is sampled.  It causes no suspension and shortens none: the sign test on
 * the job's progress still judges.  Alone, the job is polled as before.
 */
#define MANNERS_BUSY_SPAN_NS_DEFAULT (INT64_C(200) * 1000000) /* 20 ticks at 100 Hz */
#define MANNERS_BUSY_CPUS_DEFAULT    0.25 /* a CPU-bound rival takes 0.5 of a shared CPU */

struct manners_busy {
	int64_t span_ns; /* the look back, > 0 */
	double cpus;     /* others' CPUs at or above which the machine is busy */
	struct manners_activity ref; /* the start of the span under way */
	int have_ref;
	int busy;        /* what the last full span showed */
};

/* Everybody's CPU time less the job's own from a to b, in CPUs (busy ns
 * per ns); 0 for an empty span or counters that went backwards. */
double manners_others_cpus(const struct manners_activity *a, const struct manners_activity *b);

/* 0, or -EINVAL for span_ns <= 0 or cpus not > 0.  Not busy to start. */
int manners_busy_init(struct manners_busy *b, int64_t span_ns, double cpus);

/* One sample (at a poll or during a suspension).  Once span_ns has passed
 * since the span began, judges it and begins the next.  Returns 1 busy,
 * 0 not; a sample back in time restarts the span (0). */
int manners_busy_feed(struct manners_busy *b, const struct manners_activity *now);


/* The span judged from now on starts at `now`, and counts as busy until it
 * has been judged: for a sign of contention seen between the spans (the
 * rise below).  NULLs are ignored. */
void manners_busy_hint(struct manners_busy *b, const struct manners_activity *now);

/*
 * The rise of CPU pressure (not in the paper either): the quick polls
 * sooner still.  manners_busy_feed() judges the spans at the polls, so at
 * 250 ms polls a rival that starts between two is seen 0.25 - 0.5 s late,
 * and the foreground shares its CPU all that while.  Linux's pressure stall
 * information (/proc/pressure/cpu, "some": the share of the time in which a
 * runnable task waited for a CPU; kernel/sched/psi.c brings it up to date
 * at each read) shows it within one step: a job alone on its CPU waits for
 * none (share 0.00 on this VM), a job and a CPU-bound rival on one CPU
 * always have one of them waiting (1.00), a rival on another CPU leaves it
 * at 0.00 - 0.11.  So between its polls a regulator reads that one small
 * file every step_ns, and when the share over the step rises to `share` it
 * takes the machine for busy at once (manners_busy_hint()) and polls; the
 * next span judges as always.
 *
 * A rise, not a level: a job whose own threads outnumber its CPUs keeps the
 * share up by itself, and would be polled quickly for ever; it is polled as
 * manners_busy_feed() says, as without this.  Like the spans, a rise only
 * decides how often the job's progress is sampled.
 */
#define MANNERS_STALL_STEP_NS_DEFAULT (INT64_C(50) * 1000000)
#define MANNERS_STALL_SHARE_DEFAULT   0.25

struct manners_stall {
	int64_t step_ns;   /* > 0; a shorter look than step_ns / 2 is not judged */
	double share;      /* the stall share at and above which a step stalled */
	int64_t last_ns;   /* the start of the step under way */
	uint64_t last_stall_ns; /* the "some" total then (ns) */
	int have_last;
	int stalled;       /* what the last judged step showed */
	int64_t next_ns;   /* the next look is due then (manners_stall_due()) */
};

/* 0, or -EINVAL for step_ns <= 0 or a share not in (0, 1]. */
int manners_stall_init(struct manners_stall *s, int64_t step_ns, double share);

/* One look: the "some" total (ns, cumulative) at now_ns.  1 when the step
 * that ends here stalled and the one before did not (a rise), 0 otherwise;
 * a look back in time or a total gone down starts afresh (0). */
int manners_stall_feed(struct manners_stall *s, int64_t now_ns, uint64_t stall_ns);

/* Is a look due at now_ns?  1, and the next is due step_ns later; 0 not
 * yet.  One look a step, however often the regulator wakes. */
int manners_stall_due(struct manners_stall *s, int64_t now_ns);

/* The regulator stops looking for a while (the quick polls are on, the job
 * is suspended): the first look after starts a new baseline, since a step
 * spanning the gap would average old load into a rise. */
void manners_stall_pause(struct manners_stall *s);

/*
 * The rise of others' disk traffic (not in the paper either): the CPU
 * rise's counterpart for a rival on the disk, where pressure says nothing
 * (a disk-bound job alone already waits for the disk all the time).  The
 * sign test's sample is what it must cure: a disk job's progress over
 * 250 ms comes in bursts (jdupes on bench/manners.py's emulated disk
 * alternates 66 and 120 MiB/s between testpoints), its target is its
 * average, so alone half its comparisons are below and the sample grows
 * undecided (§6.1 judges neither 10 of 20).  When a rival comes the test
 * must first outvote that history: from 10 of 20, 10 more below in a row,
 * 2.5 s of contention before the first suspension (measured: 2.7 s, beside
 * a foreground of 2 s).  A sample begun at the rise judges after 5.
 *
 * Everybody's disk bytes (/proc/diskstats) less the job's own (its tree's
 * /proc/PID/io, counted as it submits them: block/blk-core.c submit_bio())
 * are the others'.  A stacked device (a loop device on a disk, dm) counts
 * the job's bytes once per layer, so the job's share is weighed by
 * `factor`: the median ratio machine / own over the last steps in which
 * the job moved at least MANNERS_DISK_RISE_MIN_BYTES - the first
 * MANNERS_DISK_RISE_RATIOS whatever they showed, then only those that were
 * not busy (alone, the depth of the stack: 2.0 on the bench's loop device,
 * 1.4 - 2.9 from step to step, as the disk completes what the job
 * submitted a little later).  A step is busy when, over it and the step
 * judged before it (the disk completes a step's bytes in the next: one
 * step alone would see a rival in each step the job submitted little in),
 * the others moved at least bps a second and at least `share` of the
 * job's weighed bytes;
 * steps in which nothing moved are no news (a throttled disk completes in
 * slices).  A rise is a busy step after MANNERS_DISK_RISE_CALM that were
 * not: a rival on a throttled disk shows in every other step or so, and
 * one rise per arrival is what is wanted.  Saturation hides nothing: two
 * readers of a full disk each get half, so the job's bytes fall as the
 * others' rise.
 *
 * Like the CPU rise it only begins a new sample.  It neither causes a
 * suspension nor polls quicker: a disk job's progress over 50 ms is mostly
 * noise (quick polls above).  What it cannot tell apart: the job's own
 * writeback, counted by the job at dirtying and by the disk up to 30 s
 * later (a spurious new sample, no more), and a rival whose bytes never
 * reach a block device (NFS, FUSE: a remote server, §3's external case).
 */
#define MANNERS_DISK_RISE_STEP_NS_DEFAULT (INT64_C(100) * 1000000)
#define MANNERS_DISK_RISE_BPS_DEFAULT     (2.0 * 1024 * 1024)
#define MANNERS_DISK_RISE_SHARE_DEFAULT   0.5
#define MANNERS_DISK_RISE_MIN_BYTES       (64 * 1024)
#define MANNERS_DISK_RISE_RATIOS          16 /* the median's window: 1.6 s of steps */
#define MANNERS_DISK_RISE_CALM            5  /* steps not busy before a rise    */

struct manners_disk_rise {
	int64_t step_ns;  /* > 0; a shorter look than step_ns / 2 is not judged */
	double bps;       /* others' bytes a second at and above which a step is busy */
	double share;     /* ... and at least this share of the job's weighed bytes */
	double ratio[MANNERS_DISK_RISE_RATIOS]; /* machine / own of quiet steps */
	unsigned ratios, next_ratio;
	int64_t last_ns;
	uint64_t last_disk, last_own;
	int have_last;
	double prev_disk, prev_own; /* the step judged before (bytes), */
	int64_t prev_span;          /* and its length: 0 after a new baseline, */
	int64_t prev_ns;            /* and its end */
	int busy;         /* what the last judged step showed */
	unsigned calm;    /* judged steps not busy since the last busy one */
	int64_t next_ns;  /* the next look is due then (manners_disk_rise_due()) */
};

/* 0, or -EINVAL for step_ns <= 0, bps < 0 or share < 0. */
int manners_disk_rise_init(struct manners_disk_rise *r, int64_t step_ns, double bps, double share);

/* The stacking factor the next step is weighed by: the median of the
 * ratios kept, 1 before any. */
double manners_disk_rise_factor(const struct manners_disk_rise *r);

/* One look (own_disk_bytes, disk_bytes and now_ns are used).  1 when the
 * step that ends here was busy after MANNERS_DISK_RISE_CALM that were not
 * (a rise), 0 otherwise; a look back in time or counters gone down start
 * afresh (0). */
int manners_disk_rise_feed(struct manners_disk_rise *r, const struct manners_activity *now);

/* Is a look due at now_ns?  As manners_stall_due(). */
int manners_disk_rise_due(struct manners_disk_rise *r, int64_t now_ns);

/* As manners_stall_pause(): the job is suspended, or the regulator stops
 * looking; the next look starts a new baseline.  The ratios are kept, and
 * so are the calm steps before: a rival that came during the suspension
 * rises at the first step after it. */
void manners_disk_rise_pause(struct manners_disk_rise *r);

#endif
