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
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/net_dev.h"
#include "common/proc_io.h"
#include "common/segment.h"
#include "tool/tool_sock_diag.h"
#include "tool/tool_yield.h"

#define SCAN_NS (100 * 1000 * 1000ull)
#define NET_RING 11 /* the network's counts over the last second of passes */

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
	/* The network: its own state, the interfaces' and the job's counts
	 * at the last pass. */
	bool net_throttled;
	uint64_t net_quiet_since_ns;
	uint64_t net_throttled_since_ns, net_throttled_ns;
	struct net_sample { uint64_t ns, dev_bytes, job_bytes; } net_ring[NET_RING];
	unsigned net_samples;
	int diag_fd; /* sock_diag (tool_sock_diag.h): -1 not yet, -2 unavailable */
	/* The job's TCP sockets' retransmissions, by their growth per socket
	 * (socket_ledger.h): memory for NET_SOCKETS_MAX of them. */
	struct socket_ledger ledger;
	struct socket_count *ledger_memory;
};

#define NET_SOCKETS_MAX 4096

/* A configured cap, or the never-binding one while free (0 stays 0). */
static uint64_t net_cap_now(uint64_t configured, bool throttled)
{
	return !configured ? 0 : throttled ? configured : YIELD_NET_FREE_BPS;
}

static void set_net_caps(struct yield_state *y, bool throttled, uint64_t now)
{
	const struct dn_caps *c = &y->config.net_caps;
	uint64_t token = segment_lock(y->seg);
	__atomic_store_n(&y->seg->net_caps.read_bps, net_cap_now(c->read_bps, throttled),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&y->seg->net_caps.write_bps, net_cap_now(c->write_bps, throttled),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&y->seg->net_caps.total_bps, net_cap_now(c->total_bps, throttled),
			 __ATOMIC_RELAXED);
	y->seg->flags &= ~(DN_FLAG_NET_YIELD_FREE | DN_FLAG_NET_YIELD_THROTTLED);
	y->seg->flags |= throttled ? DN_FLAG_NET_YIELD_THROTTLED : DN_FLAG_NET_YIELD_FREE;
	segment_unlock(y->seg, token);
	if (throttled != y->net_throttled) {
		y->switches++;
		if (throttled)
			y->net_throttled_since_ns = now;
		else
			y->net_throttled_ns += now - y->net_throttled_since_ns;
	}
	y->net_throttled = throttled;
}

/*
 * The network's half of a pass (rate-windows §3.1, on network I/O as its
 * §5.1 experiment): others' traffic = growth of the interfaces' bytes
 * (/proc/net/dev of the supervisor's namespace, the job's too; loopback
 * left out) less the job's own, as its agents counted it corrected by
 * its sockets' queues (job_wire_bytes), plus an eighth:
 * the interfaces count headers (~4.5 % of a full TCP segment) and the
 * ACKs coming back (~2 %), which the agents, counting payload, do not.
 * Over-subtracting hides at most an eighth of the job's rate of others'
 * traffic; under-subtracting would have the job throttle itself.
 */
/*
 * What the job's TCP sockets hold in the kernel now: bytes written and not
 * yet sent (tx) and bytes received and not yet read (rx), by the inodes of
 * the sockets the job's processes have open (/proc/PID/fd of the last
 * pass's processes below us).  The agents count a send when it enters the
 * socket's buffer and a receive when the program reads it; the interfaces
 * count them on the wire.  A sender's buffer (megabytes, autotuned) fills
 * and drains in bursts, so in one 100 ms interval the two counts may
 * differ by a buffer: without this the job's own traffic would look like
 * the others' and throttle it.
 * "Not yet sent" is tcp_info's notsent_bytes (write_seq - snd_nxt), from
 * sock_diag (tool_sock_diag.h).  /proc/net/tcp's tx_queue, the fallback
 * where sock_diag is unavailable, is write_seq - snd_una: it also holds
 * what is in flight or queued at a bottleneck further on, which the
 * interface here has already counted - a deep queue at a router made a
 * job alone on its link look like others' traffic at the link's rate
 * while that queue filled.
 */
/* tx, rx of job_socket_queues() from sock_diag, and the sockets'
 * retransmissions into the ledger; false when it cannot tell (no netlink
 * here, or a failed dump). */
static bool sockets_not_sent(struct yield_state *y, const uint64_t *inodes, size_t n,
			     uint64_t *tx, uint64_t *rx)
{
	if (y->diag_fd == -1) {
		int fd = sock_diag_open();
		y->ledger_memory = calloc(NET_SOCKETS_MAX, sizeof *y->ledger_memory);
		if (fd >= 0 && !y->ledger_memory) {
			close(fd);
			fd = -1;
		}
		y->diag_fd = fd >= 0 ? fd : -2;
		if (y->ledger_memory)
			socket_ledger_init(&y->ledger, y->ledger_memory, NET_SOCKETS_MAX);
	}
	if (y->diag_fd < 0)
		return false;
	struct socket_count *counts = malloc(n * sizeof *counts);
	struct sock_diag_place *places = malloc(n * sizeof *places);
	int found = counts && places ? sock_diag_tcp_dump(y->diag_fd, inodes, n, counts, places, n)
				     : -ENOMEM;
	for (int i = 0; i < found; i++) {
		*tx += counts[i].notsent;
		*rx += counts[i].unread;
	}
	if (found >= 0)
		socket_ledger_sample(&y->ledger, counts, (size_t)found);
	free(counts);
	free(places);
	return found >= 0;
}

