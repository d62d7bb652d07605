/*
 * tool_sock_diag.c - TCP sockets' byte counts from NETLINK_SOCK_DIAG (see
 * tool_sock_diag.h).  The protocol: one SOCK_DIAG_BY_FAMILY request with
 * NLM_F_DUMP per address family (net/ipv4/inet_diag.c
 * inet_diag_dump_icsk), answered by one struct inet_diag_msg per socket
 * with the extensions asked for as attributes, then NLMSG_DONE.
 */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tool/tool_sock_diag.h"

int sock_diag_open(void)
{
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	return fd < 0 ? -errno : fd;
}

static bool inode_wanted(const uint64_t *inodes, size_t n, uint64_t inode)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (inodes[mid] == inode)
			return true;
		if (inodes[mid] < inode)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/* The counts of one reply, if it is a socket we want with its tcp_info. */
static bool reply_counts(const struct nlmsghdr *h, const uint64_t *inodes, size_t n,
			 struct socket_count *out)
{
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
		return false;
	const struct inet_diag_msg *m = NLMSG_DATA(h);
	if (!m->idiag_inode || !inode_wanted(inodes, n, m->idiag_inode))
		return false;
	int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
	for (const struct rtattr *a = (const struct rtattr *)(m + 1); RTA_OK(a, len);
	     a = RTA_NEXT(a, len)) {
		if (a->rta_type != INET_DIAG_INFO)
			continue;
		/* The kernel's struct may be shorter (older) or longer (newer)
		 * than ours: the byte counts came in Linux 4.19 (bytes_sent,
		 * bytes_retrans, notsent_bytes earlier, bytes_received 4.1). */
		size_t have = RTA_PAYLOAD(a);
		if (have < offsetof(struct tcp_info, tcpi_bytes_retrans) + sizeof(uint64_t))
			return false;
		struct tcp_info info;
		memset(&info, 0, sizeof info);
		memcpy(&info, RTA_DATA(a), have < sizeof info ? have : sizeof info);
		uint64_t sent = info.tcpi_bytes_sent > info.tcpi_bytes_retrans
					? info.tcpi_bytes_sent - info.tcpi_bytes_retrans : 0;
		out->inode = m->idiag_inode;
		/* Sent once (retransmissions left out) plus what waits in the
		 * buffer unsent (write_seq - snd_nxt): what write() gave. */
		out->written = sent + info.tcpi_notsent_bytes;
		/* Received less what still waits to be read (rcv_nxt -
		 * copied_seq, tcp_diag_get_info): what read() took. */
		out->read = info.tcpi_bytes_received > m->idiag_rqueue
				    ? info.tcpi_bytes_received - m->idiag_rqueue : 0;
		return true;
	}
	return false;
}

static uint32_t dump_sequence;

/* One family's dump; adds to out[*found..max). */
static int dump_family(int fd, int family, const uint64_t *inodes, size_t n,
		       struct socket_count *out, size_t max, size_t *found)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} request;
	memset(&request, 0, sizeof request);
	uint32_t seq = ++dump_sequence;
	request.nlh.nlmsg_len = sizeof request;
	request.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	request.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	request.nlh.nlmsg_seq = seq;
	request.req.sdiag_family = (uint8_t)family;
	request.req.sdiag_protocol = IPPROTO_TCP;
	request.req.idiag_ext = 1u << (INET_DIAG_INFO - 1);
	/* Every state that has a socket of a program's: not LISTEN (no data),
	 * TIME_WAIT (a timewait sock, no inode) nor NEW_SYN_RECV (a request). */
	request.req.idiag_states = 0xfff & ~((1u << 10) | (1u << 6) | (1u << 12));
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	ssize_t r;
	do
		r = sendto(fd, &request, sizeof request, 0, (struct sockaddr *)&kernel,
			   sizeof kernel);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	/* Big enough for a few dozen sockets per datagram (the kernel fills
	 * up to its own page-sized skbs). */
	static union {
		struct nlmsghdr align;
		char bytes[64 * 1024];
	} buffer;
	for (;;) {
		do
			r = recv(fd, buffer.bytes, sizeof buffer.bytes, 0);
		while (r < 0 && errno == EINTR);
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		/* NLMSG_OK/NLMSG_NEXT by hand: the macros compare the u32
		 * length with an int (clang's -Wsign-compare). */
		size_t left = (size_t)r;
		for (struct nlmsghdr *h = &buffer.align;
		     left >= sizeof *h && h->nlmsg_len >= sizeof *h && h->nlmsg_len <= left;
		     left -= left < NLMSG_ALIGN(h->nlmsg_len) ? left : NLMSG_ALIGN(h->nlmsg_len),
		     h = (struct nlmsghdr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len))) {
			if (h->nlmsg_seq != seq)
				continue; /* a reply to an earlier dump cut short */
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				return h->nlmsg_len >= NLMSG_LENGTH(sizeof *e) && e->error ? e->error
											  : -EIO;
			}
			if (*found < max && reply_counts(h, inodes, n, &out[*found]))
				(*found)++;
		}
	}
}

int sock_diag_tcp(int fd, const uint64_t *inodes, size_t n, struct socket_count *out, size_t max)
{
	size_t found = 0;
	if (!n)
		return 0;
	int rc = dump_family(fd, AF_INET, inodes, n, out, max, &found);
	if (rc == 0)
		rc = dump_family(fd, AF_INET6, inodes, n, out, max, &found);
	/* A kernel without IPv6 answers ENOENT for its family: the IPv4
	 * sockets found still count. */
	if (rc < 0 && rc != -ENOENT)
		return rc;
	return (int)found;
}
