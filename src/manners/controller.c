/*
 * controller.c - one regulated thread's control loop, the wiring of MS
 * Manners Fig. 2 (the order and its reasons are in controller.h).
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>

#include "manners/controller.h"

void manners_controller_config_default(struct manners_controller_config *config)
{
	if (config == NULL)
		return;
	manners_calib_config_default(&config->calib);
	config->suspend_initial_ns = MANNERS_SUSPEND_INITIAL_DEFAULT;
	config->suspend_limit_ns = MANNERS_SUSPEND_LIMIT_DEFAULT;
	config->nu = MANNERS_REGRESS_NU_DEFAULT;
	config->quick_window = MANNERS_QUICK_WINDOW_DEFAULT;
	config->quick_margin = MANNERS_QUICK_MARGIN_DEFAULT;
	config->probe_below = MANNERS_PROBE_DEFAULT;
}

int manners_controller_init(struct manners_controller *ctl, const struct manners_sign_table *signs,
			    struct manners_phase *slots, size_t capacity,
			    const struct manners_controller_config *config)
{
	if (ctl == NULL || signs == NULL || signs->n_max < 1 || slots == NULL || capacity < 1)
		return -EINVAL;
	struct manners_controller_config c;
	if (config == NULL)
		manners_controller_config_default(&c);
	else
		c = *config;
	if (c.quick_window > MANNERS_QUICK_MAX || !(c.quick_margin > 0.0 && c.quick_margin < 1e6) ||
	    c.probe_below > 64)
		return -EINVAL;
	int rc = manners_suspend_init(&ctl->suspend, c.suspend_initial_ns, c.suspend_limit_ns);
	if (rc < 0)
		return rc;
	rc = manners_phase_table_init(&ctl->phases, slots, capacity, &c.calib, c.nu);
	if (rc < 0)
		return rc;
	ctl->signs = signs;
	ctl->quick_window = c.quick_window;
	ctl->quick_margin = c.quick_margin;
	ctl->probe_below = c.probe_below;
	ctl->probing = 0;
	ctl->probe_run = 0;
	manners_sign_reset(&ctl->test);
	ctl->stats = (struct manners_controller_stats){ .last_judgment = MANNERS_UNKNOWN };
	return 0;
}

static int values_ok(const double *progress, int count)
{
	if (count < 1 || count > MANNERS_REGRESS_MAX || progress == NULL)
		return 0;
	for (int k = 0; k < count; k++) /* NaN fails both comparisons */
		if (!(progress[k] >= 0.0 && progress[k] <= MANNERS_CONTROLLER_PROGRESS_MAX))
			return 0;
	return 1;
}

/* The phase's target duration for this progress (eq. 8), or < 0. */
static int phase_target_ns(struct manners_phase *phase, const double *progress, double *target)
{
	if (phase->count == 1) {
		if (phase->calib.samples == 0 || !(phase->calib.rate > 0.0))
			return -EAGAIN;
		*target = progress[0] / phase->calib.rate * 1e9;
		return 0;
	}
	return manners_regress_target_ns(&phase->regress, progress, target);
}

/* The quick raise (controller.h): one more ratio; the target set to the
 * median of the window when the job beats it by more than the margin. */
static void quick_raise(struct manners_controller *ctl, struct manners_phase *phase, double ratio)
{
	uint32_t k = ctl->quick_window;
	if (k == 0 || !(ratio > 0.0 && ratio < 1e12))
		return;
	phase->quick_ratio[phase->quick_count % k] = (float)ratio;
	if (++phase->quick_count < k)
		return;
	float sorted[MANNERS_QUICK_MAX];
	for (uint32_t i = 0; i < k; i++) { /* insertion sort: k <= 64 */
		float v = phase->quick_ratio[i];
		uint32_t j = i;
		for (; j > 0 && sorted[j - 1] > v; j--)
			sorted[j] = sorted[j - 1];
		sorted[j] = v;
	}
	double median = k % 2 ? sorted[k / 2] : 0.5 * ((double)sorted[k / 2 - 1] + sorted[k / 2]);
	if (!(median * (1.0 + ctl->quick_margin) < 1.0))
		return;
	/* Half the margin short of the median: a target the job alone just
	 * meets would be judged poor as often as not by noise alone. */
	double scale = median * (1.0 + ctl->quick_margin / 2);
	if (phase->count == 1) {
		phase->calib.rate /= scale;
	} else {
		for (int i = 0; i < phase->count; i++)
			phase->regress.y[i] *= scale;
		phase->regress.solved = 0;
	}
	phase->quick_count = 0;
	ctl->stats.quick_raises++;
}

/* The phase of index, or NULL: never creates one. */
static struct manners_phase *phase_find(struct manners_phase_table *table, int index)
{
	for (size_t i = 0; i < table->capacity; i++)
		if (table->slots[i].count > 0 && table->slots[i].index == index)
			return &table->slots[i];
	return NULL;
}

