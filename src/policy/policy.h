/*
 * policy.h - the pluggable policy module (DiscNice §4.1, §5.3).
 *
 * A policy sees a class's window, the predicted disk bytes of one piece of
 * I/O and the time now, and answers how long to wait before that I/O
 * conforms.  It never sleeps and never takes a lock: the caller holds the
 * segment lock around delay+charge and sleeps only after releasing it.
 * Pure logic: no I/O, no globals, no clock reads.
 */
#ifndef DISCNICE_POLICY_H
#define DISCNICE_POLICY_H

#include <stdint.h>
#include "discnice/segment.h"

struct policy {
	const char *name;
	/* Nanoseconds from now_ns until charging (read_bytes, write_bytes)
	 * keeps every capped rate of the class within its cap. 0 = go now. */
	uint64_t (*delay)(const struct dn_window *window, const struct dn_caps *caps,
			  uint64_t now_ns, uint64_t read_bytes, uint64_t write_bytes);
	/* Record I/O released at now_ns under caps (NULL: unknown); negative
	 * bytes refund (cancelled writes). */
	void (*charge)(struct dn_window *window, const struct dn_caps *caps, uint64_t now_ns,
		       int64_t read_bytes, int64_t write_bytes);
};

extern const struct policy policy_rate_window;  /* rate_window.c: sliding buckets  */
extern const struct policy policy_paper_window; /* paper_window.c: rate-windows §3.2 */

/* The policy a class chose (dn_segment.window_policy, set at creation):
 * one relaxed load and a compare, cheap enough for every call.  An
 * unknown value (the agent refuses such a segment) polices by the
 * default. */
static inline const struct policy *policy_of(const struct dn_segment *seg)
{
	return __atomic_load_n(&seg->window_policy, __ATOMIC_RELAXED) == DN_WINDOW_POLICY_PAPER
		       ? &policy_paper_window
		       : &policy_rate_window;
}

/* The smallest cap set, 0 when none is: what sizes chunks and pieces. */
static inline uint64_t caps_smallest(const struct dn_caps *caps)
{
	uint64_t cap = 0;
	const uint64_t all[] = { caps->read_bps, caps->write_bps, caps->total_bps };
	for (unsigned i = 0; i < 3; i++)
		if (all[i] && (!cap || all[i] < cap))
			cap = all[i];
	return cap;
}

#endif
