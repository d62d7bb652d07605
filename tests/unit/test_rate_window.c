/* Description: rate window (rate-windows §3.2, DiscNice §5.3): backlogged jobs get their cap within 0.5 %, no bursts, caps independent, refunds, shared windows. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "unit.h"
#include "policy/policy.h"
#include "policy/rate_window.h"

#define NS     UINT64_C(1000000000)
#define KiB    UINT64_C(1024)
#define MiB    (1024 * KiB)
/* An arbitrary, non-round origin: the window must not depend on t = 0. */
#define ORIGIN (UINT64_C(7) * 3600 * NS + 123456789)

enum kind { READ, WRITE };

static uint64_t ask(const struct dn_window *w, const struct dn_caps *caps, uint64_t now,
		    enum kind kind, uint64_t bytes)
{
	return rate_window_delay(w, caps, now, kind == READ ? bytes : 0,
				 kind == WRITE ? bytes : 0);
}

static void give(struct dn_window *w, uint64_t now, enum kind kind, int64_t bytes)
{
	rate_window_charge(w, NULL, now, kind == READ ? bytes : 0, kind == WRITE ? bytes : 0);
}

/*
 * One backlogged job: ask, sleep exactly the delay, charge, repeat, for
 * `seconds`.  Checks that the delay is exact (0 after sleeping it, non-zero
 * 1 ns earlier), that the average rate is within 0.5 % of the cap, and that
 * no closed interval of one window ever carries more than the cap plus one
 * chunk.
 */
static void backlogged(uint64_t rate, uint64_t chunk, uint64_t span, enum kind kind,
		       int use_total_cap, uint64_t seconds)
{
	struct dn_window w;
	struct dn_caps caps = { 0, 0, 0 };
	if (use_total_cap)
		caps.total_bps = rate;
	else if (kind == READ)
		caps.read_bps = rate;
	else
		caps.write_bps = rate;
	rate_window_init(&w, span, ORIGIN);

	static uint64_t times[2000000];
	size_t n = 0;
	uint64_t now = ORIGIN, end = ORIGIN + seconds * NS;
	for (;;) {
		uint64_t d = ask(&w, &caps, now, kind, chunk);
		if (d > 0 && n % 16 == 0)
			CHECK(ask(&w, &caps, now + d - 1, kind, chunk) > 0);
		now += d;
		CHECK_EQ_U64(ask(&w, &caps, now, kind, chunk), 0);
		if (now > end)
			break;
		rate_window_charge(&w, &caps, now, kind == READ ? (int64_t)chunk : 0,
				   kind == WRITE ? (int64_t)chunk : 0);
		CHECK(n < sizeof(times) / sizeof(times[0]));
		times[n++] = now;
	}
	CHECK(n >= 2);

	/* Average: the n chunks took until the n-th release.  (The first
	 * chunk of a fresh window waits chunk/R, so nothing is free.) */
	double achieved = (double)(n * chunk) / ((double)(times[n - 1] - ORIGIN) / 1e9);
	double error = achieved / (double)rate - 1.0;
	if (getenv("RW_VERBOSE")) fprintf(stderr, "rate %" PRIu64 " chunk %" PRIu64 " span %" PRIu64 ": %+.3f %%\n", rate, chunk, span, error * 100);
	if (!getenv("RW_VERBOSE") && (error > 0.005 || error < -0.005)) {
		fprintf(stderr, "rate %" PRIu64 " chunk %" PRIu64 " span %" PRIu64
			": achieved %.1f B/s, error %+.3f %%\n",
			rate, chunk, span, achieved, error * 100);
		exit(1);
	}

	/* Windows: the chunks in [t_i, t_i + span] (closed) for every i. */
	double cap_bytes = (double)rate * (double)span / 1e9;
	size_t j = 0;
	for (size_t i = 0; i < n; i++) {
		while (j < n && times[j] - times[i] <= span)
			j++;
		double in_window = (double)((j - i) * chunk);
		if (in_window > cap_bytes + (double)chunk) {
			fprintf(stderr, "rate %" PRIu64 " chunk %" PRIu64 ": %.0f bytes in "
				"the window from %.6f s, cap %.0f + one chunk\n", rate, chunk,
				in_window, (double)(times[i] - ORIGIN) / 1e9, cap_bytes);
			exit(1);
		}
	}
}

