/*
 * quiet.c - the end of contention from the machine's own counters (see
 * quiet.h for why, and what it cannot see).
 */
#include <errno.h>
#include <stddef.h>

#include "manners/quiet.h"

int manners_quiet_init(struct manners_quiet *q, int64_t quiet_ns, double cpu_max, double disk_max)
{
	if (q == NULL || quiet_ns <= 0 || !(cpu_max >= 0.0) || !(disk_max >= 0.0))
		return -EINVAL;
	q->quiet_ns = quiet_ns;
	q->cpu_max = cpu_max;
	q->disk_max = disk_max;
	manners_quiet_reset(q);
	return 0;
}

void manners_quiet_reset(struct manners_quiet *q)
{
	if (q == NULL)
		return;
	q->have_last = 0;
	q->quiet_since_ns = -1;
}

int manners_quiet_feed(struct manners_quiet *q, const struct manners_activity *now)
{
	if (q == NULL || now == NULL)
		return -EINVAL;
	if (!q->have_last) {
		q->last = *now;
		q->have_last = 1;
		return 0;
	}
	if (now->now_ns < q->last.now_ns)
		return -EINVAL;
	double span = (double)(now->now_ns - q->last.now_ns);
	if (span <= 0.0)
		return q->quiet_since_ns >= 0 && now->now_ns - q->quiet_since_ns >= q->quiet_ns;
	/* Counters that went backwards (a disk removed, a CPU offlined) count
	 * as busy: never a reason to wake early. */
	int quiet = now->cpu_busy_ns >= q->last.cpu_busy_ns &&
		    now->disk_busy_ns >= q->last.disk_busy_ns &&
		    (double)(now->cpu_busy_ns - q->last.cpu_busy_ns) <= q->cpu_max * span &&
		    (double)(now->disk_busy_ns - q->last.disk_busy_ns) <= q->disk_max * span;
	if (!quiet)
		q->quiet_since_ns = -1;
	else if (q->quiet_since_ns < 0)
		q->quiet_since_ns = q->last.now_ns; /* quiet since the previous sample */
	q->last = *now;
	return q->quiet_since_ns >= 0 && now->now_ns - q->quiet_since_ns >= q->quiet_ns;
}
