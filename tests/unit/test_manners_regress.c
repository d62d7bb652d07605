/* Description: MS Manners several metrics (§4.4, §6.3): ridge regression recovers known costs, survives identical and proportional metrics, tracks change by eq. 11-12, and per-phase targets by index combine in one sign test, a count at its top stays there. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "unit.h"
#include "manners/regress.h"
#include "manners/sign_test.h"

#define MS INT64_C(1000000)
#define S  (1000 * MS)
#define T0 (INT64_C(5) * 3600 * S + 13579)

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static double uniform(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int close_to(double got, double want, double rel)
{
	return isfinite(got) && fabs(got - want) <= rel * fabs(want);
}

/* Duration of a testpoint in ns for costs c (ns per unit), with relative noise. */
static int64_t duration(const double *c, const double *dp, int m, double noise)
{
	double d = 0;
	for (int k = 0; k < m; k++)
		d += c[k] * dp[k];
	d *= 1.0 + noise * (2.0 * uniform() - 1.0);
	return (int64_t)llround(d);
}

/* §4.4's content indexer: 750 kB/s scanned (1.333 ms per kB) and 120 indices/s
 * (8.333 ms per index).  Noise-free, the regression gets the costs back; with
 * +-20 % noise, within 1 %. */
static void test_recovers_costs(void)
{
	const double cost[2] = { 1e9 / 750.0, 1e9 / 120.0 };
	for (int noisy = 0; noisy <= 1; noisy++) {
		struct manners_regress r;
		CHECK(manners_regress_init(&r, 2, 10000, MANNERS_REGRESS_NU_DEFAULT) == 0);
		for (int i = 0; i < 5000; i++) {
			double dp[2] = { 20.0 + 100.0 * uniform(), floor(10.0 * uniform()) };
			CHECK(manners_regress_add(&r, dp, duration(cost, dp, 2, noisy ? 0.2 : 0.0)) == 0);
		}
		CHECK(manners_regress_solve(&r) == 0);
		double tol = noisy ? 0.01 : 1e-6;
		CHECK(close_to(r.coef[0], cost[0], tol));
		CHECK(close_to(r.coef[1], cost[1], tol));
		/* The paper's worked example: 60 kB and 5 indices in 120 ms. */
		double dp[2] = { 60.0, 5.0 }, target;
		CHECK(manners_regress_target_ns(&r, dp, &target) == 0);
		CHECK(close_to(target, 121.667 * (double)MS, noisy ? 0.01 : 1e-5));
		CHECK(120 * MS < target); /* faster than target: good */
	}
}

/* Three metrics in very different units (bytes, operations, files), costs over
 * 6 orders of magnitude: the default, unit-free ridge recovers them; eq. 14's
 * trace ridge, as the paper has it, biases them (regress.h), though the target
 * durations it gives stay within a few percent. */
static void test_three_metrics(void)
{
	const double cost[3] = { 2.5, 4e3, 7e6 }; /* per byte, per op, per file */
	struct manners_regress r, paper;
	CHECK(manners_regress_init(&r, 3, 500, MANNERS_REGRESS_NU_DEFAULT) == 0);
	CHECK(manners_regress_init(&paper, 3, 500, MANNERS_REGRESS_NU_DEFAULT) == 0);
	paper.trace_ridge = 1;
	for (int i = 0; i < 3000; i++) {
		double dp[3] = { 1e5 * uniform(), 1 + floor(30 * uniform()), floor(3 * uniform()) };
		int64_t d = duration(cost, dp, 3, 0.0);
		CHECK(manners_regress_add(&r, dp, d) == 0);
		CHECK(manners_regress_add(&paper, dp, d) == 0);
	}
	CHECK(manners_regress_solve(&r) == 0);
	CHECK(manners_regress_solve(&paper) == 0);
	for (int k = 0; k < 3; k++)
		CHECK(close_to(r.coef[k], cost[k], 1e-6));
	CHECK(!close_to(paper.coef[0], cost[0], 0.1)); /* the bias is real */
	double dp[3] = { 5e4, 15, 1 }, want = 2.5 * 5e4 + 4e3 * 15 + 7e6, t;
	CHECK(manners_regress_target_ns(&paper, dp, &t) == 0 && close_to(t, want, 0.05));
	CHECK(manners_regress_target_ns(&r, dp, &t) == 0 && close_to(t, want, 1e-6));
}

