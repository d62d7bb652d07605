/*
 * controller.h - one regulated thread's MS Manners control loop (MS Manners
 * §4, Fig. 2): rate calculator -> target calibrator and rate comparator ->
 * suspension time calculator -> execution regulator.
 *
 * The pieces are their own modules (calibrate.h, regress.h, sign_test.h,
 * suspend.h); this file only wires them in the order of Fig. 2, so that the
 * three front ends - the testpoint library (§7.1), `discnice benice` (§7.2)
 * and the agent's `--policy manners` - make the same judgments from the same
 * numbers.  Plain C: no I/O, no clock, no globals; the caller passes every
 * time and does the waiting.
 *
 * One controller per regulated thread (§4.5: "one progress-rate comparator
 * per thread").  Its phases (§4.4) live in a table whose slots the caller
 * provides.  At each testpoint the caller says which phase (index), how much
 * progress of each of its metrics was made, and for how long the thread ran
 * since its previous testpoint - running time only, its suspensions left out
 * (§4.1: the rate of progress while running).  The controller answers how
 * long to wait before the thread may go on.
 *
 * Order within one testpoint, and why:
 *  1. the comparison is made against the target as it stood before this
 *     measurement (the comparator judges the new rate, it must not be
 *     pulled toward it first);
 *  2. the calibrator then averages the measurement in (or subsamples it
 *     away, §4.3), after the quick raise below has looked at it;
 *  3. once the phase's bootstrap is over, the comparison feeds the sign test
 *     (§4.2, §6.1); its judgment drives the suspension (§4.1);
 *  4. probation (§4.3) may lengthen the wait, never shorten it;
 *  5. every phase's calibrator is told of the wait, so the intervals a
 *     strictly regulated thread would not have run are subsampled (§4.3).
 */
#ifndef DISCNICE_MANNERS_CONTROLLER_H
#define DISCNICE_MANNERS_CONTROLLER_H

#include <stddef.h>
#include <stdint.h>

#include "manners/calibrate.h"
#include "manners/regress.h"
#include "manners/sign_test.h"
#include "manners/suspend.h"

/* Suspension: the paper gives neither number; 10 min bounds the
 * worst-case resumption (§4.1, §9.4's overshoot).  The first is 4 s, not
 * a few testpoints: every resumption under lasting contention costs the
 * foreground a probe (below), and doubling from 1 s makes three of them in
 * a 10 s foreground.  A longer first suspension costs little where it
 * used to cost most, since all three forms end a suspension once the
 * machine has been quiet for a second (quiet.h): a job alone judged poor
 * by noise, or a foreground that has finished, waits about 1.1 s either
 * way.  Measured (bench/manners.py, disk, 10 s foreground, 3 reps):
 * benice +18.5 % at 1 s, +12.0 % at 4 s; the library +11.0 %, +7.1 %;
 * jdupes alone under benice +0.2 % and +0.1 % against uncontrolled.
 * What pays: contention that shows in neither counter (a remote server,
 * a lock), whose first suspension now runs 4 s, and a machine never
 * quiet, on which a false judgment costs 4 s. */
#define MANNERS_SUSPEND_INITIAL_DEFAULT (INT64_C(4000000000))
#define MANNERS_SUSPEND_LIMIT_DEFAULT   (INT64_C(600) * 1000000000)

/*
 * The quick raise: calibration from fewer measurements (§11's future work,
 * §9.6's day-long calibration from a loaded start).  Not in the paper.
 * Contention only ever slows a job down, so a target that the job beats,
 * testpoint after testpoint, is a target calibrated under load, and the
 * paper's average takes thousands of testpoints to forget it (it weighs
 * every testpoint alike, §4.3).  So: when the median of the phase's last
 * quick_window ratios measured / target duration is below
 * 1 / (1 + quick_margin), the target duration is set at once to that
 * median times 1 + quick_margin / 2 (for one metric the rate is divided by
 * it; for several the regression's y is scaled by it, which scales every
 * cost alike): half the margin short of the median, so that the job alone
 * is not judged poor by noise as often as not.  It only ever makes the
 * target more demanding; lowering it is left to the paper's slow average,
 * since a slower job is exactly what contention looks like.  A median,
 * not a mean, so that a few fast outliers (a cached stretch) do not move
 * it.  quick_window 0 is the paper's calibration alone.
 */
#define MANNERS_QUICK_WINDOW_DEFAULT 20u   /* 5 s of 250 ms testpoints */
#define MANNERS_QUICK_MARGIN_DEFAULT 0.10

/*
 * The short probe after a suspension (not in the paper).  After a poor
 * judgment the sign test starts a new sample (§4.2), so each resumption
 * under lasting contention costs the foreground m = 5 testpoints of it
 * (eq. 1) before the next, doubled suspension: over a foreground of a few
 * tens of seconds, most of the slowdown the background still causes.  Here,
 * after a poor judgment, probe_below testpoints below target in a row are
 * judged poor again at once; the first one not below ends the probe and
 * starts a fresh sample with it, as the paper would.  The evidence for
 * "still contended" is the poor judgment just made plus the probe; by
 * noise alone a probe of 2 continues a suspension with probability 1/4,
 * whose doubling then costs on average 2 initial suspensions more (the
 * series sum_k 4^-k 2^k).  probe_below 0 is the paper's comparator.
 */
#define MANNERS_PROBE_DEFAULT 2u

