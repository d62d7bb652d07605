/* Description: the parsing behind MAC's swap signal - the v1 memory controller's line in /proc/self/cgroup (alone or among other controllers, beside a v2 line, missing, too long for the buffer), the v2 line ("0::"), a cgroup's room from v1's total_* or v2's file counts and a key's value in memory.stat or /proc/vmstat text (first match of the whole key only, absent keys); and the decision from two samples: the machine's counter alone outside a cgroup, only while the cgroup is full inside one, the cgroup's own swap rising always, falling or unknown never. */
#include <errno.h>
#include <string.h>

#include "graybox/mac/swap_signal.h"
#include "unit.h"

static void test_memory_path(void)
{
	char out[64];
	const char *cg = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n0::/\n";
	CHECK(swap_signal_memory_path(cg, out, sizeof out) == 0);
	CHECK(strcmp(out, "/process_api/abc") == 0);
	/* Co-mounted controllers, and the last line without a newline. */
	CHECK(swap_signal_memory_path("2:cpu,cpuacct:/a\n3:blkio,memory:/b/c", out,
				      sizeof out) == 0);
	CHECK(strcmp(out, "/b/c") == 0);
	/* "memory" must be a whole controller name. */
	CHECK(swap_signal_memory_path("5:memoryx:/no\n6:xmemory:/no\n", out, sizeof out) ==
	      -ENOENT);
	/* cgroup v2 only: no v1 memory line (swap_signal_v2_path() reads it). */
	CHECK(swap_signal_memory_path("0::/user.slice/app\n", out, sizeof out) == -ENOENT);
	CHECK(swap_signal_memory_path("", out, sizeof out) == -ENOENT);
	char tiny[4];
	CHECK(swap_signal_memory_path("4:memory:/long/path\n", tiny, sizeof tiny) == -ENAMETOOLONG);
	CHECK(swap_signal_memory_path("4:memory:/\n", tiny, sizeof tiny) == 0);
	CHECK(strcmp(tiny, "/") == 0);
}

static void test_v2_path(void)
{
	char out[64];
	CHECK(swap_signal_v2_path("0::/user.slice/app.scope\n", out, sizeof out) == 0);
	CHECK(strcmp(out, "/user.slice/app.scope") == 0);
	/* Hybrid: v1 lines first, the v2 one last, no newline. */
	CHECK(swap_signal_v2_path("4:memory:/x\n1:cpu:/\n0::/", out, sizeof out) == 0);
	CHECK(strcmp(out, "/") == 0);
	/* v1 only, or a v1 hierarchy numbered 10 ("10::" is not "0::"). */
	CHECK(swap_signal_v2_path("4:memory:/x\n", out, sizeof out) == -ENOENT);
	CHECK(swap_signal_v2_path("10:name=x:/y\n", out, sizeof out) == -ENOENT);
	char tiny[4];
	CHECK(swap_signal_v2_path("0::/long\n", tiny, sizeof tiny) == -ENAMETOOLONG);
}

static void test_stat_value(void)
{
	const char *stat = "cache 4096\nswap 0\nswapcached 12\ntotal_swap 8192\n"
			   "total_swapcached 4\n";
	CHECK_EQ_U64(swap_signal_stat_value(stat, "swap"), 0);
	CHECK_EQ_U64(swap_signal_stat_value(stat, "swapcached"), 12);
	CHECK_EQ_U64(swap_signal_stat_value(stat, "total_swap"), 8192);
	CHECK_EQ_U64(swap_signal_stat_value(stat, "total"), UINT64_MAX);
	CHECK_EQ_U64(swap_signal_stat_value(stat, "rss"), UINT64_MAX);
	const char *vmstat = "pgpgout 77\npswpin 13536896\npswpout 14502493\n";
	CHECK_EQ_U64(swap_signal_stat_value(vmstat, "pswpout"), 14502493);
	CHECK_EQ_U64(swap_signal_stat_value("pswpout x\n", "pswpout"), UINT64_MAX);
}

