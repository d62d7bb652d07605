/*
 * tool_options.h - the configuration of `discnice run` and `discnice attach`,
 * from one table (tool_options.c): name, flag, environment variable, default,
 * units, help.
 */
#ifndef DISCNICE_TOOL_OPTIONS_H
#define DISCNICE_TOOL_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "discnice/segment.h"

struct run_config {
	struct dn_caps caps;
	bool cap_given;
	bool read_given, write_given, total_given; /* which caps were named */
	/* Sockets (rate-windows §5): read = receive, write = send, total =
	 * both; independent of the disk caps (segment.h dn_segment.net_caps). */
	struct dn_caps net_caps;
	bool net_recv_given, net_send_given, net_total_given;
	bool net_unix;             /* --net-unix: AF_UNIX sockets count too  */
	/* --net-policy scavenger[=MS]: the class's send rate follows the
	 * queueing delay its TCP connections see (src/policy/scavenger.h);
	 * 0 = --net-policy cap. */
	uint64_t scavenger_target_ns;
	bool net_policy_given;
	char class_name[DN_CLASS_NAME_MAX];
	bool class_given;
	uint64_t window_ns;
	/* --window-policy (segment.h DN_WINDOW_POLICY_*), a class setting. */
	uint32_t window_policy;
	bool window_policy_given;
	uint64_t chunk_bytes;      /* 0 = derived from the caps */
	uint32_t predict_mask;
	uint32_t cache_backend;
	const char *report_path;
	const char *trace_path;
	bool quiet;
	bool progress;             /* --progress: a status line while it runs */
	bool feedback;             /* --feedback on: measured feedback + stops */
	bool feedback_given;       /* --feedback or DISCNICE_FEEDBACK named   */
	bool exec_in_place;        /* --exec: no supervisor (tool_run.c)      */
	bool writeback_kernel;     /* --writeback kernel: no paced writeback  */
	bool cache_drop;           /* --cache drop (src/agent/cache_drop.h)   */
	bool predict_uncapped;     /* --predict-uncapped (else implied by trace, yield) */
	bool yield;                /* --policy yield                          */
	bool manners;              /* --policy manners (tool_manners.h)       */
	uint32_t manners_bootstrap;
	bool manners_paper_calibration; /* --manners-calibration paper */
	uint64_t manners_probation_ns, manners_limit_ns, manners_quiet_ns, manners_busy_ns;
	uint64_t manners_initial_ns; /* --manners-suspend-initial; 0: the default */
	bool manners_persist;            /* --manners-persist (tool_targets.h) */
	bool manners_disk_rise;          /* --manners-disk-rise (manners/quiet.h) */
	const char *manners_state_file;  /* --manners-state-file, NULL: default */
	uint64_t yield_above_bps, yield_below_bps;
	/* --policy yield on the network (issue #12 item 6): others' traffic
	 * (/proc/net/dev less the job's) above / at or below these. */
	uint64_t net_yield_above_bps, net_yield_below_bps;
	char **command;            /* argv of the job */
	char **pids;               /* attach: the PID operands, as given */
	unsigned npids;
};

/* Parse environment defaults, then argv (after the word "run").  Exits
 * with EXIT_USAGE and one clear line on any bad input; prints help and
 * exits 0 for --help. */
void run_options_parse(struct run_config *config, int argc, char **argv);

void run_options_help(void);

/* The same for `discnice attach` (after the word "attach"): the options of
 * run's table that need no agent (caps, class, window, quiet), then at
 * least one PID operand, which the caller checks. */
void attach_options_parse(struct run_config *config, int argc, char **argv);

/* The PIDs a running `discnice attach` was given, from its command line
 * (argv[0] "attach", the rest as typed; permuted): how many were put in
 * pids, 0 for a line that does not parse (tool_regulators.c). */
unsigned attach_argv_pids(int argc, char **argv, pid_t *pids, unsigned max);
/* A PID as attach and benice --pid take it: a digit first, a whole
 * decimal number from 1 to INT_MAX, nothing after it. */
bool pid_text(const char *text, pid_t *pid);
/* The operands[0 .. n) that pid_text() takes, as PIDs. */
unsigned command_line_pids(char **operands, int n, pid_t *pids, unsigned max);

/* "cap" (0), "scavenger" (the default target) or "scavenger=MS" /
 * "scavenger=MSms" with MS from 25 to 100: the target in ns.  -EINVAL
 * for anything else, -ERANGE for a target outside 25..100 ms.  Shared by
 * run and set. */
int net_policy_parse(const char *value, uint64_t *scavenger_target_ns);
/* A plain decimal number as users write one - digits, an optional
 * fraction, an optional exponent (1, 0.5, .5, 2e-3) - and nothing else:
 * no sign, no spaces, no hex, inf or nan, which strtod also takes.  true
 * with *out, or false. */
bool decimal_number(const char *text, double *out);

/* Digits only (no sign, no spaces), within 64 bits: true with *out. */
bool whole_number(const char *text, unsigned long long *out);

/* "sliding" or "paper" -> DN_WINDOW_POLICY_*; -EINVAL otherwise. */
int window_policy_parse(const char *value, uint32_t *window_policy);
const char *window_policy_name(uint32_t window_policy);
void attach_options_help(void);

#endif
