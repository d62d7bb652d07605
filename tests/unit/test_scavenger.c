/* Description: the scavenger's LEDBAT-like controller (RFC 6817): on a simulated bottleneck with a deep queue it keeps the added delay near its target and fills the link alone, backs off to its floor under a competing flow, and does not grow a rate the job never uses. */
#include <stdint.h>
#include <string.h>

#include "unit.h"
#include "policy/scavenger.h"

#define MS   UINT64_C(1000000)
#define S    (1000 * MS)
#define KiB  UINT64_C(1024)
/* An arbitrary, non-round start: nothing may depend on t = 0. */
#define T0   (UINT64_C(5) * 3600 * S + 987654321)

/*
 * A fluid model of one bottleneck of `link` B/s with a FIFO queue, base RTT
 * 1 ms, stepped every millisecond.  The job offers min(rate, demand); a
 * competing flow, when on, keeps `competing_queue` bytes standing in the
 * queue (what a cubic flow does to a deep buffer).  The kernel's srtt
 * follows the RTT with gain 1/8 per step (one ACK per ms), and its
 * min_rtt is the least RTT seen.  The job samples every 5 ms (the class
 * takes one per SCAVENGER_INTERVAL_NS).
 */
struct link_run {
	uint64_t link, demand, competing_queue, competing_from, seconds, measure_from;
	/* results over [measure_from, seconds) */
	double max_delay_ms, mean_delay_ms, share; /* share: job bytes / link capacity */
	uint64_t final_rate;
};

static void simulate(struct dn_scavenger *s, struct link_run *run)
{
	double queue = 0, srtt = 1.0, min_rtt = 1e9; /* ms */
	double job_bytes = 0, delay_sum = 0;
	uint64_t steps = 0;
	run->max_delay_ms = 0;
	for (uint64_t ms = 0; ms < run->seconds * 1000; ms++) {
		uint64_t now = T0 + ms * MS;
		double offered = (double)(s->rate_bps < run->demand ? s->rate_bps : run->demand) / 1000;
		double link = (double)run->link / 1000;
		queue += offered;
		bool competing = run->competing_queue && ms >= run->competing_from * 1000;
		if (competing && queue < (double)run->competing_queue)
			queue = (double)run->competing_queue; /* the other flow tops it up */
		/* The link drains the FIFO; the job's share of what leaves is
		 * its share of what arrives (fluid): here simply what it offered,
		 * up to the link. */
		double out = queue < link ? queue : link;
		queue -= out;
		double mine = competing ? offered * out / (offered + link) : out;
		if (mine > offered)
			mine = offered;
		double rtt = 1.0 + queue / link; /* ms */
		srtt += (rtt - srtt) / 8;
		if (rtt < min_rtt)
			min_rtt = rtt;
		__atomic_fetch_add(&s->sent_bytes, (uint64_t)offered, __ATOMIC_RELAXED);
		if (ms % 5 == 0)
			scavenger_sample(s, now, (uint64_t)(srtt * MS), (uint64_t)(min_rtt * MS));
		if (ms >= run->measure_from * 1000) {
			double d = rtt - 1.0;
			delay_sum += d;
			if (d > run->max_delay_ms)
				run->max_delay_ms = d;
			job_bytes += mine;
			steps++;
		}
	}
	run->mean_delay_ms = delay_sum / (double)steps;
	run->share = job_bytes / ((double)run->link * (double)steps / 1000);
	run->final_rate = s->rate_bps;
}

static void alone_fills_the_link(uint64_t link, uint64_t target_ms)
{
	struct dn_scavenger s;
	scavenger_init(&s, target_ms * MS);
	struct link_run run = { .link = link, .demand = UINT64_MAX, .seconds = 30, .measure_from = 10 };
	simulate(&s, &run);
	fprintf(stderr, "alone, link %" PRIu64 " B/s, target %" PRIu64 " ms: share %.3f, mean delay "
		"%.1f ms, max %.1f ms, %" PRIu64 " decreases\n", link, target_ms, run.share,
		run.mean_delay_ms, run.max_delay_ms, s.decreases);
	CHECK(run.share >= 0.80);
	CHECK(run.max_delay_ms <= 2.0 * (double)target_ms);
	CHECK(run.mean_delay_ms <= 1.2 * (double)target_ms);
	CHECK(s.decreases > 0); /* it did find the link's edge */
}

static void yields_to_a_competing_flow(void)
{
	struct dn_scavenger s;
	scavenger_init(&s, 50 * MS);
	/* Alone for 10 s, then a flow keeps 1 s of queue standing (10 Mbit/s,
	 * a bloated buffer, what cubic does to it): within a second the job
	 * must be down to its floor, and in the second after that take less
	 * than 5 % of the link. */
	struct link_run run = { .link = 1250000, .demand = UINT64_MAX, .competing_queue = 1250000,
				.competing_from = 10, .seconds = 12, .measure_from = 11 };
	simulate(&s, &run);
	fprintf(stderr, "competing flow: rate after 2 s %" PRIu64 " B/s, share in the 2nd s %.3f\n",
		s.rate_bps, run.share);
	CHECK(run.share < 0.05);
	CHECK(s.rate_bps <= 2 * SCAVENGER_MIN_BPS);
}