/* Two identical metrics (d = 3000 dp): X is singular; the ridge term splits the
 * cost, 1500 each, and the target is still exact.  Then eight identical
 * metrics, and two proportional ones (dp2 = 4 dp1). */
static void test_collinear(void)
{
	struct manners_regress r;
	CHECK(manners_regress_init(&r, 2, 1000, MANNERS_REGRESS_NU_DEFAULT) == 0);
	for (int i = 0; i < 2000; i++) {
		double v = 1.0 + 99.0 * uniform();
		double dp[2] = { v, v };
		CHECK(manners_regress_add(&r, dp, (int64_t)llround(3000.0 * v)) == 0);
	}
	CHECK(manners_regress_solve(&r) == 0);
	CHECK(close_to(r.coef[0], 1500.0, 1e-4));
	CHECK(close_to(r.coef[1], 1500.0, 1e-4));
	double dp2[2] = { 50.0, 50.0 }, target;
	CHECK(manners_regress_target_ns(&r, dp2, &target) == 0);
	CHECK(close_to(target, 150000.0, 1e-4));

	CHECK(manners_regress_init(&r, 8, 1000, MANNERS_REGRESS_NU_DEFAULT) == 0);
	for (int i = 0; i < 500; i++) {
		double v = 1.0 + 99.0 * uniform(), dp[8];
		for (int k = 0; k < 8; k++)
			dp[k] = v;
		CHECK(manners_regress_add(&r, dp, (int64_t)llround(8000.0 * v)) == 0);
	}
	CHECK(manners_regress_solve(&r) == 0);
	for (int k = 0; k < 8; k++)
		CHECK(close_to(r.coef[k], 1000.0, 1e-4));

	CHECK(manners_regress_init(&r, 2, 1000, MANNERS_REGRESS_NU_DEFAULT) == 0);
	for (int i = 0; i < 500; i++) {
		double v = 1.0 + 99.0 * uniform();
		double dp[2] = { v, 4.0 * v };
		CHECK(manners_regress_add(&r, dp, (int64_t)llround(1700.0 * v)) == 0);
	}
	CHECK(manners_regress_solve(&r) == 0);
	/* Standardised, the two columns are one, so each is credited half the time:
	 * c1 dp = c2 (4 dp) = 850 dp, i.e. (850, 212.5); the target stays exact. */
	CHECK(close_to(r.coef[0], 850.0, 1e-4));
	CHECK(close_to(r.coef[1], 212.5, 1e-4));
	double dp4[2] = { 10.0, 40.0 };
	CHECK(manners_regress_target_ns(&r, dp4, &target) == 0 && close_to(target, 17000.0, 1e-4));
	/* The paper's trace ridge gives the minimum-norm split, c (1, 4) / 17. */
	r.trace_ridge = 1;
	CHECK(manners_regress_solve(&r) == 0);
	CHECK(close_to(r.coef[0], 100.0, 1e-3));
	CHECK(close_to(r.coef[1], 400.0, 1e-3));

	/* With nu = 0, the same identical pair is singular: an error, not a NaN. */
	CHECK(manners_regress_init(&r, 2, 1000, 0.0) == 0);
	for (int i = 0; i < 10; i++) {
		double dp[2] = { 7.0, 7.0 };
		CHECK(manners_regress_add(&r, dp, 21000) == 0);
	}
	CHECK(manners_regress_solve(&r) == -EDOM);
}

