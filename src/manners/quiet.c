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
	q->disk_iops_max = MANNERS_QUIET_DISK_IOPS_DEFAULT;
	q->disk_bps_max = MANNERS_QUIET_DISK_BPS_DEFAULT;
	manners_quiet_reset(q);
	return 0;
}

struct manners_activity manners_activity_of(const struct machine_activity *machine, int64_t now_ns,
					    uint64_t own_cpu_ns)
{
	return (struct manners_activity){
		.now_ns = now_ns,
		.cpu_busy_ns = machine->cpu_busy_ns,
		.disk_busy_ns = machine->disk_busy_ns,
		.own_cpu_ns = own_cpu_ns,
		.disk_ios = machine->disk_ios,
		.disk_bytes = machine->disk_bytes,
	};
}

void manners_quiet_reset(struct manners_quiet *q)
{
	if (q == NULL)
		return;
	q->next = 0;
	q->count = 0;
}

/* Everybody's CPU time less the job's own, and the disks' busy time,
 * requests and bytes, at most their share of span (ns).  Counters that
 * went backwards (a disk removed, a CPU offlined) count as busy: never a
 * reason to wake early.  The job's
 * own time, counted in ticks apart from the machine's, may come out a
 * tick above it: that leaves nobody else, not less than nobody. */
static int span_quiet(const struct manners_quiet *q, const struct manners_activity *a,
		      const struct manners_activity *b, double span)
{
	if (b->cpu_busy_ns < a->cpu_busy_ns || b->disk_busy_ns < a->disk_busy_ns ||
	    b->own_cpu_ns < a->own_cpu_ns || b->disk_ios < a->disk_ios ||
	    b->disk_bytes < a->disk_bytes)
		return 0;
	double seconds = span / 1e9;
	return manners_others_cpus(a, b) <= q->cpu_max &&
	       (double)(b->disk_busy_ns - a->disk_busy_ns) <= q->disk_max * span &&
	       (double)(b->disk_ios - a->disk_ios) <= q->disk_iops_max * seconds &&
	       (double)(b->disk_bytes - a->disk_bytes) <= q->disk_bps_max * seconds;
}

int manners_quiet_between(const struct manners_quiet *q, const struct manners_activity *a,
			  const struct manners_activity *b)
{
	if (q == NULL || a == NULL || b == NULL)
		return -EINVAL;
	if (b->now_ns < a->now_ns || b->now_ns - a->now_ns < q->quiet_ns ||
	    b->now_ns - a->now_ns > 2 * q->quiet_ns)
		return 0;
	return span_quiet(q, a, b, (double)(b->now_ns - a->now_ns));
}

/* A ring of samples, the newest before `next`: a suspension's window
 * (manners_quiet_feed()) and the look back's history. */
static const struct manners_activity *ring_at(const struct manners_activity *ring, unsigned size,
					      unsigned next, unsigned back)
{
	return &ring[(next + size - 1 - back) % size];
}

/* The newest of the ring's samples, from `first` back, at least age_ns
 * older than at_ns; NULL if none is. */
static const struct manners_activity *ring_aged(const struct manners_activity *ring, unsigned size,
						unsigned next, unsigned count, unsigned first,
						int64_t at_ns, int64_t age_ns)
{
	for (unsigned back = first; back < count; back++) {
		const struct manners_activity *a = ring_at(ring, size, next, back);
		if (at_ns - a->now_ns >= age_ns)
			return a;
	}
	return NULL;
}

/* Would a sample at now_ns be kept: is the newest spacing_ns old or more? */
static int ring_wants(const struct manners_activity *ring, unsigned size, unsigned next,
		      unsigned count, int64_t now_ns, int64_t spacing_ns)
{
	return count == 0 || now_ns - ring_at(ring, size, next, 0)->now_ns >= spacing_ns;
}