static void test_backlogged_jobs_get_the_cap(void)
{
	static const uint64_t rates[] = { 1000000, 5 * MiB, 100000000 };
	static const uint64_t chunks[] = { 4 * KiB, 128 * KiB, MiB, 8 * MiB };
	for (size_t r = 0; r < sizeof(rates) / sizeof(rates[0]); r++)
		for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++)
			backlogged(rates[r], chunks[c], NS, READ, 0, 60);
	/* Writes, the total cap, and the rate-windows paper's 5 s window. */
	backlogged(5 * MiB, 128 * KiB, NS, WRITE, 0, 60);
	backlogged(5 * MiB, 3 * MiB, NS, WRITE, 1, 60);
	backlogged(1000000, 300 * KiB, 5 * NS, READ, 0, 60);
	backlogged(100000000, 8 * MiB, 5 * NS, WRITE, 1, 60);
}

/* A fresh class gets no burst: Tw starts at the origin (DiscNice §5.3 would
 * otherwise allow B/N <= R with B = R*N at once). */
static void test_fresh_window_has_no_free_burst(void)
{
	struct dn_window w;
	struct dn_caps caps = { .write_bps = 1000000 };
	rate_window_init(&w, NS, ORIGIN);
	/* Half a window's worth, at the origin: waits half a second. */
	CHECK_EQ_U64(ask(&w, &caps, ORIGIN, WRITE, 500000), NS / 2);
	/* Ten back-to-back 100 kB requests each wait their own 0.1 s. */
	uint64_t now = ORIGIN;
	for (int i = 1; i <= 10; i++) {
		now += ask(&w, &caps, now, WRITE, 100000);
		CHECK_EQ_U64(now - ORIGIN, (uint64_t)i * NS / 10);
		give(&w, now, WRITE, 100000);
	}
	/* A window exactly full: the next byte waits. */
	CHECK(ask(&w, &caps, now, WRITE, 1) > 0);
}

/* After an idle gap longer than N the window is empty and a whole window's
 * worth may go at once (the window's own promise: R*N per N seconds). */
static void test_idle_window_empties(void)
{
	struct dn_window w;
	struct dn_caps caps = { .read_bps = 1000000 };
	rate_window_init(&w, NS, ORIGIN);
	uint64_t now = ORIGIN + 3 * NS;
	give(&w, now, READ, 1000000);
	int64_t r = -1, wr = -1;
	rate_window_sums(&w, now, &r, &wr);
	CHECK_EQ_U64(r, 1000000);
	CHECK_EQ_U64(wr, 0);
	CHECK(ask(&w, &caps, now, READ, 1000) > 0);

	now += 2 * NS;
	rate_window_sums(&w, now, &r, &wr);
	CHECK_EQ_U64(r, 0);
	CHECK_EQ_U64(ask(&w, &caps, now, READ, 1000000), 0);
	give(&w, now, READ, 1000000);
	/* ...and another window's worth only once that has aged out.  (The
	 * burst is taken to have used the idle second before it, so small
	 * requests may continue at R meanwhile: the allowance is one window,
	 * R*N, as with a token bucket of that depth.) */
	uint64_t full = ask(&w, &caps, now, READ, 1000000);
	CHECK(full > NS - w.bucket_ns && full <= NS + w.bucket_ns);
	CHECK(ask(&w, &caps, now, READ, 100000) <= NS / 10 + w.bucket_ns);
	/* An oversize request (more than R*N) waits until nothing was
	 * released in the B/R before it: 3 s here, less the bucket-middle
	 * estimate of where the last release sat. */
	uint64_t d = ask(&w, &caps, now, READ, 3000000);
	CHECK(d > 3 * NS - w.bucket_ns && d <= 3 * NS + w.bucket_ns);

	/* Much later (the ring wrapped many times): still empty, and a charge
	 * then lands alone in the window. */
	now += 1000 * NS + 1;
	give(&w, now, READ, 7);
	rate_window_sums(&w, now, &r, &wr);
	CHECK_EQ_U64(r, 7);
}

