/*
 * tool_yield.c - the yield policy (see tool_yield.h).
 *
 * Who else is using the disk?  Every 100 ms one pass over /proc reads, for
 * every process we may read, its parent and its read_bytes (the kernel's
 * per-process count, at submission).  The job is every descendant of the
 * supervisor; the others' reads are the growth of everybody else's
 * read_bytes.  (The disks' own counters, /proc/diskstats minus the job's,
 * would not do: the job's reads are counted at submission, the disk's at
 * completion, and a readahead window in flight skews the difference by
 * megabytes per interval.)  Reads only: writes reach the disk at
 * writeback, submitted by the flusher, not by the writer.  A user sees the
 * processes of their own uid, which is what an interactive user runs.
 *
 * A rate over high_bps throttles at once (the foreground must not wait);
 * only low_bps or less for hold_ns sets the job free again (rate-windows
 * §3.1: switching back needs the foreground to have been gone a while).
 * Throttling writes the configured caps into the class segment; freeing
 * writes zero caps.  The agent reads the caps on every call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proc_io.h"
#include "common/segment.h"
#include "tool/tool_yield.h"

#define SCAN_NS (100 * 1000 * 1000ull)

struct yield_state {
	struct dn_segment *seg;
	struct yield_config config;
	bool throttled;
	uint64_t last_ns;
	uint64_t quiet_since_ns;
	uint64_t throttled_since_ns, throttled_ns, switches;
	/* The last pass over /proc, sorted by pid (proc_nodes()). */
	struct proc_node *prev;
	unsigned nprev;
};

/* Bytes the others read since the last pass.  A process new since then
 * did all its reading since then; one that ended was reaped into its
 * parent's count, which grows instead.  The job is the supervisor and
 * everything below it. */
static uint64_t others_read(const struct yield_state *y, const struct proc_node *cur, unsigned ncur)
{
	pid_t self = getpid();
	uint64_t total = 0;
	for (unsigned i = 0; i < ncur; i++) {
		const struct proc_node *c = &cur[i];
		if (proc_node_below(cur, ncur, c->pid, self))
			continue;
		const struct proc_node *p = proc_node_find(y->prev, y->nprev, c->pid);
		if (!p)
			total += c->read_bytes;
		else if (c->read_bytes > p->read_bytes)
			total += c->read_bytes - p->read_bytes;
	}
	return total;
}

static void set_caps(struct yield_state *y, bool throttled, uint64_t now)
{
	if (y->throttled == throttled)
		return;
	uint64_t token = segment_lock(y->seg);
	if (throttled) {
		y->seg->caps = y->config.caps;
		y->seg->flags |= DN_FLAG_YIELD_THROTTLED;
	} else {
		memset(&y->seg->caps, 0, sizeof y->seg->caps);
		y->seg->flags &= ~DN_FLAG_YIELD_THROTTLED;
	}
	segment_unlock(y->seg, token);
	if (throttled)
		y->throttled_since_ns = now;
	else
		y->throttled_ns += now - y->throttled_since_ns;
	y->throttled = throttled;
	y->switches++;
}

struct yield_state *yield_new(struct dn_segment *seg, const struct yield_config *config)
{
	struct yield_state *y = calloc(1, sizeof *y);
	if (!y)
		return NULL;
	int n = proc_nodes(&y->prev);
	if (n < 0) {
		free(y);
		return NULL;
	}
	y->nprev = (unsigned)n;
	y->seg = seg;
	y->config = *config;
	y->throttled = true; /* so that set_caps() below really frees */
	set_caps(y, false, 0);
	y->switches = 0;
	return y;
}

void yield_tick(struct yield_state *y, uint64_t now)
{
	if (!y)
		return;
	if (!y->last_ns) {
		y->last_ns = now;
		return;
	}
	uint64_t dt = now - y->last_ns;
	if (dt < SCAN_NS)
		return;
	struct proc_node *cur;
	int ncur = proc_nodes(&cur);
	if (ncur < 0)
		return; /* out of memory: keep the state, look again next tick */
	uint64_t others = others_read(y, cur, (unsigned)ncur);
	free(y->prev);
	y->prev = cur;
	y->nprev = (unsigned)ncur;
	y->last_ns = now;
	uint64_t rate = (uint64_t)((unsigned __int128)others * 1000000000u / dt);

	if (rate > y->config.high_bps) {
		set_caps(y, true, now);
		y->quiet_since_ns = 0;
	} else if (rate <= y->config.low_bps) {
		if (!y->quiet_since_ns)
			y->quiet_since_ns = now;
		if (y->throttled && now - y->quiet_since_ns >= y->config.hold_ns)
			set_caps(y, false, now);
	} else {
		y->quiet_since_ns = 0;
	}
}

void yield_stats(const struct yield_state *y, uint64_t now, struct yield_stats *out)
{
	memset(out, 0, sizeof *out);
	if (!y)
		return;
	out->throttled_ns = y->throttled_ns + (y->throttled ? now - y->throttled_since_ns : 0);
	out->switches = y->switches;
}

void yield_free(struct yield_state *y)
{
	if (!y)
		return;
	/* Leave the class as it was configured: other runs may share it. */
	uint64_t token = segment_lock(y->seg);
	y->seg->caps = y->config.caps;
	y->seg->flags &= ~DN_FLAG_YIELD_THROTTLED;
	segment_unlock(y->seg, token);
	free(y->prev);
	free(y);
}
