/*
 * tool_net_feedback.h - measured feedback for the network (issue #12 item
 * 5): what the job's TCP sockets moved that the agent did not count goes
 * into the class's network window, as the disk's feedback does for disk
 * bytes (tool_regulate.c), and the regulator's holds (tool_hold.c) keep a
 * job the agent cannot see - a static or Go program, io_uring - near the
 * network caps.
 *
 * Measured without privilege, at the regulator's ticks: the job's socket
 * inodes from /proc/PID/fd of its processes, each socket's counts from
 * NETLINK_SOCK_DIAG (tool_sock_diag.c: a dump when a socket is new to us,
 * a lookup of each known one otherwise), kept per inode across ticks by
 * the ledger (src/policy/socket_ledger.c), compared with the agent's
 * counters of the run (net_sent_bytes, net_received_bytes).
 *
 * What it cannot see: UDP (sock_diag has no byte counts for it, and
 * /proc/PID/io's wchar counts write() on a socket but not send, sendto,
 * sendmsg or sendmmsg: vfs_write() calls add_wchar(), __sys_sendto() does
 * not); Unix sockets; the bytes a TCP socket moved after the last tick
 * before it closed, and a connection opened and closed between two ticks;
 * sockets of processes that left the job (passed on to another process).
 */
#ifndef DISCNICE_TOOL_NET_FEEDBACK_H
#define DISCNICE_TOOL_NET_FEEDBACK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "discnice/segment.h"

struct net_feedback;

/* NULL when out of memory or when the kernel offers no sock_diag (one
 * warning: the network is then policed by the agent alone). */
struct net_feedback *net_feedback_new(struct dn_segment *seg, int run_slot);
void net_feedback_free(struct net_feedback *nf);

/* Does the class have a network cap now (or the scavenger's rate)? */
bool net_feedback_capped(const struct net_feedback *nf);

/* No network cap now: what the job moves meanwhile is not owed; the next
 * measure() starts the books afresh. */
void net_feedback_uncapped(struct net_feedback *nf);

/* Sample the job's sockets (the processes pids[0..n)) and work out what
 * is owed and what is to be given back.  Without the segment lock.
 * True if bytes escaped the agent at this sample. */
bool net_feedback_measure(struct net_feedback *nf, const pid_t *pids, unsigned n, uint64_t now);

/* With the segment lock held: give back what the agent counted after we
 * charged it, then pay the debt into the network window in pieces; the
 * ns until the window takes the next piece (0: nothing owed now). */
uint64_t net_feedback_pay(struct net_feedback *nf, uint64_t now);

/* Is anything owed? */
bool net_feedback_owes(const struct net_feedback *nf);

/* Charged beyond the agent's count so far, per direction. */
void net_feedback_totals(const struct net_feedback *nf, uint64_t *sent, uint64_t *received);

#endif
