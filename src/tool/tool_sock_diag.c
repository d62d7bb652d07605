/*
 * tool_sock_diag.c - TCP sockets' byte counts from NETLINK_SOCK_DIAG (see
 * tool_sock_diag.h).  The protocol: a SOCK_DIAG_BY_FAMILY request with
 * NLM_F_DUMP per address family (net/ipv4/inet_diag.c
 * inet_diag_dump_icsk) is answered by one struct inet_diag_msg per socket,
 * with the extensions asked for as attributes, then NLMSG_DONE; one
 * without NLM_F_DUMP, naming a socket by its struct inet_diag_sockid
 * (inet_diag_find_one_icsk), by that socket's message or an NLMSG_ERROR
 * (-ENOENT: it is gone).  Several requests may share one datagram
 * (netlink_rcv_skb() takes them in turn); each reply carries its
 * request's sequence number.
 */
#include <dirent.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/net_dev.h"
#include "tool/tool_sock_diag.h"

/* Requests sent in one datagram by a lookup: their replies (a few hundred
 * bytes each) fit the socket's default receive buffer. */
#define LOOKUP_BATCH 64

int sock_diag_open(void)
{
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -errno;
	/* The kernel answers at once; a reply lost (ENOBUFS) must not hang
	 * the supervisor's loop. */
	struct timeval wait = { 0, 100 * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
	return fd;
}

static int compare_inode(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

size_t sock_diag_job_inodes(const pid_t *pids, unsigned n, uint64_t *inodes, size_t max)
{
	size_t count = 0;
	for (unsigned i = 0; i < n && count < max; i++) {
		char dir[64];
		snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pids[i]);
		DIR *d = opendir(dir);
		if (!d)
			continue; /* gone since the scan */
		struct dirent *e;
		while ((e = readdir(d)) && count < max) {
			if (e->d_name[0] == '.')
				continue;
			char target[64];
			ssize_t len = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
			if (len < 8 || memcmp(target, "socket:[", 8) != 0)
				continue;
			target[len] = '\0';
			char *end;
			unsigned long long inode = strtoull(target + 8, &end, 10);
			if (*end == ']' && inode)
				inodes[count++] = inode;
		}
		closedir(d);
	}
	qsort(inodes, count, sizeof *inodes, compare_inode);
	size_t unique = 0;
	for (size_t i = 0; i < count; i++)
		if (!unique || inodes[unique - 1] != inodes[i])
			inodes[unique++] = inodes[i];
	return unique;
}

/* The counts and place of the socket a reply describes, if it has its
 * tcp_info. */
static bool reply_counts(const struct nlmsghdr *h, struct socket_count *out,
			 struct sock_diag_place *place)
{
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
		return false;
	const struct inet_diag_msg *m = NLMSG_DATA(h);
	int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
	for (const struct rtattr *a = (const struct rtattr *)(m + 1); RTA_OK(a, len);
	     a = RTA_NEXT(a, len)) {
		if (a->rta_type != INET_DIAG_INFO)
			continue;
		/* The kernel's struct may be shorter (older) or longer (newer)
		 * than ours: the byte counts came in Linux 4.19 (bytes_sent,
		 * bytes_retrans; notsent_bytes and bytes_received earlier). */
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
		 * copied_seq, tcp_diag_get_info): what read() took; and all
		 * that arrived. */
		out->read = info.tcpi_bytes_received > m->idiag_rqueue
				    ? info.tcpi_bytes_received - m->idiag_rqueue : 0;
		out->received = info.tcpi_bytes_received;
		out->notsent = info.tcpi_notsent_bytes;
		out->unread = m->idiag_rqueue;
		out->retrans = info.tcpi_bytes_retrans;
		place->family = m->idiag_family;
		place->id = m->id;
		return true;
	}
	return false;
}

static uint32_t request_sequence;

static union {
	struct nlmsghdr align;
	char bytes[64 * 1024];
} reply_buffer;

static void request_init(struct nlmsghdr *nlh, struct inet_diag_req_v2 *req, uint8_t family,
			 uint16_t flags, uint32_t seq)
{
	memset(nlh, 0, sizeof *nlh);
	memset(req, 0, sizeof *req);
	nlh->nlmsg_len = NLMSG_LENGTH(sizeof *req);
	nlh->nlmsg_type = SOCK_DIAG_BY_FAMILY;
	nlh->nlmsg_flags = flags;
	nlh->nlmsg_seq = seq;
	req->sdiag_family = family;
	req->sdiag_protocol = IPPROTO_TCP;
	req->idiag_ext = 1u << (INET_DIAG_INFO - 1);
	/* Every state that has a program's socket: not LISTEN (no data),
	 * TIME_WAIT (a timewait sock, no inode) nor NEW_SYN_RECV (a
	 * request).  A lookup ignores them. */
	req->idiag_states = 0xfff & ~((1u << 10) | (1u << 6) | (1u << 12));
}

