/*
 * tool_sock_diag.h - every TCP socket's byte counts, from the kernel's
 * NETLINK_SOCK_DIAG (inet_diag; what `ss -ti` shows), for the supervisor's
 * network feedback (tool_net_feedback.c).
 *
 * No privilege is needed: inet_diag_dump_icsk() lists every socket of the
 * caller's network namespace to any user, and tcp_diag_get_info() fills
 * INET_DIAG_INFO (struct tcp_info) for each without a capability check
 * (only INET_DIAG_MD5SIG/ULP details need CAP_NET_ADMIN; measured as
 * nobody on Linux 6.18).  Sockets are matched to the job by inode
 * (/proc/PID/fd/N -> "socket:[INODE]").
 *
 * TCP only: UDP's inet_diag (udp_diag.c) reports queues, not byte counts,
 * and a closed or orphaned TCP socket (inode 0, TIME_WAIT) is no one's.
 */
#ifndef DISCNICE_TOOL_SOCK_DIAG_H
#define DISCNICE_TOOL_SOCK_DIAG_H

#include "policy/socket_ledger.h"

/* A netlink socket for the dumps (close-on-exec): fd or -errno. */
int sock_diag_open(void);

/*
 * Dump every TCP socket (IPv4 and IPv6) whose inode is in `inodes`
 * (sorted ascending, n of them) into out[0..max): its inode and what the
 * program moved through it - written = bytes_sent - bytes_retrans +
 * notsent_bytes (the data it handed to the kernel: sent once, or still
 * waiting to be), read = bytes_received - the receive queue (the data it
 * took).  Returns how many were written, or -errno.
 */
int sock_diag_tcp(int fd, const uint64_t *inodes, size_t n, struct socket_count *out, size_t max);

#endif