/* The read cap polices reads, the write cap writes, the total cap the sum;
 * a zero cap means none. */
static void test_caps_are_independent_and_total_binds_the_sum(void)
{
	struct dn_window w;
	struct dn_caps caps = { .read_bps = 1000000, .write_bps = 2000000 };
	uint64_t now = ORIGIN + 10 * NS;
	rate_window_init(&w, NS, ORIGIN);
	give(&w, now, READ, 1000000); /* the read window is full */
	CHECK(ask(&w, &caps, now, READ, 1000) > 0);
	CHECK_EQ_U64(ask(&w, &caps, now, WRITE, 2000000), 0);
	/* A mixed request waits for its read part. */
	CHECK(rate_window_delay(&w, &caps, now, 1000, 1000) > 0);

	/* Uncapped reads never wait, however much was read. */
	struct dn_caps writes_only = { .write_bps = 2000000 };
	give(&w, now, READ, 50000000);
	CHECK_EQ_U64(ask(&w, &writes_only, now, READ, 50000000), 0);
	struct dn_caps none = { 0, 0, 0 };
	CHECK_EQ_U64(rate_window_delay(&w, &none, now, 1 << 30, 1 << 30), 0);

	/* Total cap 1 MB/s: 600 kB read + 500 kB write exceeds it although
	 * each kind alone fits its own (absent) cap. */
	struct dn_caps total = { .total_bps = 1000000 };
	rate_window_init(&w, NS, ORIGIN);
	give(&w, now, READ, 600000);
	CHECK_EQ_U64(ask(&w, &total, now, WRITE, 400000), 0);
	CHECK(ask(&w, &total, now, WRITE, 500000) > 0);
	struct dn_caps separate = { .read_bps = 1000000, .write_bps = 1000000 };
	CHECK_EQ_U64(ask(&w, &separate, now, WRITE, 500000), 0);
	/* The delay is the largest over the caps that apply. */
	struct dn_caps both = { .read_bps = 1000000, .write_bps = 1000000, .total_bps = 1000000 };
	CHECK(rate_window_delay(&w, &both, now, 0, 500000) ==
	      ask(&w, &total, now, WRITE, 500000));
}

/* Cancelled delayed writes are refunded (DiscNice §4.4); a refund never takes
 * the window below empty. */
static void test_refunds(void)
{
	struct dn_window w;
	struct dn_caps caps = { .write_bps = 1000000 };
	/* In a young window the test is an exact virtual clock: at 0.6 s,
	 * 600 kB have been earned. */
	uint64_t now = ORIGIN + 6 * NS / 10;
	rate_window_init(&w, NS, ORIGIN);
	give(&w, ORIGIN + 2 * NS / 10, WRITE, 200000);
	give(&w, now, WRITE, 400000);
	CHECK_EQ_U64(ask(&w, &caps, now, WRITE, 100000), NS / 10);
	give(&w, now, WRITE, -300000);
	int64_t r, wr;
	rate_window_sums(&w, now, &r, &wr);
	CHECK_EQ_U64(wr, 300000);
	CHECK_EQ_U64(ask(&w, &caps, now, WRITE, 300000), 0);
	CHECK_EQ_U64(ask(&w, &caps, now, WRITE, 300001), 1000);

	/* Refunding more than the window holds empties it, no further. */
	give(&w, now, WRITE, -5000000);
	rate_window_sums(&w, now, &r, &wr);
	CHECK_EQ_U64(wr, 0);
	CHECK_EQ_U64(ask(&w, &caps, now, WRITE, 600000), 0);
	CHECK_EQ_U64(ask(&w, &caps, now, WRITE, 600001), 1000);
	give(&w, now, WRITE, 600000);
	CHECK(ask(&w, &caps, now, WRITE, 1) > 0);

	/* A refund of writes leaves reads alone. */
	give(&w, now, READ, 1000);
	give(&w, now, WRITE, -INT64_MAX);
	rate_window_sums(&w, now, &r, &wr);
	CHECK_EQ_U64(r, 1000);
	CHECK_EQ_U64(wr, 0);

	/* In a full window too, a refund lets the job go sooner. */
	rate_window_init(&w, NS, ORIGIN);
	now = ORIGIN + 10 * NS;
	give(&w, now, WRITE, 1000000);
	uint64_t before = ask(&w, &caps, now, WRITE, 500000);
	give(&w, now, WRITE, -500000);
	CHECK(before > 0 && ask(&w, &caps, now, WRITE, 500000) < before);
}

