/* Description: MAC's decisions (graybox-icl §4.3.2) - the increment doubles while sizes fit and backs off fully to the initial one on a failure, the answer is the largest multiple that fits to within the initial increment, bad arguments are refused, and paging means several slow pages in near succession, not one; the caller's own evicted pages come off the answer. */
#include <errno.h>
#include <string.h>

#include "graybox/mac/mac_policy.h"
#include "unit.h"

#define MIB (UINT64_C(1) << 20)

/* Run a search against a machine where `available` bytes fit; record the
 * probes.  Returns the answer. */
static uint64_t search(struct mac_growth *g, uint64_t available, uint64_t *probes, unsigned *n,
		       unsigned cap)
{
	*n = 0;
	for (uint64_t next; (next = mac_growth_next(g)) != 0;) {
		CHECK(*n < cap);
		probes[(*n)++] = next;
		mac_growth_result(g, next <= available);
	}
	return mac_growth_answer(g);
}

static void test_trace(void)
{
	/* Units of 1 byte to trace by hand: min 1, max 10, initial step 1,
	 * largest step 4, 6 available.
	 *   1 fits (first: the step stays 1)        -> 2
	 *   2 fits, step 2                          -> 4
	 *   4 fits, step 4                          -> 8
	 *   8 fails: back off to 1 from 4           -> 5
	 *   5 fits, step 2                          -> 7
	 *   7 fails (7 - 5 = 2 > 1): back off       -> 6
	 *   6 fits, step 2 -> 8, but 7 failed: top is 6 = done. */
	struct mac_growth g;
	uint64_t probes[64];
	unsigned n;
	CHECK(mac_growth_init(&g, 1, 10, 1, 1, 4) == 0);
	CHECK_EQ_U64(search(&g, 6, probes, &n, 64), 6);
	const uint64_t want[] = { 1, 2, 4, 8, 5, 7, 6 };
	CHECK_EQ_U64(n, sizeof want / sizeof want[0]);
	for (unsigned i = 0; i < n; i++)
		CHECK_EQ_U64(probes[i], want[i]);

	/* Everything fits: climbs to max and stops there (capped step). */
	CHECK(mac_growth_init(&g, 1, 10, 1, 1, 4) == 0);
	CHECK_EQ_U64(search(&g, 100, probes, &n, 64), 10);
	const uint64_t all[] = { 1, 2, 4, 8, 10 };
	CHECK_EQ_U64(n, 5);
	for (unsigned i = 0; i < n; i++)
		CHECK_EQ_U64(probes[i], all[i]);

	/* Not even the minimum: one probe, answer 0. */
	CHECK(mac_growth_init(&g, 5, 10, 1, 1, 4) == 0);
	CHECK_EQ_U64(search(&g, 4, probes, &n, 64), 0);
	CHECK_EQ_U64(n, 1);
	CHECK_EQ_U64(probes[0], 5);

	/* min == max: one probe either way (an application that cannot
	 * adapt, §4.3.2). */
	CHECK(mac_growth_init(&g, 7, 7, 1, 1, 4) == 0);
	CHECK_EQ_U64(search(&g, 7, probes, &n, 64), 7);
	CHECK_EQ_U64(n, 1);
}

static void test_resolution(void)
{
	/* gb_alloc's defaults: 1 MiB steps growing to 64 MiB, in multiples of
	 * a 100-byte record (fastsort's, §4.3.3), min 100 MiB, max 4 GiB.
	 * For every available amount from 100 MiB to 3 GiB in odd steps:
	 * the answer is a multiple of 100 within 1 MiB below the truth, never
	 * above it; no probe repeats a size known to fail; a failing probe
	 * overshoots by at most 64 MiB; few probes. */
	struct mac_growth g;
	uint64_t probes[256];
	unsigned n, most = 0;
	for (uint64_t avail = 100 * MIB; avail < 3072 * MIB; avail += 37 * MIB + 12345) {
		CHECK(mac_growth_init(&g, 100 * MIB, 4096 * MIB, 100, MAC_INITIAL_INCREMENT,
				      MAC_MAX_INCREMENT) == 0);
		uint64_t got = search(&g, avail, probes, &n, 256);
		CHECK(got <= avail && avail - got < MIB + 100);
		CHECK_EQ_U64(got % 100, 0);
		uint64_t failed = UINT64_MAX, fitted = 0;
		for (unsigned i = 0; i < n; i++) {
			CHECK(probes[i] < failed && probes[i] > fitted);
			if (probes[i] <= avail) {
				fitted = probes[i];
			} else {
				/* at most the larger of 64 MiB and an eighth */
				CHECK(probes[i] - avail <= MAC_MAX_INCREMENT + 100 ||
				      probes[i] - avail <= avail / 8 + 100);
				failed = probes[i];
			}
		}
		if (n > most)
			most = n;
	}
	printf("most probes for one answer: %u\n", most);
	/* Each back-off climbs again from 1 MiB, so the count grows as
	 * log2(size / step)^2 / 2: 11.6^2 / 2 = 68 for 3 GiB in 1 MiB steps. */
	CHECK(most <= 70);

	/* Exactly the available amount when it is a multiple. */
	CHECK(mac_growth_init(&g, 100 * MIB, 4096 * MIB, MIB, MAC_INITIAL_INCREMENT,
			      MAC_MAX_INCREMENT) == 0);
	CHECK_EQ_U64(search(&g, 830 * MIB, probes, &n, 256), 830 * MIB);

	/* The increment doubles, then backs off fully: 1 2 4 ... 64 MiB. */
	CHECK(mac_growth_init(&g, MIB, 4096 * MIB, MIB, MIB, 64 * MIB) == 0);
	search(&g, 500 * MIB, probes, &n, 256);
	/* 1, 2, 4, 8, 16, 32, 64, 128, 192: steps 1 2 4 ... 64 after the
	 * first; 64 MiB until an eighth of the fit is more (from 576 on). */
	const uint64_t climb[] = { 1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 320, 384, 448, 512 };
	for (unsigned i = 0; i < sizeof climb / sizeof climb[0]; i++)
		CHECK_EQ_U64(probes[i], climb[i] * MIB);
	/* 512 failed: back to 448 + 1. */
	CHECK_EQ_U64(probes[14], 449 * MIB);
	CHECK_EQ_U64(probes[15], 451 * MIB);
}