/* The sufficient statistics: plain sums for n testpoints, then eq. 11, 12. */
static void test_statistics(void)
{
	struct manners_regress r;
	CHECK(manners_regress_init(&r, 2, 4, 0.0) == 0);
	double a[2] = { 1, 2 }, b[2] = { 3, 5 };
	CHECK(manners_regress_add(&r, a, 10) == 0);
	CHECK(manners_regress_add(&r, b, 20) == 0);
	CHECK(r.x[0][0] == 10 && r.x[0][1] == 17 && r.x[1][0] == 17 && r.x[1][1] == 29);
	CHECK(r.y[0] == 70 && r.y[1] == 120);
	CHECK(manners_regress_add(&r, a, 10) == 0);
	CHECK(manners_regress_add(&r, b, 20) == 0); /* 4 = n: still plain */
	CHECK(r.x[0][0] == 20 && r.y[1] == 240);
	CHECK(manners_regress_add(&r, a, 10) == 0); /* xi = 3/4 from here */
	CHECK(r.x[0][0] == 0.75 * 20 + 1 && r.x[1][1] == 0.75 * 58 + 4);
	CHECK(r.y[0] == 0.75 * 140 + 10);
	/* A metric that never progressed costs 0 (and breaks nothing). */
	CHECK(manners_regress_init(&r, 2, 100, MANNERS_REGRESS_NU_DEFAULT) == 0);
	double target;
	CHECK(manners_regress_target_ns(&r, a, &target) == -EAGAIN); /* no data */
	for (int i = 0; i < 50; i++) {
		double dp[2] = { 1 + uniform(), 0 };
		CHECK(manners_regress_add(&r, dp, (int64_t)llround(500.0 * dp[0])) == 0);
	}
	CHECK(manners_regress_solve(&r) == 0);
	CHECK(close_to(r.coef[0], 500.0, 1e-4) && r.coef[1] == 0.0);
}

/* Tracking (§6.3): the cost per unit doubles; with n = 200, after 10 n testpoints
 * the fit is the new cost within 1 % (the old data weigh xi^2000 = 4.5e-5). */
static void test_tracks_change(void)
{
	struct manners_regress r;
	CHECK(manners_regress_init(&r, 2, 200, MANNERS_REGRESS_NU_DEFAULT) == 0);
	const double before[2] = { 100, 1e5 }, after[2] = { 200, 1e5 };
	for (int i = 0; i < 1000; i++) {
		double dp[2] = { 1e3 * uniform(), floor(4 * uniform()) };
		CHECK(manners_regress_add(&r, dp, duration(before, dp, 2, 0.0)) == 0);
	}
	CHECK(manners_regress_solve(&r) == 0 && close_to(r.coef[0], 100, 1e-4));
	for (int i = 0; i < 2000; i++) {
		double dp[2] = { 1e3 * uniform(), floor(4 * uniform()) };
		CHECK(manners_regress_add(&r, dp, duration(after, dp, 2, 0.0)) == 0);
		if (i == 100) { /* half-way through its time constant, neither value */
			CHECK(manners_regress_solve(&r) == 0);
			CHECK(r.coef[0] > 120 && r.coef[0] < 190);
		}
	}
	CHECK(manners_regress_solve(&r) == 0);
	CHECK(close_to(r.coef[0], 200, 0.01));
	CHECK(close_to(r.coef[1], 1e5, 0.01));
}

/* A negative least-squares cost is dropped and the rest refitted: d = 2 dp1 with a
 * second metric anti-correlated with the noise would fit < 0; force it exactly:
 * data generated by d = 2 dp1 - 0.5 dp2. */
static void test_negative_dropped(void)
{
	struct manners_regress r;
	CHECK(manners_regress_init(&r, 2, 1000, MANNERS_REGRESS_NU_DEFAULT) == 0);
	for (int i = 0; i < 500; i++) {
		double dp[2] = { 100 + 100 * uniform(), 10 * uniform() };
		CHECK(manners_regress_add(&r, dp, (int64_t)llround(2000 * dp[0] - 500 * dp[1])) == 0);
	}
	CHECK(manners_regress_solve(&r) == 0);
	CHECK(r.coef[1] == 0.0);
	CHECK(r.coef[0] > 1900 && r.coef[0] < 2000); /* the one-metric fit */
}