struct manners_controller_config {
	struct manners_calib_config calib; /* n, bootstrap, probation (§4.3, §6.2) */
	int64_t suspend_initial_ns;        /* first suspension (§4.1) */
	int64_t suspend_limit_ns;          /* longest suspension (§4.1) */
	double nu;                         /* ridge parameter (§6.3, eq. 13) */
	uint32_t quick_window;             /* 0 .. MANNERS_QUICK_MAX; 0: off */
	double quick_margin;               /* > 0 */
	uint32_t probe_below;              /* 0 .. 64; 0: the paper's comparator */
};

/* What the controller has done, for reports and `discnice top`. */
struct manners_controller_stats {
	uint64_t testpoints;    /* every call */
	uint64_t compared;      /* comparisons fed to the sign test */
	uint64_t below;         /* of which below target */
	uint64_t judged_good;
	uint64_t judged_poor;
	uint64_t discarded;     /* testpoints whose measurement was thrown away */
	int64_t suspended_ns;   /* sum of the suspensions ordered */
	int64_t probation_ns;   /* sum of the probation waits ordered (beyond suspension) */
	int last_judgment;      /* enum manners_judgment of the last decided sample */
	uint64_t quick_raises;  /* targets raised by the quick raise */
	uint64_t probe_poor;    /* poor judgments made by the short probe */
	uint64_t forgiven;      /* poor judgments on a quiet machine: no suspension */
	uint64_t new_samples;   /* samples begun afresh at a change of the machine */
};

struct manners_controller {
	const struct manners_sign_table *signs; /* shared, read-only */
	struct manners_sign_test test;
	struct manners_suspend suspend;
	struct manners_phase_table phases;
	struct manners_controller_stats stats;
	uint32_t quick_window;
	double quick_margin;
	uint32_t probe_below;
	int probing;            /* the last judgment was poor: probing */
	uint32_t probe_run;     /* testpoints below target in this probe */
	int machine_quiet;      /* for the next testpoint only (see below) */
};

/*
 * The machine was quiet up to the next testpoint (quiet.h's look back:
 * nobody else used a CPU or a disk meanwhile), so a poor judgment there is
 * the sign test's alpha, not contention: it orders no suspension, does not
 * lengthen the next one and starts no short probe (it is counted in
 * stats.forgiven).  This only ever shortens a suspension - to nothing -
 * and never causes one; probation waits stand.  Applies to the next
 * manners_controller_testpoint() only.  Not in the paper.
 */
void manners_controller_machine_quiet(struct manners_controller *ctl, int quiet);

/* The defaults: calibrate.h's, the suspension above, the paper's nu, the
 * quick raise on. */
void manners_controller_config_default(struct manners_controller_config *config);

/*
 * An empty controller over the caller's phase slots (capacity >= 1) and a
 * sign table already initialised.  config NULL means the defaults.
 * 0 or -EINVAL.
 */
int manners_controller_init(struct manners_controller *ctl, const struct manners_sign_table *signs,
			    struct manners_phase *slots, size_t capacity,
			    const struct manners_controller_config *config);

/*
 * The largest progress value one testpoint takes: 2^53, the last count a
 * double holds exactly.  Far beyond any job's bytes or records, and far
 * enough below DBL_MAX that the averages, rates and regression sums made
 * of it stay finite: values near 1e300 made them infinite, and the phase
 * stopped regulating without a word.
 */
#define MANNERS_CONTROLLER_PROGRESS_MAX 9007199254740992.0

/*
 * One testpoint of phase `index` with `count` progress values (each >= 0,
 * at most MANNERS_CONTROLLER_PROGRESS_MAX), after the thread ran run_ns
 * (> 0) since its previous testpoint; now_ns is the time of this testpoint.  Returns the wait in ns (>= 0) before
 * the thread may go on, and the sign test's outcome in *judgment when it is
 * not NULL.  Errors, with nothing changed: -EINVAL for a bad argument or a
 * count different from the index's first, -ENOSPC when the phase table is
 * full.
 */
int64_t manners_controller_testpoint(struct manners_controller *ctl, int index, int count,
				     const double *progress, int64_t run_ns, int64_t now_ns,
				     int *judgment);

/*
 * The measurement since the previous testpoint is not to be trusted (the
 * thread was presumed hung, §7.1, or the caller knows the interval was
 * spent elsewhere): counted, nothing learnt, no wait.
 */
void manners_controller_discard(struct manners_controller *ctl);

/*
 * The machine changed under the thread: a rival has just appeared (quiet.h's
 * rise of CPU pressure).  The comparisons of the sign test's current sample
 * describe the machine before it, so the sample is dropped and a new one
 * begun (§4.2 begins one after every judgment).  Not in the paper.  Without
 * it, a job that ran alone near its target for minutes has an undecided
 * sample of hundreds of comparisons split about evenly (§6.1 judges "good"
 * only well under half below), and the first contention must outweigh them:
 * measured, 9 to 11 comparisons below target instead of 5.  It neither
 * causes nor shortens a suspension: a poor judgment still needs m = 5 of 5
 * below (eq. 1), which by noise alone comes with probability alpha at
 * most, as at the start of any sample.  The short probe after a suspension
 * is left as it is.  Counted in stats.new_samples.
 */
void manners_controller_new_sample(struct manners_controller *ctl);

/*
 * The target duration, in ns, of the given progress in phase `index` (for
 * one metric, progress / rate).  0, -ENOENT for a phase never seen,
 * -EAGAIN while it has no target, -EINVAL for bad values.
 */
int manners_controller_target_ns(struct manners_controller *ctl, int index, int count,
				 const double *progress, double *target_ns);

#endif
