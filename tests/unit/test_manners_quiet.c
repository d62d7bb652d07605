/* Description: the end of contention from the machine's counters (issue #10 §4): quiet for 1 s ends a suspension, any busy sample restarts the count, counters that go back are busy; the look back at a judgment leaves the job's own CPU time out and takes only spans of quiet_ns .. 2 quiet_ns. */
#include <errno.h>
#include <stdint.h>

#include "unit.h"
#include "manners/quiet.h"

#define MS INT64_C(1000000)

static struct manners_activity at(int64_t t_ms, uint64_t cpu_ms, uint64_t disk_ms)
{
	return (struct manners_activity){ t_ms * MS, (uint64_t)cpu_ms * MS, (uint64_t)disk_ms * MS, 0 };
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
}

int main(void)
{
	test_look_back();
	test_quiet_after_one_second();
	test_busy_disk_keeps_it();
	test_counters_back_are_busy();
	return 0;
}
