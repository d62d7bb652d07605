/* Description: MS Manners suspension calculator (§4.1, eq. 3): the k-th poor judgment waits 2^k initial units up to the limit, good resets, unknown keeps. */
#include <errno.h>
#include <stdint.h>

#include "unit.h"
#include "manners/sign_test.h"
#include "manners/suspend.h"

#define MS INT64_C(1000000)
#define S  (1000 * MS)

static void test_doubling_and_cap(void)
{
	struct manners_suspend s;
	CHECK(manners_suspend_init(&s, 250 * MS, 60 * S) == 0);
	/* 0.25, 0.5, 1, 2, 4, 8, 16, 32 s, then the 60 s limit for ever. */
	int64_t want = 250 * MS;
	for (int k = 0; k < 8; k++) {
		CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), want);
		CHECK_EQ_U64(s.poor_run, k + 1);
		want *= 2;
	}
	for (int k = 0; k < 100; k++)
		CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 60 * S);
	/* Unknown: no suspension now, and the next poor still waits the limit. */
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_UNKNOWN), 0);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 60 * S);
	/* Good: resumes at once and the next poor starts over at 0.25 s. */
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_GOOD), 0);
	CHECK_EQ_U64(s.poor_run, 0);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 250 * MS);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_UNKNOWN), 0);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 500 * MS);
}

/* A limit that is not initial * 2^k: the last step is cut to the limit. */
static void test_uneven_limit(void)
{
	struct manners_suspend s;
	CHECK(manners_suspend_init(&s, 3, 20) == 0);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 3);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 6);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 12);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 20);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 20);
	/* initial == limit: a constant suspension. */
	CHECK(manners_suspend_init(&s, 7, 7) == 0);
	for (int k = 0; k < 5; k++)
		CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 7);
}

/* The largest limit: doubling near INT64_MAX must not overflow (UBSan watches). */
static void test_no_overflow(void)
{
	struct manners_suspend s;
	CHECK(manners_suspend_init(&s, INT64_MAX / 3, INT64_MAX) == 0);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), INT64_MAX / 3);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), 2 * (INT64_MAX / 3));
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), INT64_MAX);
	CHECK_EQ_U64(manners_suspend_judge(&s, MANNERS_POOR), INT64_MAX);
}

/*
 * Eq. 3 from its own series: the k-th poor judgment since a good one suspends
 * 2^k initial units, p_k is eq. 2, and q = 1 - (1 + sum_k a 2^k p_k / m)^-1
 * must equal the closed form a b / (a b + m (b - a)).  This is the doubling
 * rule the calculator implements (first poor judgment: 2^0 units).
 */
static void test_eq3_series(void)
{
	const double a = 0.05, b = 0.2;
	/* p_k = b/(a+b) (a/(a+b))^k; sum_k a 2^k p_k = a b / (a + b) / (1 - 2a/(a+b)) */
	double series = 0, pk = b / (a + b);
	for (int k = 0; k < 200; k++) {
		series += a * (double)((uint64_t)1 << (k < 62 ? k : 62)) * pk;
		pk *= a / (a + b);
	}
	double closed = a * b / (b - a);
	CHECK(series > closed * (1 - 1e-9) && series < closed * (1 + 1e-9));
	/* eq. 3 with m = 5 (alpha = 0.05): q = 0.01 / (0.01 + 5 * 0.15) = 1.3 %:
	 * the paper's "1% performance degradation" (§6.1). */
	double q = a * b / (a * b + 5 * (b - a));
	CHECK(q > 0.0131 && q < 0.0132);
	CHECK(1 - 1 / (1 + series / 5) > q * (1 - 1e-9) && 1 - 1 / (1 + series / 5) < q * (1 + 1e-9));
}

static void test_bad_input(void)
{
	struct manners_suspend s;
	CHECK(manners_suspend_init(NULL, 1, 2) == -EINVAL);
	CHECK(manners_suspend_init(&s, 0, 2) == -EINVAL);
	CHECK(manners_suspend_init(&s, 3, 2) == -EINVAL);
	CHECK(manners_suspend_init(&s, -1, 2) == -EINVAL);
	CHECK(manners_suspend_init(&s, 1, 2) == 0);
	CHECK(manners_suspend_judge(&s, 3) == -EINVAL);
	CHECK(manners_suspend_judge(&s, -1) == -EINVAL);
	CHECK(manners_suspend_judge(NULL, MANNERS_POOR) == -EINVAL);
}

/* The rule every front end uses to reconcile the first suspension with
 * the limit (--suspend-initial, MANNERS_SUSPEND_INITIAL, run's default). */
static void test_settle(void)
{
	int64_t initial = 4000; /* the default, nobody chose it */
	CHECK(manners_suspend_settle(&initial, 1000, 0) == 0 && initial == 1000);
	initial = 4000; /* given, above the limit: refused, left alone */
	CHECK(manners_suspend_settle(&initial, 1000, 1) == -EINVAL && initial == 4000);
	initial = 500; /* within the limit: kept, given or not */
	CHECK(manners_suspend_settle(&initial, 1000, 1) == 0 && initial == 500);
	CHECK(manners_suspend_settle(&initial, 1000, 0) == 0 && initial == 500);
	CHECK(manners_suspend_settle(&initial, 500, 1) == 0 && initial == 500);
	CHECK(manners_suspend_settle(NULL, 1000, 0) == -EINVAL);
	CHECK(manners_suspend_settle(&initial, 0, 0) == -EINVAL && initial == 500);
}

int main(void)
{
	test_doubling_and_cap();
	test_settle();
	test_uneven_limit();
	test_no_overflow();
	test_eq3_series();
	test_bad_input();
	return 0;
}
