/*
 * rate_window.h - sliding-window rate policing (rate-windows paper §3.2,
 * DiscNice §5.3, Fig. 10).
 *
 * The window holds the bytes released in the last N seconds (span_ns), in
 * DN_WINDOW_BUCKETS time buckets.  A request of B bytes conforms at time t
 * when   bytes_in(t - Tw, t] + B  <=  R * Tw,   with Tw = min(N, t - origin)
 * (the window never reaches back before the class started, so a job cannot
 * open with a burst of N seconds' worth).  Otherwise the delay is the least
 * d >= 0 for which the inequality holds at t + d: the paper's B/R - Tw with
 * the bytes that age out of the window during d accounted for.
 * The oldest bucket, only partly inside the window, counts pro rata.
 */
#ifndef DISCNICE_RATE_WINDOW_H
#define DISCNICE_RATE_WINDOW_H

#include <stdint.h>
#include "discnice/segment.h"

/* Empty window of span span_ns starting at origin_ns. */
void rate_window_init(struct dn_window *window, uint64_t span_ns, uint64_t origin_ns);

uint64_t rate_window_delay(const struct dn_window *window, const struct dn_caps *caps,
			   uint64_t now_ns, uint64_t read_bytes, uint64_t write_bytes);

/* Record bytes released at now_ns (negative: a refund).  caps (may be NULL)
 * are the class's: a charge into an empty window restarts its clock there
 * (see rate_window.c, window_restart). */
void rate_window_charge(struct dn_window *window, const struct dn_caps *caps, uint64_t now_ns,
			int64_t read_bytes, int64_t write_bytes);

/* Bytes counted in the window ending at now_ns (for status displays). */
void rate_window_sums(const struct dn_window *window, uint64_t now_ns,
		      int64_t *read_bytes, int64_t *write_bytes);

#endif
