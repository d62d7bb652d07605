/* Description: the rate-windows paper's window (§3.2): a backlogged job's rate against its cap beside the sliding window's, the min-sleep rule, 5 s / 100 events, the max-sleep split, refunds. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "policy/paper_window.h"
#include "policy/policy.h"
#include "policy/rate_window.h"

#define NS     UINT64_C(1000000000)
#define MS     UINT64_C(1000000)
#define KiB    UINT64_C(1024)
#define MiB    (1024 * KiB)
#define ORIGIN (UINT64_C(7) * 3600 * NS + 123456789)

static struct dn_window fresh(void)
{
	struct dn_window w;
	memset(&w, 0xa5, sizeof w); /* nothing may depend on what was there */
	rate_window_init(&w, NS, ORIGIN);
	paper_window_init(&w, 0, 0, 0);
	return w;
}

/*
 * A backlogged reader: ask, sleep what it is told, ask again; when told 0,
 * charge a piece and spend io_ns doing it.  Returns the mean rate over
 * `seconds` as a ratio to the cap (x 10^6), and the largest count of bytes
 * in any one-second interval that starts at a release, as a ratio to the
 * cap (x 10^6), and the longest sleep.
 */
struct run {
	uint64_t ratio_ppm;
	uint64_t worst_second_ppm;
	uint64_t longest_sleep_ns;
};

static struct run backlogged(const struct policy *policy, uint64_t rate, uint64_t piece,
			     uint64_t io_ns, uint64_t seconds)
{
	static struct dn_window w;
	w = fresh();
	struct dn_caps caps = { rate, 0, 0 };
	static uint64_t at[1 << 20];
	size_t n = 0;
	uint64_t t = ORIGIN, end = ORIGIN + seconds * NS, longest = 0;
	while (t < end && n < sizeof at / sizeof at[0]) {
		uint64_t d = policy->delay(&w, &caps, t, piece, 0);
		if (d) {
			longest = d > longest ? d : longest;
			t += d;
			continue;
		}
		policy->charge(&w, &caps, t, (int64_t)piece, 0);
		at[n++] = t;
		t += io_ns;
	}
	struct run run = { 0, 0, longest };
	/* The rate: from the first release to the last, the bytes released
	 * before the last (the last piece is paid for after it). */
	run.ratio_ppm = (uint64_t)((unsigned __int128)(n - 1) * piece * NS * 1000000 /
				   ((unsigned __int128)rate * (at[n - 1] - at[0])));
	size_t j = 0;
	for (size_t i = 0; i < n; i++) {
		while (j < n && at[j] < at[i] + NS)
			j++;
		uint64_t ppm = (uint64_t)((unsigned __int128)(j - i) * piece * 1000000 / rate);
		run.worst_second_ppm = ppm > run.worst_second_ppm ? ppm : run.worst_second_ppm;
	}
	return run;
}

static void backlogged_table(void)
{
	/* The bench's caps (base 1000 and 1024, small and large) with cat's
	 * 128 KiB reads, and small pieces where the min-sleep bias shows. */
	const struct {
		uint64_t rate, piece;
	} cases[] = {
		{ 1000000, 128 * KiB },
		{ 4 * MiB, 128 * KiB },
		{ 20000000, 128 * KiB },
		{ 64 * MiB, 128 * KiB },
		{ 64 * MiB, 16 * KiB },
		{ 1000000, 4 * KiB },
	};
	printf("backlogged, 20 s, I/O at 1 GB/s:  cap  piece  paper: rate/cap  worst 1 s/cap  "
	       "longest sleep | sliding: rate/cap  worst 1 s/cap\n");
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint64_t rate = cases[i].rate, piece = cases[i].piece;
		uint64_t io_ns = piece; /* 1 byte per ns */
		struct run p = backlogged(&policy_paper_window, rate, piece, io_ns, 20);
		struct run s = backlogged(&policy_rate_window, rate, piece, io_ns, 20);
		printf("  %9" PRIu64 " B/s %7" PRIu64 " B   %+.2f %%  %.4f  %5.1f ms | %+.2f %%  %.4f\n",
		       rate, piece, (double)p.ratio_ppm / 1e4 - 100, (double)p.worst_second_ppm / 1e6,
		       (double)p.longest_sleep_ns / 1e6, (double)s.ratio_ppm / 1e4 - 100,
		       (double)s.worst_second_ppm / 1e6);
		/* Never under the cap, and over it by at most the minimum
		 * sleep's advance (paper_window.c): 0.1 % here. */
		int64_t err = (int64_t)p.ratio_ppm - 1000000;
		CHECK(err >= -100); /* 0.01 % */
		CHECK(err <= 1000);
		/* No one-second interval carries more than the cap and a piece. */
		CHECK(p.worst_second_ppm <= 1000000 + piece * 1000000 / rate + 1000);
	}
}

