/*
 * swap_signal.c - see swap_signal.h.
 */
#include "graybox/mac/swap_signal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proc_io.h"

#define MEMCG_V1_ROOT "/sys/fs/cgroup/memory"

/* A v1 limit at or above this is "no limit" (the kernel shows
 * PAGE_COUNTER_MAX * PAGE_SIZE, 0x7ffffffffffff000 on x86-64). */
#define NO_LIMIT (UINT64_C(1) << 62)

int swap_signal_memory_path(const char *proc_cgroup, char *out, size_t size)
{
	for (const char *line = proc_cgroup; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		const char *c1 = memchr(line, ':', len);
		const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
		if (c2) {
			/* the controllers, comma-separated, between the colons */
			for (const char *t = c1 + 1; t < c2;) {
				const char *comma = memchr(t, ',', (size_t)(c2 - t));
				const char *te = comma ? comma : c2;
				if ((size_t)(te - t) == 6 && memcmp(t, "memory", 6) == 0) {
					size_t plen = len - (size_t)(c2 + 1 - line);
					if (plen + 1 > size)
						return -ENAMETOOLONG;
					memcpy(out, c2 + 1, plen);
					out[plen] = '\0';
					return 0;
				}
				t = te + 1;
			}
		}
		line = end ? end + 1 : NULL;
	}
	return -ENOENT;
}

int swap_signal_v2_path(const char *proc_cgroup, char *out, size_t size)
{
	for (const char *line = proc_cgroup; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		if (len >= 3 && memcmp(line, "0::", 3) == 0) {
			if (len - 3 + 1 > size)
				return -ENAMETOOLONG;
			memcpy(out, line + 3, len - 3);
			out[len - 3] = '\0';
			return 0;
		}
		line = end ? end + 1 : NULL;
	}
	return -ENOENT;
}

