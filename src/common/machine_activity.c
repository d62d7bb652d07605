/*
 * machine_activity.c - /proc/stat and /proc/diskstats (see the header).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/machine_activity.h"
#include "common/proc_io.h"

/* Only whole disks are in /sys/block: a partition's busy time is its
 * disk's too, and would count twice. */
static int whole_disk(const char *name)
{
	char path[96];
	snprintf(path, sizeof path, "/sys/block/%s", name);
	return access(path, F_OK) == 0;
}

int machine_activity_read(struct machine_activity *out)
{
	static char buf[65536]; /* the supervisor's thread only */
	return machine_activity_read_into(out, buf, sizeof buf);
}

int machine_activity_read_into(struct machine_activity *out, char *buf, size_t size)
{
	long hz = sysconf(_SC_CLK_TCK);
	if (out == NULL || buf == NULL || size < 2 || hz <= 0)
		return -EINVAL;
	int saved = errno;
	ssize_t n = proc_read_small("/proc/stat", buf, size);
	if (n < 0)
		return (int)n;
	uint64_t v[8] = { 0 };
	/* cpu  user nice system idle iowait irq softirq steal ... */
	if (sscanf(buf, "cpu %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
			" %" SCNu64 " %" SCNu64, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
		   &v[7]) != 8) {
		errno = saved;
		return -EPROTO;
	}
	uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
	out->cpu_busy_ns = busy * (1000000000u / (uint64_t)hz);

	n = proc_read_small("/proc/diskstats", buf, size);
	uint64_t disk_ms = 0, ios = 0, sectors = 0;
	if (n >= 0) {
		for (char *line = buf; line && *line;) {
			char *next = strchr(line, '\n');
			if (next)
				*next++ = '\0';
			unsigned major, minor;
			char name[64];
			uint64_t s[10];
			if (sscanf(line, "%u %u %63s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
				   " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64,
				   &major, &minor, name, &s[0], &s[1], &s[2], &s[3], &s[4], &s[5],
				   &s[6], &s[7], &s[8], &s[9]) == 13 && whole_disk(name)) {
				disk_ms += s[9]; /* io_ticks */
				ios += s[0] + s[4];     /* reads, writes completed */
				sectors += s[2] + s[6]; /* always 512-byte units */
			}
			line = next;
		}
	}
	out->disk_busy_ns = disk_ms * 1000000u;
	out->disk_ios = ios;
	out->disk_bytes = sectors * 512u;
	errno = saved;
	return 0;
}

int machine_cpu_stall_read(uint64_t *some_ns)
{
	char buf[256]; /* "some avg10=0.00 avg60=0.00 avg300=0.00 total=N" and "full ..." */
	if (some_ns == NULL)
		return -EINVAL;
	int saved = errno;
	ssize_t n = proc_read_small("/proc/pressure/cpu", buf, sizeof buf);
	if (n < 0) {
		errno = saved;
		return (int)n;
	}
	const char *total = strstr(buf, "total=");
	uint64_t us;
	if (strncmp(buf, "some ", 5) != 0 || total == NULL ||
	    sscanf(total, "total=%" SCNu64, &us) != 1) {
		errno = saved;
		return -EPROTO;
	}
	*some_ns = us * 1000u;
	errno = saved;
	return 0;
}
