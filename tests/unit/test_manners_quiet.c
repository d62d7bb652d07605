/* Description: the end of contention from the machine's counters (issue #10 §4): quiet for 1 s ends a suspension, judged on the counters' growth over that second (CPU ticks of 10 ms in 20 ms samples), a busy stretch keeps it busy until it is a second old, counters that go back are busy; a disk is busy by its busy time, its requests or its bytes (a throttled disk shows almost no busy time); the look back at a judgment leaves the job's own CPU time out and takes only spans of quiet_ns .. 2 quiet_ns; quick polls: others' CPUs over 200 ms spans, the job's own time left out, busy from 0.25 CPUs. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "unit.h"
#include "manners/quiet.h"

#define MS INT64_C(1000000)

static struct manners_activity at(int64_t t_ms, uint64_t cpu_ms, uint64_t disk_ms)
{
	return (struct manners_activity){ .now_ns = t_ms * MS, .cpu_busy_ns = (uint64_t)cpu_ms * MS,
					  .disk_busy_ns = (uint64_t)disk_ms * MS };
}

static void test_quiet_after_one_second(void)
{
	struct manners_quiet q;
	CHECK(manners_quiet_init(&q, 1000 * MS, 0.10, 0.05) == 0);
	/* Busy: a CPU hog (100 ms of CPU per 100 ms), then it stops at 1 s. */
	uint64_t cpu = 0;
	for (int t = 0; t <= 1000; t += 100) {
		struct manners_activity a = at(t, cpu, 0);
		CHECK(manners_quiet_feed(&q, &a) == 0);
		cpu += 100;
	}
	/* From 1000 ms on: 5 ms of CPU per 100 ms (the supervisor, daemons). */
	int woke = -1;
	for (int t = 1100; t <= 3000 && woke < 0; t += 100) {
		cpu += 5;
		struct manners_activity a = at(t, cpu, 0);
		if (manners_quiet_feed(&q, &a) == 1)
			woke = t;
	}
	/* The hog ran until 1100 ms (its last 100 ms show in the sample at
	 * 1100); quiet from there, so 1 s later. */
	CHECK(woke == 2100);
}

/* What /proc/stat shows on an idle VM: CPU time in ticks of 10 ms, one
 * tick of somebody (a daemon, the regulator itself) every 300 ms, sampled
 * every 20 ms.  The step that holds a tick reads as half a CPU; over the
 * second it is 0.03 CPU, quiet.  Judged step by step it never ended a
 * suspension (measured: 28 s for a disk job alone). */
static void test_ticks_are_averaged(void)
{
	struct manners_quiet q;
	CHECK(manners_quiet_init(&q, 1000 * MS, 0.10, 0.05) == 0);
	uint64_t cpu = 0;
	int woke = -1;
	for (int t = 0; t <= 3000 && woke < 0; t += 20) {
		if (t % 300 == 0)
			cpu += 10;
		struct manners_activity a = at(t, cpu, 0);
		if (manners_quiet_feed(&q, &a) == 1)
			woke = t;
	}
	CHECK(woke == 1000);
	/* Twice the limit, in the same ticks: 2 of them every 100 ms. */
	manners_quiet_reset(&q);
	cpu = 0;
	for (int t = 0; t <= 3000; t += 20) {
		if (t % 100 == 0)
			cpu += 20;
		struct manners_activity a = at(t, cpu, 0);
		CHECK(manners_quiet_feed(&q, &a) == 0);
	}
}

static void test_busy_disk_keeps_it(void)
{
	struct manners_quiet q;
	CHECK(manners_quiet_init(&q, 500 * MS, 0.10, 0.05) == 0);
	uint64_t disk = 0;
	for (int t = 0; t <= 3000; t += 100) {
		struct manners_activity a = at(t, 0, disk);
		CHECK(manners_quiet_feed(&q, &a) == 0);
		disk += 30; /* 30 % busy */
	}
	/* One busy sample in a quiet stretch restarts it. */
	manners_quiet_reset(&q);
	int64_t t = 0;
	struct manners_activity a = at(t, 0, disk);
	CHECK(manners_quiet_feed(&q, &a) == 0);
	for (t = 100; t <= 400; t += 100) {
		a = at(t, 0, disk);
		CHECK(manners_quiet_feed(&q, &a) == 0);
	}
	disk += 50;
	a = at(500, 0, disk);
	CHECK(manners_quiet_feed(&q, &a) == 0);
	for (t = 600; t < 1000; t += 100) {
		a = at(t, 0, disk);
		CHECK(manners_quiet_feed(&q, &a) == 0);
	}
	a = at(1000, 0, disk);
	CHECK(manners_quiet_feed(&q, &a) == 1);
}

