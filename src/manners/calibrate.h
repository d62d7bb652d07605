/*
 * calibrate.h - MS Manners' automatic target calibration (MS Manners §4.3,
 * §6.2) for one progress metric.
 *
 * The target rate is the exponential average of the measured progress rate
 * at every testpoint, r <- xi r + (1 - xi) dp/d with xi = (n - 1)/n (eq. 4,
 * 5).  It tends to the uncontended rate because a regulated process is
 * mostly suspended while contended, so few testpoints see poor progress
 * (§4.3's "key insight": each testpoint weighs the same).  Around that rule:
 *
 *  - bootstrap (§4.3): the first `bootstrap` testpoints run unregulated and
 *    only feed the average; manners_calib_regulating() says when it is over.
 *  - probation (§4.3, §9.6): for probation_ns after the first testpoint the
 *    execution rate is capped, because a target bootstrapped under load is
 *    too low and would let the process run when it should not.
 *  - subsampling (§4.3): when the application runs on although regulation
 *    told it to wait, only the testpoints that a strictly regulated thread
 *    would have executed are averaged.
 *
 * Where the paper is vague, and what is chosen here:
 *  - How the bootstrap averages.  Not said.  Here each testpoint k weighs
 *    1/min(k, n): a plain mean until n testpoints, eq. 4 from then on.  With
 *    xi fixed from the first sample a short bootstrap would weigh as much as
 *    n testpoints (n = 10,000 in §6.2, hours of them), which is how §9.6's
 *    loaded start took a day to calibrate; the plain mean gives every
 *    testpoint equal weight from the start, which is what the key insight
 *    asks for, and equals eq. 4 exactly once k >= n.
 *  - How probation caps the rate.  "Limits the maximum execution rate" is
 *    all the paper says.  Here: a duty cycle.  After running run_ns, the
 *    process waits at least run_ns (1 - duty) / duty, so it runs at most a
 *    fraction `duty` of the time.  Defaults are ours (the paper's 24 h of
 *    §9.6 were an experiment, and it zeroed probation elsewhere, §9.1).
 *  - Which testpoints a strict thread "would have executed".  After a wait
 *    of W ordered at time t, a strict thread runs nothing in [t, t + W), so a
 *    measurement whose interval starts before t + W is dropped; the first one
 *    starting at or after t + W is kept.  A caller that did wait gets the
 *    same result as no subsampling at all, so no "ignoring" flag is needed.
 *
 * Durations are the time the process ran between testpoints, not counting
 * its suspensions (§4.1: the rate of progress while running).  Times are ns
 * from any fixed origin; rates are progress units per second.
 */
#ifndef DISCNICE_MANNERS_CALIBRATE_H
#define DISCNICE_MANNERS_CALIBRATE_H

#include <stdint.h>

#define MANNERS_CALIB_N_DEFAULT         10000u /* §6.2 */
#define MANNERS_CALIB_BOOTSTRAP_DEFAULT 50u    /* ~10-15 s at a few testpoints a second */
#define MANNERS_CALIB_PROBATION_DEFAULT (INT64_C(15) * 60 * 1000000000) /* 15 min, ours */
#define MANNERS_CALIB_DUTY_DEFAULT      0.25   /* ours */

struct manners_calib_config {
	uint32_t n;            /* averaging constant of eq. 5, >= 1 */
	uint32_t bootstrap;    /* testpoints of unregulated start, >= 1 */
	int64_t probation_ns;  /* probation length from the first testpoint, >= 0 */
	double probation_duty; /* largest running fraction during probation, (0, 1] */
};

struct manners_calib {
	struct manners_calib_config config;
	double rate;         /* the target: progress units per second */
	uint64_t samples;    /* measurements averaged in */
	uint64_t dropped;    /* measurements subsampled away */
	int64_t start_ns;    /* first testpoint: probation runs from here */
	int started;
	int64_t allowed_ns;  /* strict regulation runs nothing before this */
};

/* The defaults above. */
void manners_calib_config_default(struct manners_calib_config *config);

/* An empty calibrator; config NULL means the defaults.  0 or -EINVAL. */
int manners_calib_init(struct manners_calib *calib, const struct manners_calib_config *config);

/*
 * 1 when a strictly regulated thread would have run an interval that starts
 * at start_ns, else 0 (the subsampling rule above).  Starts the probation
 * clock at the first call.
 */
int manners_calib_admit(struct manners_calib *calib, int64_t start_ns);

/*
 * One testpoint: progress made in the duration_ns the process ran, ending at
 * now_ns.  Returns 1 when averaged into the target, 0 when subsampled away,
 * -EINVAL for a NULL calibrator, negative or non-finite progress, or a
 * duration <= 0 (no rate can be formed: the caller drops it).
 */
int manners_calib_sample(struct manners_calib *calib, double progress, int64_t duration_ns,
			 int64_t now_ns);

/*
 * The subsampling gate alone, for a caller that keeps its own estimator (the
 * regression of regress.h): 1 when the testpoint counts (samples is then
 * incremented, for the bootstrap), 0 when it is dropped (dropped is), or
 * -EINVAL for a duration <= 0.  manners_calib_sample() is this gate plus
 * eq. 4.
 */
int manners_calib_gate(struct manners_calib *calib, int64_t duration_ns, int64_t now_ns);

/*
 * The regulator ordered a wait of wait_ns at now_ns (a suspension, a
 * probation wait, or both): intervals starting before now_ns + wait_ns are
 * dropped by manners_calib_admit() and manners_calib_sample().
 */
void manners_calib_note_wait(struct manners_calib *calib, int64_t now_ns, int64_t wait_ns);

/* 1 once the bootstrap is over and judgments may begin, else 0. */
int manners_calib_regulating(const struct manners_calib *calib);

/* 1 while on probation at now_ns (from the first testpoint), else 0. */
int manners_calib_on_probation(const struct manners_calib *calib, int64_t now_ns);

/*
 * The least wait after a run of run_ns ending at now_ns that keeps the
 * running fraction within probation_duty; 0 off probation.  Never negative.
 */
int64_t manners_calib_probation_wait(const struct manners_calib *calib, int64_t now_ns,
				     int64_t run_ns);

#endif
