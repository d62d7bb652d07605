/*
 * tool_report.h - what `discnice run` tells at the end: the JSON report
 * (--report), the one-line summary, and the live status line.
 */
#ifndef DISCNICE_TOOL_REPORT_H
#define DISCNICE_TOOL_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "common/proc_io.h"
#include "discnice/segment.h"
#include "tool/tool_options.h"

struct run_result {
	double elapsed_s;
	struct dn_counters counters;   /* this run's, from the segment      */
	struct proc_io actual;         /* kernel's, job and reaped children */
	int exit_status;               /* what discnice exits with          */
	int signal;                    /* killed by this signal, or 0       */
	struct dn_caps caps_at_end;    /* the class's disk caps at the end: `discnice set` may have changed them */
	uint64_t probe_threshold_ns;
	bool feedback;                 /* --feedback on                     */
	uint64_t feedback_read_bytes;  /* charged beyond the predictions    */
	uint64_t feedback_write_bytes;
	uint64_t feedback_net_sent_bytes;     /* TCP bytes beyond the agent's count */
	uint64_t feedback_net_received_bytes; /* (tool_net_feedback.c)           */
	double stopped_s;              /* time the job spent held           */
	bool slack_seen;               /* a cap far above the job: the agent dozed */
	uint64_t stops;
	double settle_s;               /* paying the debt after the job ended */
	double supervisor_cpu_s;       /* our own CPU time (getrusage SELF)  */
	bool yield;                    /* --policy yield                    */
	double yield_throttled_s;      /* time held at the caps             */
	uint64_t yield_switches;
	bool manners;                  /* --policy manners (tool_manners.h)  */
	double manners_suspended_s;    /* suspensions ordered               */
	uint64_t manners_testpoints, manners_judged_good, manners_judged_poor;
	uint64_t manners_forgiven;     /* poor judgments on a quiet machine */
	uint64_t manners_busy_testpoints; /* made at --manners-poll-busy      */
	bool manners_cpu_pressure;     /* /proc/pressure/cpu read for rises */
	uint64_t manners_pressure_rises; /* rises that started them sooner  */
	uint64_t manners_new_samples;  /* sign-test samples begun at a rise */
	uint64_t manners_disk_rises;   /* rises of others' disk traffic      */
	uint64_t manners_shortened;    /* suspensions a quiet machine ended */
	double manners_s_per_mib_read, manners_s_per_mib_written; /* calibrated costs */
	char manners_state_file[4096]; /* where the target is kept, "": nowhere */
	bool manners_target_restored;  /* started from a kept target         */
	uint64_t manners_restored_samples;
};

/* Write atomically (temp file + rename).  Returns 0 or -errno. */
int report_write_json(const char *path, const struct run_config *config,
		      const struct run_result *result);
void report_print_summary(const struct run_config *config, const struct run_result *result);

/* What every JSON report writer shares (run's, benice's; its strings:
 * tool_json.h json_print_string): a report written whole or not at all -
 * to PATH.tmp.PID, then renamed over PATH.  report_file_open: NULL with
 * errno set; report_file_commit closes f and returns 0 or -errno (the
 * temporary file removed). */
FILE *report_file_open(const char *path, char *tmp, size_t size);
int report_file_commit(FILE *f, const char *tmp, const char *path);
/* Redraw the status line (stderr is a tty). */
void report_print_status(const struct dn_segment *seg, const struct dn_counters *run,
			 double elapsed_s);
void report_clear_status(void);

#endif
