/*
 * tool_manners.h - `discnice run --policy manners` (issue #10 §3): MS
 * Manners' progress-based regulation of a job whose progress is its own
 * file I/O, as the agent counts it.
 *
 * The controller (src/manners/controller.h: calibration, sign test,
 * exponential suspension) runs here, in the supervisor, at testpoints it
 * makes from the run's counters (the bytes the job read and wrote through
 * the agent's hooks: two concurrent metrics, MS Manners §4.4).  A
 * suspension is published in the run slot (segment.h suspend_until_ns) and
 * waited out by every process of the job at its next hooked I/O call
 * (src/agent/suspension.c), never by a signal.
 */
#ifndef DISCNICE_TOOL_MANNERS_H
#define DISCNICE_TOOL_MANNERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "discnice/segment.h"

struct manners_run_config {
	uint32_t bootstrap;        /* testpoints before the first judgment (§4.3) */
	uint64_t probation_ns;     /* running fraction capped this long (§4.3)    */
	uint64_t limit_ns;         /* longest suspension (§4.1)                   */
	uint64_t initial_ns;       /* first suspension (§4.1); 0: the default     */
	bool paper_calibration;    /* no quick raise (manners/controller.h)       */
	uint64_t quiet_ns;         /* a quiet machine this long ends a suspension
	                            * early, and a poor judgment after it orders
	                            * none (manners/quiet.h); 0: the paper's     */
	uint64_t busy_ns;          /* the testpoint interval while others use a CPU
	                            * (manners/quiet.h's quick polls); 0: off    */
	bool disk_rise;            /* a new sample at a rise of others' disk
	                            * traffic (manners/quiet.h)                 */
	bool persist;              /* keep the target across runs (tool_targets.h) */
	const char *state_file;    /* NULL: named after program                */
	const char *program;       /* the job's executable, NULL: unknown      */
};

#define MANNERS_RUN_BOOTSTRAP_DEFAULT 40u /* 10 s of 250 ms testpoints */
#define MANNERS_RUN_LIMIT_DEFAULT     (UINT64_C(60) * 1000000000)
#define MANNERS_RUN_TESTPOINT_NS      (UINT64_C(250) * 1000000)
#define MANNERS_RUN_QUIET_DEFAULT     (UINT64_C(1000) * 1000000)
#define MANNERS_RUN_BUSY_DEFAULT      (UINT64_C(50) * 1000000)

struct manners_run;

/* NULL when out of memory (the caller warns: the job then runs unregulated
 * by manners, its caps still hold). */
struct manners_run *manners_run_new(struct dn_segment *seg, int slot,
				    const struct manners_run_config *config, uint64_t now_ns);
/* The job has started (its pid): the look back at a judgment counts its
 * processes' CPU time as its own (manners/quiet.h). */
void manners_run_watch(struct manners_run *m, pid_t job);
/* At every supervisor tick: makes a testpoint when one is due, publishes
 * or lifts the suspension.  Returns the longest the next tick may wait. */
uint64_t manners_run_tick(struct manners_run *m, uint64_t now_ns);
/* The job is over or discnice is leaving: no suspension may outlive us;
 * the target is saved (tool_targets.h). */
void manners_run_end(struct manners_run *m);

struct manners_run_stats {
	uint64_t testpoints, judged_good, judged_poor, discarded;
	uint64_t suspended_ns;      /* suspensions served, summed           */
	uint64_t shortened;         /* suspensions a quiet machine ended    */
	uint64_t forgiven;          /* poor judgments on a quiet machine    */
	uint64_t busy_testpoints;   /* made at the quick interval           */
	bool cpu_pressure;          /* /proc/pressure/cpu read for the rise */
	uint64_t pressure_rises;    /* rises that started the quick ones    */
	uint64_t new_samples;       /* sign-test samples begun at a rise    */
	uint64_t disk_rises;        /* rises of others' disk traffic        */
	double target_ns_per_mib_read, target_ns_per_mib_written; /* calibrated costs */
	char state_file[4096];      /* where the target is kept, "": nowhere */
	bool target_restored;       /* it started from a kept target        */
	uint64_t restored_samples;  /* the testpoints that target averaged  */
};
void manners_run_stats(const struct manners_run *m, struct manners_run_stats *out);
void manners_run_free(struct manners_run *m);

#endif
