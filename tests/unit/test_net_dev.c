/* Description: /proc/net/dev parsing for the network's yield policy: rx + tx bytes of every interface but the loopback; headers and junk lines skipped. */
#include <string.h>

#include "unit.h"
#include "common/net_dev.h"

static const char sample[] =
	"Inter-|   Receive                                                |  Transmit\n"
	" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
	"    lo: 8244940595  325292    0    0    0     0          0         0 8244940595  325292    0    0    0     0       0          0\n"
	"  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"
	"veth-long-name0:       5       1    0    0    0     0          0         0        7       1    0    0    0     0       0          0\n"
	"  lo2: 100 1 0 0 0 0 0 0 200 2 0 0 0 0 0 0\n";

int main(void)
{
	uint64_t bytes = 0;
	CHECK(net_dev_parse(sample, &bytes) == 0);
	CHECK_EQ_U64(bytes, 1000 + 2000 + 5 + 7 + 100 + 200); /* "lo2" is not the loopback */
	/* Headers only, or nothing: no interface read. */
	CHECK(net_dev_parse("Inter-|   Receive\n face |bytes\n", &bytes) == -22);
	CHECK(net_dev_parse("", &bytes) == -22);
	/* A truncated line is skipped, the rest counted. */
	CHECK(net_dev_parse("  eth0: 1 2 3\n  eth1: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n", &bytes) == 0);
	CHECK_EQ_U64(bytes, 3);
	/* No trailing newline. */
	CHECK(net_dev_parse("  eth0: 4 0 0 0 0 0 0 0 6 0 0 0 0 0 0 0", &bytes) == 0);
	CHECK_EQ_U64(bytes, 10);
	/* /proc/net/tcp: the queues of the sockets named, by inode. */
	static const char tcp[] =
		"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
		"   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1236 1 000000003e78fcb3 100 0 0 10 0\n"
		"   1: 0100007F:E783 0100007F:1389 01 00010000:00000010 01:00000014 00000000  1000        0 917954 2 0000000000000000 20 4 30 10 -1\n"
		"   2: 0100007F:E784 0100007F:1389 01 000000FF:00000001 01:00000014 00000000  1000        0 917955 2 0000000000000000 20 4 30 10 -1\n"
		"   3: garbage\n";
	const uint64_t inodes[] = { 1236, 917954, 999999 };
	uint64_t tx = 1, rx = 2;
	net_tcp_queues(tcp, inodes, 3, &tx, &rx);
	CHECK_EQ_U64(tx, 1 + 0x10000);
	CHECK_EQ_U64(rx, 2 + 0x10);
	/* The real file parses on this machine. */
	CHECK(net_dev_read(&bytes) == 0);
	return 0;
}