int64_t manners_controller_testpoint(struct manners_controller *ctl, int index, int count,
				     const double *progress, int64_t run_ns, int64_t now_ns,
				     int *judgment)
{
	if (judgment != NULL)
		*judgment = MANNERS_UNKNOWN;
	if (ctl == NULL || ctl->signs == NULL || !values_ok(progress, count) || run_ns <= 0 ||
	    now_ns < INT64_MIN + run_ns)
		return -EINVAL;
	struct manners_phase *phase;
	int rc = manners_phase_lookup(&ctl->phases, index, count, &phase);
	if (rc < 0)
		return rc;
	ctl->stats.testpoints++;
	int quiet = ctl->machine_quiet;
	ctl->machine_quiet = 0;

	/* 1. Compare against the target as it stood before this measurement. */
	int below = manners_phase_below(phase, progress, run_ns);
	int regulating = manners_calib_regulating(&phase->calib); /* bootstrap over before it */
	double target;
	if (regulating && phase_target_ns(phase, progress, &target) == 0 && target > 0.0)
		quick_raise(ctl, phase, (double)run_ns / target);
	/* 2. Calibrate (or subsample away, §4.3). */
	(void)manners_phase_update(phase, progress, run_ns, now_ns);

	/* 3. Judge, once this phase's bootstrap is over. */
	int judged = MANNERS_UNKNOWN;
	if (below >= 0 && regulating) {
		ctl->stats.compared++;
		if (below)
			ctl->stats.below++;
		if (ctl->probing && ctl->probe_below) {
			/* The short probe after a suspension (controller.h). */
			if (below) {
				judged = MANNERS_UNKNOWN;
				if (++ctl->probe_run >= ctl->probe_below) {
					judged = MANNERS_POOR;
					ctl->probe_run = 0;
					ctl->stats.probe_poor++;
				}
			} else {
				ctl->probing = 0;
				ctl->probe_run = 0;
				manners_sign_reset(&ctl->test);
				judged = manners_sign_feed(&ctl->test, ctl->signs, 0);
			}
		} else {
			judged = manners_sign_feed(&ctl->test, ctl->signs, below);
		}
		if (judged < 0)
			judged = MANNERS_UNKNOWN;
		if (judged == MANNERS_POOR && !quiet)
			ctl->probing = 1;
		else if (judged == MANNERS_GOOD)
			ctl->probing = 0;
	}
	/* A poor judgment with nobody to contend with is noise (controller.h):
	 * counted, but it orders no suspension and does not lengthen the next. */
	int forgiven = judged == MANNERS_POOR && quiet;
	int64_t wait = manners_suspend_judge(&ctl->suspend, forgiven ? MANNERS_UNKNOWN : judged);
	if (wait < 0)
		wait = 0;
	if (judged == MANNERS_GOOD)
		ctl->stats.judged_good++;
	else if (judged == MANNERS_POOR)
		ctl->stats.judged_poor++;
	if (forgiven)
		ctl->stats.forgiven++;
	if (judged != MANNERS_UNKNOWN)
		ctl->stats.last_judgment = judged;
	ctl->stats.suspended_ns += wait;

	/* 4. Probation caps the running fraction; it only lengthens the wait. */
	int64_t probation = manners_calib_probation_wait(&phase->calib, now_ns, run_ns);
	if (probation > wait) {
		ctl->stats.probation_ns += probation - wait;
		wait = probation;
	}

	/* 5. A strictly regulated thread runs nothing during the wait: every
	 * phase subsamples what the application runs in it anyway (§4.3). */
	if (wait > 0)
		for (size_t i = 0; i < ctl->phases.capacity; i++)
			if (ctl->phases.slots[i].count > 0)
				manners_calib_note_wait(&ctl->phases.slots[i].calib, now_ns, wait);
	if (judgment != NULL)
		*judgment = forgiven ? MANNERS_UNKNOWN : judged;
	return wait;
}

void manners_controller_machine_quiet(struct manners_controller *ctl, int quiet)
{
	if (ctl != NULL)
		ctl->machine_quiet = quiet != 0;
}

void manners_controller_discard(struct manners_controller *ctl)
{
	if (ctl != NULL)
		ctl->stats.discarded++;
}

void manners_controller_new_sample(struct manners_controller *ctl)
{
	if (ctl == NULL || ctl->test.n == 0)
		return;
	ctl->test.n = 0; /* last_n, the size that gave the last judgment, stays */
	ctl->test.below = 0;
	ctl->stats.new_samples++;
}

int manners_controller_target_ns(struct manners_controller *ctl, int index, int count,
				 const double *progress, double *target_ns)
{
	if (ctl == NULL || target_ns == NULL || !values_ok(progress, count))
		return -EINVAL;
	struct manners_phase *phase = phase_find(&ctl->phases, index);
	if (phase == NULL)
		return -ENOENT;
	if (phase->count != count)
		return -EINVAL;
	return phase_target_ns(phase, progress, target_ns);
}
