/*
 * machine_activity.h - how busy the machine is, from its own cumulative
 * counters: CPU time not idle (/proc/stat's first line) and, for the disks,
 * their busy time (io_ticks, the 10th statistic of each /proc/diskstats
 * line), the requests they completed and the bytes they moved
 * (Documentation/admin-guide/iostats.rst).  Readable by any user, no root.
 * Used to see the end of contention during a suspension, and whether anyone
 * else used the machine before a judgment (manners/quiet.h).
 */
#ifndef DISCNICE_MACHINE_ACTIVITY_H
#define DISCNICE_MACHINE_ACTIVITY_H

#include <stddef.h>
#include <stdint.h>

struct machine_activity {
	uint64_t cpu_busy_ns;  /* user+nice+system+irq+softirq+steal, all CPUs */
	uint64_t disk_busy_ns; /* io_ticks of every whole disk, summed         */
	uint64_t disk_ios;     /* reads + writes completed, every whole disk   */
	uint64_t disk_bytes;   /* sectors read + written, x 512                */
};

/* 0 or -errno (the files cannot be read or parsed).  Not thread-safe
 * (one buffer of its own): the supervisor's thread only. */
int machine_activity_read(struct machine_activity *out);

/* The same into the caller's buffer, for a library called from any thread
 * (src/manners/library): size 64 KiB holds /proc/diskstats of a few
 * hundred devices; the disks beyond a full buffer are not counted. */
int machine_activity_read_into(struct machine_activity *out, char *buf, size_t size);

/* The "some" total of /proc/pressure/cpu in ns: the time in which a
 * runnable task waited for a CPU (kernel/sched/psi.c; manners/quiet.h's
 * rise).  0, or -errno: -ENOENT without CONFIG_PSI or when booted with
 * psi=0 (psi_proc_init() makes no /proc/pressure then), -EPROTO for a line
 * it cannot parse.  Thread-safe. */
int machine_cpu_stall_read(uint64_t *some_ns);

#endif
