/*
 * paper_window.h - the rate-windows paper's own window (Ryu et al. §3.2),
 * a policy beside the sliding bucket window (rate_window.h), selected per
 * class by `discnice run --window-policy paper`.
 *
 * The window is the last <= 100 I/O events of the class, none older than
 * 5 s.  For a request of B bytes at time t under a cap Rt:
 *     Bw = the bytes of the window's events + B
 *     Tw = t + B / Rt - (start of the oldest event)
 * proceed at once if Bw / Tw <= Rt, else sleep Bw / Rt - Tw; a sleep below
 * the minimum becomes 0; requests are cut into pieces of at most
 * Rt x the maximum sleep where discnice already cuts them (disk chunks,
 * stream pieces), datagrams never.  See paper_window.c for the choices.
 */
#ifndef DISCNICE_PAPER_WINDOW_H
#define DISCNICE_PAPER_WINDOW_H

#include <stdint.h>
#include "discnice/segment.h"

/* The paper's constants.  5 s and 100 events: §3.2.  The maximum sleep:
 * Fig. 6(b), "the maximum sleep duration of 100msec".  The minimum sleep
 * is not given; the paper needed KURT's fine-grained timers for its sleeps
 * (§3.2) and reports a most common non-zero sleep of 2-3 ms (Fig. 6(c)),
 * so its bound lay below 2 ms: we take 1 ms, above which a nanosleep's
 * own cost (~50-100 us here) is small. */
#define PAPER_SPAN_NS      UINT64_C(5000000000)
#define PAPER_MIN_SLEEP_NS UINT64_C(1000000)
#define PAPER_MAX_SLEEP_NS UINT64_C(100000000)

/* An empty event queue with these bounds (0: the paper's defaults).  The
 * bucket part of the window is rate_window_init's. */
void paper_window_init(struct dn_window *window, uint64_t span_ns, uint64_t min_sleep_ns,
		       uint64_t max_sleep_ns);

uint64_t paper_window_delay(const struct dn_window *window, const struct dn_caps *caps,
			    uint64_t now_ns, uint64_t read_bytes, uint64_t write_bytes);

/* Record one event (negative bytes: a refund, taken from the newest
 * events).  Also charges the bucket window, which the displays read. */
void paper_window_charge(struct dn_window *window, const struct dn_caps *caps, uint64_t now_ns,
			 int64_t read_bytes, int64_t write_bytes);

/* The largest piece whose steady-state sleep stays within the maximum:
 * cap x max_sleep, at least 4 KiB; UINT64_MAX when cap is 0. */
uint64_t paper_window_piece(const struct dn_window *window, uint64_t cap);

/* How many events the window holds at now_ns (for tests and displays). */
unsigned paper_window_events(const struct dn_window *window, uint64_t now_ns);

#endif