/* Two processes of one class share one window (DiscNice §5.1: children are
 * charged to the parent): together they get the cap. */
static void test_two_processes_share_the_cap(void)
{
	/* Equal chunks: a stateless policy does not queue, so a process with
	 * much smaller chunks would always fit first and could starve one
	 * with much bigger chunks; the throttle cuts every call to one size. */
	static const uint64_t chunk[2] = { 128 * KiB, 128 * KiB };
	struct dn_window w;
	struct dn_caps caps = { .total_bps = 5 * MiB };
	rate_window_init(&w, NS, ORIGIN);
	uint64_t next[2] = { ORIGIN, ORIGIN + 12345 }, bytes[2] = { 0, 0 }, last = ORIGIN;
	uint64_t end = ORIGIN + 60 * NS, seed = 88172645463325252u;
	for (;;) {
		int p = next[0] <= next[1] ? 0 : 1;
		uint64_t now = next[p];
		if (now > end)
			break;
		/* Process p wakes, takes the lock, asks; it charges if it
		 * conforms, else sleeps the delay and asks again. */
		uint64_t d = rate_window_delay(&w, &caps, now, chunk[p] / 2, chunk[p] - chunk[p] / 2);
		if (d == 0) {
			rate_window_charge(&w, NULL, now, (int64_t)(chunk[p] / 2),
					   (int64_t)(chunk[p] - chunk[p] / 2));
			bytes[p] += chunk[p];
			last = now;
		}
		/* Wake-ups jitter (0-50 us, xorshift): with exact sleeps both
		 * would wake on the same nanosecond, forever in the same order. */
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		next[p] = now + d + (d ? seed % 50000 : 0);
	}
	double achieved = (double)(bytes[0] + bytes[1]) / ((double)(last - ORIGIN) / 1e9);
	double error = achieved / (double)(5 * MiB) - 1.0;
	CHECK(error < 0.005 && error > -0.005);
	/* Neither starves. */
	CHECK(bytes[0] > 100 * MiB && bytes[1] > 100 * MiB);
}

/* A charge stamped before head (a process that read the clock before another
 * took the lock) goes into head and does not disturb the ring. */
static void test_charge_in_the_past(void)
{
	struct dn_window w;
	rate_window_init(&w, NS, ORIGIN);
	uint64_t now = ORIGIN + 5 * NS;
	give(&w, now, WRITE, 1000);
	uint64_t head = w.head;
	give(&w, now - NS / 2, WRITE, 2000);
	give(&w, ORIGIN - 10 * NS, WRITE, 4000);
	CHECK_EQ_U64(w.head, head);
	int64_t r, wr;
	rate_window_sums(&w, now, &r, &wr);
	CHECK_EQ_U64(wr, 7000);
	/* All of it ages out together, a window after head. */
	rate_window_sums(&w, now + NS + 2 * w.bucket_ns, &r, &wr);
	CHECK_EQ_U64(wr, 0);
	/* Asking with a clock behind head waits at least the lag. */
	struct dn_caps caps = { .write_bps = 1000000 };
	uint64_t behind = head * w.bucket_ns - NS / 10;
	CHECK(ask(&w, &caps, behind, WRITE, 1) >= NS / 10);
}

/* Rates up to 2^40 B/s and byte counts up to 2^50 do not overflow (UBSan
 * watches), and the answers stay exact. */