/* Keeps the sample if ring_wants() it, over the oldest when full. */
static void ring_keep(struct manners_activity *ring, unsigned size, unsigned *next, unsigned *count,
		      const struct manners_activity *sample, int64_t spacing_ns)
{
	if (!ring_wants(ring, size, *next, *count, sample->now_ns, spacing_ns))
		return;
	ring[*next] = *sample;
	*next = (*next + 1) % size;
	if (*count < size)
		++*count;
}

int manners_quiet_feed(struct manners_quiet *q, const struct manners_activity *now)
{
	if (q == NULL || now == NULL)
		return -EINVAL;
	if (q->count > 0 && now->now_ns < ring_at(q->kept, MANNERS_QUIET_WINDOW, q->next, 0)->now_ns)
		return -EINVAL;
	/* The window: from the newest kept sample quiet_ns old or more. */
	const struct manners_activity *from = ring_aged(q->kept, MANNERS_QUIET_WINDOW, q->next,
							q->count, 0, now->now_ns, q->quiet_ns);
	int quiet = from != NULL && span_quiet(q, from, now, (double)(now->now_ns - from->now_ns));
	ring_keep(q->kept, MANNERS_QUIET_WINDOW, &q->next, &q->count, now,
		  q->quiet_ns / MANNERS_QUIET_WINDOW_SPACING);
	return quiet;
}

int manners_quiet_history_wants(const struct manners_quiet_history *h,
				const struct manners_quiet *q, int64_t now_ns)
{
	if (h == NULL || q == NULL)
		return 0;
	return ring_wants(h->seen, MANNERS_QUIET_SEEN, h->next, h->count, now_ns,
			  q->quiet_ns / MANNERS_QUIET_SPACING);
}

void manners_quiet_history_add(struct manners_quiet_history *h, const struct manners_quiet *q,
			       const struct manners_activity *sample)
{
	if (h == NULL || q == NULL || sample == NULL)
		return;
	ring_keep(h->seen, MANNERS_QUIET_SEEN, &h->next, &h->count, sample,
		  q->quiet_ns / MANNERS_QUIET_SPACING);
}

int manners_quiet_history_quiet(const struct manners_quiet_history *h,
				const struct manners_quiet *q, const struct manners_busy *busy)
{
	if (h == NULL || q == NULL || h->count < 2 || (busy != NULL && busy->busy))
		return 0;
	const struct manners_activity *last = ring_at(h->seen, MANNERS_QUIET_SEEN, h->next, 0);
	const struct manners_activity *a = ring_aged(h->seen, MANNERS_QUIET_SEEN, h->next, h->count,
						     1, last->now_ns, q->quiet_ns);
	return a != NULL && manners_quiet_between(q, a, last) == 1;
}

double manners_others_cpus(const struct manners_activity *a, const struct manners_activity *b)
{
	if (a == NULL || b == NULL || b->now_ns <= a->now_ns || b->cpu_busy_ns < a->cpu_busy_ns ||
	    b->own_cpu_ns < a->own_cpu_ns)
		return 0.0;
	uint64_t busy = b->cpu_busy_ns - a->cpu_busy_ns, own = b->own_cpu_ns - a->own_cpu_ns;
	return busy > own ? (double)(busy - own) / (double)(b->now_ns - a->now_ns) : 0.0;
}

int manners_busy_init(struct manners_busy *b, int64_t span_ns, double cpus)
{
	if (b == NULL || span_ns <= 0 || !(cpus > 0.0))
		return -EINVAL;
	*b = (struct manners_busy){ .span_ns = span_ns, .cpus = cpus };
	return 0;
}

int manners_busy_feed(struct manners_busy *b, const struct manners_activity *now)
{
	if (b == NULL || now == NULL)
		return 0;
	if (!b->have_ref || now->now_ns < b->ref.now_ns) {
		b->ref = *now;
		b->have_ref = 1;
		b->busy = 0;
		return 0;
	}
	if (now->now_ns - b->ref.now_ns >= b->span_ns) {
		b->busy = manners_others_cpus(&b->ref, now) >= b->cpus;
		b->ref = *now;
	}
	return b->busy;
}

