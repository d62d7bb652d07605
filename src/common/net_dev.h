/*
 * net_dev.h - the bytes the machine's network interfaces moved, from
 * /proc/net/dev (the reader's network namespace; readable by any user).
 * Used by --policy yield on a network class (src/tool/tool_yield.c): the
 * others' traffic is the growth of this less what the job's agent counted.
 */
#ifndef DISCNICE_NET_DEV_H
#define DISCNICE_NET_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Pure: the received plus transmitted bytes of every interface in `text`
 * (the file's contents, NUL-terminated) except the loopback ("lo": its
 * traffic never crosses a link, and is counted there twice).  0 or
 * -EINVAL when no interface line could be read. */
int net_dev_parse(const char *text, uint64_t *bytes);

/* Read /proc/net/dev and parse it: 0 or -errno. */
int net_dev_read(uint64_t *bytes);

/* Pure: over the lines of /proc/net/tcp or tcp6 (`text`) whose inode is
 * in `inodes` (sorted ascending, n of them), add tx_queue (bytes written
 * and not yet acknowledged) to *tx and rx_queue (bytes received and not
 * yet read) to *rx (net/ipv4/tcp_ipv4.c get_tcp4_sock).  Lines it cannot
 * read are skipped. */
void net_tcp_queues(const char *text, const uint64_t *inodes, size_t n, uint64_t *tx,
		    uint64_t *rx);

/* Pure: is inode among inodes[0..n) (sorted ascending)? */
bool net_inode_in(const uint64_t *inodes, size_t n, uint64_t inode);

/* Read a whole /proc file into a NUL-terminated malloc'd buffer: 0 or
 * -errno (*out is then NULL). */
int net_proc_slurp(const char *path, char **out);

#endif
