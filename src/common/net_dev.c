/*
 * net_dev.c - /proc/net/dev (see net_dev.h).  The format (net/core/
 * net-procfs.c, dev_seq_printf_stats): two header lines, then one line per
 * interface, "NAME: rx_bytes rx_packets ... (8 receive fields) tx_bytes
 * ... (8 transmit fields)"; the name is right-aligned, padded with spaces.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/net_dev.h"

int net_dev_parse(const char *text, uint64_t *bytes)
{
	uint64_t total = 0;
	bool any = false;
	for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		const char *colon = strchr(line, ':');
		const char *end = strchr(line, '\n');
		if (!colon || (end && colon > end))
			continue; /* a header line */
		const char *name = line;
		while (*name == ' ')
			name++;
		bool loopback = colon - name == 2 && strncmp(name, "lo", 2) == 0;
		/* Field 1 is rx_bytes, field 9 tx_bytes. */
		const char *p = colon + 1;
		uint64_t rx = 0, tx = 0;
		bool ok = true;
		for (int field = 1; field <= 9 && ok; field++) {
			char *next;
			errno = 0;
			unsigned long long v = strtoull(p, &next, 10);
			if (next == p || errno || (end && next > end)) {
				ok = false;
				break;
			}
			if (field == 1)
				rx = v;
			else if (field == 9)
				tx = v;
			p = next;
		}
		if (!ok)
			continue;
		any = true;
		if (!loopback)
			total += rx + tx;
	}
	if (!any)
		return -EINVAL;
	*bytes = total;
	return 0;
}

int net_proc_slurp(const char *path, char **out)
{
	int saved = errno;
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		errno = saved;
		return -err;
	}
	/* A machine with hundreds of interfaces or sockets has a long file:
	 * read it all, growing the buffer. */
	size_t cap = 16384, len = 0;
	char *buf = malloc(cap);
	int rc = buf ? 0 : -ENOMEM;
	while (buf) {
		if (len + 1 >= cap) {
			char *more = realloc(buf, cap * 2);
			if (!more) {
				rc = -ENOMEM;
				break;
			}
			buf = more;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	errno = saved;
	if (rc) {
		free(buf);
		return rc;
	}
	buf[len] = '\0';
	*out = buf;
	return 0;
}

int net_dev_read(uint64_t *bytes)
{
	char *text;
	int rc = net_proc_slurp("/proc/net/dev", &text);
	if (rc)
		return rc;
	rc = net_dev_parse(text, bytes);
	free(text);
	return rc;
}

static int compare_inode(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

bool net_inode_in(const uint64_t *inodes, size_t n, uint64_t inode)
{
	return n && bsearch(&inode, inodes, n, sizeof *inodes, compare_inode) != NULL;
}

void net_tcp_queues(const char *text, const uint64_t *inodes, size_t n, uint64_t *tx,
		    uint64_t *rx)
{
	const char *line = strchr(text, '\n'); /* the header */
	while (line && *++line) {
		const char *end = strchr(line, '\n');
		/* Fields: sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
		const char *p = line;
		unsigned long long queue_tx = 0, queue_rx = 0, inode = 0;
		bool ok = true;
		for (int field = 0; field < 10 && ok; field++) {
			while (*p == ' ')
				p++;
			const char *start = p;
			while (*p && *p != ' ' && *p != '\n')
				p++;
			if (p == start || (end && p > end)) {
				ok = false;
				break;
			}
			char *stop;
			if (field == 4) {
				queue_tx = strtoull(start, &stop, 16);
				ok = *stop == ':';
				if (ok)
					queue_rx = strtoull(stop + 1, &stop, 16);
			} else if (field == 9) {
				inode = strtoull(start, &stop, 10);
				ok = stop == p;
			}
		}
		if (ok && inode && net_inode_in(inodes, n, inode)) {
			*tx += queue_tx;
			*rx += queue_rx;
		}
		line = end;
	}
}
