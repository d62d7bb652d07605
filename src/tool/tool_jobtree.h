/*
 * tool_jobtree.h - the process tree `discnice benice` regulates, and the
 * kernel's count of its I/O (MS Manners §7.2: BeNice regulates a whole
 * unmodified program, every thread and child of it).
 *
 * The tree is the roots (the command benice started, or the PIDs given
 * with --pid) and every process below them, found from the roots down
 * through /proc/PID/task/TID/children at every scan, as `discnice attach`
 * finds its processes (tool_regulate.c: attached_scan()).
 *
 * Its I/O is the sum of /proc/PID/io over the tree, plus what processes
 * that left it did:
 *  - for a command of ours (we are its parent and its subreaper, so every
 *    process of the job that exits is reaped by us or by a parent in the
 *    tree), a reaped process's counts are added to its reaper's
 *    (kernel/exit.c: wait_task_zombie()), and ours are read as
 *    /proc/self/io minus /proc/self/task/TID/io - our own reads of /proc
 *    left out;
 *  - for --pid, a process that left is counted with its last reading,
 *    unless its parent is in the tree (which reaped its counts).
 * The sums can dip for a moment (a child reaped between the readings of
 * its parent and its own): the totals kept, I/O and CPU time, are never
 * below the last ones.
 */
#ifndef DISCNICE_TOOL_JOBTREE_H
#define DISCNICE_TOOL_JOBTREE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define JOBTREE_MAX 1024

struct jobtree_proc {
	pid_t pid, ppid;
	char state;           /* /proc/PID/stat: R S D T t Z ... */
	uint64_t cpu_ticks;   /* utime + stime + cutime + cstime, clock ticks */
	uint64_t chars;       /* rchar + wchar at the last scan */
	uint64_t read_bytes, write_bytes; /* disk, at the last scan */
};

struct jobtree_io {
	uint64_t chars;       /* rchar + wchar: every byte read and written */
	uint64_t read_bytes;  /* disk, as the kernel counts it */
	uint64_t write_bytes;
};

struct jobtree {
	bool ours;            /* the roots are our children (a command) */
	pid_t roots[JOBTREE_MAX];
	unsigned nroots;
	pid_t skip;           /* never part of the tree (our guard) */
	struct jobtree_proc procs[JOBTREE_MAX];
	unsigned n;
	struct jobtree_io departed; /* --pid: processes that left */
	uint64_t departed_cpu_ticks; /* ... and their CPU time */
	struct jobtree_io total;    /* never decreasing */
	uint64_t cpu_ticks;         /* the CPU time of the live processes and of
				     * what they (and, for a command, we) reaped,
				     * or that left (--pid); never decreasing */
	bool busy;                  /* at the last scan: a process in R or D, or
				     * the live processes' CPU time grew */
};

void jobtree_init(struct jobtree *tree, const pid_t *roots, unsigned nroots, bool ours);

/* Find the tree's processes now, with their state and I/O counts; update
 * the total.  Returns the number of live (non-zombie) processes. */
unsigned jobtree_scan(struct jobtree *tree);

/* Idle: at the last scan every process slept (S), none ran or waited on
 * the disk, and the tree used no CPU since the scan before.  A job that
 * waits for input, a timer or the user makes no progress, and that is not
 * contention: that time is not running time (tool_benice.c). */
static inline bool jobtree_idle(const struct jobtree *tree)
{
	return !tree->busy;
}

/* Is a process of the tree stopped by someone else now (T: job control,
 * kill -STOP; t: a debugger)?  Only meaningful while benice itself holds
 * nothing stopped. */
bool jobtree_stopped(const struct jobtree *tree);

/* The machine's counters now (common/machine_activity.h) with the tree's
 * CPU time at its last scan as the job's own, for manners/quiet.h's look
 * back and suspension end (benice, run --policy manners).  A process that
 * ends keeps its time in the sum once reaped in the tree (or by us, for a
 * command), so a job of many short processes (make) is its own CPU, not
 * somebody else's; one reaped outside the tree (--pid) makes the sum drop,
 * which quiet.h reads as busy.  false when the counters cannot be read. */
struct manners_activity;
bool jobtree_machine_sample(const struct jobtree *tree, uint64_t now_ns,
			    struct manners_activity *out);

#endif