static void test_big_numbers(void)
{
	struct dn_window w;
	struct dn_caps caps = { .read_bps = UINT64_C(1) << 40 };
	rate_window_init(&w, 3600 * NS, ORIGIN);
	/* 2^50 bytes at 2^40 B/s from a fresh window: 1024 s. */
	CHECK_EQ_U64(ask(&w, &caps, ORIGIN, READ, UINT64_C(1) << 50), 1024 * NS);
	give(&w, ORIGIN + 1024 * NS, READ, (int64_t)1 << 50);
	CHECK_EQ_U64(ask(&w, &caps, ORIGIN + 1024 * NS, READ, UINT64_C(1) << 50), 1024 * NS);
	/* An oversize request (more than R*N) waits B/R in all. */
	rate_window_init(&w, NS, ORIGIN);
	CHECK_EQ_U64(ask(&w, &caps, ORIGIN, READ, UINT64_C(1) << 50), 1024 * NS);
	/* Saturated counters stay sane. */
	give(&w, ORIGIN, READ, INT64_MAX);
	give(&w, ORIGIN, READ, INT64_MAX);
	int64_t r, wr;
	rate_window_sums(&w, ORIGIN, &r, &wr);
	CHECK(r == INT64_MAX);
	struct dn_caps slow = { .read_bps = 1 };
	CHECK(ask(&w, &slow, ORIGIN, READ, UINT64_MAX) > 0);
}

/* The most bytes a backlogged job released in any `span` of its run. */
static uint64_t busiest(const uint64_t *times, size_t n, uint64_t chunk, uint64_t span)
{
	uint64_t most = 0;
	for (size_t i = 0, j = 0; i < n; i++) {
		while (j < n && times[j] - times[i] < span)
			j++;
		if ((j - i) * chunk > most)
			most = (j - i) * chunk;
	}
	return most;
}

/* A job that starts late, or again after an idle spell, opens with no
 * burst of the credit the quiet time "left", and so none echoes once per N
 * afterwards (rate_window.c, window_restart).  Before: a sender starting
 * 0.1 s after its class, 1 MiB pieces at 64 MiB/s, sent ~2x the cap in the
 * first half of each second and ~0 in the second. */
static void test_late_start_and_restart_are_smooth(void)
{
	static const uint64_t rates[] = { 64 * MiB, 64000000, 1000000 };
	static const uint64_t chunks[] = { MiB, MiB, 64 * KiB };
	static uint64_t times[4096];
	for (size_t r = 0; r < 6; r++) {
		struct dn_window w;
		struct dn_caps caps = { .write_bps = rates[r % 3] };
		uint64_t chunk = chunks[r % 3];
		/* The second three: a request in the uncapped direction opens
		 * each phase (a server under a send cap reads it, then
		 * answers).  Before: those bytes left the window not empty, it
		 * kept its old clock, and the answer's first second went at
		 * twice the cap. */
		bool request = r >= 3;
		rate_window_init(&w, NS, ORIGIN);
		uint64_t now = ORIGIN + NS / 10; /* connected 0.1 s after the class began */
		for (int phase = 0; phase < 2; phase++) {
			size_t n = 0;
			if (request) {
				rate_window_charge(&w, &caps, now, 300, 0);
				now += NS / 1000;
			}
			uint64_t end = now + 4 * NS;
			while (now < end && n < sizeof times / sizeof times[0]) {
				now += ask(&w, &caps, now, WRITE, chunk);
				rate_window_charge(&w, &caps, now, 0, (int64_t)chunk);
				times[n++] = now;
				now += 20000; /* the send itself */
			}
			/* Any half window: at most half the budget and one piece. */
			uint64_t most = busiest(times, n, chunk, NS / 2);
			CHECK(most <= rates[r % 3] / 2 + chunk);
			now += 3 * NS; /* idle, longer than N: the window empties */
		}
	}
}

static void test_policy_table(void)
{
	CHECK(policy_rate_window.name && strcmp(policy_rate_window.name, "rate-window") == 0);
	CHECK(policy_rate_window.delay == rate_window_delay);
	CHECK(policy_rate_window.charge == rate_window_charge);
}

int main(void)
{
	test_backlogged_jobs_get_the_cap();
	test_fresh_window_has_no_free_burst();
	test_idle_window_empties();
	test_late_start_and_restart_are_smooth();
	test_caps_are_independent_and_total_binds_the_sum();
	test_refunds();
	test_two_processes_share_the_cap();
	test_charge_in_the_past();
	test_big_numbers();
	test_policy_table();
	return 0;
}