static void test_bad_input(void)
{
	struct manners_regress r;
	CHECK(manners_regress_init(&r, 0, 10, 1e-11) == -EINVAL);
	CHECK(manners_regress_init(&r, MANNERS_REGRESS_MAX + 1, 10, 1e-11) == -EINVAL);
	CHECK(manners_regress_init(&r, 2, 0, 1e-11) == -EINVAL);
	CHECK(manners_regress_init(&r, 2, 10, -1.0) == -EINVAL);
	CHECK(manners_regress_init(&r, 2, 10, NAN) == -EINVAL);
	CHECK(manners_regress_init(&r, 2, 10, 1e-11) == 0);
	double neg[2] = { 1, -1 }, nan2[2] = { NAN, 1 }, inf2[2] = { 1, INFINITY }, ok[2] = { 1, 1 };
	CHECK(manners_regress_add(&r, neg, 10) == -EINVAL);
	CHECK(manners_regress_add(&r, nan2, 10) == -EINVAL);
	CHECK(manners_regress_add(&r, inf2, 10) == -EINVAL);
	CHECK(manners_regress_add(&r, NULL, 10) == -EINVAL);
	CHECK(manners_regress_add(&r, ok, 0) == -EINVAL);
	CHECK(r.samples == 0);
	double t;
	CHECK(manners_regress_target_ns(&r, ok, NULL) == -EINVAL);
	CHECK(manners_regress_target_ns(&r, ok, &t) == -EAGAIN);
}

/* Phases by index (§4.4): a mark phase at 100 units/s and a sweep phase at
 * 10 units/s, each with its own target, one sign test across both.  Testpoints
 * alternate phases (one each: too brief for a per-phase judgment). */