uint64_t swap_signal_stat_value(const char *text, const char *key)
{
	size_t klen = strlen(key);
	for (const char *line = text; line && *line;) {
		if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
			char *end;
			unsigned long long v = strtoull(line + klen + 1, &end, 10);
			if (end != line + klen + 1)
				return (uint64_t)v;
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return UINT64_MAX;
}

/* The number in the cgroup file dir/name; UINT64_MAX for none (no such
 * file, or v2's "max"). */
static uint64_t read_value(const char *dir, const char *name)
{
	char path[SWAP_SIGNAL_DIR_MAX + 48], buf[64];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (proc_read_small(path, buf, sizeof buf) <= 0)
		return UINT64_MAX;
	char *end;
	unsigned long long v = strtoull(buf, &end, 10);
	return end == buf ? UINT64_MAX : (uint64_t)v;
}

/* The room under `limit` of the cgroup at dir that uses `usage`
 * (swap_signal_cgroup_room(), from its memory.stat); UINT64_MAX where
 * either is unknown. */
static uint64_t room_at(const char *dir, uint64_t limit, uint64_t usage)
{
	char path[SWAP_SIGNAL_DIR_MAX + 32], stat[16384];
	snprintf(path, sizeof path, "%s/memory.stat", dir);
	if (usage == UINT64_MAX || proc_read_small(path, stat, sizeof stat) <= 0)
		return UINT64_MAX;
	return swap_signal_cgroup_room(limit, usage, stat);
}

/* The limited v1 memory cgroup nearest the process: up from its own to
 * the first with a limit (the machine's root has none; a cgroup
 * namespace's, a container's, may).  false: none, or no v1
 * memory hierarchy. */
static bool init_v1(struct swap_signal *signal, const char *proc_cgroup)
{
	char rel[256], dir[sizeof signal->cgroup_dir];
	if (swap_signal_memory_path(proc_cgroup, rel, sizeof rel) < 0 ||
	    snprintf(dir, sizeof dir, "%s%s", MEMCG_V1_ROOT, rel) >= (int)sizeof dir)
		return false;
	for (;;) {
		size_t len = strlen(dir);
		while (len > strlen(MEMCG_V1_ROOT) && dir[len - 1] == '/')
			dir[--len] = '\0';
		uint64_t limit = read_value(dir, "memory.limit_in_bytes");
		if (limit == UINT64_MAX)
			return false;   /* no v1 memory hierarchy here */
		if (limit < NO_LIMIT) {
			memcpy(signal->cgroup_dir, dir, len + 1);
			signal->limit_bytes = limit;
			signal->version = 1;
			return true;
		}
		/* The mount's root was read too: in a container with its
		 * own cgroup namespace it is the container's cgroup. */
		if (len <= strlen(MEMCG_V1_ROOT))
			return false;
		char *slash = strrchr(dir, '/');
		if (!slash)
			return false;
		*slash = '\0';
	}
}

/* cgroup v2 (the unified hierarchy: systemd's slices, containers): every
 * ancestor's memory.max binds (mem_cgroup charges go up the tree,
 * page_counter_try_charge()), so the one that matters is the one with the
 * least room now - limit less what reclaim cannot free - not the nearest.
 * A memory.swap.max of 0 anywhere up the tree keeps the process's pages
 * out of swap.  The hierarchy is where systemd mounts it: /sys/fs/cgroup,
 * or /sys/fs/cgroup/unified beside v1 controllers. */
static bool init_v2(struct swap_signal *signal, const char *proc_cgroup)
{
	static const char *const roots[] = { "/sys/fs/cgroup", "/sys/fs/cgroup/unified" };
	char rel[256];
	if (swap_signal_v2_path(proc_cgroup, rel, sizeof rel) < 0)
		return false;
	bool found = false;
	for (unsigned r = 0; r < sizeof roots / sizeof roots[0] && !found; r++) {
		char dir[SWAP_SIGNAL_DIR_MAX];
		size_t root_len = strlen(roots[r]);
		/* Only a v2 root has cgroup.controllers (the tmpfs holding
		 * v1 controllers at /sys/fs/cgroup does not). */
		if (snprintf(dir, sizeof dir, "%s/cgroup.controllers", roots[r]) >=
			    (int)sizeof dir || access(dir, F_OK) != 0)
			continue;
		if (snprintf(dir, sizeof dir, "%s%s", roots[r], rel) >= (int)sizeof dir)
			return false;
		uint64_t least_room = UINT64_MAX;
		for (;;) {
			size_t len = strlen(dir);
			while (len > root_len && dir[len - 1] == '/')
				dir[--len] = '\0';
			/* memory.high too: past it the kernel reclaims and
			 * throttles the cgroup (mem_cgroup_handle_over_high()). */
			uint64_t limit = read_value(dir, "memory.max");
			uint64_t high = read_value(dir, "memory.high");
			if (high < limit)
				limit = high;
			if (limit != UINT64_MAX) {
				uint64_t room = room_at(dir, limit,
							read_value(dir, "memory.current"));
				if (room == UINT64_MAX)
					room = limit;
				if (room < least_room) {
					least_room = room;
					memcpy(signal->cgroup_dir, dir, len + 1);
					signal->limit_bytes = limit;
					signal->version = 2;
					found = true;
				}
			}
			if (read_value(dir, "memory.swap.max") == 0)
				signal->swap_off = true;
			/* The mount's root was read too: the machine's root
			 * cgroup has no memory.max, but under a cgroup
			 * namespace (a container's "0::/") the root of
			 * /sys/fs/cgroup is the container's own cgroup. */
			if (len <= root_len)
				break;
			char *slash = strrchr(dir, '/');
			if (!slash)
				break;
			*slash = '\0';
		}
	}
	return found;
}

void swap_signal_init(struct swap_signal *signal)
{
	int saved = errno;
	char text[4096];
	signal->cgroup_dir[0] = '\0';
	signal->limit_bytes = 0;
	signal->version = 0;
	signal->swap_off = false;
	if (proc_read_small("/proc/self/cgroup", text, sizeof text) > 0 &&
	    !init_v1(signal, text)) {
		signal->cgroup_dir[0] = '\0';
		init_v2(signal, text);
	}
	errno = saved;
}

/* The cgroup's usage, by the file of its version. */
static uint64_t cgroup_usage(const struct swap_signal *signal)
{
	return read_value(signal->cgroup_dir,
			  signal->version == 2 ? "memory.current" : "memory.usage_in_bytes");
}

void swap_signal_sample(const struct swap_signal *signal, struct swap_sample *sample)
{
	int saved = errno;
	char buf[16384];
	sample->machine_out = UINT64_MAX;
	sample->cgroup_swap = UINT64_MAX;
	sample->cgroup_out = UINT64_MAX;
	if (proc_read_small("/proc/vmstat", buf, sizeof buf) > 0)
		sample->machine_out = swap_signal_stat_value(buf, "pswpout");
	if (signal->cgroup_dir[0]) {
		char path[sizeof signal->cgroup_dir + 32];
		snprintf(path, sizeof path, "%s/memory.stat", signal->cgroup_dir);
		bool stat = proc_read_small(path, buf, sizeof buf) > 0;
		if (signal->version == 1) {
			if (stat)
				sample->cgroup_swap = swap_signal_stat_value(buf, "total_swap");
		} else {
			/* v2 counts the cgroup's own swap-outs (memory.stat
			 * pswpout, since Linux 6.x) and its swap in use. */
			if (stat)
				sample->cgroup_out = swap_signal_stat_value(buf, "pswpout");
			sample->cgroup_swap = read_value(signal->cgroup_dir, "memory.swap.current");
		}
	}
	errno = saved;
}

uint64_t swap_signal_decide(const struct swap_sample *before, const struct swap_sample *now,
			    bool in_cgroup, bool cgroup_full, uint64_t page_size)
{
	uint64_t pages = 0;
	if (in_cgroup && before->cgroup_swap != UINT64_MAX && now->cgroup_swap != UINT64_MAX &&
	    now->cgroup_swap > before->cgroup_swap)
		pages = (now->cgroup_swap - before->cgroup_swap) / (page_size ? page_size : 4096);
	if (in_cgroup && before->cgroup_out != UINT64_MAX && now->cgroup_out != UINT64_MAX &&
	    now->cgroup_out > before->cgroup_out && now->cgroup_out - before->cgroup_out > pages)
		pages = now->cgroup_out - before->cgroup_out;
	if ((!in_cgroup || cgroup_full) && before->machine_out != UINT64_MAX &&
	    now->machine_out != UINT64_MAX && now->machine_out > before->machine_out &&
	    now->machine_out - before->machine_out > pages)
		pages = now->machine_out - before->machine_out;
	return pages;
}

uint64_t swap_signal_since(const struct swap_signal *signal, const struct swap_sample *before)
{
	int saved = errno;
	struct swap_sample now;
	swap_signal_sample(signal, &now);
	bool full = false;
	if (signal->cgroup_dir[0]) {
		uint64_t usage = cgroup_usage(signal);
		uint64_t slack = signal->limit_bytes / 64;
		full = usage != UINT64_MAX && usage + slack >= signal->limit_bytes;
	}
	long page = sysconf(_SC_PAGESIZE);
	uint64_t pages = swap_signal_decide(before, &now, signal->cgroup_dir[0] != '\0', full,
					    page > 0 ? (uint64_t)page : 4096u);
	errno = saved;
	return pages;
}

uint64_t swap_signal_cgroup_room(uint64_t limit, uint64_t usage, const char *stat_text)
{
	/* v1's hierarchical counts are total_*; v2's have no prefix (and
	 * are hierarchical already). */
	static const char *const keys[2][2] = {
		{ "total_inactive_file", "total_active_file" },
		{ "inactive_file", "active_file" },
	};
	uint64_t file = 0;
	for (unsigned k = 0; k < 2; k++) {
		bool seen = false;
		for (unsigned i = 0; i < 2; i++) {
			uint64_t v = swap_signal_stat_value(stat_text, keys[k][i]);
			if (v != UINT64_MAX) {
				file += v;
				seen = true;
			}
		}
		if (seen)
			break;
	}
	uint64_t held = usage > file ? usage - file : 0;  /* what reclaim cannot free */
	return limit > held ? limit - held : 0;
}

uint64_t swap_signal_no_swap_ceiling(const struct swap_signal *signal, uint64_t swap_total,
				     uint64_t available)
{
	int saved = errno;
	uint64_t ceiling = swap_total == 0 ? available : UINT64_MAX;
	if (signal->cgroup_dir[0]) {
		bool swaps;
		if (signal->version == 1) {
			uint64_t swappiness = read_value(signal->cgroup_dir, "memory.swappiness");
			uint64_t memsw = read_value(signal->cgroup_dir, "memory.memsw.limit_in_bytes");
			swaps = swap_total != 0 && swappiness != 0 &&
				!(memsw != UINT64_MAX && memsw <= signal->limit_bytes);
		} else {
			swaps = swap_total != 0 && !signal->swap_off;
		}
		if (!swaps) {
			uint64_t room = room_at(signal->cgroup_dir, signal->limit_bytes,
						cgroup_usage(signal));
			if (room < ceiling)
				ceiling = room;
		}
	}
	/* Not to the last page: the probe's page tables, the kernel's own
	 * allocations, and the caller's mapped text (file pages, counted as
	 * reclaimable, which it needs back to run) come out of the same
	 * memory - probing a 256 MiB cgroup to its computed room still got
	 * the OOM killer.  A sixteenth is kept back. */
	if (ceiling != UINT64_MAX)
		ceiling -= ceiling / 16;
	errno = saved;
	return ceiling;
}

const char *swap_signal_scope(const struct swap_signal *signal)
{
	return signal->cgroup_dir[0] ? "cgroup" : "machine";
}
