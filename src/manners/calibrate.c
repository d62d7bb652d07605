/*
 * calibrate.c - automatic target calibration (MS Manners §4.3, §6.2; the
 * choices made where the paper is vague are listed in calibrate.h).
 */
#include <errno.h>
#include <stddef.h>

#include "manners/calibrate.h"

#define NS_PER_S 1e9

void manners_calib_config_default(struct manners_calib_config *config)
{
	if (config == NULL)
		return;
	config->n = MANNERS_CALIB_N_DEFAULT;
	config->bootstrap = MANNERS_CALIB_BOOTSTRAP_DEFAULT;
	config->probation_ns = MANNERS_CALIB_PROBATION_DEFAULT;
	config->probation_duty = MANNERS_CALIB_DUTY_DEFAULT;
}

int manners_calib_init(struct manners_calib *calib, const struct manners_calib_config *config)
{
	if (calib == NULL)
		return -EINVAL;
	struct manners_calib_config c;
	if (config == NULL)
		manners_calib_config_default(&c);
	else
		c = *config;
	if (c.n < 1 || c.bootstrap < 1 || c.probation_ns < 0 ||
	    !(c.probation_duty > 0.0 && c.probation_duty <= 1.0))
		return -EINVAL;
	calib->config = c;
	calib->rate = 0.0;
	calib->samples = 0;
	calib->dropped = 0;
	calib->start_ns = 0;
	calib->started = 0;
	calib->allowed_ns = INT64_MIN;
	return 0;
}

int manners_calib_admit(struct manners_calib *calib, int64_t start_ns)
{
	if (calib == NULL)
		return 0;
	if (!calib->started) {
		calib->started = 1;
		calib->start_ns = start_ns;
	}
	return start_ns >= calib->allowed_ns;
}

int manners_calib_gate(struct manners_calib *calib, int64_t duration_ns, int64_t now_ns)
{
	if (calib == NULL || duration_ns <= 0 || now_ns < INT64_MIN + duration_ns)
		return -EINVAL;
	if (!manners_calib_admit(calib, now_ns - duration_ns)) {
		calib->dropped++;
		return 0;
	}
	/* Saturating: a state file may bring any count back, and a wrap to 0
	 * would start the bootstrap again and weigh the next sample 1/0. */
	if (calib->samples < UINT64_MAX)
		calib->samples++;
	return 1;
}

int manners_calib_sample(struct manners_calib *calib, double progress, int64_t duration_ns,
			 int64_t now_ns)
{
	/* The negated form rejects NaN; the bound rejects infinity. */
	if (calib == NULL || !(progress >= 0.0 && progress <= 1e300))
		return -EINVAL;
	int kept = manners_calib_gate(calib, duration_ns, now_ns);
	if (kept != 1)
		return kept;
	double rate = progress / ((double)duration_ns / NS_PER_S);
	/* Weight 1/min(k, n): a plain mean through the start, eq. 4 after. */
	uint64_t k = calib->samples;
	double weight = 1.0 / (double)(k < calib->config.n ? k : calib->config.n);
	calib->rate += weight * (rate - calib->rate);
	return 1;
}

void manners_calib_note_wait(struct manners_calib *calib, int64_t now_ns, int64_t wait_ns)
{
	if (calib == NULL || wait_ns <= 0)
		return;
	int64_t until = now_ns > INT64_MAX - wait_ns ? INT64_MAX : now_ns + wait_ns;
	if (until > calib->allowed_ns)
		calib->allowed_ns = until;
}

int manners_calib_regulating(const struct manners_calib *calib)
{
	return calib != NULL && calib->samples >= calib->config.bootstrap;
}

int manners_calib_on_probation(const struct manners_calib *calib, int64_t now_ns)
{
	if (calib == NULL)
		return 0;
	if (!calib->started)
		return calib->config.probation_ns > 0;
	/* now - start, computed without overflow for any ordering of the two. */
	if (now_ns < calib->start_ns)
		return calib->config.probation_ns > 0;
	return (uint64_t)now_ns - (uint64_t)calib->start_ns < (uint64_t)calib->config.probation_ns;
}

int64_t manners_calib_probation_wait(const struct manners_calib *calib, int64_t now_ns,
				     int64_t run_ns)
{
	if (calib == NULL || run_ns <= 0 || !manners_calib_on_probation(calib, now_ns))
		return 0;
	double duty = calib->config.probation_duty;
	double wait = (double)run_ns * (1.0 - duty) / duty;
	if (wait >= 9.2e18) /* beyond INT64_MAX ns (292 years) */
		return INT64_MAX;
	return (int64_t)wait;
}
