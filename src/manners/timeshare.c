/*
 * timeshare.c - time-multiplex isolation with decay-usage sharing and a
 * hung-thread threshold (MS Manners §4.5, §7.1; choices in timeshare.h).
 */
#include <errno.h>
#include <stddef.h>

#include "manners/timeshare.h"

static int clamp_priority(int priority)
{
	if (priority < MANNERS_PRIORITY_MIN)
		return MANNERS_PRIORITY_MIN;
	if (priority > MANNERS_PRIORITY_MAX)
		return MANNERS_PRIORITY_MAX;
	return priority;
}

/* 2^priority as a double, exactly, without libm. */
static double priority_weight(int priority)
{
	double w = 1.0;
	for (int p = 0; p < priority; p++)
		w *= 2.0;
	for (int p = 0; p > priority; p--)
		w *= 0.5;
	return w;
}

static struct manners_share_thread *thread_of(struct manners_timeshare *share, int id)
{
	if (share == NULL || share->threads == NULL || id < 0 || (size_t)id >= share->capacity)
		return NULL;
	struct manners_share_thread *t = &share->threads[id];
	return t->state == MANNERS_SHARE_FREE ? NULL : t;
}

int manners_timeshare_init(struct manners_timeshare *share, struct manners_share_thread *slots,
			   size_t capacity, int64_t half_life_ns, int64_t hung_ns)
{
	if (share == NULL || slots == NULL || capacity == 0 || capacity > INT32_MAX ||
	    half_life_ns <= 0 || hung_ns <= 0)
		return -EINVAL;
	share->threads = slots;
	share->capacity = capacity;
	share->running = -1;
	share->half_life_ns = half_life_ns;
	share->hung_ns = hung_ns;
	share->decayed_ns = 0;
	share->decay_started = 0;
	for (size_t i = 0; i < capacity; i++)
		slots[i].state = MANNERS_SHARE_FREE;
	return 0;
}

int manners_timeshare_add(struct manners_timeshare *share, int priority)
{
	if (share == NULL || share->threads == NULL)
		return -EINVAL;
	for (size_t i = 0; i < share->capacity; i++) {
		struct manners_share_thread *t = &share->threads[i];
		if (t->state != MANNERS_SHARE_FREE)
			continue;
		t->state = MANNERS_SHARE_WAITING;
		t->priority = clamp_priority(priority);
		/* A newcomer starts level with the least-used thread, so it neither
		 * starves the others (usage 0) nor waits behind them for ever. */
		double least = -1.0;
		for (size_t j = 0; j < share->capacity; j++) {
			const struct manners_share_thread *o = &share->threads[j];
			if (j != i && o->state != MANNERS_SHARE_FREE && (least < 0 || o->usage_ns < least))
				least = o->usage_ns;
		}
		t->usage_ns = least > 0 ? least : 0.0;
		t->eligible_ns = INT64_MIN;
		t->since_ns = 0;
		return (int)i;
	}
	return -ENOSPC;
}

int manners_timeshare_remove(struct manners_timeshare *share, int id)
{
	struct manners_share_thread *t = thread_of(share, id);
	if (t == NULL)
		return -EINVAL;
	t->state = MANNERS_SHARE_FREE;
	if (share->running == id)
		share->running = -1;
	return 0;
}

int manners_timeshare_set_priority(struct manners_timeshare *share, int id, int priority)
{
	struct manners_share_thread *t = thread_of(share, id);
	if (t == NULL)
		return -EINVAL;
	t->priority = clamp_priority(priority);
	return 0;
}

/* Halves every usage once per whole half-life since the last halving. */
static void decay_usage(struct manners_timeshare *share, int64_t now_ns)
{
	if (!share->decay_started) {
		share->decay_started = 1;
		share->decayed_ns = now_ns;
		return;
	}
	if (now_ns <= share->decayed_ns)
		return;
	uint64_t steps = ((uint64_t)now_ns - (uint64_t)share->decayed_ns) /
			 (uint64_t)share->half_life_ns;
	if (steps == 0)
		return;
	/* Beyond 64 halvings every usage is 0 in all that matters. */
	double factor = steps > 64 ? 0.0 : 1.0;
	for (uint64_t s = 0; s < steps && s < 64; s++)
		factor *= 0.5;
	for (size_t i = 0; i < share->capacity; i++)
		share->threads[i].usage_ns *= factor;
	share->decayed_ns += (int64_t)(steps * (uint64_t)share->half_life_ns);
}

/* Adds the thread's run since since_ns, at most cap, to its usage. */
static void charge_run(struct manners_share_thread *t, int64_t now_ns, uint64_t cap)
{
	if (now_ns <= t->since_ns)
		return;
	uint64_t ran = (uint64_t)now_ns - (uint64_t)t->since_ns;
	t->usage_ns += (double)(ran < cap ? ran : cap);
}

int manners_timeshare_arrive(struct manners_timeshare *share, int id, int64_t now_ns,
			     int64_t eligible_ns)
{
	struct manners_share_thread *t = thread_of(share, id);
	if (t == NULL || t->state == MANNERS_SHARE_WAITING)
		return -EINVAL;
	int was_hung = t->state == MANNERS_SHARE_HUNG;
	/* Charged for its run; a hung thread only up to the threshold, as its
	 * external delay is not running time that others were denied. */
	charge_run(t, now_ns, was_hung ? (uint64_t)share->hung_ns : UINT64_MAX);
	t->state = MANNERS_SHARE_WAITING;
	t->eligible_ns = eligible_ns;
	if (share->running == id)
		share->running = -1;
	return was_hung;
}

int manners_timeshare_touch(struct manners_timeshare *share, int id, int64_t now_ns)
{
	struct manners_share_thread *t = thread_of(share, id);
	if (t == NULL)
		return -EINVAL;
	if (share->running != id || t->state != MANNERS_SHARE_RUNNING)
		return -ESRCH;
	charge_run(t, now_ns, UINT64_MAX);
	if (now_ns > t->since_ns)
		t->since_ns = now_ns;
	return 0;
}

int manners_timeshare_pick(struct manners_timeshare *share, int64_t now_ns, int64_t *wake_ns)
{
	if (share == NULL || share->threads == NULL || wake_ns == NULL)
		return -EINVAL;
	decay_usage(share, now_ns);
	if (share->running >= 0) {
		struct manners_share_thread *r = &share->threads[share->running];
		int64_t deadline = r->since_ns > INT64_MAX - share->hung_ns
					   ? INT64_MAX : r->since_ns + share->hung_ns;
		if (now_ns < deadline) {
			*wake_ns = deadline;
			return -EBUSY;
		}
		/* Presumed hung (§7.1): the others go on without it. */
		r->state = MANNERS_SHARE_HUNG;
		share->running = -1;
	}
	int best = -1;
	double best_key = 0.0;
	int64_t earliest = INT64_MAX;
	for (size_t i = 0; i < share->capacity; i++) {
		const struct manners_share_thread *t = &share->threads[i];
		if (t->state != MANNERS_SHARE_WAITING)
			continue;
		if (t->eligible_ns > now_ns) {
			if (t->eligible_ns < earliest)
				earliest = t->eligible_ns;
			continue;
		}
		double key = t->usage_ns / priority_weight(t->priority);
		if (best < 0 || key < best_key) {
			best = (int)i;
			best_key = key;
		}
	}
	if (best < 0) {
		*wake_ns = earliest;
		return -EAGAIN;
	}
	share->threads[best].state = MANNERS_SHARE_RUNNING;
	share->threads[best].since_ns = now_ns;
	share->running = best;
	*wake_ns = now_ns;
	return best;
}
