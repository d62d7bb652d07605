/*
 * scavenger.c - the LEDBAT-like controller of a class's send rate (see
 * scavenger.h; RFC 6817 §2.4.2 "cwnd += GAIN * off_target * ...").
 *
 * LEDBAT adjusts a congestion window per ACK; at user level the agent
 * controls the rate at which the program may hand bytes to its sockets,
 * so the same law is written for a rate and per unit of time:
 *
 *   off_target = (TARGET - queueing_delay) / TARGET        (clamped to +-1)
 *   below the target:  dR/dt = off_target * (R * 1/s + 1 MiB/s per s)
 *   above the target:  R *= 1 - min(1/2, (delay - TARGET) / (2 * TARGET)),
 *                      at most once per RTT (4 targets at most).
 *
 * Why a multiplicative cut rather than LEDBAT's linear one: the link's
 * rate is unknown and spans four orders of magnitude (a 1 Mbit/s uplink to
 * 10 Gbit/s loopback), and the rate only acts on the queue after the
 * kernel's socket buffer and the smoothed RTT catch up; a cut in
 * proportion to the rate drains a queue in about the same time at any
 * link speed.  Why once per RTT: the delay sampled just after a cut is
 * still the queue built before it.
 *
 * Fixed point: off_target in parts per million, rates in B/s, times in
 * ns; products in 128 bits.  No floating point (this runs in the agent).
 */
#include "policy/scavenger.h"

__extension__ typedef unsigned __int128 wide_t;

#define PPM            1000000
#define NS_PER_S       UINT64_C(1000000000)
#define RATE_MAX       (UINT64_C(1) << 40)     /* 1 TiB/s: far above any NIC   */
#define GROWTH_STEP    (UINT64_C(1) << 20)     /* + 1 MiB/s per second at most */
#define DT_MAX_NS      (200 * UINT64_C(1000000)) /* an idle gap counts as this */

void scavenger_init(struct dn_scavenger *s, uint64_t target_ns)
{
	*s = (struct dn_scavenger){ 0 };
	if (!target_ns)
		return;
	if (target_ns < SCAVENGER_TARGET_MIN_NS)
		target_ns = SCAVENGER_TARGET_MIN_NS;
	if (target_ns > SCAVENGER_TARGET_MAX_NS)
		target_ns = SCAVENGER_TARGET_MAX_NS;
	s->target_ns = target_ns;
	s->rate_bps = SCAVENGER_START_BPS;
}

bool scavenger_sample(struct dn_scavenger *s, uint64_t now_ns, uint64_t rtt_ns,
		      uint64_t min_rtt_ns)
{
	uint64_t target = s->target_ns;
	if (!target || !rtt_ns || !min_rtt_ns)
		return false;
	/* Another process may have updated with a clock reading a hair later
	 * than ours: too soon as well. */
	if (s->updated_ns && (now_ns < s->updated_ns || now_ns - s->updated_ns < SCAVENGER_INTERVAL_NS))
		return false;
	uint64_t delay = rtt_ns > min_rtt_ns ? rtt_ns - min_rtt_ns : 0;
	uint64_t sent = __atomic_load_n(&s->sent_bytes, __ATOMIC_RELAXED);
	uint64_t used = sent - s->sent_at_update;
	uint64_t rate = s->rate_bps < SCAVENGER_MIN_BPS ? SCAVENGER_MIN_BPS : s->rate_bps;
	uint64_t dt = s->updated_ns ? now_ns - s->updated_ns : 0;
	if (dt > DT_MAX_NS)
		dt = DT_MAX_NS;

	if (delay <= target) {
		/* off_target in (0, 1]: how far below the target, in ppm. */
		uint64_t off = (uint64_t)((wide_t)(target - delay) * PPM / target);
		/* Used at least half of what the rate allowed over dt? */
		bool limited_by_rate = (wide_t)used * 2 * NS_PER_S >= (wide_t)rate * dt;
		if (dt && limited_by_rate) {
			wide_t grow = ((wide_t)rate + GROWTH_STEP) * off * dt / ((wide_t)PPM * NS_PER_S);
			wide_t next = (wide_t)rate + grow;
			rate = next > RATE_MAX ? RATE_MAX : (uint64_t)next;
		}
	} else if (now_ns >= s->next_cut_ns) {
		/* Cut by half the relative excess, at most by half. */
		uint64_t excess = delay - target;
		uint64_t cut_ppm = excess >= target ? PPM / 2
						    : (uint64_t)((wide_t)excess * (PPM / 2) / target);
		rate = (uint64_t)((wide_t)rate * (PPM - cut_ppm) / PPM);
		/* The RTT now, not the one at the next sample: a queue that
		 * grows faster than time would put that off for ever. */
		uint64_t hold = rtt_ns < 4 * target ? rtt_ns : 4 * target;
		s->next_cut_ns = now_ns + hold;
		s->decreases++;
	}
	if (rate < SCAVENGER_MIN_BPS)
		rate = SCAVENGER_MIN_BPS;
	__atomic_store_n(&s->rate_bps, rate, __ATOMIC_RELAXED);
	s->updated_ns = now_ns;
	s->sent_at_update = sent;
	s->delay_ns = delay;
	s->samples++;
	return true;
}