static void test_counters_back_are_busy(void)
{
	struct manners_quiet q;
	CHECK(manners_quiet_init(&q, 200 * MS, 0.10, 0.05) == 0);
	struct manners_activity a = at(0, 1000, 1000);
	CHECK(manners_quiet_feed(&q, &a) == 0);
	a = at(300, 10, 1000);
	CHECK(manners_quiet_feed(&q, &a) == 0);
	a = at(200, 10, 1000);
	CHECK(manners_quiet_feed(&q, &a) == -EINVAL);
	CHECK(manners_quiet_init(&q, 0, 0.1, 0.1) == -EINVAL);
	CHECK(manners_quiet_init(&q, 1, -0.1, 0.1) == -EINVAL);
	CHECK(manners_quiet_feed(NULL, &a) == -EINVAL);
}

/* A disk whose bandwidth is limited above its queue (the emulated disk of
 * bench/manners.py: a blkio throttle on a loop device over a host-cached
 * virtual disk): a foreground reading 48 MiB/s in 80 requests a second
 * kept it 2 % busy.  Its requests and bytes say what its busy time hides. */
static void test_throttled_disk_is_busy(void)
{
	struct manners_quiet q;
	CHECK(manners_quiet_init(&q, 1000 * MS, 0.10, 0.05) == 0);
	CHECK(q.disk_iops_max == MANNERS_QUIET_DISK_IOPS_DEFAULT);
	CHECK(q.disk_bps_max == MANNERS_QUIET_DISK_BPS_DEFAULT);
	/* One second, the disk 2 % busy: requests, bytes, quiet? */
	static const struct { uint64_t ios, bytes; int quiet; } second[] = {
		{ 80, 48u << 20, 0 },      /* a foreground reading 48 MiB/s        */
		{ 150, 150u * 4096, 0 },   /* random 4 KiB reads at an HDD's rate  */
		{ 4, 48u << 20, 0 },       /* as many bytes in few requests        */
		{ 6, 36u << 10, 1 },       /* an idle machine's journal            */
		{ 20, 80u << 10, 1 },      /* a progress file replaced 20 times    */
		{ 50, 1u << 20, 1 },       /* the limits exactly                   */
		{ 51, 1u << 20, 0 },
		{ 50, (1u << 20) + 1, 0 },
	};
	struct manners_activity a = at(0, 0, 0), b = at(1000, 0, 20);
	for (size_t i = 0; i < sizeof second / sizeof second[0]; i++) {
		b.disk_ios = second[i].ios;
		b.disk_bytes = second[i].bytes;
		CHECK(manners_quiet_between(&q, &a, &b) == second[i].quiet);
	}
	/* The same during a suspension: 3 s of 48 MiB/s never end it (the
	 * limits scale with the sampling step: 0.1 s, 5 requests). */
	manners_quiet_reset(&q);
	uint64_t ios = 0, bytes = 0;
	for (int t = 0; t <= 3000; t += 100) {
		struct manners_activity s = at(t, 0, (uint64_t)t / 50);
		s.disk_ios = ios;
		s.disk_bytes = bytes;
		CHECK(manners_quiet_feed(&q, &s) == 0);
		ios += 8;
		bytes += 48u << 17; /* 4.8 MiB per 0.1 s */
	}
	/* A counter that went back (a disk removed) is busy. */
	a.disk_ios = 100;
	b.disk_ios = 5;
	CHECK(manners_quiet_between(&q, &a, &b) == 0);
}

static struct manners_activity own_at(int64_t t_ms, uint64_t cpu_ms, uint64_t disk_ms, uint64_t own_ms)
{
	struct manners_activity a = at(t_ms, cpu_ms, disk_ms);
	a.own_cpu_ns = own_ms * (uint64_t)MS;
	return a;
}

