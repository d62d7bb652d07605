/*
 * tool_regulate.h - regulation from outside the job, by the supervisor
 * (issue #4 §1-2): measured feedback and SIGSTOP/SIGCONT duty cycling.
 *
 * Every tick (50 ms) the regulator reads the kernel's /proc/PID/io of every
 * process of the job, charges into the class window whatever the agent did
 * not predict (mmap faults, io_uring, O_DIRECT, unhooked calls, programs
 * the agent cannot reach), and - when the window is then over its budget
 * although the agent would have slept - stops the job's processes for as
 * long as the policy says (BeNice's mechanism, ms-manners §7.2).
 *
 * A guard process, started before the first stop, holds the list of
 * processes stopped right now, fed through a pipe; if the supervisor dies in any way (SIGKILL included) the
 * pipe's EOF makes the guard SIGCONT them: a job is never left stopped.
 */
#ifndef DISCNICE_TOOL_REGULATE_H
#define DISCNICE_TOOL_REGULATE_H

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
/* One tick: measure, charge the unpredicted, stop or continue the job.
 * Returns when the next tick is due, in ns from now. */
uint64_t regulator_tick(struct regulator *reg, uint64_t now_ns);
/* After the job's end: pay what it still owes into the window, sleeping
 * at the cap (a job can finish its last burst between two ticks; the run
 * returns - and the class's next user proceeds - only once it is paid).
 * Returns the ns spent. */
uint64_t regulator_settle(struct regulator *reg);
/* Continue anything stopped, end the guard. */
void regulator_end(struct regulator *reg);
/* Is pid the guard (the wait loop must not take it for a job process)? */
bool regulator_is_guard(const struct regulator *reg, pid_t pid);

struct regulator_stats {
	uint64_t feedback_read_bytes;   /* charged beyond the predictions  */
	uint64_t feedback_write_bytes;
	uint64_t stopped_ns;            /* time the job spent SIGSTOPped   */
	uint64_t stops;
};
void regulator_stats(const struct regulator *reg, struct regulator_stats *out);

#endif
