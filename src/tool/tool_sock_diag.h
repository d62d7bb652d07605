/*
 * tool_sock_diag.h - TCP sockets' byte counts from the kernel's
 * NETLINK_SOCK_DIAG (inet_diag; what `ss -ti` shows), for the supervisor's
 * network feedback (tool_net_feedback.c).
 *
 * No privilege is needed: inet_diag lists every socket of the caller's
 * network namespace to any user, and tcp_diag_get_info() fills
 * INET_DIAG_INFO (struct tcp_info) for each without a capability check
 * (only INET_DIAG_MD5SIG/ULP details need CAP_NET_ADMIN; measured as
 * nobody on Linux 6.18).  Sockets are matched to the job by inode
 * (/proc/PID/fd/N -> "socket:[INODE]").
 *
 * Two ways to ask.  A dump walks every bucket of the kernel's TCP hash
 * tables (inet_diag_dump_icsk()): about half a millisecond on this 24 GiB
 * machine whatever the job holds, too much for every tick.  A lookup asks
 * for one socket by where it is filed - its addresses, ports and cookie,
 * which a dump tells - and is one hash lookup (inet_diag_find_one_icsk()).
 * So a socket is dumped once, when it appears, and looked up from then on.
 *
 * TCP only: UDP's inet_diag (udp_diag.c) reports queues, not byte counts,
 * and a closed or orphaned TCP socket (inode 0, TIME_WAIT) is no one's.
 */
#ifndef DISCNICE_TOOL_SOCK_DIAG_H
#define DISCNICE_TOOL_SOCK_DIAG_H

#include <linux/inet_diag.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "policy/socket_ledger.h"

/* Where the kernel files a TCP socket: enough to ask for it alone. */
struct sock_diag_place {
	uint8_t family; /* AF_INET or AF_INET6 */
	struct inet_diag_sockid id;
};

/* The socket inodes the processes pids[0..n) hold now (/proc/PID/fd/N ->
 * "socket:[N]"; readable for our own user's processes) into inodes[0..max),
 * sorted ascending, each once: how many. */
size_t sock_diag_job_inodes(const pid_t *pids, unsigned n, uint64_t *inodes, size_t max);

/* A netlink socket for the requests (close-on-exec, replies awaited at
 * most 100 ms): fd or -errno. */
int sock_diag_open(void);

/*
 * Dump every TCP socket (IPv4 and IPv6) whose inode is in `inodes`
 * (sorted ascending, n of them) into counts[0..max) and places[0..max):
 * its inode and what the program moved through it - written =
 * bytes_sent - bytes_retrans + notsent_bytes (the data it handed to the
 * kernel: sent once, or still waiting to be), read = bytes_received - the
 * receive queue (the data it took), received = bytes_received (all that
 * arrived) - and where it is filed.  Returns how
 * many were found, or -errno.
 */
int sock_diag_tcp_dump(int fd, const uint64_t *inodes, size_t n, struct socket_count *counts,
		       struct sock_diag_place *places, size_t max);

/*
 * Ask for each of places[0..n) (with its inode in inodes[i]) alone:
 * counts[i] and found[i] = true for those still there under that inode.
 * 0 or -errno (then nothing is known).
 */
int sock_diag_tcp_lookup(int fd, const struct sock_diag_place *places, const uint64_t *inodes,
			 size_t n, struct socket_count *counts, bool *found);

#endif