static void test_look_back(void)
{
	struct manners_quiet q;
	CHECK(manners_quiet_init(&q, 1000 * MS, 0.10, 0.05) == 0);
	/* The job alone on a CPU for 1 s (all of the machine's busy time is
	 * its own) plus 50 ms of daemons: quiet, its slow stretch was noise. */
	struct manners_activity a = own_at(0, 5000, 700, 3000), b = own_at(1000, 6050, 700, 4000);
	CHECK(manners_quiet_between(&q, &a, &b) == 1);
	/* The same with a foreground on the other CPU half the time: not. */
	b = own_at(1000, 6500, 700, 4000);
	CHECK(manners_quiet_between(&q, &a, &b) == 0);
	/* The job's ticks a tick above the machine's: nobody else, quiet. */
	b = own_at(1000, 5990, 700, 4000);
	CHECK(manners_quiet_between(&q, &a, &b) == 1);
	/* The disk 10 % busy (the job's own reads, or somebody's): not. */
	b = own_at(1000, 6000, 800, 4000);
	CHECK(manners_quiet_between(&q, &a, &b) == 0);
	/* Spans too short to tell, or so long they would average a burst
	 * away: no answer. */
	b = own_at(900, 5900, 700, 3900);
	CHECK(manners_quiet_between(&q, &a, &b) == 0);
	b = own_at(2001, 7001, 700, 5001);
	CHECK(manners_quiet_between(&q, &a, &b) == 0);
	b = own_at(2000, 7000, 700, 5000);
	CHECK(manners_quiet_between(&q, &a, &b) == 1);
	/* The job's own count went down (a process of it exited): busy. */
	b = own_at(1000, 6000, 700, 2000);
	CHECK(manners_quiet_between(&q, &a, &b) == 0);
	CHECK(manners_quiet_between(NULL, &a, &b) == -EINVAL);
	CHECK(manners_quiet_between(&q, NULL, &b) == -EINVAL);

	/* Through the history: quiet from its newest sample back 1 s, but
	 * never while the quick polls' spans say others use a CPU now. */
	struct manners_quiet_history h = { 0 };
	CHECK(manners_quiet_history_quiet(&h, &q, NULL) == 0); /* nothing seen */
	manners_quiet_history_add(&h, &q, &a);
	b = own_at(1000, 6050, 700, 4000);
	manners_quiet_history_add(&h, &q, &b);
	struct manners_busy busy;
	CHECK(manners_busy_init(&busy, 200 * MS, 0.25) == 0);
	CHECK(manners_quiet_history_quiet(&h, &q, NULL) == 1);
	CHECK(manners_quiet_history_quiet(&h, &q, &busy) == 1);
	busy.busy = 1;
	CHECK(manners_quiet_history_quiet(&h, &q, &busy) == 0);
	CHECK(manners_quiet_history_quiet(NULL, &q, NULL) == 0);
}

/* Quick polls: others' CPU time over 200 ms spans, the job's own left out. */
static void test_busy_spans(void)
{
	struct manners_busy b;
	CHECK(manners_busy_init(&b, 0, 0.25) == -EINVAL);
	CHECK(manners_busy_init(&b, 200 * MS, 0.0) == -EINVAL);
	CHECK(manners_busy_init(&b, 200 * MS, 0.25) == 0);

	/* The job alone on a CPU: all the busy time is its own. */
	uint64_t cpu = 0, own = 0;
	int t = 0;
	for (; t <= 1000; t += 50, cpu += 50, own += 50) {
		struct manners_activity a = at(t, cpu, 0);
		a.own_cpu_ns = own * (uint64_t)MS;
		CHECK(manners_busy_feed(&b, &a) == 0);
	}
	/* A rival on the job's CPU from 1000 ms: each gets 25 ms of 50, the
	 * machine's busy time goes on at one CPU.  Busy once a whole 200 ms
	 * span has seen it: the span that began at 1000 ms ends at 1200. */
	int busy_at = -1;
	for (; t <= 2000; t += 50, cpu += 50, own += 25) {
		struct manners_activity a = at(t, cpu, 0);
		a.own_cpu_ns = own * (uint64_t)MS;
		if (manners_busy_feed(&b, &a) == 1 && busy_at < 0)
			busy_at = t;
	}
	CHECK(busy_at == 1200);
	CHECK(b.busy == 1);
	/* 0.5 CPUs of others over a span. */
	struct manners_activity a0 = at(0, 0, 0), a1 = at(200, 200, 0);
	a1.own_cpu_ns = 100 * (uint64_t)MS;
	CHECK(manners_others_cpus(&a0, &a1) > 0.499 && manners_others_cpus(&a0, &a1) < 0.501);
	/* An empty span, and counters that went back: nobody. */
	CHECK(manners_others_cpus(&a0, &a0) == 0.0);
	CHECK(manners_others_cpus(&a1, &a0) == 0.0);
	/* A daemon's 10 ms in 200 ms is not busy; and back in time restarts. */
	CHECK(manners_busy_init(&b, 200 * MS, 0.25) == 0);
	struct manners_activity s0 = at(0, 0, 0), s1 = at(200, 10, 0), s2 = at(100, 500, 0);
	CHECK(manners_busy_feed(&b, &s0) == 0);
	CHECK(manners_busy_feed(&b, &s1) == 0);
	CHECK(manners_busy_feed(&b, &s2) == 0);
	CHECK(b.ref.now_ns == 100 * MS);
	CHECK(manners_busy_feed(NULL, &s0) == 0);
}

