/*
 * tool_guard.h - the stop guard: whatever discnice stops with SIGSTOP is
 * continued however discnice ends, even by SIGKILL.
 *
 * Two parts stop processes with SIGSTOP: tool_hold.c's fallback, for a
 * process ptrace may not touch, and tool_suspend.c, benice's suspensions.
 * Both tell the guard first.  The guard is a small fork in a process group
 * of its own (a kill of discnice's group, `kill -9 -PGID`, or the
 * terminal's signals do not reach it) that ignores the terminal's signals
 * and remembers the pids it is told of.  When discnice's end of the pipe
 * closes - at exit, or because the kernel closed it when discnice was
 * killed - the guard SIGCONTs every pid told and not since said to be
 * continued, then exits.
 *
 * The process group is set by both parent and child (the shell's idiom
 * for job control): the parent does not go on to stop anything until the
 * guard is out of its group, however late the child first runs.
 */
#ifndef DISCNICE_TOOL_GUARD_H
#define DISCNICE_TOOL_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* How many stopped processes the guard remembers at once. */
#define STOP_GUARD_MAX 4096

struct stop_guard {
	pid_t pid;      /* 0 not started, -1 cannot be had: stop nothing */
	int fd;         /* write end of the guard's pipe, or -1 */
	unsigned told;  /* pids told since the last stop_guard_all_continued() */
};

#define STOP_GUARD_INIT { 0, -1, 0 }

/* Fork the guard, once (later calls return at once).  0, or -errno: then
 * the guard can never be had, and nothing may be stopped. */
int stop_guard_start(struct stop_guard *g);

/* Tell the guard, before kill(pid, SIGSTOP), that pid is about to be
 * stopped.  false: the guard is gone or full - do not stop it. */
bool stop_guard_will_stop(struct stop_guard *g, pid_t pid);

/* pid has been continued, or handed over to a stop of someone else's:
 * the guard forgets it (and will not continue it at the end). */
void stop_guard_forget(struct stop_guard *g, pid_t pid);

/* Everything told so far has been continued: the guard forgets it. */
void stop_guard_all_continued(struct stop_guard *g);

/* End the guard: it continues what it still remembers, and is reaped. */
void stop_guard_end(struct stop_guard *g);

/* Continue a process we stopped, unless someone else asked it to stop
 * meanwhile (a stop signal pending beside ours); a stop signal it catches
 * or blocks is sent again after the SIGCONT (which flushes it).  For the
 * guard at its end, and for benice (tool_suspend.c). */
void stop_guard_continue(pid_t pid);
/* SIGCONT, then each stop signal in `again` (bit N-1: signal N) anew. */
void stop_guard_continue_then_send(pid_t pid, uint64_t again);

#endif