void manners_busy_hint(struct manners_busy *b, const struct manners_activity *now)
{
	if (b == NULL || now == NULL)
		return;
	b->ref = *now;
	b->have_ref = 1;
	b->busy = 1;
}

int manners_stall_init(struct manners_stall *s, int64_t step_ns, double share)
{
	if (s == NULL || step_ns <= 0 || !(share > 0.0 && share <= 1.0))
		return -EINVAL;
	*s = (struct manners_stall){ .step_ns = step_ns, .share = share };
	return 0;
}

int manners_stall_feed(struct manners_stall *s, int64_t now_ns, uint64_t stall_ns)
{
	if (s == NULL)
		return 0;
	if (!s->have_last || now_ns < s->last_ns || stall_ns < s->last_stall_ns) {
		*s = (struct manners_stall){ .step_ns = s->step_ns, .share = s->share,
					     .last_ns = now_ns, .last_stall_ns = stall_ns,
					     .have_last = 1, .next_ns = s->next_ns };
		return 0;
	}
	int64_t span = now_ns - s->last_ns;
	if (span < s->step_ns / 2 || span <= 0)
		return 0;
	int was = s->stalled;
	s->stalled = (double)(stall_ns - s->last_stall_ns) >= s->share * (double)span;
	s->last_ns = now_ns;
	s->last_stall_ns = stall_ns;
	return s->stalled && !was;
}

/* The schedule of the looks between polls (the pressure's, the disks'):
 * due once now_ns reaches *next_ns, then a step later. */
static int step_due(int64_t *next_ns, int64_t step_ns, int64_t now_ns)
{
	if (now_ns < *next_ns)
		return 0;
	*next_ns = now_ns + step_ns;
	return 1;
}

int manners_stall_due(struct manners_stall *s, int64_t now_ns)
{
	return s != NULL && step_due(&s->next_ns, s->step_ns, now_ns);
}

void manners_stall_pause(struct manners_stall *s)
{
	if (s != NULL)
		s->have_last = 0;
}

int manners_disk_rise_init(struct manners_disk_rise *r, int64_t step_ns, double bps, double share)
{
	if (r == NULL || step_ns <= 0 || !(bps >= 0.0) || !(share >= 0.0))
		return -EINVAL;
	*r = (struct manners_disk_rise){ .step_ns = step_ns, .bps = bps, .share = share };
	return 0;
}

