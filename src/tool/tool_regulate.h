/*
 * tool_regulate.h - regulation from outside the job, by the supervisor
 * (issue #4 §1-2): measured feedback and duty cycling.
 *
 * Every tick (5-20 ms) the regulator reads the kernel's /proc/PID/io of
 * every process of the job, charges into the class window whatever the
 * agent did not predict (mmap faults, io_uring, O_DIRECT, unhooked calls,
 * programs the agent cannot reach), and - when the window is then over its
 * budget although the agent would have slept - holds the job's running
 * threads for as long as the policy says (BeNice's duty cycling,
 * ms-manners §7.2).  How a thread is held, invisibly to the job and its
 * parent (a ptrace stop, SIGSTOP only where ptrace is refused), and why a
 * job is never left held when the supervisor dies: tool_hold.h.
 */
#ifndef DISCNICE_TOOL_REGULATE_H
#define DISCNICE_TOOL_REGULATE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/proc_io.h"
#include "discnice/segment.h"

struct regulator;

/* NULL if feedback is off (or out of memory). */
struct regulator *regulator_new(struct dn_segment *seg, int run_slot, bool feedback);
/* The job has been forked: from now on ticks regulate it.  base is the
 * supervisor's own /proc/self/io before the fork. */
void regulator_watch(struct regulator *reg, pid_t job, const struct proc_io *base);
/* discnice attach: the job is the running processes pids[0..n) - not our
 * children - and every process born below them from now on.  Their I/O so
 * far is not owed; the kernel's count of it since is published in our run
 * slot for `discnice top`.  False if there are too many. */
bool regulator_attach(struct regulator *reg, const pid_t *pids, unsigned n);
/* discnice attach: how many of the processes are alive (zombies are not),
 * as of the last pass over /proc; 0 when all are gone. */
unsigned regulator_alive(const struct regulator *reg);
/* One tick: measure, charge the unpredicted, hold or let go of the job.
 * Returns when the next tick is due, in ns from now. */
uint64_t regulator_tick(struct regulator *reg, uint64_t now_ns);
/* After the job's end: pay what it still owes into the window, sleeping
 * at the cap (a job can finish its last burst between two ticks; the run
 * returns - and the class's next user proceeds - only once it is paid).
 * Stops early once *interrupted is non-zero (Ctrl-C, kill: a signal
 * wakes the sleep).  Returns the ns spent. */
uint64_t regulator_settle(struct regulator *reg, const volatile sig_atomic_t *interrupted);
/* Let go of everything held now (the supervisor is about to stop itself
 * with its job, tool_run.c); the next tick may hold again. */
void regulator_release(struct regulator *reg);
/* discnice attach was stopped (Ctrl-Z) while its processes ran on free:
 * what they did meanwhile is not owed (charged, it held them at 0 B/s for
 * as long afterwards); the books start afresh at the next tick, as when a
 * cap comes back. */
void regulator_forgive(struct regulator *reg);
/* Let go of everything, end the guard, free. */
void regulator_end(struct regulator *reg);
/* The supervisor's waitpid(-1, ..., __WALL | WUNTRACED) found pid: true if
 * the status was a ptrace stop of a thread the regulator holds (taken);
 * false for anything the wait loop must handle itself, exits included. */
bool regulator_child_event(struct regulator *reg, pid_t pid, int status);
/* Did the regulator itself SIGSTOP pid (so its stop is not the job's)? */
bool regulator_stopped_it(const struct regulator *reg, pid_t pid);

struct regulator_stats {
	uint64_t feedback_read_bytes;   /* charged beyond the predictions  */
	uint64_t feedback_write_bytes;
	/* The network (tool_net_feedback.c): TCP bytes the kernel counted
	 * beyond the agent's count. */
	uint64_t feedback_net_sent_bytes;
	uint64_t feedback_net_received_bytes;
	uint64_t stopped_ns;            /* time the job spent held         */
	uint64_t stops;
	bool slack_seen;                /* the caps were slack at some tick */
};
void regulator_stats(const struct regulator *reg, struct regulator_stats *out);

#endif
