/*
 * regress.h - MS Manners' several progress metrics (MS Manners §4.4, §6.3).
 *
 * Two ways, as in §4.4:
 *
 * Phases.  A testpoint reports the metric set of the phase it is in, named
 * by an index (§7.1's Testpoint(index, count, metrics)); each index has its
 * own calibrated target, and the sign test (sign_test.h) combines the
 * comparisons of all phases into one judgment, so brief phases are still
 * regulated.  struct manners_phase_table maps an index to its state, in a
 * fixed table whose storage the caller provides.
 *
 * Concurrent metrics.  The duration between testpoints is modelled as the
 * sum of the times to make each kind of progress, d = sum_k dp_k / r_k
 * (eq. 8), and the comparison is of durations: a testpoint is "below
 * target" when it took longer than the target duration sum_k c_k dp_k
 * (§4.4; for one metric this is the rate comparison).  The c_k = 1/r_k come
 * from least squares with no bias term on exponentially averaged sufficient
 * statistics X = sum dp dp', y = sum d dp (eq. 9-12), solved as ridge
 * regression, X + nu Omega I with Omega = trace X (eq. 13-14), which stays
 * solvable when metrics are collinear (the defragmenter's blocks and moves,
 * §8).  nu = 1e-11 is the paper's.
 *
 * Where the paper is vague, and what is chosen here:
 *  - The "initialization phase" before eq. 11-12 (§6.3): plain sums (eq. 9,
 *    10) for the first n testpoints, then decay by xi = (n - 1)/n.  Both
 *    hold a total weight of n at the switch, so nothing jumps, and every
 *    early testpoint weighs the same (as in calibrate.h).
 *  - Negative coefficients.  With noisy, correlated metrics least squares can
 *    give c_k < 0, a metric whose progress saves time, which is meaningless
 *    and can make the target duration negative.  The paper does not say.
 *    Here a negative c_k is set to 0 and its metric left out of the fit,
 *    which is then solved again: a simple active-set step toward
 *    non-negative least squares (a metric left out is not brought back
 *    within one solve).
 *  - The ridge term: one departure from the paper.  Eq. 14's Omega = trace X
 *    is one number for all metrics, so its weight depends on the units: a
 *    metric counted in files beside one counted in bytes gets a ridge that
 *    is percents of its own diagonal, not 1e-11.  In the unit test (bytes at
 *    2.5 ns, operations at 4 us, files at 7 ms) eq. 13-14 gave the three
 *    costs 86 %, 189 % and -3.7 % off on noise-free data.  By default the
 *    ridge is therefore nu x_kk on each diagonal (ridge regression on
 *    standardised metrics, which does not depend on units); identical
 *    metrics have equal diagonals, so they still split their cost evenly.
 *    A metric with x_kk = 0 has never progressed and gets cost 0.  Setting
 *    trace_ridge = 1 after init gives eq. 13-14 exactly.
 *  - The solver: LDL' (Cholesky without square roots; this code is linked
 *    into the agent, built without libm).  The ridge term makes X + nu Omega I
 *    positive definite; a pivot that is not positive anyway (non-finite
 *    input) gives -EDOM, never a NaN target.
 *
 * Units: durations in ns, progress in the application's units, c_k in ns
 * per unit.  Up to MANNERS_REGRESS_MAX metrics per testpoint.
 */
#ifndef DISCNICE_MANNERS_REGRESS_H
#define DISCNICE_MANNERS_REGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "manners/calibrate.h"

#define MANNERS_REGRESS_MAX        8
#define MANNERS_REGRESS_NU_DEFAULT 1e-11 /* §6.3 */

struct manners_regress {
	int count;          /* metrics, 1 .. MANNERS_REGRESS_MAX */
	uint32_t n;         /* eq. 5 */
	double nu;          /* eq. 13 */
	int trace_ridge;    /* 1: nu Omega (eq. 13-14); 0: nu x_kk (default, above) */
	uint64_t samples;
	double x[MANNERS_REGRESS_MAX][MANNERS_REGRESS_MAX]; /* eq. 9, 11 */
	double y[MANNERS_REGRESS_MAX];                      /* eq. 10, 12 */
	double coef[MANNERS_REGRESS_MAX]; /* last solution: ns per unit, 1/r_k */
	int solved;         /* coef is the solution of the current x, y */
};

/* 0, or -EINVAL for a count outside 1 .. MANNERS_REGRESS_MAX, n < 1, or nu < 0. */
int manners_regress_init(struct manners_regress *regress, int count, uint32_t n, double nu);

/*
 * One testpoint: count progress values and the duration (eq. 11, 12).
 * -EINVAL for NULL, a negative or non-finite value, or duration_ns <= 0.
 */
int manners_regress_add(struct manners_regress *regress, const double *progress,
			int64_t duration_ns);

/*
 * Solves eq. 13-14 into coef.  0; -EAGAIN when there is no data yet (every
 * metric's progress has been 0); -EDOM when the system is not solvable.
 */
int manners_regress_solve(struct manners_regress *regress);

/* The target duration sum_k coef_k progress_k (eq. 8), solving first if needed. */
int manners_regress_target_ns(struct manners_regress *regress, const double *progress,
			      double *target_ns);

/* One index's state: its calibrator (the rate of a single metric, eq. 4,
 * and for any count the bootstrap, probation and subsampling of §4.3), and
 * for several metrics the regression. */
#define MANNERS_QUICK_MAX 64 /* longest window of the quick raise (controller.h) */

struct manners_phase {
	int index;
	int count; /* 0: slot free */
	struct manners_calib calib;
	struct manners_regress regress; /* used when count > 1 */
	/* The quick raise (controller.h): measured / target durations of the
	 * phase's last testpoints. */
	float quick_ratio[MANNERS_QUICK_MAX];
	uint32_t quick_count;
};

/* Caller-provided slots; open addressing on the index. */
struct manners_phase_table {
	struct manners_phase *slots;
	size_t capacity;
	size_t used;
	struct manners_calib_config config; /* for new phases */
	double nu;
};

/* config NULL: calibrate.h's defaults.  0 or -EINVAL. */
int manners_phase_table_init(struct manners_phase_table *table, struct manners_phase *slots,
			     size_t capacity, const struct manners_calib_config *config,
			     double nu);

/*
 * The phase of index, created on first use with `count` metrics (§7.1: no
 * explicit initialisation).  -EINVAL for a count outside 1 ..
 * MANNERS_REGRESS_MAX or one that differs from the index's first; -ENOSPC
 * when the table is full.
 */
int manners_phase_lookup(struct manners_phase_table *table, int index, int count,
			 struct manners_phase **phase);

/*
 * Calibrates on one testpoint of the phase (its count progress values, the
 * ns it ran, ending at now_ns).  1 when used, 0 when subsampled away
 * (calibrate.h), -EINVAL for bad values.
 */
int manners_phase_update(struct manners_phase *phase, const double *progress,
			 int64_t duration_ns, int64_t now_ns);

/*
 * The comparison the sign test takes: 1 when the testpoint took longer than
 * its target duration (progress below target), 0 when not, -EAGAIN when the
 * phase has no target yet, -EINVAL for bad values.
 */
int manners_phase_below(struct manners_phase *phase, const double *progress,
			int64_t duration_ns);

#endif