double manners_disk_rise_factor(const struct manners_disk_rise *r)
{
	if (r == NULL || r->ratios == 0)
		return 1.0;
	double sorted[MANNERS_DISK_RISE_RATIOS];
	unsigned n = r->ratios;
	for (unsigned i = 0; i < n; i++) { /* insertion sort: n <= 16 */
		double v = r->ratio[i];
		unsigned j = i;
		for (; j > 0 && sorted[j - 1] > v; j--)
			sorted[j] = sorted[j - 1];
		sorted[j] = v;
	}
	return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

/* Did others move at least bps a second over span_ns, and at least `share`
 * of the job's weighed bytes, given the disk's? */
static int disk_busy(const struct manners_disk_rise *r, double disk, double weighed, double span_ns)
{
	double others = disk > weighed ? disk - weighed : 0.0;
	return others >= r->bps * (span_ns / 1e9) && others >= r->share * weighed;
}

int manners_disk_rise_feed(struct manners_disk_rise *r, const struct manners_activity *now)
{
	if (r == NULL || now == NULL)
		return 0;
	if (!r->have_last || now->now_ns < r->last_ns || now->disk_bytes < r->last_disk ||
	    now->own_disk_bytes < r->last_own) {
		/* After a pause the calm before it still counts: a rival that
		 * came while the job was suspended rises at the first step
		 * after (one that was there before it has left calm at 0). */
		if (r->have_last)
			r->calm = 0;
		r->last_ns = now->now_ns;
		r->last_disk = now->disk_bytes;
		r->last_own = now->own_disk_bytes;
		r->have_last = 1;
		r->busy = 0;
		r->prev_disk = r->prev_own = 0.0;
		r->prev_span = 0;
		return 0;
	}
	int64_t span = now->now_ns - r->last_ns;
	if (span < r->step_ns / 2 || span <= 0)
		return 0;
	double disk = (double)(now->disk_bytes - r->last_disk);
	double own = (double)(now->own_disk_bytes - r->last_own);
	r->last_ns = now->now_ns;
	r->last_disk = now->disk_bytes;
	r->last_own = now->own_disk_bytes;
	/* Nothing moved: no news.  A throttled disk completes in slices
	 * (blk-throttle dispatches a slice's worth at once), and the steps in
	 * between say nothing of who shares it. */
	if (disk < MANNERS_DISK_RISE_MIN_BYTES && own < MANNERS_DISK_RISE_MIN_BYTES)
		return 0;
	/* Judged over this step and the one judged before it: the disk
	 * completes what the job submitted a little later (the job counts a
	 * bio at submit_bio(), the disk at its end, and a throttled loop
	 * device holds it in between), so a step in which the job submitted
	 * little often shows the disk finishing the step before - measured,
	 * jdupes alone on bench/manners.py's emulated disk: 8 and 9 rises in
	 * 20 s judged step by step, 1 and 1 over two steps, and a tar beside
	 * it still rose 0.2 s after it began either way. */
	/* The step before counts if it ended at most a step of no news
	 * before this one began (a throttled disk's slices); after a longer
	 * lull the job may have gone idle, and its last burst would hide a
	 * rival that comes now. */
	int with_prev = r->prev_span > 0 && now->now_ns - span - r->prev_ns <= r->step_ns + r->step_ns / 2;
	double win_disk = disk + (with_prev ? r->prev_disk : 0.0);
	double win_own = own + (with_prev ? r->prev_own : 0.0);
	double win_span = (double)span + (with_prev ? (double)r->prev_span : 0.0);
	r->prev_disk = disk;
	r->prev_own = own;
	r->prev_span = span;
	r->prev_ns = now->now_ns;
	double factor = manners_disk_rise_factor(r);
	r->busy = disk_busy(r, win_disk, factor * win_own, win_span);
	/* The step alone, for the ratio only: a rival's first step is not
	 * busy over two, but its ratio is no stack's depth. */
	int step_busy = disk_busy(r, disk, factor * own, (double)span);
	int rise = r->busy && r->calm >= MANNERS_DISK_RISE_CALM;
	r->calm = r->busy ? 0 : r->calm + 1;
	/* Alone, the ratio is the stack's depth.  The first window is taken
	 * whatever it shows (before it the factor is a guess, and a job on a
	 * stacked device would look like a rival of itself for ever); after
	 * it, a busy step's ratio would count the rival in (busy over two
	 * steps, or in this one), and one with little of the job's own is
	 * noise. */
	if (own >= MANNERS_DISK_RISE_MIN_BYTES && disk > 0.0 &&
	    (r->ratios < MANNERS_DISK_RISE_RATIOS || (!r->busy && !step_busy))) {
		r->ratio[r->next_ratio] = disk / own;
		r->next_ratio = (r->next_ratio + 1) % MANNERS_DISK_RISE_RATIOS;
		if (r->ratios < MANNERS_DISK_RISE_RATIOS)
			r->ratios++;
	}
	return rise;
}

int manners_disk_rise_due(struct manners_disk_rise *r, int64_t now_ns)
{
	return r != NULL && step_due(&r->next_ns, r->step_ns, now_ns);
}

void manners_disk_rise_pause(struct manners_disk_rise *r)
{
	if (r != NULL)
		r->have_last = 0;
}