static void test_bad_arguments(void)
{
	struct mac_growth g;
	CHECK(mac_growth_init(&g, 10, 5, 1, 1, 4) == -EINVAL);       /* min > max */
	CHECK(mac_growth_init(&g, 1, 10, 0, 1, 4) == -EINVAL);       /* multiple 0 */
	CHECK(mac_growth_init(&g, 11, 19, 10, 1, 4) == -EINVAL);     /* no multiple in range */
	CHECK(mac_growth_init(&g, 0, 9, 10, 1, 4) == -EINVAL);       /* only 0 */
	CHECK(mac_growth_init(&g, UINT64_MAX - 1, UINT64_MAX, 1000, 1, 4) == -EINVAL); /* overflow */
	/* min 0 starts at one multiple; steps are rounded up to multiples. */
	CHECK(mac_growth_init(&g, 0, 100, 10, 3, 25) == 0);
	CHECK_EQ_U64(g.lowest, 10);
	CHECK_EQ_U64(g.initial_increment, 10);
	CHECK_EQ_U64(g.max_increment, 30);
	CHECK_EQ_U64(mac_growth_next(&g), 10);
	mac_growth_result(&g, true);
	CHECK_EQ_U64(mac_growth_next(&g), 20);
}

static void test_paging(void)
{
	struct mac_paging p;
	mac_paging_init(&p, 10000);
	/* Fast pages never trigger. */
	for (uint64_t i = 0; i < 1000; i++)
		CHECK(!mac_paging_page(&p, i, 900));
	/* Scattered slow pages (interrupts): far apart, never a streak. */
	for (uint64_t i = 1000; i < 100000; i += 1000)
		CHECK(!mac_paging_page(&p, i, 50000));
	CHECK_EQ_U64(p.slow_pages, 99);
	/* Three near ones are not yet paging; the fourth is. */
	CHECK(!mac_paging_page(&p, 200000, 60000));
	CHECK(!mac_paging_page(&p, 200008, 60000));      /* swap readahead gap of 8 */
	CHECK(!mac_paging_page(&p, 200040, 60000));      /* gap 32: still near */
	CHECK(mac_paging_page(&p, 200041, 10000));       /* at the threshold: slow */
	/* A gap of 33 breaks the streak. */
	mac_paging_restart(&p);
	CHECK(!mac_paging_page(&p, 300000, 60000));
	CHECK(!mac_paging_page(&p, 300001, 60000));
	CHECK(!mac_paging_page(&p, 300002, 60000));
	CHECK(!mac_paging_page(&p, 300035, 60000));
	CHECK(!mac_paging_page(&p, 300036, 60000));
	CHECK(!mac_paging_page(&p, 300037, 60000));
	CHECK(mac_paging_page(&p, 300038, 60000));
	/* A new pass starts over: index going back does not continue it. */
	mac_paging_restart(&p);
	CHECK(!mac_paging_page(&p, 5, 60000));
	CHECK(!mac_paging_page(&p, 6, 60000));
	CHECK(!mac_paging_page(&p, 7, 60000));
	CHECK(mac_paging_page(&p, 8, 60000));
	CHECK_EQ_U64(p.slow_pages, 99 + 4 + 7 + 4);
}

static void test_answer_less_own(void)
{
	struct mac_growth g;
	/* 16..1024 MiB in 4 KiB multiples, 1 MiB first step: 383 MiB fit. */
	CHECK(mac_growth_init(&g, 16 * MIB, 1024 * MIB, 4096, MIB, 64 * MIB) == 0);
	g.fitted = 383 * MIB;
	/* Under one initial increment is noise. */
	CHECK_EQ_U64(mac_answer_less_own(&g, 0), 383 * MIB);
	CHECK_EQ_U64(mac_answer_less_own(&g, MIB - 1), 383 * MIB);
	/* 6.5 MiB of the caller's own pages evicted: off the answer, rounded
	 * down to the multiple. */
	CHECK_EQ_U64(mac_answer_less_own(&g, 6 * MIB + MIB / 2 + 100), 376 * MIB + MIB / 2 - 4096);
	/* Below the lowest size, or all of it: nothing. */
	CHECK_EQ_U64(mac_answer_less_own(&g, 368 * MIB), 0);
	CHECK_EQ_U64(mac_answer_less_own(&g, 383 * MIB), 0);
	CHECK_EQ_U64(mac_answer_less_own(&g, 500 * MIB), 0);
	CHECK_EQ_U64(mac_answer_less_own(&g, 367 * MIB), 16 * MIB);
	/* No answer stays none. */
	g.fitted = 0;
	CHECK_EQ_U64(mac_answer_less_own(&g, 4 * MIB), 0);
}

int main(void)
{
	test_trace();
	test_answer_less_own();
	test_resolution();
	test_bad_arguments();
	test_paging();
	return 0;
}
