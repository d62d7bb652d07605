/*
 * suspend.h - MS Manners' suspension time calculator: exponential
 * suspension, instantaneous resumption (MS Manners §4.1; eq. 2 and 3 of
 * §6.1; §10 contrasts it with TCP's linear resumption).
 *
 * On each judgment of poor progress the process is suspended and the
 * suspension time doubles, up to a limit; a judgment of good progress
 * restores the initial value; no judgment (the sign test's "unknown", §4.2)
 * keeps it.  Which value the poor judgment waits for: eq. 3 takes the k-th
 * poor judgment since the last good one (k = 0, 1, ...) to suspend for 2^k
 * initial units, so the first poor judgment waits the initial value and
 * only then is it doubled.  The doubling adapts the background to the time
 * scale of the foreground's activity; the limit bounds how late it resumes
 * after that activity ends (§4.1).
 */
#ifndef DISCNICE_MANNERS_SUSPEND_H
#define DISCNICE_MANNERS_SUSPEND_H

#include <stdint.h>

struct manners_suspend {
	int64_t initial_ns; /* suspension after the first poor judgment */
	int64_t limit_ns;   /* never longer than this */
	int64_t next_ns;    /* what the next poor judgment will wait */
	uint32_t poor_run;  /* poor judgments since the last good one (eq. 2's k) */
};

/* 0 < initial_ns <= limit_ns, else -EINVAL. */
int manners_suspend_init(struct manners_suspend *suspend, int64_t initial_ns, int64_t limit_ns);

/*
 * The one rule by which every front end (library settings, benice's and
 * run's options) reconciles the first suspension with the limit: a limit
 * below a first suspension nobody chose (given == 0: the default) lowers
 * the first to it; a first suspension given above the limit is an error.
 * 0, with *initial_ns lowered where needed, or -EINVAL (and *initial_ns
 * unchanged).
 */
int manners_suspend_settle(int64_t *initial_ns, int64_t limit_ns, int given);

/*
 * Applies one judgment (enum manners_judgment, sign_test.h) and returns the
 * time to suspend now, in ns: next_ns for POOR (which then doubles, capped),
 * 0 for GOOD (and the suspension is reset) and 0 for UNKNOWN (kept).
 * Returns -EINVAL for a NULL calculator or an unknown judgment.
 */
int64_t manners_suspend_judge(struct manners_suspend *suspend, int judgment);

#endif