static void test_phases(void)
{
	struct manners_phase slots[4];
	struct manners_phase_table table;
	struct manners_calib_config cfg = { 1000, 10, 0, 1.0 };
	CHECK(manners_phase_table_init(&table, slots, 4, &cfg, MANNERS_REGRESS_NU_DEFAULT) == 0);
	struct manners_phase *mark, *sweep, *again;
	CHECK(manners_phase_lookup(&table, 7, 1, &mark) == 0);
	CHECK(manners_phase_lookup(&table, 1000, 1, &sweep) == 0);
	CHECK(mark != sweep);
	CHECK(manners_phase_lookup(&table, 7, 1, &again) == 0 && again == mark);
	CHECK(manners_phase_lookup(&table, 7, 2, &again) == -EINVAL); /* count changed */
	struct manners_phase *p3, *p4, *p5;
	CHECK(manners_phase_lookup(&table, -3, 2, &p3) == 0);
	CHECK(manners_phase_lookup(&table, 42, 1, &p4) == 0);
	CHECK(manners_phase_lookup(&table, 43, 1, &p5) == -ENOSPC);
	CHECK(table.used == 4);

	int64_t now = T0, d = 200 * MS;
	double one[1];
	for (int i = 0; i < 400; i++) {
		now += d;
		one[0] = 100.0 * 0.2 * (0.8 + 0.4 * uniform());
		CHECK(manners_phase_update(mark, one, d, now) == 1);
		now += d;
		one[0] = 10.0 * 0.2 * (0.8 + 0.4 * uniform());
		CHECK(manners_phase_update(sweep, one, d, now) == 1);
	}
	CHECK(close_to(mark->calib.rate, 100.0, 0.02));
	CHECK(close_to(sweep->calib.rate, 10.0, 0.02));
	CHECK(manners_calib_regulating(&mark->calib));
	/* The same 5 units in 200 ms: far below target for mark, above for sweep. */
	one[0] = 5.0;
	CHECK(manners_phase_below(mark, one, d) == 1);
	CHECK(manners_phase_below(sweep, one, d) == 0);
	/* Exactly at target is not below (§4.1: "at least as good"). */
	one[0] = mark->calib.rate * 0.2;
	CHECK(manners_phase_below(mark, one, d) == 0);
	/* A phase with no target yet says so. */
	CHECK(manners_phase_below(p4, one, d) == -EAGAIN);

	/* Contention halves both rates: alternating phases, the one sign test judges
	 * poor at n = 5 although each phase saw only 2 or 3 testpoints. */
	struct manners_sign_table st;
	struct manners_sign_test s;
	CHECK(manners_sign_table_init(&st, 0.05, 0.2, 0.5, 100) == 0);
	manners_sign_reset(&s);
	int judgment = MANNERS_UNKNOWN, fed = 0;
	while (judgment == MANNERS_UNKNOWN && fed < 20) {
		struct manners_phase *ph = fed % 2 ? sweep : mark;
		one[0] = ph->calib.rate * 0.2 * 0.5;
		int below = manners_phase_below(ph, one, d);
		CHECK(below == 1);
		judgment = manners_sign_feed(&s, &st, below);
		fed++;
	}
	CHECK(judgment == MANNERS_POOR && fed == 5);

	/* Several metrics in one phase go through the regression. */
	const double cost[2] = { 1e6, 3e7 };
	for (int i = 0; i < 300; i++) {
		double dp[2] = { 50 * uniform(), floor(3 * uniform()) };
		int64_t dd = duration(cost, dp, 2, 0.0);
		if (dd <= 0)
			continue;
		now += dd;
		CHECK(manners_phase_update(p3, dp, dd, now) == 1);
	}
	double dp[2] = { 20, 1 };
	CHECK(manners_phase_below(p3, dp, 51 * MS) == 1);  /* target 50 ms */
	CHECK(manners_phase_below(p3, dp, 49 * MS) == 0);
	CHECK(close_to(p3->regress.coef[0], 1e6, 1e-5));

	/* Subsampling reaches the regression too: a wait of 10 s ignored. */
	manners_calib_note_wait(&p3->calib, now, 10 * S);
	uint64_t before = p3->regress.samples;
	CHECK(manners_phase_update(p3, dp, 50 * MS, now + 50 * MS) == 0);
	CHECK(p3->regress.samples == before);

	/* Bad values. */
	double neg[1] = { -1.0 };
	CHECK(manners_phase_update(mark, neg, d, now) == -EINVAL);
	CHECK(manners_phase_update(mark, NULL, d, now) == -EINVAL);
	CHECK(manners_phase_below(mark, one, 0) == -EINVAL);
	CHECK(manners_phase_lookup(&table, 1, 0, &again) == -EINVAL);
	CHECK(manners_phase_lookup(&table, 1, MANNERS_REGRESS_MAX + 1, &again) == -EINVAL);
	CHECK(manners_phase_table_init(&table, NULL, 4, NULL, 1e-11) == -EINVAL);
	CHECK(manners_phase_table_init(&table, slots, 0, NULL, 1e-11) == -EINVAL);
}

/* A count at its top stays there: a wrap to 0 took plain sums again
 * (xi 1), doubling the weight of everything averaged so far. */
static void test_count_saturates(void)
{
	struct manners_regress r;
	CHECK(manners_regress_init(&r, 1, 10, 1e-11) == 0);
	double one = 1.0;
	CHECK(manners_regress_add(&r, &one, 100 * MS) == 0);
	r.samples = UINT64_MAX;
	double x = r.x[0][0];
	CHECK(manners_regress_add(&r, &one, 100 * MS) == 0);
	CHECK_EQ_U64(r.samples, UINT64_MAX);
	CHECK(close_to(r.x[0][0], 0.9 * x + 1.0, 1e-12));
}

int main(void)
{
	test_recovers_costs();
	test_three_metrics();
	test_collinear();
	test_statistics();
	test_tracks_change();
	test_negative_dropped();
	test_bad_input();
	test_phases();
	test_count_saturates();
	return 0;
}
