/*
 * tool_class.h - what `discnice ls`, `top` and `set` share: finding the
 * user's classes, a consistent snapshot of one, the small option tables of
 * the control commands, and their output helpers.
 */
#ifndef DISCNICE_TOOL_CLASS_H
#define DISCNICE_TOOL_CLASS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/segment.h"
#include "tool/tool_msg.h"

/* Exit codes of the control commands (discnice(1), EXIT STATUS); the others
 * are in tool_msg.h. */
enum {
	EXIT_NO_CLASS = 3,   /* no class of that name                         */
	EXIT_BAD_CLASS = 4,  /* segment corrupt, not ours, or not mode 0600    */
};

struct class_run_view {
	unsigned slot;
	uint32_t pid;                /* the run's supervisor                   */
	bool alive;
	bool stopped;                /* held with SIGSTOP by its supervisor now */
	uint64_t stopped_ns;         /* held so far, up to the last SIGCONT     */
	bool suspended;              /* --policy manners: suspended right now   */
	uint64_t suspended_ns;       /* suspensions ordered so far              */
	uint64_t manners_read_ns_per_gib, manners_write_ns_per_gib; /* its target */
	/* Its regulator (segment_run_kind()).  benice's: stopped then means
	 * suspended by benice, stopped_ns the time suspended; job_stopped
	 * that someone else stopped the job (DN_RUN_JOB_STOPPED). */
	enum run_kind kind;
	bool job_stopped;
	struct dn_counters counters;
	/* The kernel's count for the run (filled by `top`, not class_list()):
	 * /proc/PID/io of its supervisor and every live process below it. */
	uint64_t actual_read_bytes, actual_write_bytes;
	/* `discnice attach`: the first process given (0 for a run), how many
	 * it regulates now, and the kernel's count of their disk bytes since
	 * attaching, as its supervisor last published it. */
	uint32_t attached_pid, attached_processes;
	uint64_t measured_read_bytes, measured_write_bytes;
	/* A run inside a Slurm job (issue #13): SLURM_JOB_ID and the step
	 * ("0", "1"... "batch", "extern", "interactive") from its supervisor's
	 * environment (/proc/PID/environ, which Slurm set before the task ran);
	 * 0 and "" otherwise.  Nothing about Slurm is in the segment. */
	uint32_t slurm_job;
	char slurm_step[16];
};

/* SLURM_JOB_ID and SLURM_STEP_ID from an environment block (NUL-separated
 * NAME=VALUE, as /proc/PID/environ): 0 if there is no job.  Pure. */
uint32_t class_slurm_from_environ(const char *block, size_t len, char *step, size_t step_len);

/* One class as seen at one instant: every field is read atomically on its
 * own, without the segment lock (a listing never waits on a job). */
struct class_view {
	char name[DN_CLASS_NAME_MAX + 8]; /* the file's name (may be junk)  */
	int error;                   /* 0, or -errno from segment_attach_path  */
	struct dn_caps caps;
	/* The network's caps (read = receive, write = send) and what its
	 * window holds, per second (segment.h dn_segment.net_caps). */
	struct dn_caps net_caps;
	double window_recv_bps, window_send_bps;
	/* --net-policy scavenger (segment.h dn_scavenger): its target (0 =
	 * off), the send rate it allows now, the last queueing delay seen. */
	uint64_t scavenger_target_ns, scavenger_rate_bps, scavenger_delay_ns;
	uint64_t window_ns;
	uint32_t window_policy;      /* DN_WINDOW_POLICY_* (--window-policy)   */
	uint32_t predict_mask;
	uint32_t attached_runs;
	bool yield_throttled;        /* --policy yield: held at the caps now    */
	bool net_yield_free;         /* yield: the network caps lifted now      */
	bool stopped;                /* some live run's job is stopped now      */
	uint64_t stopped_ns;         /* sum over the runs listed               */
	bool suspended;              /* some live run is suspended by manners   */
	uint64_t suspended_ns;       /* sum over the runs listed               */
	struct dn_counters total;    /* class counters + every run slot's      */
	double window_read_bps;      /* predicted bytes in the rate window / its span */
	double window_write_bps;
	unsigned n_runs;
	struct class_run_view runs[DN_MAX_RUNS];
};

/* Snapshot every class in the user's segment directory, sorted by name.
 * No directory yet = no classes.  Returns the count (>= 0) and an array
 * to free(), or -errno (the directory is not ours: -EPERM). */
int class_list(struct class_view **views);

/* Open class `name` read-write for a control command.  On failure prints
 * one line and returns the exit status (EXIT_NO_CLASS, EXIT_BAD_CLASS,
 * EXIT_INTERNAL); 0 on success. */
int class_open(const char *name, struct dn_segment **seg);
void class_close(struct dn_segment *seg);

/* One line naming why the segment directory or a segment is unusable. */
const char *class_error_text(int error);
/* One line on stderr for a class directory segment_dir() refused with
 * rc: which directory, why (not a directory, another user's, open to
 * others) and what to do; `doing`, if not NULL, names what failed
 * ("cannot list classes").  For run, ls, top and set alike. */
void class_dir_error(int rc, const char *doing);

void command_options_help(const struct command_option *options, size_t n_options);
const char *class_predict_name(uint32_t mask);
/* "2.00 MiB/s"; class_cap_text says "none" for 0 (no cap). */
void class_rate_text(char *buf, size_t len, double bps);
void class_cap_text(char *buf, size_t len, uint64_t bps);
/* "read 2.00 MiB/s, total 8.00 MiB/s": the caps set, "" when none is. */
void class_caps_text(char *buf, size_t len, const struct dn_caps *caps);
/* The same for a class's network caps: "recv 1.00 MiB/s, send ...". */
void class_net_caps_text(char *buf, size_t len, const struct dn_caps *net_caps);
/* The members naming a class, its caps, window, predictors and attached
 * runs, without braces; for an unusable class its name and "error". */
void class_json_head(FILE *f, const struct class_view *view);
/* What a run is, for ls and top: "benice", "attach" or "run". */
const char *class_run_policy(const struct class_run_view *run);
/* A benice run's state: "stopped" (by someone else), "suspended" (by
 * benice) or "running"; "gone" once its supervisor is. */
const char *class_benice_state(const struct class_run_view *run);

/* Predicted writes net of cancelled ones, as in the run report. */
uint64_t class_predicted_writes(const struct dn_counters *c);

/* The control commands (tool_ls.c, tool_top.c, tool_set.c); argv[0] is
 * the command's name.  Each returns the exit status. */
int tool_ls(int argc, char **argv);
int tool_top(int argc, char **argv);
int tool_set(int argc, char **argv);

#endif