int main(void)
{
	backlogged_table();

	/* The rule with numbers: 1 MB/s, one event of 100 kB at ORIGIN. */
	struct dn_window w = fresh();
	struct dn_caps caps = { 1000000, 0, 0 };
	/* An empty window lets any request go: Bw / Tw = B / (B / Rt) = Rt. */
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN, 10 * MiB, 0), 0);
	paper_window_charge(&w, &caps, ORIGIN, 100000, 0);
	/* S / Rt - (t - t0) = 100 ms - elapsed, whatever the new size. */
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN, 1, 0), 100 * MS);
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN + 40 * MS, 5 * MiB, 0), 60 * MS);
	/* The minimum sleep: 1 ms is still slept, below it none. */
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN + 99 * MS, 4096, 0), 1 * MS);
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN + 99 * MS + 1, 4096, 0), 0);
	/* Caps are per kind: a write cap sees no read bytes. */
	struct dn_caps write_cap = { 0, 1000000, 0 };
	CHECK_EQ_U64(paper_window_delay(&w, &write_cap, ORIGIN, 0, 4096), 0);
	struct dn_caps total_cap = { 0, 0, 500000 };
	CHECK_EQ_U64(paper_window_delay(&w, &total_cap, ORIGIN, 0, 4096), 200 * MS);

	/* A refund takes from the newest events: 100 kB - 40 kB = 60 ms. */
	paper_window_charge(&w, &caps, ORIGIN, 0, 0);
	paper_window_charge(&w, &caps, ORIGIN + 1, -40000, 0);
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN, 1, 0), 60 * MS);
	paper_window_charge(&w, &caps, ORIGIN + 1, -INT64_MAX, 0); /* never below 0 */
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN, 1, 0), 0);

	/* 5 s: an event 5 s old counts, one older does not. */
	w = fresh();
	paper_window_charge(&w, &caps, ORIGIN, 10000000, 0); /* 10 s worth */
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN + 5 * NS, 1, 0), 5 * NS);
	CHECK_EQ_U64(paper_window_events(&w, ORIGIN + 5 * NS), 1);
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN + 5 * NS + 1, 1, 0), 0);
	CHECK_EQ_U64(paper_window_events(&w, ORIGIN + 5 * NS + 1), 0);
	/* ... the paper's memory: a job that waited its 10 s owes nothing,
	 * and one that then idles 4 s may burst 4 s worth (its bias). */
	w = fresh();
	paper_window_charge(&w, &caps, ORIGIN, 100000, 0);
	uint64_t burst = 0, t = ORIGIN + 4 * NS + 100 * MS;
	while (paper_window_delay(&w, &caps, t, 100000, 0) == 0 && burst < 100000000) {
		paper_window_charge(&w, &caps, t, 100000, 0);
		burst += 100000;
	}
	printf("after 4 s idle at 1 MB/s, a burst of %" PRIu64 " bytes goes at once\n", burst);
	CHECK(burst >= 4000000 && burst <= 4100000);

	/* 100 events: the 101st pushes the oldest out, and its bytes with it. */
	w = fresh();
	paper_window_charge(&w, &caps, ORIGIN, 1000000, 0); /* 1 s worth */
	for (unsigned i = 1; i <= 99; i++)
		paper_window_charge(&w, &caps, ORIGIN + i, 1, 0);
	CHECK_EQ_U64(paper_window_events(&w, ORIGIN + 100), 100);
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN + 100, 1, 0), NS + 99 * 1000 - 100);
	paper_window_charge(&w, &caps, ORIGIN + 100, 1, 0);
	CHECK_EQ_U64(paper_window_events(&w, ORIGIN + 100), 100);
	/* 100 bytes from ORIGIN + 1: 100 us owed, under the minimum sleep. */
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN + 100, 1, 0), 0);
	/* A clock behind the newest event is recorded at the newest's time. */
	paper_window_charge(&w, &caps, ORIGIN, 1000, 0);
	CHECK_EQ_U64(w.paper_events[w.paper_head].start_ns, ORIGIN + 100);

	/* The maximum sleep: pieces of cap x 100 ms, at least 4 KiB. */
	w = fresh();
	CHECK_EQ_U64(paper_window_piece(&w, 1000000), 100000);
	CHECK_EQ_U64(paper_window_piece(&w, 64 * MiB), 64 * MiB / 10);
	CHECK_EQ_U64(paper_window_piece(&w, 10000), 4096);
	CHECK_EQ_U64(paper_window_piece(&w, 0), UINT64_MAX);
	/* A 10 MB request at 1 MB/s cut into those pieces: every sleep is
	 * within the maximum, the whole takes its 10 s, and no one-second
	 * interval carries more than the cap and a piece. */
	uint64_t piece = paper_window_piece(&w, caps.read_bps), left = 10000000, longest = 0;
	t = ORIGIN;
	while (left) {
		uint64_t p = left < piece ? left : piece;
		uint64_t d = paper_window_delay(&w, &caps, t, p, 0);
		if (d) {
			longest = d > longest ? d : longest;
			t += d;
			continue;
		}
		paper_window_charge(&w, &caps, t, (int64_t)p, 0);
		left -= p;
	}
	CHECK(longest <= PAPER_MAX_SLEEP_NS);
	CHECK_EQ_U64(t - ORIGIN, 9900 * MS); /* the last piece goes at 9.9 s */
	/* Uncut, the same request goes whole (as a datagram does) and the
	 * next one waits its 10 s: the delay is owed, never capped. */
	w = fresh();
	paper_window_charge(&w, &caps, ORIGIN, 10000000, 0);
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN, 1, 0), 10 * NS);
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN + 5 * NS, 1, 0), 5 * NS);
	/* ... but the window forgets the lump after 5 s: a request larger
	 * than Rt x 5 s (a 64 KiB datagram under 12 kB/s) gets more than Rt. */
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN + 5 * NS + 1, 1, 0), 0);

	/* A damaged queue: counts and heads out of range only miscount. */
	w = fresh();
	w.paper_count = 1000;
	w.paper_head = 12345;
	(void)paper_window_delay(&w, &caps, ORIGIN, 1, 0);
	paper_window_charge(&w, &caps, ORIGIN, 1, 0);
	w.paper_span_ns = 0;
	CHECK_EQ_U64(paper_window_delay(&w, &caps, ORIGIN, 1, 0), 0);

	/* Selection by the segment field. */
	static struct dn_segment seg;
	memset(&seg, 0, sizeof seg);
	CHECK(policy_of(&seg) == &policy_rate_window);
	seg.window_policy = DN_WINDOW_POLICY_PAPER;
	CHECK(policy_of(&seg) == &policy_paper_window);
	seg.window_policy = 7;
	CHECK(policy_of(&seg) == &policy_rate_window);
	return 0;
}