static unsigned job_socket_queues(struct yield_state *y, uint64_t *tx, uint64_t *rx)
{
	static uint64_t inodes[NET_SOCKETS_MAX]; /* the supervisor's thread only */
	pid_t *pids = malloc((y->nprev ? y->nprev : 1) * sizeof *pids);
	unsigned processes = 0;
	pid_t self = getpid();
	*tx = *rx = 0;
	if (!pids)
		return 0;
	for (unsigned i = 0; i < y->nprev; i++) {
		pid_t pid = y->prev[i].pid;
		if (pid != self && proc_node_below(y->prev, y->nprev, pid, self))
			pids[processes++] = pid;
	}
	size_t n = sock_diag_job_inodes(pids, processes, inodes, NET_SOCKETS_MAX);
	free(pids);
	if (!n)
		return processes;
	if (sockets_not_sent(y, inodes, n, tx, rx))
		return processes;
	static const char *const tables[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	for (unsigned t = 0; t < 2; t++) {
		char *text;
		if (net_proc_slurp(tables[t], &text) == 0) {
			net_tcp_queues(text, inodes, n, tx, rx);
			free(text);
		}
	}
	return processes;
}

/* The job's bytes as the interfaces see them: sent less what still waits
 * in its sockets, received plus what waits there to be read.  false when
 * the job's processes are not known yet (the first passes): its sockets'
 * queues cannot be read, and a sample then would count what waits in them
 * as sent - a sample before the job had written 1.2 MB into its socket
 * buffer, and no later one, made that 1.2 MB look like others' traffic
 * (2.4 MB/s over the first half second) and held a job that was alone. */
static bool job_wire_bytes(struct yield_state *y, uint64_t *bytes)
{
	const struct dn_segment *seg = y->seg;
	uint64_t sent = segment_read_counter(&seg->counters.net_sent_bytes);
	uint64_t received = segment_read_counter(&seg->counters.net_received_bytes);
	for (unsigned i = 0; i < DN_MAX_RUNS; i++) {
		sent += segment_read_counter(&seg->runs[i].counters.net_sent_bytes);
		received += segment_read_counter(&seg->runs[i].counters.net_received_bytes);
	}
	uint64_t tx, rx;
	if (job_socket_queues(y, &tx, &rx) == 0)
		return false;
	/* Plus what TCP sent again: the interfaces count it, and on a path
	 * with a deep queue (a second or more of RTT) spurious timeouts resend
	 * whole windows - seen at the link's full rate, which the job alone
	 * then took for others' traffic. */
	*bytes = (sent > tx ? sent - tx : 0) + received + rx + y->ledger.retrans;
	return true;
}

static void net_tick(struct yield_state *y, uint64_t now)
{
	uint64_t dev;
	if (net_dev_read(&dev) < 0)
		return; /* unreadable now: keep the state */
	uint64_t job;
	if (!job_wire_bytes(y, &job)) {
		y->net_samples = 0; /* the first sample once the job is known */
		return;
	}
	/* The rate over the last second ("measured over the life of the rate
	 * window", §3.1): the job's bytes reach the wire in bursts of a
	 * piece, which one 100 ms interval would see as someone else's. */
	unsigned newest = y->net_samples % NET_RING;
	y->net_ring[newest] = (struct net_sample){ now, dev, job };
	y->net_samples++;
	unsigned oldest = y->net_samples < NET_RING ? 0 : y->net_samples % NET_RING;
	const struct net_sample *then = &y->net_ring[oldest];
	uint64_t dt = now - then->ns;
	if (dt < 5 * SCAN_NS)
		return; /* half a second at least, or a burst decides */
	uint64_t dev_delta = dev > then->dev_bytes ? dev - then->dev_bytes : 0;
	uint64_t job_delta = job > then->job_bytes ? job - then->job_bytes : 0;
	uint64_t mine = job_delta + job_delta / 8;
	uint64_t others = dev_delta > mine ? dev_delta - mine : 0;
	uint64_t rate = (uint64_t)((unsigned __int128)others * 1000000000u / dt);
	if (rate > y->config.net_high_bps) {
		if (!y->net_throttled)
			set_net_caps(y, true, now);
		y->net_quiet_since_ns = 0;
	} else if (rate <= y->config.net_low_bps) {
		if (!y->net_quiet_since_ns)
			y->net_quiet_since_ns = now;
		if (y->net_throttled && now - y->net_quiet_since_ns >= y->config.hold_ns)
			set_net_caps(y, false, now);
	} else {
		y->net_quiet_since_ns = 0;
	}
}

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
	y->diag_fd = -1;
	y->throttled = true; /* so that set_caps() below really frees */
	set_caps(y, false, 0);
	if (config->net)
		set_net_caps(y, false, 0);
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
	if (y->config.net)
		net_tick(y, now);
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
	/* A class with network caps only: the time its network was held. */
	const struct dn_caps *disk = &y->config.caps;
	if (y->config.net && !(disk->read_bps | disk->write_bps | disk->total_bps))
		out->throttled_ns = y->net_throttled_ns +
				    (y->net_throttled ? now - y->net_throttled_since_ns : 0);
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
	if (y->config.net) {
		y->seg->net_caps = y->config.net_caps;
		y->seg->flags &= ~(DN_FLAG_NET_YIELD_FREE | DN_FLAG_NET_YIELD_THROTTLED);
	}
	segment_unlock(y->seg, token);
	if (y->diag_fd >= 0)
		close(y->diag_fd);
	free(y->ledger_memory);
	free(y->prev);
	free(y);
}