/* The rise of CPU pressure: a step of 50 ms, stalled from a quarter of it. */
static void test_stall_rise(void)
{
	struct manners_stall s;
	CHECK(manners_stall_init(&s, 0, 0.25) == -EINVAL);
	CHECK(manners_stall_init(&s, 50 * MS, 0.0) == -EINVAL);
	CHECK(manners_stall_init(&s, 50 * MS, 1.5) == -EINVAL);
	CHECK(manners_stall_init(&s, 50 * MS, 0.25) == 0);

	/* Alone: nobody waits.  The first look only starts the step. */
	uint64_t stall = 0;
	int t = 0;
	for (; t < 500; t += 50)
		CHECK(manners_stall_feed(&s, t * MS, stall) == 0);
	/* A rival on the job's CPU from 500 ms: one of them always waits.
	 * The rise is seen at the end of the first step, once. */
	int rises = 0, rise_at = -1;
	for (; t <= 1500; t += 50, stall += 50 * (uint64_t)MS) {
		if (manners_stall_feed(&s, t * MS, stall) == 1) {
			rises++;
			rise_at = t;
		}
	}
	CHECK(rises == 1 && rise_at == 550);
	/* Gone, and back: a second rise. */
	for (; t <= 2000; t += 50)
		CHECK(manners_stall_feed(&s, t * MS, stall) == 0);
	stall += 30 * (uint64_t)MS;
	CHECK(manners_stall_feed(&s, t * MS, stall) == 1);
	t += 50;

	/* A look within half a step is not judged: 20 ms of 20 would be a
	 * full share out of a tick's noise. */
	CHECK(manners_stall_init(&s, 50 * MS, 0.25) == 0);
	CHECK(manners_stall_feed(&s, 0, 0) == 0);
	CHECK(manners_stall_feed(&s, 20 * MS, 20 * (uint64_t)MS) == 0);
	CHECK(s.last_ns == 0);
	/* Under the share (10 ms in 50) is no rise; at it (13 of 50) is. */
	CHECK(manners_stall_feed(&s, 50 * MS, 10 * (uint64_t)MS) == 0);
	CHECK(manners_stall_feed(&s, 100 * MS, 23 * (uint64_t)MS) == 1);

	/* A job that keeps the share up by itself rises once, at its start. */
	CHECK(manners_stall_init(&s, 50 * MS, 0.25) == 0);
	rises = 0;
	stall = 0;
	for (t = 0; t <= 2000; t += 50, stall += 40 * (uint64_t)MS)
		rises += manners_stall_feed(&s, t * MS, stall);
	CHECK(rises == 1);
	/* Back in time, or a total gone down: afresh, no rise. */
	CHECK(manners_stall_feed(&s, 10 * MS, stall) == 0);
	CHECK(s.last_ns == 10 * MS && s.stalled == 0);
	CHECK(manners_stall_feed(&s, 100 * MS, 0) == 0);
	CHECK(manners_stall_feed(NULL, 0, 0) == 0);

	/* One look a step, however often the regulator wakes; a pause makes
	 * the next look a new baseline, whatever the gap held. */
	CHECK(manners_stall_init(&s, 50 * MS, 0.25) == 0);
	CHECK(manners_stall_due(&s, 0) == 1);
	CHECK(manners_stall_due(&s, 20 * MS) == 0);
	CHECK(manners_stall_due(&s, 50 * MS) == 1 && s.next_ns == 100 * MS);
	CHECK(manners_stall_feed(&s, 0, 0) == 0);
	CHECK(manners_stall_feed(&s, 50 * MS, 0) == 0);
	manners_stall_pause(&s);
	CHECK(manners_stall_feed(&s, 1000 * MS, 900 * (uint64_t)MS) == 0); /* baseline */
	CHECK(s.next_ns == 100 * MS && s.last_ns == 1000 * MS);
	CHECK(manners_stall_feed(&s, 1050 * MS, 950 * (uint64_t)MS) == 1);
	CHECK(manners_stall_due(NULL, 0) == 0);
	manners_stall_pause(NULL);

	/* The hint: busy at once, and the next span judged from there. */
	struct manners_busy b;
	CHECK(manners_busy_init(&b, 200 * MS, 0.25) == 0);
	struct manners_activity h = at(300, 100, 0);
	manners_busy_hint(&b, &h);
	CHECK(b.busy == 1 && b.ref.now_ns == 300 * MS);
	struct manners_activity mid = at(400, 105, 0);
	CHECK(manners_busy_feed(&b, &mid) == 1); /* not judged yet: still busy */
	struct manners_activity end = at(500, 110, 0); /* 10 ms in 200: nobody */
	CHECK(manners_busy_feed(&b, &end) == 0);
	manners_busy_hint(NULL, &h);
	manners_busy_hint(&b, NULL);
}

