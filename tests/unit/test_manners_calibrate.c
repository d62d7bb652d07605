/* Description: MS Manners calibration (§4.3, §6.2): converges to a known rate, eq. 4 exactly after n, a loaded bootstrap washes out as computed, probation caps the duty cycle, subsampling drops what strict regulation would not have run, a count at its top stays there. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "unit.h"
#include "manners/calibrate.h"

#define MS INT64_C(1000000)
#define S  (1000 * MS)
/* A non-round origin: nothing may depend on t = 0. */
#define T0 (INT64_C(3) * 3600 * S + 987654321)

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static double uniform(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int close_to(double got, double want, double rel)
{
	return fabs(got - want) <= rel * fabs(want);
}

static struct manners_calib_config config(uint32_t n, uint32_t bootstrap, int64_t probation,
					  double duty)
{
	struct manners_calib_config c = { n, bootstrap, probation, duty };
	return c;
}

/* Noisy progress around 100 units/s (uniform +-40 %, testpoints 150-350 ms): the
 * target settles within 1 % of 100. */
static void test_converges(void)
{
	struct manners_calib c;
	struct manners_calib_config cfg = config(1000, 20, 0, 1.0);
	CHECK(manners_calib_init(&c, &cfg) == 0);
	int64_t now = T0;
	for (int i = 0; i < 20000; i++) {
		int64_t d = 150 * MS + (int64_t)(uniform() * 200.0 * (double)MS);
		double rate = 100.0 * (0.6 + 0.8 * uniform());
		now += d;
		CHECK(manners_calib_sample(&c, rate * (double)d / 1e9, d, now) == 1);
		if (i == 18)
			CHECK(!manners_calib_regulating(&c));
		if (i == 19)
			CHECK(manners_calib_regulating(&c));
	}
	CHECK(close_to(c.rate, 100.0, 0.01));
	CHECK_EQ_U64(c.samples, 20000);
	CHECK_EQ_U64(c.dropped, 0);
}

/* A loaded start: 20 testpoints at 40/s, then 100/s.  Up to n the target is the
 * plain mean, (20*40 + (k-20)*100)/k; after n each step is eq. 4, so the gap to
 * 100 shrinks by xi = (n-1)/n per testpoint. */
static void test_loaded_start(void)
{
	struct manners_calib c;
	struct manners_calib_config cfg = config(1000, 20, 0, 1.0);
	CHECK(manners_calib_init(&c, &cfg) == 0);
	int64_t now = T0, d = 200 * MS;
	for (int k = 1; k <= 20; k++) {
		now += d;
		CHECK(manners_calib_sample(&c, 40.0 * 0.2, d, now) == 1);
	}
	CHECK(close_to(c.rate, 40.0, 1e-12));
	for (int k = 21; k <= 1000; k++) {
		now += d;
		CHECK(manners_calib_sample(&c, 100.0 * 0.2, d, now) == 1);
		double want = (20.0 * 40.0 + (k - 20) * 100.0) / k;
		CHECK(close_to(c.rate, want, 1e-9));
	}
	CHECK(close_to(c.rate, 98.8, 1e-9));
	double gap = 100.0 - c.rate;
	for (int k = 1; k <= 3000; k++) {
		now += d;
		CHECK(manners_calib_sample(&c, 100.0 * 0.2, d, now) == 1);
	}
	CHECK(close_to(100.0 - c.rate, gap * pow(0.999, 3000), 1e-6));

	/* One step of eq. 4 by hand, with n = 1000: r <- .999 r + .001 x. */
	double before = c.rate;
	now += d;
	CHECK(manners_calib_sample(&c, 50.0 * 0.2, d, now) == 1);
	CHECK(close_to(c.rate, 0.999 * before + 0.001 * 50.0, 1e-12));
}

/* §4.3's key insight: a regulated process is mostly suspended when contended, so
 * 1 testpoint in 10 sees contention (at half the rate): the target lands near
 * the uncontended rate (within the 5 % that 10 % of half-rate samples cost). */
static void test_key_insight(void)
{
	struct manners_calib c;
	struct manners_calib_config cfg = config(2000, 20, 0, 1.0);
	CHECK(manners_calib_init(&c, &cfg) == 0);
	int64_t now = T0, d = 250 * MS;
	for (int i = 0; i < 40000; i++) {
		double rate = (i % 10 == 0 ? 50.0 : 100.0) * (0.9 + 0.2 * uniform());
		now += d;
		CHECK(manners_calib_sample(&c, rate * 0.25, d, now) == 1);
	}
	CHECK(c.rate > 93.0 && c.rate < 97.0);
}

/* Probation: 60 s at duty 0.25: after a 300 ms run wait 900 ms; after 60 s, 0. */
static void test_probation(void)
{
	struct manners_calib c;
	struct manners_calib_config cfg = config(100, 5, 60 * S, 0.25);
	CHECK(manners_calib_init(&c, &cfg) == 0);
	CHECK(manners_calib_on_probation(&c, T0)); /* before any testpoint */
	CHECK(manners_calib_sample(&c, 10.0, 300 * MS, T0 + 300 * MS) == 1);
	CHECK_EQ_U64(manners_calib_probation_wait(&c, T0 + 300 * MS, 300 * MS), 900 * MS);
	/* A process that obeys runs 25 % of the time through the probation. */
	int64_t now = T0 + 300 * MS, ran = 300 * MS, waited = 0;
	while (manners_calib_on_probation(&c, now)) {
		int64_t w = manners_calib_probation_wait(&c, now, 300 * MS);
		manners_calib_note_wait(&c, now, w);
		now += w;
		waited += w;
		now += 300 * MS;
		ran += 300 * MS;
		CHECK(manners_calib_sample(&c, 10.0, 300 * MS, now) == 1);
	}
	/* Each wait pairs with the run before it: exactly one part in four running. */
	CHECK(close_to((double)(ran - 300 * MS) / (double)(ran - 300 * MS + waited), 0.25, 1e-9));
	CHECK(waited >= 44 * S);
	CHECK(now >= T0 + 60 * S && now < T0 + 62 * S);
	CHECK_EQ_U64(manners_calib_probation_wait(&c, now, 300 * MS), 0);
	/* Probation 0 (the paper's experiments, §9.1): never on probation. */
	cfg = config(100, 5, 0, 0.25);
	CHECK(manners_calib_init(&c, &cfg) == 0);
	CHECK(!manners_calib_on_probation(&c, T0));
	CHECK_EQ_U64(manners_calib_probation_wait(&c, T0, 300 * MS), 0);
}

/* Subsampling: told to wait 5 s at T0 + 10 s, the process runs on.  Its testpoints
 * whose intervals start before T0 + 15 s are dropped; the first one that starts at
 * or after is kept, as a strict thread would have run it. */
static void test_subsampling(void)
{
	struct manners_calib c;
	struct manners_calib_config cfg = config(100, 1, 0, 1.0);
	CHECK(manners_calib_init(&c, &cfg) == 0);
	int64_t d = 500 * MS, now = T0 + 10 * S;
	CHECK(manners_calib_sample(&c, 50.0, d, now) == 1); /* 100/s */
	manners_calib_note_wait(&c, now, 5 * S);
	/* It ignores the wait: testpoints every 0.5 s at a contended 20/s. */
	int kept = 0, dropped = 0;
	for (int i = 1; i <= 10; i++) { /* intervals start at 10.0 .. 14.5 s */
		int r = manners_calib_sample(&c, 10.0, d, now + i * d);
		CHECK(r == 0 || r == 1);
		kept += r;
		dropped += !r;
	}
	CHECK(kept == 0 && dropped == 10);
	CHECK(close_to(c.rate, 100.0, 1e-12)); /* untouched by the ignored stretch */
	CHECK(manners_calib_sample(&c, 50.0, d, now + 11 * d) == 1); /* starts at 15.0 s */
	CHECK_EQ_U64(c.dropped, 10);
	CHECK_EQ_U64(c.samples, 2);
	/* A process that does wait loses nothing. */
	manners_calib_note_wait(&c, now + 11 * d, 2 * S);
	CHECK(manners_calib_sample(&c, 50.0, d, now + 11 * d + 2 * S + d) == 1);
}

static void test_bad_input(void)
{
	struct manners_calib c;
	struct manners_calib_config cfg = config(0, 5, 0, 0.5);
	CHECK(manners_calib_init(&c, &cfg) == -EINVAL);
	cfg = config(10, 0, 0, 0.5);
	CHECK(manners_calib_init(&c, &cfg) == -EINVAL);
	cfg = config(10, 5, -1, 0.5);
	CHECK(manners_calib_init(&c, &cfg) == -EINVAL);
	cfg = config(10, 5, 0, 0.0);
	CHECK(manners_calib_init(&c, &cfg) == -EINVAL);
	cfg = config(10, 5, 0, 1.5);
	CHECK(manners_calib_init(&c, &cfg) == -EINVAL);
	CHECK(manners_calib_init(NULL, NULL) == -EINVAL);
	CHECK(manners_calib_init(&c, NULL) == 0);
	CHECK(c.config.n == MANNERS_CALIB_N_DEFAULT);
	CHECK(manners_calib_sample(&c, -1.0, S, T0) == -EINVAL);
	CHECK(manners_calib_sample(&c, NAN, S, T0) == -EINVAL);
	CHECK(manners_calib_sample(&c, INFINITY, S, T0) == -EINVAL);
	CHECK(manners_calib_sample(&c, 1.0, 0, T0) == -EINVAL);
	CHECK(manners_calib_sample(&c, 1.0, -5, T0) == -EINVAL);
	CHECK(manners_calib_sample(NULL, 1.0, S, T0) == -EINVAL);
	CHECK(manners_calib_sample(&c, 1.0, S, INT64_MIN) == -EINVAL);
	CHECK_EQ_U64(c.samples, 0);
	/* Extreme waits saturate instead of overflowing (UBSan watches). */
	manners_calib_note_wait(&c, INT64_MAX - 5, INT64_MAX);
	CHECK(c.allowed_ns == INT64_MAX);
}

/* A count at its top (a state file may bring any count back) stays there:
 * a wrap to 0 began the bootstrap again and weighed the next sample 1/0,
 * an infinite rate. */
static void test_count_saturates(void)
{
	struct manners_calib c;
	struct manners_calib_config cfg = config(100, 5, 0, 1.0);
	CHECK(manners_calib_init(&c, &cfg) == 0);
	c.samples = UINT64_MAX;
	c.rate = 100.0;
	CHECK(manners_calib_sample(&c, 50.0, S, T0) == 1);
	CHECK_EQ_U64(c.samples, UINT64_MAX);
	CHECK(manners_calib_regulating(&c));
	/* eq. 4 with n = 100: 100 + (50 - 100) / 100 */
	CHECK(close_to(c.rate, 99.5, 1e-12));
}

int main(void)
{
	test_converges();
	test_loaded_start();
	test_key_insight();
	test_probation();
	test_subsampling();
	test_bad_input();
	test_count_saturates();
	return 0;
}
