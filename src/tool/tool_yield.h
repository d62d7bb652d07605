/*
 * tool_yield.h - the yield policy (issue #4 §3; rate-windows §3.1): the job
 * runs free while the disk is otherwise idle and drops to its caps as soon
 * as other processes do disk I/O, with hysteresis so the state does not
 * flap.  Other processes' I/O is the growth of their read_bytes in
 * /proc/PID/io (the processes the user may read; see tool_yield.c).
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
};

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