/* The rise of others' disk traffic: steps of 100 ms on a loop device that
 * counts the job's bytes twice (the loop device and the disk below it). */
static void feed_disk(struct manners_disk_rise *r, struct manners_activity *a, int64_t t,
		      uint64_t own, uint64_t others, int *rises, int64_t *rise_at)
{
	/* The disk completes what the job submitted a little later: +-30 %
	 * of its bytes move between neighbouring steps. */
	uint64_t lag = own * 3 / 10;
	a->now_ns = t;
	a->own_disk_bytes += own;
	a->disk_bytes += 2 * own + others + ((t / (100 * MS)) % 2 ? lag : 0) - ((t / (100 * MS)) % 2 ? 0 : lag);
	if (manners_disk_rise_feed(r, a) == 1) {
		++*rises;
		*rise_at = t;
	}
}

static void test_disk_rise(void)
{
	struct manners_disk_rise r;
	CHECK(manners_disk_rise_init(&r, 0, 1.0, 0.5) == -EINVAL);
	CHECK(manners_disk_rise_init(&r, 100 * MS, -1.0, 0.5) == -EINVAL);
	CHECK(manners_disk_rise_init(&r, 100 * MS, 1.0, -0.5) == -EINVAL);
	CHECK(manners_disk_rise_init(&r, 100 * MS, MANNERS_DISK_RISE_BPS_DEFAULT,
				     MANNERS_DISK_RISE_SHARE_DEFAULT) == 0);
	CHECK(manners_disk_rise_factor(&r) == 1.0);

	/* Alone at 3.5 or 6.5 MB a step (bursts), the disk's count +-30 % off
	 * the job's: counted twice, the job looks like a rival at first
	 * (factor 1 before any ratio), but calm steps come before a rise, and
	 * by then the factor is learnt (about 2) and the noise is no rise. */
	struct manners_activity a = { 0 };
	int rises = 0;
	int64_t at = -1, t = 0;
	for (; t < 3000 * MS; t += 100 * MS)
		feed_disk(&r, &a, t, (t / (100 * MS)) % 2 ? 6500000 : 3500000, 0, &rises, &at);
	CHECK(rises == 0);
	double f = manners_disk_rise_factor(&r);
	CHECK(f > 1.7 && f < 2.3);
	/* A rival takes half of the saturated disk: the job's bytes halve,
	 * the disk's do not.  One rise, at its second step (judged with the
	 * step before it, alone, the first is under half the job's). */
	for (int64_t end = t + 1000 * MS; t < end; t += 100 * MS)
		feed_disk(&r, &a, t, 2500000, 5000000, &rises, &at);
	CHECK(rises == 1 && at == 3100 * MS);
	/* The rival stays, on a disk that completes in slices: every other
	 * step moves nothing (no news).  No second rise, and the rival does
	 * not become the normal. */
	for (int64_t end = t + 3000 * MS; t < end; t += 100 * MS) {
		if ((t / (100 * MS)) % 2)
			feed_disk(&r, &a, t, 0, 0, &rises, &at);
		else
			feed_disk(&r, &a, t, 5000000, 10000000, &rises, &at);
	}
	CHECK(rises == 1);
	f = manners_disk_rise_factor(&r);
	CHECK(f > 1.7 && f < 2.3);
	/* Gone a while, and back: a second rise, at its second step; back
	 * too soon: none. */
	for (int64_t end = t + 1000 * MS; t < end; t += 100 * MS)
		feed_disk(&r, &a, t, 5000000, 0, &rises, &at);
	feed_disk(&r, &a, t, 2500000, 5000000, &rises, &at);
	CHECK(rises == 1);
	t += 100 * MS;
	feed_disk(&r, &a, t, 2500000, 5000000, &rises, &at);
	CHECK(rises == 2 && at == t);
	t += 100 * MS;
	for (int64_t end = t + 300 * MS; t < end; t += 100 * MS)
		feed_disk(&r, &a, t, 5000000, 0, &rises, &at);
	for (int64_t end = t + 200 * MS; t < end; t += 100 * MS)
		feed_disk(&r, &a, t, 2500000, 5000000, &rises, &at);
	CHECK(rises == 2);

	/* A rival of less than bps a second, or less than half the job's
	 * weighed bytes, is none: an idle VM's journal, a trickle. */
	CHECK(manners_disk_rise_init(&r, 100 * MS, MANNERS_DISK_RISE_BPS_DEFAULT,
				     MANNERS_DISK_RISE_SHARE_DEFAULT) == 0);
	a = (struct manners_activity){ 0 };
	rises = 0;
	for (t = 0; t < 2000 * MS; t += 100 * MS)
		feed_disk(&r, &a, t, 5000000, t < 200 * MS ? 0 : 150000, &rises, &at);
	CHECK(rises == 0);
	for (int64_t end = t + 1000 * MS; t < end; t += 100 * MS)
		feed_disk(&r, &a, t, 5000000, 3000000, &rises, &at); /* 30 % of 10 MB */
	CHECK(rises == 0);
	/* The job idle (cached reads, computing): anybody's bytes over bps
	 * are a rival. */
	for (int64_t end = t + 300 * MS; t < end; t += 100 * MS)
		feed_disk(&r, &a, t, 0, 0, &rises, &at);
	feed_disk(&r, &a, t, 0, 400000, &rises, &at);
	CHECK(rises == 1 && at == t);
	t += 100 * MS;

	/* A pause (the job suspended) makes the next look a new baseline and
	 * keeps the factor and the calm before it: a rival that came during
	 * the suspension rises at the first step after. */
	for (int64_t end = t + 600 * MS; t < end; t += 100 * MS)
		feed_disk(&r, &a, t, 5000000, 0, &rises, &at);
	manners_disk_rise_pause(&r);
	a.disk_bytes += 30000000; /* the rival, unseen during the suspension */
	t += 2000 * MS;
	feed_disk(&r, &a, t, 0, 0, &rises, &at); /* the baseline */
	CHECK(r.last_ns == t && r.calm >= MANNERS_DISK_RISE_CALM);
	t += 100 * MS;
	feed_disk(&r, &a, t, 2500000, 5000000, &rises, &at);
	CHECK(rises == 2 && at == t);
	t += 100 * MS;

	/* A look within half a step is not judged; a pause makes the next
	 * look a new baseline (the factor is kept); back in time afresh. */
	int64_t last = r.last_ns;
	a.now_ns = t - 60 * MS;
	a.disk_bytes += 10000000;
	CHECK(manners_disk_rise_feed(&r, &a) == 0 && r.last_ns == last);
	manners_disk_rise_pause(&r);
	a.now_ns = t;
	CHECK(manners_disk_rise_feed(&r, &a) == 0 && r.last_ns == t && r.busy == 0);
	CHECK(manners_disk_rise_factor(&r) > 1.7);
	a.now_ns = t - 1000 * MS;
	CHECK(manners_disk_rise_feed(&r, &a) == 0 && r.last_ns == t - 1000 * MS);
	a.own_disk_bytes = 0;
	a.now_ns = t + 100 * MS;
	CHECK(manners_disk_rise_feed(&r, &a) == 0 && r.last_own == 0);
	CHECK(manners_disk_rise_feed(NULL, &a) == 0 && manners_disk_rise_feed(&r, NULL) == 0);
	CHECK(manners_disk_rise_factor(NULL) == 1.0);
	CHECK(manners_disk_rise_due(&r, 0) == 1 && manners_disk_rise_due(&r, 50 * MS) == 0);
	CHECK(manners_disk_rise_due(&r, 100 * MS) == 1 && r.next_ns == 200 * MS);
	CHECK(manners_disk_rise_due(NULL, 0) == 0);
	manners_disk_rise_pause(NULL);
}

