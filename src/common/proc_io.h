/*
 * proc_io.h - the kernel's own per-process I/O accounting, /proc/PID/io
 * (Documentation/filesystems/proc.rst).  The independent oracle: read_bytes
 * counts bios submitted for reads (submit_bio -> task_io_account_read),
 * write_bytes pages dirtied (folio_account_dirtied), cancelled_write_bytes
 * dirty pages truncated away.  A reaped child's counts are added to its
 * parent's (wait_task_zombie), so a supervisor that reaps the whole job sees
 * the job's total in its own /proc/self/io.
 */
#ifndef DISCNICE_PROC_IO_H
#define DISCNICE_PROC_IO_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct proc_io {
	uint64_t rchar, wchar, syscr, syscw;
	uint64_t read_bytes, write_bytes, cancelled_write_bytes;
};

/* A small /proc file read whole into buf (at most size - 1 bytes), NUL-
 * terminated: its length, or -errno.  errno is left as it was. */
ssize_t proc_read_small(const char *path, char *buf, size_t size);

/* pid 0 = self.  Returns 0 or -errno. */
int proc_io_read(pid_t pid, struct proc_io *out);

/* /proc/PID/comm without its newline (pid 0 = self), for messages and for
 * telling programs apart; "?" when it cannot be read.  Returns buf. */
char *proc_comm(pid_t pid, char *buf, size_t size);

/* One thread's own counts, /proc/PID/task/TID/io: without what the
 * process reaped and what its other threads did (fs/proc/base.c:
 * proc_tid_io_accounting(), do_io_accounting() with whole = 0).  A
 * single-threaded supervisor's /proc/self/io minus this is what it reaped
 * from its children, its own reads of /proc left out. */
int proc_thread_io_read(pid_t pid, pid_t tid, struct proc_io *out);

/* Calls child(ctx, c) for every child c of pid, from
 * /proc/PID/task/TID/children (one file per thread: a child is listed
 * under the thread that forked it; CONFIG_PROC_CHILDREN).  A process gone
 * meanwhile simply has no children.  False when a list may have been cut
 * short (more children than a 4 KiB read holds). */
bool proc_children(pid_t pid, void (*child)(void *ctx, pid_t c), void *ctx);

/* The fields of /proc/PID/stat the supervisor needs. */
struct proc_stat {
	pid_t ppid;
	char state;   /* R, S, D, T, t, Z, ... */
	/* utime + stime + cutime + cstime, clock ticks: the CPU time of the
	 * process (of the thread, for a task's stat) and what it reaped - its
	 * waited-for children's, theirs included - so that a child's time
	 * stays in a tree's sum when its parent reaps it. */
	uint64_t cpu_ticks;
	/* starttime (field 22): when the process started, clock ticks after
	 * boot.  With the pid it names one process for good: a pid is reused,
	 * the pair never (while the machine is up). */
	uint64_t start_ticks;
};
int proc_stat_read(pid_t pid, struct proc_stat *out);
/* The same for one thread, /proc/PID/task/TID/stat. */
int proc_thread_stat_read(pid_t pid, pid_t tid, struct proc_stat *out);
/* proc_stat_read() for a process as a whole: a leader that left by
 * pthread_exit() is a zombie (Z) while its other threads run on, and the
 * process is not gone - state is then that of its first live thread. */
int proc_process_stat_read(pid_t pid, struct proc_stat *out);
/* Calls fn(ctx, pid, tid) for the threads of pid (/proc/PID/task) until
 * one returns true; whether one did.  getdents64 into a stack buffer, no
 * malloc: the agent calls it from inside any hooked call (segment_lock). */
bool proc_any_thread(pid_t pid, bool (*fn)(void *ctx, pid_t pid, pid_t tid), void *ctx);
/* Is a thread of pid, other than the calling one, running or runnable (R)
 * or in an uninterruptible wait (D)? */
bool proc_process_busy(pid_t pid);

/* The pid of the process's ptrace tracer (TracerPid in /proc/PID/status),
 * 0 when it is not traced, -errno when it cannot be read. */
int proc_tracer_pid(pid_t pid);

/* A thread's signal sets from /proc/PID/task/TID/status (bit N-1 is
 * signal N): its own pending signals, the process's, and its masks. */
struct proc_signals {
	uint64_t pending, shared_pending, blocked, ignored, caught;
};
int proc_thread_signals(pid_t pid, pid_t tid, struct proc_signals *out);

/* The stop signals (kernel/signal.c SIG_KERNEL_STOP_MASK), in those sets. */
#define PROC_STOP_SIGNALS (1ull << (SIGSTOP - 1) | 1ull << (SIGTSTP - 1) | \
			   1ull << (SIGTTIN - 1) | 1ull << (SIGTTOU - 1))
static inline bool proc_is_stop_signal(int sig)
{
	return sig > 0 && sig <= 64 && (PROC_STOP_SIGNALS & 1ull << (sig - 1));
}
/* Pending stop signals that will stop the thread once it runs: default
 * action, neither caught, nor blocked, nor ignored (get_signal() calls
 * do_signal_stop() for those only). */
static inline uint64_t proc_stop_requested(const struct proc_signals *s)
{
	return (s->pending | s->shared_pending) & PROC_STOP_SIGNALS & ~s->caught & ~s->blocked &
	       ~s->ignored;
}

/* Is pid's process group orphaned (POSIX: no member has a parent in
 * another group of the same session)?  Then the kernel discards a
 * SIGTSTP, SIGTTIN or SIGTTOU of default action when the process runs
 * (kernel/signal.c: get_signal(), is_current_pgrp_orphaned()): pending,
 * it stops nothing.  Walks /proc; false when it cannot tell. */
bool proc_pgrp_orphaned(pid_t pid);

/* Threads of process pid now (/proc/PID/task), 0 if it is gone.  A zombie
 * leader with more than one is still a process: it left by pthread_exit()
 * and its other threads run on (kernel/exit.c: delay_group_leader()). */
unsigned proc_thread_count(pid_t pid);

/* Call fn for every process in /proc (pid order is the kernel's). */
void proc_each(void (*fn)(void *ctx, pid_t pid), void *ctx);

/* One pass over /proc: pid, parent and disk bytes of every process we may
 * read (a user's own; all, for root), sorted by pid.  Returns the count and
 * an array to free() in *out, or -errno. */
struct proc_node {
	pid_t pid, ppid;
	uint64_t read_bytes, write_bytes;
};
int proc_nodes(struct proc_node **out);
const struct proc_node *proc_node_find(const struct proc_node *nodes, unsigned n, pid_t pid);
/* Is pid `top` itself or below it, by the parent links of the pass? */
bool proc_node_below(const struct proc_node *nodes, unsigned n, pid_t pid, pid_t top);

#endif
