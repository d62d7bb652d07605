/*
 * socket_ledger.h - the supervisor's books of a job's TCP traffic (issue
 * #12 item 5: what the agent cannot see).  Pure: no I/O, no globals; the
 * caller (src/tool/tool_net_feedback.c) hands it what the kernel reported
 * of each socket (src/tool/tool_sock_diag.c) and its memory.
 *
 * Two parts:
 *
 *   The per-socket ledger.  The kernel keeps cumulative counts per socket
 *   (tcp_info) and forgets them when the socket closes.  The ledger keeps
 *   the counts each socket had at the last sample, by inode, and adds to
 *   the job's running totals only their growth: a socket new since the
 *   last sample brings its whole count (it was opened since), one gone
 *   since takes nothing away.  What a socket moved between the last sample
 *   and its close is lost (at most one tick's worth), and a socket opened
 *   and closed between two samples is never seen at all.
 *
 *   The feedback's books (feedback_settle).  The same rule as the disk's
 *   (src/tool/tool_regulate.c regulator_tick): what the kernel counted
 *   beyond what the agent counted and beyond what feedback charged before
 *   is owed, never twice; once the agent's count and ours together pass
 *   the kernel's (the agent counted late), the excess is given back, up to
 *   what feedback charged.  The window then holds max(agent, kernel).
 */
#ifndef DISCNICE_SOCKET_LEDGER_H
#define DISCNICE_SOCKET_LEDGER_H

#include <stddef.h>
#include <stdint.h>

/* One socket's cumulative counts: bytes the program handed to the kernel
 * to send, bytes it took from the kernel, and bytes that arrived (read
 * plus what waits in the receive queue). */
struct socket_count {
	uint64_t inode;
	uint64_t written;
	uint64_t read;
	uint64_t received;
	/* Not counts but the queues now (the ledger ignores them): bytes
	 * written and not yet sent (write_seq - snd_nxt) and bytes arrived and
	 * not yet read (rcv_nxt - copied_seq). */
	uint64_t notsent;
	uint64_t unread;
	/* Bytes sent again (tcp_info bytes_retrans): on the wire, and in the
	 * interfaces' counts, but in neither written nor the agent's count. */
	uint64_t retrans;
};

struct socket_ledger {
	struct socket_count *known; /* the last sample, sorted by inode */
	size_t count, capacity;
	uint64_t written, read, received, retrans; /* the job's totals: sum of the growth seen */
};

/* An empty ledger over the caller's memory for `capacity` sockets. */
void socket_ledger_init(struct socket_ledger *ledger, struct socket_count *memory,
			size_t capacity);

/*
 * One sample: the job's sockets now (any order; an inode listed twice -
 * a socket shared by two processes - counts once; at most `capacity` are
 * kept, the rest of `now` is ignored).  `now` is sorted in place.  Adds
 * each socket's growth since the last sample to the totals (a count
 * smaller than last time - an inode reused by a new socket - counts as
 * new) and makes `now` the last sample.
 */
void socket_ledger_sample(struct socket_ledger *ledger, struct socket_count *now, size_t n);

/*
 * The feedback's books for one direction.  actual: the kernel's count
 * since the start; agent: the agent's count over the same span; *fed:
 * what feedback has charged so far (updated).  *owe: to charge now;
 * *back: to give back now (at most what was fed).  One of them is 0.
 */
void feedback_settle(uint64_t actual, uint64_t agent, uint64_t *fed, uint64_t *owe,
		     uint64_t *back);

#endif