/* The disk completes a burst a step after the job submitted it: no rise,
 * since a step is judged with the one before.  Steps of 100 ms, the factor
 * learnt at 2 (a loop device on a disk).  One step: the job's and the
 * disk's bytes in it, judged at *t, which then moves to the next step. */
static void step_disk(struct manners_disk_rise *r, struct manners_activity *a, int64_t *t,
		      uint64_t own, uint64_t disk, int *rises)
{
	a->now_ns = *t;
	a->own_disk_bytes += own;
	a->disk_bytes += disk;
	*rises += manners_disk_rise_feed(r, a) == 1;
	*t += 100 * MS;
}

static void test_disk_rise_lag(void)
{
	struct manners_disk_rise r;
	struct manners_activity a = { 0 };
	int rises = 0;
	int64_t t = 0;
	CHECK(manners_disk_rise_init(&r, 100 * MS, MANNERS_DISK_RISE_BPS_DEFAULT,
				     MANNERS_DISK_RISE_SHARE_DEFAULT) == 0);
	while (t < 2000 * MS)
		step_disk(&r, &a, &t, 4000000, 8000000, &rises);
	CHECK(rises == 0 && manners_disk_rise_factor(&r) == 2.0);
	/* A burst at the end of a step, completed in the next (4 MB read,
	 * 8 MB through the two layers), then hashing; again and again. */
	for (int i = 0; i < 5; i++) {
		step_disk(&r, &a, &t, 4000000, 0, &rises);
		step_disk(&r, &a, &t, 0, 8000000, &rises);
		for (int j = 0; j < 6; j++)
			step_disk(&r, &a, &t, 0, 0, &rises);
	}
	CHECK(rises == 0);
	/* Half of it in the next step, the rest with a step of no news
	 * between (a throttled disk's slices): the step before still counts,
	 * and there is none. */
	step_disk(&r, &a, &t, 4000000, 4000000, &rises);
	step_disk(&r, &a, &t, 0, 0, &rises);
	step_disk(&r, &a, &t, 0, 4000000, &rises);
	CHECK(rises == 0);
	/* The same bytes again, in the step after, are the others'. */
	for (int j = 0; j < 6; j++)
		step_disk(&r, &a, &t, 0, 0, &rises);
	step_disk(&r, &a, &t, 4000000, 0, &rises);
	step_disk(&r, &a, &t, 0, 8000000, &rises);
	CHECK(rises == 0);
	step_disk(&r, &a, &t, 0, 8000000, &rises);
	CHECK(rises == 1);
	/* ... and so is what comes after a lull of two steps: the job may
	 * have gone idle, and its last burst counts no more. */
	for (int j = 0; j < 6; j++)
		step_disk(&r, &a, &t, 4000000, 8000000, &rises);
	step_disk(&r, &a, &t, 4000000, 0, &rises);
	step_disk(&r, &a, &t, 0, 0, &rises);
	step_disk(&r, &a, &t, 0, 0, &rises);
	step_disk(&r, &a, &t, 0, 8000000, &rises);
	CHECK(rises == 2);
}

int main(void)
{
	test_busy_spans();
	test_stall_rise();
	test_disk_rise();
	test_disk_rise_lag();
	test_look_back();
	test_quiet_after_one_second();
	test_ticks_are_averaged();
	test_busy_disk_keeps_it();
	test_counters_back_are_busy();
	test_throttled_disk_is_busy();
	return 0;
}