static void no_growth_while_application_limited(void)
{
	struct dn_scavenger s;
	scavenger_init(&s, 50 * MS);
	struct link_run run = { .link = 1250000, .demand = 100 * KiB, .seconds = 20, .measure_from = 1 };
	simulate(&s, &run);
	/* The job offers 100 KiB/s: the rate may grow past that (the test
	 * is "used at least half"), never beyond twice what it uses; it
	 * starts above that, at SCAVENGER_START_BPS, and stays there. */
	fprintf(stderr, "application-limited at 100 KiB/s: rate %" PRIu64 " B/s\n", s.rate_bps);
	CHECK_EQ_U64(s.rate_bps, SCAVENGER_START_BPS);
	scavenger_init(&s, 50 * MS);
	struct link_run more = { .link = 1250000, .demand = 400 * KiB, .seconds = 20, .measure_from = 1 };
	simulate(&s, &more);
	fprintf(stderr, "application-limited at 400 KiB/s: rate %" PRIu64 " B/s\n", s.rate_bps);
	CHECK(s.rate_bps >= 400 * KiB && s.rate_bps <= 2 * 400 * KiB + (1u << 20) / 50);
	CHECK(s.decreases == 0);
}

static void samples_and_bounds(void)
{
	struct dn_scavenger s;
	scavenger_init(&s, 0);
	CHECK(!scavenger_sample(&s, T0, 5 * MS, MS)); /* off: nothing */
	CHECK_EQ_U64(s.rate_bps, 0);
	scavenger_init(&s, 1 * MS); /* clamped into [25, 100] ms */
	CHECK_EQ_U64(s.target_ns, SCAVENGER_TARGET_MIN_NS);
	scavenger_init(&s, 10 * S);
	CHECK_EQ_U64(s.target_ns, SCAVENGER_TARGET_MAX_NS);
	CHECK_EQ_U64(s.rate_bps, SCAVENGER_START_BPS);
	/* No RTT known yet (tcpi_min_rtt 0): no sample. */
	CHECK(!scavenger_sample(&s, T0, 5 * MS, 0));
	CHECK(scavenger_sample(&s, T0, 5 * MS, MS));
	/* Too soon after the last: not taken. */
	CHECK(!scavenger_sample(&s, T0 + SCAVENGER_INTERVAL_NS - 1, 5 * MS, MS));
	/* A clock reading before the last update (another process's): not taken. */
	CHECK(!scavenger_sample(&s, T0 - 1, 5 * MS, MS));
	/* Twice the target above the floor: cut by half, once per RTT. */
	uint64_t rate = s.rate_bps;
	uint64_t t = T0 + SCAVENGER_INTERVAL_NS;
	CHECK(scavenger_sample(&s, t, MS + 2 * s.target_ns, MS));
	CHECK_EQ_U64(s.rate_bps, rate / 2);
	CHECK(scavenger_sample(&s, t + SCAVENGER_INTERVAL_NS, MS + 2 * s.target_ns, MS));
	CHECK_EQ_U64(s.rate_bps, rate / 2); /* within one RTT of the cut */
	/* Half the target over: cut by a quarter. */
	uint64_t later = t + MS + 2 * s.target_ns + SCAVENGER_INTERVAL_NS;
	CHECK(scavenger_sample(&s, later, MS + s.target_ns * 3 / 2, MS));
	CHECK_EQ_U64(s.rate_bps, rate / 2 * 3 / 4);
	/* Never below the floor. */
	for (int i = 0; i < 100; i++) {
		later += S;
		scavenger_sample(&s, later, 10 * S, MS);
	}
	CHECK_EQ_U64(s.rate_bps, SCAVENGER_MIN_BPS);
	/* An RTT below the least seen (a new path) counts as no queue. */
	CHECK(scavenger_sample(&s, later + S, MS, 2 * MS));
	CHECK_EQ_U64(s.delay_ns, 0);
}

int main(void)
{
	samples_and_bounds();
	alone_fills_the_link(1250000, 50);      /* 10 Mbit/s, the bench's link */
	alone_fills_the_link(1250000, 25);
	alone_fills_the_link(1250000, 100);
	alone_fills_the_link(125000, 50);       /* 1 Mbit/s uplink */
	alone_fills_the_link(125000000, 50);    /* 1 Gbit/s */
	yields_to_a_competing_flow();
	no_growth_while_application_limited();
	return 0;
}
