/*
 * tool_hold.h - holding the job's threads from outside without the job or
 * its parent seeing it (issue #8 item 5).
 *
 * A hold is a ptrace stop: PTRACE_SEIZE then PTRACE_INTERRUPT, thread by
 * thread, and PTRACE_DETACH at release, so the job is traced only while it
 * is held and stays debuggable in between.  Only threads that run or sleep
 * on the disk (state R or D) are held: a thread asleep in S does no I/O, and
 * the interrupt would wake it - epoll_wait(2) would return EINTR and a
 * write(2) blocked on a full pipe would return short, which is what
 * SIGSTOP/SIGCONT did.  A ptrace stop is not a group stop, so the job's
 * parent (a shell waiting with WUNTRACED) sees nothing; threads stopped by
 * someone else (state T or t) are never touched.
 *
 * Where the kernel refuses ptrace (a setuid or non-dumpable program for a
 * non-root user, a program a debugger already traces), the process is held
 * with SIGSTOP instead, with a warning once per run, and a guard process
 * continues it if the supervisor dies.  A ptrace hold needs no guard: when
 * the tracer dies the kernel detaches and resumes its tracees
 * (kernel/ptrace.c: exit_ptrace() -> __ptrace_detach() -> __ptrace_unlink()).
 */
#ifndef DISCNICE_TOOL_HOLD_H
#define DISCNICE_TOOL_HOLD_H

#include <stdbool.h>
#include <sys/types.h>

struct hold;

/* NULL if out of memory. */
struct hold *hold_new(void);
/* Hold the threads of process `pid` that are running or in disk sleep now;
 * threads held already stay held.  Called again every tick of a hold, so
 * a thread that wakes and runs is held too. */
void hold_process(struct hold *hold, pid_t pid);
/* While on, hold_process() also holds threads asleep in a read, write,
 * sendto, recvfrom or recvmsg on a socket, or in poll, select,
 * epoll_wait or io_uring_enter (x86-64; see waits_on_sockets() in
 * tool_hold.c): the
 * network's feedback holds (tool_net_feedback.h). */
void hold_socket_waits(struct hold *hold, bool on);
/* Threads (and SIGSTOPped processes) held now, their traps pending or not. */
unsigned hold_count(const struct hold *hold);
/* Let every held process whose threads have a signal to take go at once:
 * a held job handles Ctrl-C, kill(1) and its timers as it would unheld
 * (the next tick holds it again if it still owes). */
void hold_let_signals_through(struct hold *hold);
/* Let everything go.  A thread whose trap has not come yet is let go when
 * it comes (hold_child_event()). */
void hold_release(struct hold *hold);
/* A status the supervisor's waitpid(-1, ..., __WALL | WUNTRACED) returned:
 * true if it was a ptrace stop of a thread we hold (taken, nothing more to
 * do); false for anything else - exits included, which the caller still
 * needs (a held thread that exits is forgotten here). */
bool hold_child_event(struct hold *hold, pid_t pid, int status);
/* Is pid a process we hold with SIGSTOP (its stop is ours, not the job's)? */
bool hold_sigstopped(const struct hold *hold, pid_t pid);
/* The guard process, 0 if none (the job's process list must skip it). */
pid_t hold_guard(const struct hold *hold);
/* Release, wait a little for pending traps, end the guard, free. */
void hold_free(struct hold *hold);

#endif
