/*
 * tool_yield.h - the yield policy (issue #4 §3; rate-windows §3.1): the job
 * runs free while the disk is otherwise idle and drops to its caps as soon
 * as other processes do disk I/O, with hysteresis so the state does not
 * flap.  Other processes' I/O is the growth of their read_bytes in
 * /proc/PID/io (the processes the user may read; see tool_yield.c); for
 * a class with network caps, also the machine's other traffic.
 */
#ifndef DISCNICE_TOOL_YIELD_H
#define DISCNICE_TOOL_YIELD_H

#include <stdbool.h>
#include <stdint.h>

#include "discnice/segment.h"

struct yield_config {
	struct dn_caps caps;    /* what the job gets while others use the disk */
	uint64_t high_bps;      /* others above this: throttle                 */
	uint64_t low_bps;       /* others below this for hold_ns: run free      */
	uint64_t hold_ns;
	/* The network (issue #12 item 6), when the class has network caps:
	 * the same policy, driven by the others' traffic - /proc/net/dev
	 * less the bytes the job's agents counted (see tool_yield.c). */
	bool net;
	struct dn_caps net_caps; /* what the job gets while others use the network */
	uint64_t net_high_bps, net_low_bps;
};

/* While the network runs free its caps are not lifted to 0 but set to
 * this (1 TiB/s, which never binds), so that the agents keep counting the
 * job's socket bytes: without that count the job's own traffic would look
 * like the others'.  A class in this state shows DN_FLAG_NET_YIELD_FREE. */
#define YIELD_NET_FREE_BPS (UINT64_C(1) << 40)

struct yield_state;

/* Starts free: the class's caps are lifted until others' I/O appears. */
struct yield_state *yield_new(struct dn_segment *seg, const struct yield_config *config);
/* At most every 100 ms: measure the others, switch if needed. */
void yield_tick(struct yield_state *y, uint64_t now_ns);
void yield_free(struct yield_state *y);

struct yield_stats {
	uint64_t throttled_ns;   /* time spent at the caps          */
	uint64_t switches;       /* free <-> throttled transitions  */
};
void yield_stats(const struct yield_state *y, uint64_t now_ns, struct yield_stats *out);

#endif