static void test_cgroup_room(void)
{
	const uint64_t MiB = 1 << 20;
	const char *stat = "cache 1\ntotal_inactive_file 41943040\ntotal_active_file 20971520\n"
			   "total_rss 999\n";
	/* 256 MiB limit, 100 MiB used of which 60 MiB file: 216 MiB left. */
	CHECK_EQ_U64(swap_signal_cgroup_room(256 * MiB, 100 * MiB, stat), 216 * MiB);
	/* All file: the whole limit. */
	CHECK_EQ_U64(swap_signal_cgroup_room(256 * MiB, 60 * MiB, stat), 256 * MiB);
	/* Full of what reclaim cannot free: none. */
	CHECK_EQ_U64(swap_signal_cgroup_room(256 * MiB, 400 * MiB, stat), 0);
	/* v2's memory.stat: the same counts without the prefix; v1's
	 * non-hierarchical ones are not taken when total_* are there. */
	const char *v2 = "anon 10\nfile 62914560\ninactive_file 41943040\n"
			 "active_file 20971520\n";
	CHECK_EQ_U64(swap_signal_cgroup_room(256 * MiB, 100 * MiB, v2), 216 * MiB);
	const char *v1 = "inactive_file 1\nactive_file 1\ntotal_inactive_file 41943040\n";
	CHECK_EQ_U64(swap_signal_cgroup_room(256 * MiB, 100 * MiB, v1), 196 * MiB);
	/* No file counts in the text: usage alone. */
	CHECK_EQ_U64(swap_signal_cgroup_room(256 * MiB, 56 * MiB, "rss 1\n"), 200 * MiB);
}

static void test_decide(void)
{
	const uint64_t page = 4096, unknown = UINT64_MAX;
	struct swap_sample before = { 1000, 8192, unknown }, now = { 1000, 8192, unknown };
	/* Nothing moved. */
	CHECK_EQ_U64(swap_signal_decide(&before, &now, false, false, page), 0);
	CHECK_EQ_U64(swap_signal_decide(&before, &now, true, true, page), 0);
	/* No cgroup: the machine's counter alone. */
	now.machine_out = 1300;
	CHECK_EQ_U64(swap_signal_decide(&before, &now, false, false, page), 300);
	/* In a cgroup that is not full, the machine's swap-outs were elsewhere;
	 * in a full one they count. */
	CHECK_EQ_U64(swap_signal_decide(&before, &now, true, false, page), 0);
	CHECK_EQ_U64(swap_signal_decide(&before, &now, true, true, page), 300);
	/* The cgroup's own swap rising counts even when not full (it was full
	 * a moment ago); the larger of the two is reported. */
	now.cgroup_swap = 8192 + 10 * page;
	CHECK_EQ_U64(swap_signal_decide(&before, &now, true, false, page), 10);
	now.cgroup_swap = 8192 + 500 * page;
	CHECK_EQ_U64(swap_signal_decide(&before, &now, true, true, page), 500);
	/* Falling (slots freed by writes after swap-in) says nothing. */
	now.cgroup_swap = 0;
	now.machine_out = 1000;
	CHECK_EQ_U64(swap_signal_decide(&before, &now, true, true, page), 0);
	/* Unknown counts say nothing. */
	struct swap_sample blind = { unknown, unknown, unknown };
	now.machine_out = 5000;
	CHECK_EQ_U64(swap_signal_decide(&blind, &now, false, false, page), 0);
	CHECK_EQ_U64(swap_signal_decide(&before, &blind, true, true, page), 0);
	/* v2's own counter of swap-outs counts inside its cgroup, full or
	 * not, the larger of it and the swap in use; outside none. */
	struct swap_sample b2 = { 1000, 0, 40 }, n2 = { 1000, 0, 140 };
	CHECK_EQ_U64(swap_signal_decide(&b2, &n2, true, false, page), 100);
	n2.cgroup_swap = 300 * page;
	CHECK_EQ_U64(swap_signal_decide(&b2, &n2, true, false, page), 300);
	CHECK_EQ_U64(swap_signal_decide(&b2, &n2, false, false, page), 0);
	n2.cgroup_out = 30;   /* a counter going back says nothing */
	n2.cgroup_swap = 0;
	CHECK_EQ_U64(swap_signal_decide(&b2, &n2, true, true, page), 0);
}

int main(void)
{
	test_memory_path();
	test_v2_path();
	test_stat_value();
	test_cgroup_room();
	test_decide();
	return 0;
}
