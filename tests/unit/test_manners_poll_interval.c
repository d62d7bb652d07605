/* Description: benice's adaptive polling (MS Manners §7.2): rounds with many unchanged polls double the interval up to its limit, rounds where every poll moved shorten it down to the lower limit, unchanged polls are carried into the next testpoint until a stall. */
#include <errno.h>
#include <stdint.h>

#include "unit.h"
#include "manners/poll_interval.h"

#define MS INT64_C(1000000)

static void test_defaults_and_bad_config(void)
{
	struct manners_poll p;
	CHECK(manners_poll_init(&p, NULL) == 0);
	CHECK_EQ_U64(p.interval_ns, 250 * MS);
	CHECK(manners_poll_record(NULL, 1) == -EINVAL);
	struct manners_poll_config c;
	manners_poll_config_default(&c);
	c.min_ns = 0;
	CHECK(manners_poll_init(&p, &c) == -EINVAL);
	manners_poll_config_default(&c);
	c.max_ns = c.min_ns - 1;
	CHECK(manners_poll_init(&p, &c) == -EINVAL);
	manners_poll_config_default(&c);
	c.lower_below = c.raise_above;
	CHECK(manners_poll_init(&p, &c) == -EINVAL);
	manners_poll_config_default(&c);
	c.window = 0;
	CHECK(manners_poll_init(&p, &c) == -EINVAL);
	manners_poll_config_default(&c);
	c.stall_polls = 0;
	CHECK(manners_poll_init(&p, &c) == -EINVAL);
}

/* Every poll sees progress: every poll is a testpoint and the interval
 * stays at its lower limit. */
static void test_fine_counter(void)
{
	struct manners_poll p;
	CHECK(manners_poll_init(&p, NULL) == 0);
	for (int i = 0; i < 100; i++)
		CHECK(manners_poll_record(&p, 1) == 1);
	CHECK_EQ_U64(p.interval_ns, 250 * MS);
}

/* A counter updated once every 4 polls: 3 of 4 unchanged, so each round of
 * 8 doubles the interval until the limit; the unchanged polls are carried
 * (not testpoints) and the changed ones are. */
static void test_coarse_counter_lengthens(void)
{
	struct manners_poll p;
	CHECK(manners_poll_init(&p, NULL) == 0);
	int testpoints = 0;
	for (int i = 0; i < 8; i++)
		testpoints += manners_poll_record(&p, i % 4 == 3);
	CHECK_EQ_U64(testpoints, 2);
	CHECK_EQ_U64(p.interval_ns, 500 * MS);
	for (int i = 0; i < 8 * 10; i++)
		manners_poll_record(&p, i % 4 == 3);
	CHECK_EQ_U64(p.interval_ns, 8000 * MS); /* the limit, never beyond */
	/* The counter becomes fine again: each round shortens by a quarter
	 * down to the lower limit. */
	for (int i = 0; i < 8; i++)
		manners_poll_record(&p, 1);
	CHECK_EQ_U64(p.interval_ns, 6000 * MS);
	for (int i = 0; i < 8 * 50; i++)
		manners_poll_record(&p, 1);
	CHECK_EQ_U64(p.interval_ns, 250 * MS);
}

/* Hysteresis: 1 unchanged in 8 (1/8, between 0 and 1/4) keeps it. */
static void test_band_keeps(void)
{
	struct manners_poll p;
	CHECK(manners_poll_init(&p, NULL) == 0);
	for (int i = 0; i < 8; i++)
		manners_poll_record(&p, 1);
	for (int r = 0; r < 10; r++)
		for (int i = 0; i < 8; i++)
			manners_poll_record(&p, i != 0);
	CHECK_EQ_U64(p.interval_ns, 250 * MS);
	for (int r = 0; r < 2; r++)
		for (int i = 0; i < 8; i++)
			manners_poll_record(&p, i > 2); /* 3 of 8 > 1/4 */
	CHECK_EQ_U64(p.interval_ns, 1000 * MS);
}

/* A job that makes no progress at all: every 4th poll is a testpoint (of
 * zero progress), so a stalled job is still judged. */
static void test_stall(void)
{
	struct manners_poll p;
	CHECK(manners_poll_init(&p, NULL) == 0);
	for (int k = 0; k < 5; k++) {
		CHECK(manners_poll_record(&p, 0) == 0);
		CHECK(manners_poll_record(&p, 0) == 0);
		CHECK(manners_poll_record(&p, 0) == 0);
		CHECK(manners_poll_record(&p, 0) == 1);
	}
	/* A change resets the run of unchanged polls. */
	CHECK(manners_poll_record(&p, 0) == 0);
	CHECK(manners_poll_record(&p, 1) == 1);
	CHECK(manners_poll_record(&p, 0) == 0);
	CHECK(manners_poll_record(&p, 0) == 0);
	CHECK(manners_poll_record(&p, 0) == 0);
	CHECK(manners_poll_record(&p, 0) == 1);
}

int main(void)
{
	test_defaults_and_bad_config();
	test_fine_counter();
	test_coarse_counter_lengthens();
	test_band_keeps();
	test_stall();
	return 0;
}
