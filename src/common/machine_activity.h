/*
 * machine_activity.h - how busy the machine is, from its own cumulative
 * counters: CPU time not idle (/proc/stat's first line) and the disks'
 * busy time (io_ticks, the 10th statistic of each /proc/diskstats line;
 * Documentation/admin-guide/iostats.rst).  Readable by any user, no root.
 * Used to see the end of contention during a suspension (manners/quiet.h).
 */
#ifndef DISCNICE_MACHINE_ACTIVITY_H
#define DISCNICE_MACHINE_ACTIVITY_H

#include <stdint.h>

struct machine_activity {
	uint64_t cpu_busy_ns;  /* user+nice+system+irq+softirq+steal, all CPUs */
	uint64_t disk_busy_ns; /* io_ticks of every whole disk, summed         */
};

/* 0 or -errno (the files cannot be read or parsed). */
int machine_activity_read(struct machine_activity *out);

#endif