static int send_requests(int fd, const void *buf, size_t len)
{
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	ssize_t r;
	do
		r = sendto(fd, buf, len, 0, (struct sockaddr *)&kernel, sizeof kernel);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : 0;
}

/* One datagram of replies: its length, or -errno (-EAGAIN after 100 ms). */
static ssize_t receive_replies(int fd)
{
	ssize_t r;
	do
		r = recv(fd, reply_buffer.bytes, sizeof reply_buffer.bytes, 0);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r ? r : -EIO;
}

/* NLMSG_OK/NLMSG_NEXT by hand: the macros compare the u32 length with an
 * int (clang's -Wsign-compare). */
#define EACH_REPLY(h, left) \
	for (struct nlmsghdr *h = &reply_buffer.align; \
	     left >= sizeof *h && h->nlmsg_len >= sizeof *h && h->nlmsg_len <= left; \
	     left -= left < NLMSG_ALIGN(h->nlmsg_len) ? left : NLMSG_ALIGN(h->nlmsg_len), \
	     h = (struct nlmsghdr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len)))

static int reply_error(const struct nlmsghdr *h)
{
	const struct nlmsgerr *e = NLMSG_DATA(h);
	return h->nlmsg_len >= NLMSG_LENGTH(sizeof *e) && e->error ? e->error : -EIO;
}

/* One family's dump; adds to counts/places[*found..max). */
static int dump_family(int fd, uint8_t family, const uint64_t *inodes, size_t n,
		       struct socket_count *counts, struct sock_diag_place *places, size_t max,
		       size_t *found)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} request;
	uint32_t seq = ++request_sequence;
	request_init(&request.nlh, &request.req, family, NLM_F_REQUEST | NLM_F_DUMP, seq);
	int rc = send_requests(fd, &request, sizeof request);
	if (rc < 0)
		return rc;
	for (;;) {
		ssize_t r = receive_replies(fd);
		if (r < 0)
			return (int)r;
		size_t left = (size_t)r;
		EACH_REPLY(h, left) {
			if (h->nlmsg_seq != seq)
				continue; /* a reply to an earlier request cut short */
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR)
				return reply_error(h);
			struct socket_count c;
			struct sock_diag_place p;
			if (*found < max && reply_counts(h, &c, &p) && c.inode &&
			    net_inode_in(inodes, n, c.inode)) {
				counts[*found] = c;
				places[*found] = p;
				(*found)++;
			}
		}
	}
}

int sock_diag_tcp_dump(int fd, const uint64_t *inodes, size_t n, struct socket_count *counts,
		       struct sock_diag_place *places, size_t max)
{
	size_t found = 0;
	if (!n)
		return 0;
	int rc = dump_family(fd, AF_INET, inodes, n, counts, places, max, &found);
	if (rc == 0)
		rc = dump_family(fd, AF_INET6, inodes, n, counts, places, max, &found);
	/* A kernel without IPv6 answers ENOENT for its family: the IPv4
	 * sockets found still count. */
	if (rc < 0 && rc != -ENOENT)
		return rc;
	return (int)found;
}

int sock_diag_tcp_lookup(int fd, const struct sock_diag_place *places, const uint64_t *inodes,
			 size_t n, struct socket_count *counts, bool *found)
{
	static struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} batch[LOOKUP_BATCH];
	for (size_t start = 0; start < n; start += LOOKUP_BATCH) {
		size_t k = n - start < LOOKUP_BATCH ? n - start : LOOKUP_BATCH;
		uint32_t first = request_sequence + 1;
		request_sequence += (uint32_t)k;
		for (size_t i = 0; i < k; i++) {
			request_init(&batch[i].nlh, &batch[i].req, places[start + i].family,
				     NLM_F_REQUEST, first + (uint32_t)i);
			batch[i].req.id = places[start + i].id;
			found[start + i] = false;
		}
		int rc = send_requests(fd, batch, k * sizeof batch[0]);
		if (rc < 0)
			return rc;
		/* One reply per request: the socket, or an error (-ENOENT). */
		for (size_t answered = 0; answered < k;) {
			ssize_t r = receive_replies(fd);
			if (r < 0)
				return (int)r;
			size_t left = (size_t)r;
			EACH_REPLY(h, left) {
				uint32_t i = h->nlmsg_seq - first;
				if (i >= k)
					continue; /* an earlier request's */
				answered++;
				struct socket_count c;
				struct sock_diag_place p;
				if (h->nlmsg_type != NLMSG_ERROR && reply_counts(h, &c, &p) &&
				    c.inode == inodes[start + i]) {
					counts[start + i] = c;
					found[start + i] = true;
				}
			}
		}
	}
	return 0;
}
