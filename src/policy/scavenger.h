/*
 * scavenger.h - the network's scavenger mode: a LEDBAT-like controller
 * (RFC 6817) of a class's send rate, at user level.
 *
 * LEDBAT keeps the queueing delay a flow adds at the bottleneck at or
 * below a target, so that it uses a link nobody else needs and gets out
 * of the way of anyone who does; it lives in the kernel's congestion
 * control.  Here the kernel's TCP stays as it is (cubic), and the agent
 * limits how fast the program may hand bytes to its sockets: the
 * controller turns samples of the queueing delay the job's connections
 * see (TCP_INFO tcpi_rtt - tcpi_min_rtt, src/agent/io_net.c) into the
 * class's send rate (segment.h dn_scavenger.rate_bps), which the network
 * window then enforces like a --send-rate cap.
 *
 * Pure logic: no I/O, no clock reads, no globals; the caller holds the
 * class lock around scavenger_sample().
 */
#ifndef DISCNICE_SCAVENGER_H
#define DISCNICE_SCAVENGER_H

#include <stdbool.h>
#include <stdint.h>
#include "discnice/segment.h"

/* The target's bounds and default (RFC 6817 §2.5.1: TARGET MUST be at
 * most 100 ms; 25 ms is what µTP's successors use on fast links).  The
 * default leaves room for the overshoot of one update and one piece of
 * the window above it, so that what the job adds stays within 100 ms. */
#define SCAVENGER_TARGET_MIN_NS     (25 * 1000000ull)
#define SCAVENGER_TARGET_MAX_NS     (100 * 1000000ull)
#define SCAVENGER_TARGET_DEFAULT_NS (50 * 1000000ull)

/* The rate the class starts from, and the least it is ever allowed (RFC
 * 6817 keeps a cwnd of at least 2 MSS: the flow must go on sampling the
 * delay to find out when the link is free again). */
#define SCAVENGER_START_BPS (256u << 10)
#define SCAVENGER_MIN_BPS   (16u << 10)

/* Samples closer together than this, class-wide, are not taken: the
 * kernel's smoothed RTT moves by at most 1/8 of a sample per ACK. */
#define SCAVENGER_INTERVAL_NS (10 * 1000000ull)

/* Turn the controller on (target_ns within the bounds) or off (0). */
void scavenger_init(struct dn_scavenger *s, uint64_t target_ns);

/*
 * One sample at now_ns: the connection's smoothed RTT and its least RTT
 * seen (both in ns, as TCP_INFO gives them in µs).  Returns true when the
 * sample was taken (at most one per SCAVENGER_INTERVAL_NS; rtt_ns below
 * min_rtt_ns counts as no queue).  The rate:
 *   - below the target it grows in proportion to how far below it is
 *     (LEDBAT's off_target), by at most 100 % per second plus 1 MiB/s per
 *     second, and only while the class used at least half of it (LEDBAT
 *     lets cwnd grow only with the flight size: an application-limited
 *     flow would otherwise raise a rate it never tests);
 *   - above the target it is cut at once, multiplicatively, by half the
 *     relative excess (by half at twice the target, never below half),
 *     and then not again for one RTT (the RTT of that sample, at most 4
 *     targets): the RTT the kernel reports lags the queue by about a round
 *     trip, and cutting on every sample until it catches up would empty
 *     the link;
 *   - never below SCAVENGER_MIN_BPS.
 */
bool scavenger_sample(struct dn_scavenger *s, uint64_t now_ns, uint64_t rtt_ns,
		      uint64_t min_rtt_ns);

#endif
