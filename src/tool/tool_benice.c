/*
 * tool_benice.c - `discnice benice`: MS Manners' external regulator of an
 * unmodified program (MS Manners §7.2, "BeNice"), issue #10 §2.
 *
 * The program reports nothing to us: benice polls a progress count (its
 * tree's bytes read and written, a counter file, or a command's output:
 * tool_progress.h), and each poll that saw progress is a testpoint (§4.1):
 * the progress since the previous one, over the time the job ran since -
 * the time benice kept it suspended, or someone else kept it stopped, left
 * out.  The control loop of Fig. 2 (src/manners/controller.h: calibration,
 * sign test, exponential suspension, probation) answers how long to wait;
 * benice waits by stopping the whole tree with SIGSTOP and SIGCONTs it
 * after (tool_suspend.h).  How often it polls adapts to the counter
 * (§7.2; src/manners/poll_interval.h).
 *
 * Order, so that bad input never starts or touches anything:
 *   1. parse every option, check every value and the controller's config
 *      (exit 2);
 *   2. --pid: check every PID as attach does (exit 2); a command: find it
 *      (126/127); --report: check it can be written (exit 2);
 *   3. make the class and claim a run slot, for `discnice ls` and `top`;
 *      fork the guard (exit 125);
 *   4. a command: become its subreaper, fork, exec;
 *   5. poll, judge, suspend, until the job ends (a command: its exit;
 *      --pid: every process gone) or, for --pid, a signal asks us to
 *      detach; always continue what we stopped; report; exit with the
 *      job's status, or die of the signal it died of (as `discnice run`).
 *
 * Never left stopped: the guard (tool_guard.c) continues whatever benice
 * stopped when benice dies, even of SIGKILL.  Ctrl-Z (SIGTSTP, SIGTTIN,
 * SIGTTOU to benice) continues the job first, then stops benice; Ctrl-C
 * with a command ends a suspension at once so the job takes its signal (and
 * benice dies of it too if the job does); with --pid, SIGINT, SIGTERM and
 * SIGHUP detach.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc_io.h"
#include "common/segment.h"
#include "manners/controller.h"
#include "manners/library/multiplex.h"
#include "manners/poll_interval.h"
#include "manners/settings.h"
#include "manners/progress_text.h"
#include "manners/quiet.h"
#include "tool/tool_attach.h"
#include "tool/tool_benice.h"
#include "tool/tool_class.h"
#include "tool/tool_exec.h"
#include "tool/tool_jobtree.h"
#include "tool/tool_json.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"
#include "tool/tool_progress.h"
#include "tool/tool_regulators.h"
#include "tool/tool_report.h"
#include "tool/tool_run.h"
#include "tool/tool_suspend.h"
#include "tool/tool_targets.h"

#define BENICE_METRICS_MAX MANNERS_REGRESS_MAX
#define BENICE_PHASES 1                      /* one metric set: index 0 */
#define BENICE_WARNINGS_MAX 5                /* per kind of bad sample, then quiet */
#define BENICE_SUSPEND_LIMIT_DEFAULT (INT64_C(60) * 1000000000)  /* ours: see --help */
#define BENICE_PROBATION_DEFAULT (INT64_C(60) * 1000000000)      /* ours */
#define BENICE_DUTY_DEFAULT 0.5                                  /* ours */
#define MAX_PIDS 256
/* manners/quiet.h's quick polls: 5 polls below target in a quarter second. */
#define BENICE_POLL_BUSY_DEFAULT (INT64_C(50) * 1000000)

/* ---- options ------------------------------------------------------------- */

enum benice_option {
	OPT_ALPHA, OPT_BETA, OPT_BOOTSTRAP, OPT_CLASS, OPT_DISK_RISE, OPT_DUTY, OPT_HELP, OPT_N,
	OPT_PERSIST,
	OPT_PID, OPT_POLL_BUSY, OPT_POLL_MAX, OPT_POLL_MIN, OPT_PROBATION, OPT_PROGRESS, OPT_QUIET, OPT_QUIET_AFTER,
	OPT_REPORT, OPT_SHARE, OPT_STATE_FILE, OPT_SUSPEND_INITIAL, OPT_SUSPEND_LIMIT,
};

/* Sorted by long name; indexed by the enum above. */
static const struct command_option benice_options[] = {
	[OPT_ALPHA] = { "alpha", 0, "P", "sign test: the chance of judging progress poor when it is\n"
					 "at target (MS Manners 6.1) [default: 0.05]" },
	[OPT_BETA] = { "beta", 0, "P", "sign test: the chance of judging marginally poor progress\n"
				       "good; must be above alpha (6.1) [default: 0.2]" },
	[OPT_BOOTSTRAP] = { "bootstrap", 0, "N", "testpoints of unregulated start that calibrate the\n"
						 "target (4.3), 1 to 100000\n"
						 "[default: 50, ~12 s at 4 polls/s]" },
	[OPT_CLASS] = { "class", 'c', "NAME", "the class `discnice ls` shows it under\n"
					      "[default: benice-PID, PID being benice's]" },
	[OPT_DISK_RISE] = { "disk-rise", 0, "on|off", "on: when others' disk traffic rises, the sign test\n"
						      "begins a new sample (see below) [default: on]" },
	[OPT_DUTY] = { "duty", 0, "F", "during probation, run at most this fraction of the\n"
				       "time, in (0, 1] (4.3) [default: 0.5]" },
	[OPT_HELP] = { "help", 'h', NULL, "show this help and exit" },
	[OPT_N] = { "n", 0, "N", "averaging constant of the target (eq. 5): the target\n"
				  "follows the last ~N testpoints [default: 10000]" },
	[OPT_PERSIST] = { "persist", 0, "on|off", "on: start from the target an earlier run of this\n"
						  "program calibrated with this --progress kind, and keep\n"
						  "it for the next (under $XDG_STATE_HOME; see below);\n"
						  "off: calibrate afresh, keep nothing [default: on]" },
	[OPT_PID] = { "pid", 0, NULL, "the operands are PIDs of running processes (yours),\n"
				      "not a command" },
	[OPT_POLL_BUSY] = { "poll-busy", 0, "SECONDS", "while others use a CPU, poll this often instead of\n"
						       "--poll-min (see below); 0: never [default: 0.05]" },
	[OPT_POLL_MAX] = { "poll-max", 0, "SECONDS", "longest polling interval [default: 8]" },
	[OPT_POLL_MIN] = { "poll-min", 0, "SECONDS", "shortest (and first) polling interval\n"
						     "[default: 0.25]" },
	[OPT_PROBATION] = { "probation", 0, "SECONDS", "after the first testpoint, run at most --duty of\n"
						       "the time for this long; 0 = none (4.3) [default: 60]" },
	[OPT_PROGRESS] = { "progress", 'p', "KIND", "the progress metric: io, file:PATH or cmd:COMMAND\n"
						    "(see below) [default: io]" },
	[OPT_QUIET] = { "quiet", 'q', NULL, "no start line and no summary" },
	[OPT_QUIET_AFTER] = { "quiet-after", 0, "SECONDS", "a machine nobody else used for this long (CPUs less\n"
							   "the job's own time, disks) ends a suspension early,\n"
							   "and makes a poor judgment order none; 0: the\n"
							   "paper's rule (see below) [default: 1]" },
	[OPT_REPORT] = { "report", 0, "FILE", "write a JSON report to FILE at the end" },
	[OPT_SHARE] = { "share", 0, "FILE|none", "take turns (4.5) with the other benice jobs and\n"
						 "library programs of this user through FILE; none:\n"
						 "no turns; a FILE that cannot be used: exit 2\n"
						 "[default: $MANNERS_SHARE_FILE, else\n"
						 "/dev/shm/discnice-manners-UID, as the library]" },
	[OPT_STATE_FILE] = { "state-file", 0, "FILE", "keep the target in FILE instead\n"
						      "[default: named after the program and metric]" },
	[OPT_SUSPEND_INITIAL] = { "suspend-initial", 0, "SECONDS", "the first suspension (4.1) [default: 4]" },
	[OPT_SUSPEND_LIMIT] = { "suspend-limit", 0, "SECONDS", "the longest suspension: how late the job may\n"
							       "resume after contention ends (4.1) [default: 60]" },
};
#define N_BENICE_OPTIONS (sizeof benice_options / sizeof benice_options[0])

unsigned benice_argv_pids(int argc, char **argv, pid_t *pids, unsigned max)
{
	uint64_t seen;
	int first = command_options_scan(benice_options, N_BENICE_OPTIONS, true, argc, argv, &seen);
	if (first < 0 || !(seen & (UINT64_C(1) << OPT_PID)))
		return 0; /* a command's benice: its job is its child */
	return command_line_pids(argv + first, argc - first, pids, max);
}

struct benice_config {
	struct manners_controller_config controller;
	double alpha, beta;
	struct manners_poll_config poll;
	struct progress_source progress;
	char class_name[DN_CLASS_NAME_MAX];
	bool class_given;
	bool pid_mode;
	bool quiet;
	const char *report_path;
	bool persist;              /* --persist (tool_targets.h) */
	const char *state_file;    /* --state-file, NULL: the default */
	const char *share;         /* --share, NULL: the library's default */
	int64_t quiet_ns;          /* --quiet-after, 0: off (manners/quiet.h) */
	int64_t poll_busy_ns;      /* --poll-busy, 0: off (manners/quiet.h's quick polls) */
	bool disk_rise;            /* --disk-rise (manners/quiet.h) */
	char **operands; /* the command, or the PIDs */
	unsigned noperands;
};

static void benice_help(void)
{
	printf("Usage: discnice benice [OPTION]... [--] COMMAND [ARG]...\n"
	       "       discnice benice [OPTION]... --pid PID...\n"
	       "Run COMMAND (or regulate running processes) so that it gives way to\n"
	       "everything else: MS Manners' progress-based regulation from outside\n"
	       "(Douceur & Bolosky, \"BeNice\").  No root, no change to the program.\n\n"
	       "How it works.  benice polls the job's progress (every 0.25 s at first).\n"
	       "Each poll that saw progress is a testpoint: the progress since the last\n"
	       "one over the time the job ran meanwhile.  For the first --bootstrap\n"
	       "testpoints the job runs free and benice learns its target rate, the rate\n"
	       "of an uncontended run; from then on a sign test compares each rate with\n"
	       "the target.  When progress is judged poor - something else is using what\n"
	       "the job needs - the whole job (every process and thread below it) is\n"
	       "suspended with SIGSTOP for the suspension time, then SIGCONTed; each poor\n"
	       "judgment in a row doubles the suspension (up to --suspend-limit), a good\n"
	       "one resets it to --suspend-initial.  Time suspended does not count as\n"
	       "running time.  A counter that changes less often than the polls makes\n"
	       "benice poll less often (up to --poll-max; it shortens again when every\n"
	       "poll sees a change); polls that saw no change are added to the next\n"
	       "testpoint, and 4 in a row are a testpoint of zero progress - unless\n"
	       "the job was idle (every process asleep, no CPU used): waiting for input\n"
	       "is not contention, and idle time is not running time.\n\n"
	       "Not in the paper (--quiet-after).  The sign test judges a job alone poor\n"
	       "in a fraction alpha of its judgments; each such judgment cost a suspension.\n"
	       "So at a poor judgment benice looks back: if nobody else used the machine\n"
	       "over the last --quiet-after seconds (CPU time in /proc/stat less the\n"
	       "job's own under 0.1 CPU; disks busy under 5 %% of the time, at most 50\n"
	       "requests and 1 MiB a second, from /proc/diskstats), there was\n"
	       "nothing to contend with and no suspension is ordered.  And a suspension\n"
	       "ends early once the machine has been that quiet while the job was\n"
	       "stopped: the foreground has finished.  Neither can cause a suspension.\n"
	       "A job that uses a disk itself never looks quiet before a judgment\n"
	       "(its own disk traffic cannot be told apart), and contention that shows in\n"
	       "neither counter (a remote server, a lock) is judged as in the paper.\n\n"
	       "Also not in the paper (--poll-busy).  The sign test needs 5 polls below\n"
	       "target to judge, and the other program pays for every one of them.  So\n"
	       "while others use a CPU (at least a quarter of one over 0.2 s, the job's\n"
	       "own time left out) benice polls every --poll-busy seconds: a CPU shared\n"
	       "with the job shows at once in its progress, and the judgment comes in a\n"
	       "quarter of a second.  It decides only how often the job is looked at,\n"
	       "never whether it is suspended.  Alone, and beside a program that uses\n"
	       "only the disk (whose progress in 50 ms is noise), polls stay as they are;\n"
	       "so do they for a counter too coarse for --poll-min.  Where the kernel\n"
	       "has /proc/pressure/cpu, benice reads it every 50 ms between its polls:\n"
	       "when the time some task waited for a CPU rises to a quarter, the quick\n"
	       "polls start at once instead of 0.25-0.5 s later.\n\n"
	       "Also not in the paper (--disk-rise).  A disk job's progress comes in\n"
	       "bursts, so alone half its polls are below its average and the sign test's\n"
	       "sample grows undecided; a rival must first outvote that history (10\n"
	       "polls below in a row from 10 of 20).  So every 0.1 s between its polls\n"
	       "benice compares the disks' bytes (/proc/diskstats) with the job's own\n"
	       "(read_bytes + write_bytes of its tree): when the others' rise to 2 MiB/s\n"
	       "and half the job's over the last 0.2 s (the disk completes a burst a\n"
	       "look after the job submitted it), after 0.5 s without, the interval\n"
	       "under way is not measured and the sign test begins a new sample, which\n"
	       "judges in 5 polls.\n"
	       "Polls stay as they are, and a rise never suspends the job itself.\n\n");
	command_options_help(benice_options, N_BENICE_OPTIONS);
	printf("\nThe progress metric (--progress), a cumulative count benice takes the\n"
	       "difference of between polls:\n"
	       "  io            bytes the job's processes read and wrote (rchar + wchar\n"
	       "                in /proc/PID/io): disk, cache, pipes, sockets; any\n"
	       "                program, static ones too; exited children still count\n"
	       "  file:PATH     a number the program writes to PATH (rewritten in place);\n"
	       "                several numbers separated by white space are several\n"
	       "                metrics progressing at once (MS Manners 4.4)\n"
	       "  cmd:COMMAND   /bin/sh -c COMMAND prints the number(s); killed after 5 s,\n"
	       "                or at once when the job ends\n"
	       "A sample that is not numbers, that went down, or that has another count\n"
	       "of numbers than the first, is skipped with a warning (the first few) and\n"
	       "counted in the report; only an unknown KIND is an error (exit 2).\n\n"
	       "Kept targets.  At the end (and every 60 s) the calibrated target is saved\n"
	       "in $XDG_STATE_HOME/discnice/manners/NAME-HASH.METRIC.targets (default\n"
	       "~/.local/state), NAME and HASH for the program (the executable: with\n"
	       "`python3 job.py` it is python3, so give each script its --state-file),\n"
	       "METRIC for the --progress kind (benice-io, benice-file, benice-cmd-HASH).\n"
	       "The next run starts from it: no bootstrap once one was completed, no\n"
	       "probation.  A file that is damaged, or of another version or metric, is\n"
	       "ignored with one warning and rewritten; it never stops the job.  The\n"
	       "format is the testpoint library's (manners(3), FILES).\n\n"
	       "Rate-limited resources (token buckets: cloud disks with burst credits,\n"
	       "tc tbf, cgroup io.max) slow the job when the bucket empties, with no one\n"
	       "else in the way: benice takes that for contention and suspends for\n"
	       "nothing, or keeps a target of the burst speed.  Use a fixed cap there\n"
	       "(discnice run --rate), or calibrate with the bucket empty (discnice(1)).\n\n"
	       "Turns (MS Manners 4.5).  Of all your benice jobs and threads using the\n"
	       "testpoint library, only one runs at a time, from one testpoint to its\n"
	       "next, so that two background jobs do not slow each other and take that\n"
	       "for contention; the others wait stopped (see --share, none: no turns).\n"
	       "The job is one of them: COMMAND gets MANNERS_SHARE_FILE=none, so that a\n"
	       "library program in it takes turns among its own threads only (with\n"
	       "--pid, start such a program so, or give --share none).\n\n"
	       "Never left stopped.  A guard process continues whatever benice stopped\n"
	       "if benice dies, even of SIGKILL.  A job someone else stopped (Ctrl-Z,\n"
	       "kill -STOP, a debugger) is neither judged, nor stopped, nor continued.\n"
	       "Ctrl-Z at the terminal stops the job and benice together, and fg\n"
	       "continues both; a stop sent to benice alone continues the job first.\n"
	       "Where benice leads its session (script -c, tmux new CMD, ssh -t) the\n"
	       "kernel discards a terminal's stop: Ctrl-Z stops nothing there, and a\n"
	       "job held suspended is continued.\n\n"
	       "Ctrl-C.  With a COMMAND the job gets the signal (a suspension ends at\n"
	       "once so that it can take it) and benice exits as the job does - its\n"
	       "status, or dying of the same signal.  With --pid, Ctrl-C, SIGTERM and\n"
	       "SIGHUP detach: the processes are continued and run on, unregulated.\n\n"
	       "Each PID must be a process of yours (root may give anyone's), not\n"
	       "discnice, and not an ancestor of discnice (your shell); not in (nor\n"
	       "above) another benice's job: two would keep it stopped; not the job of\n"
	       "a `discnice run` (which follows its job's stops; use run --policy\n"
	       "manners); every PID is checked before any is touched.\n\n"
	       "Exit status: with COMMAND the job's own; 128+N if it died of signal N\n"
	       "(benice then dies of N too); with --pid 0 when every process has exited\n"
	       "or benice detached; 2 for bad options, values or PIDs (nothing is\n"
	       "started or touched); 125 if discnice itself failed; 126 if COMMAND\n"
	       "cannot be executed; 127 if it is not found.\n\n"
	       "Examples:\n"
	       "  discnice benice -- tar czf /backup/home.tgz ~\n"
	       "  discnice benice --progress file:/tmp/indexer.count -- ./indexer\n"
	       "  discnice benice --pid $(pgrep -x updatedb)\n"
	       "  discnice benice --bootstrap 20 --probation 0 --report r.json -- make -j1\n\n"
	       "See discnice(1), BENICE.\n");
}

static double number_arg(const char *name, const char *value, double low, double high,
			 bool low_open, const char *what)
{
	double v;
	if (!decimal_number(value, &v) || v > high || v < low || (low_open && v == low))
		usage_error("--%s '%s': %s", name, value, what);
	return v;
}

static uint32_t count_arg(const char *name, const char *value, uint32_t low, uint32_t high,
			  const char *what)
{
	unsigned long long v;
	if (!whole_number(value, &v) || v < low || v > high)
		usage_error("--%s '%s': %s", name, value, what);
	return (uint32_t)v;
}

static int64_t seconds_arg(const char *name, const char *value, double low, bool low_open,
			   const char *what)
{
	return (int64_t)llround(number_arg(name, value, low, 86400.0 * 365, low_open, what) * 1e9);
}

static void benice_options_parse(struct benice_config *c, int argc, char **argv)
{
	memset(c, 0, sizeof *c);
	manners_controller_config_default(&c->controller);
	c->controller.suspend_limit_ns = BENICE_SUSPEND_LIMIT_DEFAULT;
	c->controller.calib.probation_ns = BENICE_PROBATION_DEFAULT;
	c->controller.calib.probation_duty = BENICE_DUTY_DEFAULT;
	c->alpha = MANNERS_SIGN_ALPHA_DEFAULT;
	c->beta = MANNERS_SIGN_BETA_DEFAULT;
	manners_poll_config_default(&c->poll);
	progress_source_parse("io", &c->progress);
	c->persist = true;
	c->disk_rise = true;
	c->quiet_ns = MANNERS_QUIET_NS_DEFAULT;
	c->poll_busy_ns = BENICE_POLL_BUSY_DEFAULT;
	set_usage_command("benice");

	bool initial_given = false;
	optind = 1;
	int i;
	while ((i = command_option_next("benice", benice_options, N_BENICE_OPTIONS, true, argc,
					argv)) >= 0) {
		const char *name = benice_options[i].name, *v = optarg;
		switch ((enum benice_option)i) {
		case OPT_ALPHA:
			c->alpha = number_arg(name, v, 0, 1, true, "a probability, above 0 and below 1");
			if (c->alpha >= 1)
				usage_error("--alpha '%s': a probability, above 0 and below 1", v);
			break;
		case OPT_BETA:
			c->beta = number_arg(name, v, 0, 1, true, "a probability, above 0 and below 1");
			if (c->beta >= 1)
				usage_error("--beta '%s': a probability, above 0 and below 1", v);
			break;
		case OPT_BOOTSTRAP:
			c->controller.calib.bootstrap =
				count_arg(name, v, 1, 100000,
					  "a whole number of testpoints from 1 to 100000 (as run's "
					  "--manners-bootstrap)");
			break;
		case OPT_CLASS: {
			if (!segment_name_ok(v))
				usage_error("--class '%s': " SEGMENT_NAME_RULE, v);
			snprintf(c->class_name, sizeof c->class_name, "%s", v);
			c->class_given = true;
			break;
		}
		case OPT_DUTY:
			c->controller.calib.probation_duty =
				number_arg(name, v, 0, 1, true, "a fraction of the time, above 0 and at most 1");
			break;
		case OPT_HELP:
			benice_help();
			exit(0);
		case OPT_N:
			c->controller.calib.n = count_arg(name, v, 1, UINT32_MAX,
							"a whole number from 1 to 4294967295");
			break;
		case OPT_PERSIST:
			c->persist = on_off_arg("--persist", v);
			break;
		case OPT_PID:
			c->pid_mode = true;
			break;
		case OPT_DISK_RISE:
			c->disk_rise = on_off_arg("--disk-rise", v);
			break;
		case OPT_POLL_BUSY:
			c->poll_busy_ns = seconds_arg(name, v, 0, false, "a number of seconds, 0 or more");
			if (c->poll_busy_ns > 0 && c->poll_busy_ns < 1000000)
				usage_error("--poll-busy '%s': 0 (never), or at least 0.001 seconds", v);
			break;
		case OPT_POLL_MAX:
			c->poll.max_ns = seconds_arg(name, v, 0, true, "a number of seconds above 0");
			break;
		case OPT_POLL_MIN:
			c->poll.min_ns = seconds_arg(name, v, 0.001, false,
						     "a number of seconds, at least 0.001");
			break;
		case OPT_PROBATION:
			c->controller.calib.probation_ns =
				seconds_arg(name, v, 0, false, "a number of seconds, 0 or more");
			break;
		case OPT_PROGRESS:
			if (progress_source_parse(v, &c->progress) < 0) {
				if (strcmp(v, "file:") == 0 || strcmp(v, "cmd:") == 0)
					usage_error("--progress '%s': the %s is missing after the "
						    "colon", v, v[0] == 'f' ? "path" : "command");
				usage_error("--progress '%s': unknown kind; expected io, file:PATH or "
					    "cmd:COMMAND", v);
			}
			break;
		case OPT_QUIET:
			c->quiet = true;
			break;
		case OPT_REPORT:
			if (!*v)
				usage_error("--report: empty file name");
			c->report_path = v;
			break;
		case OPT_SHARE:
			if (!*v)
				usage_error("--share: empty file name (none: no turns)");
			c->share = v;
			break;
		case OPT_STATE_FILE:
			if (!*v)
				usage_error("--state-file: empty file name");
			c->state_file = v;
			break;
		case OPT_QUIET_AFTER:
			c->quiet_ns = seconds_arg(name, v, 0, false, "a number of seconds, 0 or more");
			break;
		case OPT_SUSPEND_INITIAL:
			initial_given = true;
			c->controller.suspend_initial_ns =
				seconds_arg(name, v, 0, true, "a number of seconds above 0");
			break;
		case OPT_SUSPEND_LIMIT:
			c->controller.suspend_limit_ns =
				seconds_arg(name, v, 0, true, "a number of seconds above 0");
			break;
		}
	}
	if (c->alpha >= c->beta)
		usage_error("--alpha %g must be below --beta %g (MS Manners eq. 3: otherwise the "
			    "suspension never settles)", c->alpha, c->beta);
	if (manners_suspend_settle(&c->controller.suspend_initial_ns, c->controller.suspend_limit_ns,
				   initial_given) < 0)
		usage_error("--suspend-initial must not be above --suspend-limit");
	if (c->poll.min_ns > c->poll.max_ns)
		usage_error("--poll-min must not be above --poll-max");
	if (optind >= argc)
		usage_error(c->pid_mode ? "no process given (usage: discnice benice [OPTION]... --pid PID...)"
					: "no command given (usage: discnice benice [OPTION]... [--] COMMAND "
					  "[ARG]...)");
	c->operands = argv + optind;
	c->noperands = (unsigned)(argc - optind);
}

/* ---- signals ------------------------------------------------------------- */

static volatile sig_atomic_t interrupt_signal;  /* SIGINT, SIGTERM, SIGHUP, SIGQUIT */
static volatile sig_atomic_t interrupt_from_user; /* sent with kill(2), not by the terminal */
static volatile sig_atomic_t stop_signal;       /* SIGTSTP, SIGTTIN, SIGTTOU */

static void on_interrupt(int sig, siginfo_t *info, void *context)
{
	(void)context;
	interrupt_signal = sig;
	interrupt_from_user = info->si_code == SI_USER || info->si_code == SI_QUEUE;
}

static volatile sig_atomic_t stop_from_terminal; /* sent by the tty to our group */

static void on_stop(int sig, siginfo_t *info, void *context)
{
	(void)context;
	stop_signal = sig;
	stop_from_terminal = info->si_code == SI_KERNEL;
}

static void catch_stop(int sig)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_stop;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

static void catch_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_interrupt;
	sa.sa_flags = SA_SIGINFO; /* no SA_RESTART: the wait must end */
	sigemptyset(&sa.sa_mask);
	const int interrupts[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
	for (unsigned i = 0; i < sizeof interrupts / sizeof interrupts[0]; i++)
		sigaction(interrupts[i], &sa, NULL);
	catch_stop(SIGTSTP);
	catch_stop(SIGTTIN);
	catch_stop(SIGTTOU);
	signal(SIGPIPE, SIG_IGN); /* a dead guard is seen at write(), not by dying */
}

/* Stop benice itself with the signal's default action (the job was
 * continued first: nothing stays stopped while nobody watches). */
static void stop_self(int sig)
{
	signal(sig, SIG_DFL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	catch_stop(sig);
}

/* ---- the regulation ------------------------------------------------------ */

struct benice_state {
	struct benice_config *config;
	struct manners_sign_table signs;
	struct manners_controller controller;
	struct manners_phase phases[BENICE_PHASES];
	struct manners_poll poll;
	struct targets_store targets; /* kept across runs (tool_targets.h) */
	struct jobtree tree;
	struct suspender suspender;
	struct dn_segment *seg;
	int slot;
	pid_t job;                 /* a command's pid; 0 for --pid */
	/* The measurement since the last testpoint. */
	double base[BENICE_METRICS_MAX], pending[BENICE_METRICS_MAX];
	int count;                 /* metrics; 0 until the first reading */
	bool have_base;
	int64_t run_ns;            /* running time carried since the last testpoint */
	uint64_t mark_ns;          /* running time accrues from here */
	/* Suspension. */
	bool suspended;
	uint64_t suspend_since_ns, suspend_until_ns;
	uint64_t suspended_ns, suspensions;
	/* Stopped by someone else. */
	bool others_stopped;
	uint64_t others_since_ns, others_ns;
	uint64_t idle_ns;          /* polls that found the job idle, not counted */
	uint64_t skipped;          /* samples skipped: unreadable, not numbers, went down */
	uint64_t missing_since_ns; /* a counter file not there yet, since (0: there) */
	bool warned_missing;
	unsigned warned_read, warned_down, warned_controller;
	unsigned alive;
	uint64_t next_poll_ns;
	/* --quiet-after (manners/quiet.h): the look back at a judgment, and
	 * the end of a suspension on a machine gone quiet. */
	bool use_quiet;
	struct manners_quiet quiet;        /* during a suspension */
	struct manners_quiet_history seen; /* at polls, for the look back */
	uint64_t shortened;                /* suspensions it ended early */
	/* --poll-busy (manners/quiet.h's quick polls). */
	bool use_busy;
	struct manners_busy busy;
	uint64_t busy_polls;               /* polls made at the quick interval */
	/* ... sooner, at a rise of CPU pressure between the polls. */
	bool use_stall;
	struct manners_stall stall;
	uint64_t last_poll_ns;             /* the last poll, or the resume */
	bool rose;                         /* the poll under way follows a rise */
	uint64_t stall_rises;
	/* --disk-rise: a new sample at a rise of others' disk traffic. */
	bool use_disk_rise;
	struct manners_disk_rise disk_rise;
	bool disk_rose;                    /* the poll under way follows one */
	uint64_t disk_rises;
	/* Turns (MS Manners 4.5, 7.1): the job is one "thread" of the
	 * library's per-user table (manners/library/multiplex.h), so that
	 * only one regulated job or thread of the user runs at a time. */
	bool turns;
	struct multiplex mux;
	int mux_slot;
	int64_t hung_ns, half_life_ns;
	uint64_t turn_since_ns;            /* the job's turn began (arrival or resume) */
	uint64_t carried_ns;               /* running time before a turn_keep() stop */
	uint64_t turn_waits;               /* suspensions that were a turn only */
	uint64_t poor_waits;               /* suspensions after a poor judgment */
	uint64_t probation_waits;          /* suspensions of probation's duty cycle */
};

/* For `discnice ls` and `top`. */
static void publish(struct benice_state *b, uint64_t now)
{
	struct dn_run *run = &b->seg->runs[b->slot];
	uint64_t suspended = b->suspended_ns + (b->suspended ? now - b->suspend_since_ns : 0);
	__atomic_store_n(&run->stopped_ns, suspended, __ATOMIC_RELAXED);
	__atomic_store_n(&run->attached_processes, b->alive, __ATOMIC_RELAXED);
	__atomic_store_n(&run->measured_read_bytes, b->tree.total.read_bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&run->measured_write_bytes, b->tree.total.write_bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&run->state,
			 DN_RUN_BENICE | (b->suspended && b->suspender.n ? DN_RUN_STOPPED : 0) |
				 (b->others_stopped ? DN_RUN_JOB_STOPPED : 0),
			 __ATOMIC_RELEASE);
}

/* While another job or thread runs, the table is looked at this often:
 * its testpoint does not wake us (the library's waiters sleep on a futex,
 * benice in sigtimedwait). */
#define BENICE_TURN_LOOK_NS (20 * 1000 * 1000ull)

/* Joins the table, as the library would (its settings' environment
 * variables: MANNERS_SHARE_FILE, MANNERS_HUNG, MANNERS_HALF_LIFE).  0, or
 * EXIT_USAGE when the table --share names cannot be used (said): the job
 * is not started.  One that came from the environment or the default
 * warns once, and the job takes no turns. */
static int turns_open(struct benice_state *b)
{
	struct manners_settings s;
	manners_settings_default(&s);
	for (size_t i = 0; i < manners_settings_count(); i++) {
		const char *name = manners_settings_name(i);
		const char *value = getenv(manners_settings_env(i));
		if (!value || !*value ||
		    (strcmp(name, "share_file") && strcmp(name, "hung") && strcmp(name, "half_life")))
			continue;
		if (manners_settings_set(&s, name, value) < 0)
			warnf("ignoring %s=%s: not a valid setting", manners_settings_env(i), value);
	}
	char fallback[64];
	const char *path = b->config->share ? b->config->share : s.share_file;
	if (!path[0])
		path = multiplex_default_path(fallback, sizeof fallback);
	if (strcmp(path, "none") == 0)
		return 0;
	const char *why = "";
	int rc = multiplex_open_shared(&b->mux, path, &why);
	if (rc < 0) {
		if (b->config->share) {
			errorf("--share %s: %s (%s)", path, why, strerror(-rc));
			return EXIT_USAGE;
		}
		warnf("benice: cannot take turns through %s: %s (%s); the job takes no turns "
		      "(--share none asks for that without a warning)", path, why, strerror(-rc));
		return 0;
	}
	b->mux_slot = multiplex_join(&b->mux, 0);
	if (b->mux_slot < 0) {
		warnf("the turn table %s is full (%u threads): the job takes no turns", path,
		      MANNERS_SHARE_THREADS);
		return 0;
	}
	b->hung_ns = s.hung_ns;
	b->half_life_ns = s.half_life_ns;
	b->turns = true;
	return 0;
}

/* Is it the job's turn?  1 yes, 0 not yet (*wake: when to look again);
 * a table that lost our slot ends the turns (-EINVAL: not ours any more). */
static int turn_ready(struct benice_state *b, uint64_t now, uint64_t *wake)
{
	int64_t at;
	int r = multiplex_try_run(&b->mux, b->mux_slot, b->hung_ns, b->half_life_ns, &at);
	if (r < 0) {
		b->turns = false;
		return 1;
	}
	*wake = at > (int64_t)now ? (uint64_t)at : now;
	if (*wake > now + BENICE_TURN_LOOK_NS)
		*wake = now + BENICE_TURN_LOOK_NS;
	return r;
}

/* May polls be quick at all (manners/quiet.h)?  --poll-busy is on and
 * shorter, and the counter is not too coarse even for --poll-min (the poll
 * rule has not lengthened the interval). */
static bool quick_allowed(const struct benice_state *b)
{
	return b->use_busy && b->poll.interval_ns <= b->poll.config.min_ns &&
	       b->config->poll_busy_ns < b->poll.interval_ns;
}

/* The interval to the next poll: --poll-busy while others use a CPU. */
static uint64_t poll_interval(const struct benice_state *b)
{
	if (quick_allowed(b) && b->busy.busy)
		return (uint64_t)b->config->poll_busy_ns;
	return (uint64_t)b->poll.interval_ns;
}

/* Could the quick polls start (manners/quiet.h)?  Not with them on
 * already, nor where the poll rule has lengthened the interval. */
static bool quick_possible(const struct benice_state *b)
{
	return quick_allowed(b) && !b->busy.busy;
}

/* The next look at the pressure: a step after the last, and never a poll
 * sooner than a quick one after the last (a sample of a few microseconds is
 * no measurement). */
static uint64_t stall_due(const struct benice_state *b)
{
	uint64_t quick = b->last_poll_ns + (uint64_t)b->config->poll_busy_ns;
	uint64_t next = (uint64_t)b->stall.next_ns;
	return next > quick ? next : quick;
}

/* Between the polls, once a step: has CPU pressure risen (a rival on the
 * job's CPU)?  Then the poll comes now, and the quick ones after it. */
static bool stall_rise(struct benice_state *b, uint64_t now)
{
	if (!b->use_stall)
		return false;
	if (!quick_possible(b)) {
		manners_stall_pause(&b->stall);
		return false;
	}
	if (now < stall_due(b) || !manners_stall_due(&b->stall, (int64_t)now))
		return false;
	uint64_t some;
	if (machine_cpu_stall_read(&some) < 0) {
		b->use_stall = false; /* no PSI here: the spans alone */
		return false;
	}
	b->rose = manners_stall_feed(&b->stall, (int64_t)now, some) == 1;
	return b->rose;
}

/* Between the polls, once a step: have others' disk bytes risen (a rival
 * on the job's disk)?  Then the poll comes now, and begins a new sample;
 * the polls after it keep their interval (manners/quiet.h). */
static bool disk_rise_look(struct benice_state *b, uint64_t now)
{
	if (!b->use_disk_rise || !manners_disk_rise_due(&b->disk_rise, (int64_t)now))
		return false;
	struct manners_activity sample;
	jobtree_scan(&b->tree);
	if (!jobtree_machine_sample(&b->tree, now, &sample))
		return false;
	b->disk_rose = manners_disk_rise_feed(&b->disk_rise, &sample) == 1;
	return b->disk_rose;
}

/* A look at the machine for the quick polls, when they are on. */
static void busy_feed(struct benice_state *b, const struct manners_activity *sample)
{
	if (b->use_busy)
		manners_busy_feed(&b->busy, sample);
}

static void resume(struct benice_state *b, uint64_t now)
{
	if (!b->suspended)
		return;
	suspender_continue(&b->suspender);
	b->suspended = false;
	b->suspended_ns += now - b->suspend_since_ns;
	b->mark_ns = now; /* running time starts again now (§4.1) */
	b->last_poll_ns = now;
	manners_stall_pause(&b->stall); /* the suspension was not looked at */
	manners_disk_rise_pause(&b->disk_rise);
	b->next_poll_ns = now + poll_interval(b);
	b->turn_since_ns = now;
	publish(b, now);
}

static void suspend(struct benice_state *b, uint64_t now, int64_t wait_ns)
{
	/* Stop, then look again for children born meanwhile and stop them
	 * too: a running parent may fork between the scan and its stop. */
	suspender_stop(&b->suspender, &b->tree);
	b->alive = jobtree_scan(&b->tree);
	suspender_stop(&b->suspender, &b->tree);
	b->suspended = true;
	b->suspensions++;
	b->suspend_since_ns = now;
	b->suspend_until_ns = now + (uint64_t)wait_ns;
	if (b->use_quiet)
		manners_quiet_reset(&b->quiet);
	publish(b, now);
}

/* A testpoint's outcome: suspend the job for wait_ns and, when it takes
 * turns, until its turn.  With others in the table the job is stopped
 * before we arrive: the one picked then may run at once, and two never
 * run together (4.5). */
static void take_turn(struct benice_state *b, uint64_t now, int64_t wait_ns)
{
	if (!b->alive)
		return;
	if (!b->turns) {
		if (wait_ns > 0)
			suspend(b, now, wait_ns);
		return;
	}
	bool others = multiplex_threads(&b->mux) > 1;
	if (others || wait_ns > 0)
		suspend(b, now, wait_ns);
	if (multiplex_arrive(&b->mux, b->mux_slot, wait_ns, b->hung_ns, b->half_life_ns) < 0) {
		b->turns = false;
		return;
	}
	b->turn_since_ns = now;
	uint64_t wake;
	if (wait_ns == 0 && turn_ready(b, now, &wake) == 1) {
		/* Ours at once: no suspension to count. */
		if (b->suspended) {
			resume(b, clock_now_ns());
			b->suspensions--;
		}
		return;
	}
	if (wait_ns == 0) {
		/* Another took the turn between our look and our arrival. */
		if (!b->suspended)
			suspend(b, now, 0);
		b->turn_waits++;
	}
}

/* A job whose counter moves less often than the hung threshold (a
 * --poll-min above it, or polls lengthened to --poll-max for a coarse
 * counter) would come back to the table too late: the others would
 * presume it hung and run beside it (timeshare.h).  benice knows better -
 * it is watching the job - so every hung_ns / 2 of a turn it tells the
 * table the job runs on (multiplex_touch(): no stop, no judgment).  Only
 * when benice itself came too late, and the others run already, does the
 * job stop and wait for its turn as at a testpoint, its measurement
 * carried over the stop: returns 1 then; otherwise lowers *wake to the
 * next touch. */
static int turn_keep(struct benice_state *b, uint64_t now, uint64_t *wake)
{
	if (!b->turns || b->suspended || !b->alive)
		return 0;
	uint64_t half = (uint64_t)b->hung_ns / 2;
	if (now >= b->turn_since_ns + half) {
		int r = multiplex_touch(&b->mux, b->mux_slot, b->hung_ns, b->half_life_ns);
		if (r == -ESRCH) {
			uint64_t next_poll = b->next_poll_ns;
			b->carried_ns += now - b->mark_ns;
			b->mark_ns = now;
			take_turn(b, now, 0);
			if (!b->suspended) /* ours again at once: the poll stays */
				b->next_poll_ns = next_poll;
			return 1;
		}
		if (r < 0) {
			b->turns = false; /* the table lost our slot */
			return 0;
		}
		b->turn_since_ns = now;
	}
	if (b->turn_since_ns + half < *wake)
		*wake = b->turn_since_ns + half;
	return 0;
}

/* Start the measurement afresh from this reading (or from the next one):
 * after a skipped sample, or a stop by someone else. */
static void restart_measurement(struct benice_state *b, uint64_t now)
{
	b->have_base = false;
	b->run_ns = 0;
	b->carried_ns = 0;
	memset(b->pending, 0, sizeof b->pending);
	b->mark_ns = now;
}

/* For a cmd: progress (tool_progress.h): give the command up when the
 * job has ended (peeked at, not reaped: the loop reaps it) or a signal
 * waits for the loop; a hung command held benice 5 s past its job. */
static bool progress_not_wanted(void *ctx)
{
	const struct benice_state *b = ctx;
	if (interrupt_signal || stop_signal)
		return true;
	if (b->config->pid_mode) {
		/* Gone, or a zombie (no live thread) its parent has not reaped. */
		for (unsigned i = 0; i < b->tree.nroots; i++) {
			struct proc_stat st;
			if (proc_process_stat_read(b->tree.roots[i], &st) == 0 && st.state != 'Z' &&
			    st.state != 'X')
				return false;
		}
		return true;
	}
	siginfo_t info;
	info.si_pid = 0;
	return waitid(P_PID, (id_t)b->job, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid;
}

static void poll_once(struct benice_state *b, uint64_t now)
{
	const struct benice_config *c = b->config;
	b->alive = jobtree_scan(&b->tree);
	b->last_poll_ns = now;
	struct manners_activity sample;
	bool sampled = false, rose = false;
	if (b->use_busy && jobtree_machine_sample(&b->tree, now, &sample)) {
		busy_feed(b, &sample);
		if (b->rose) {
			manners_busy_hint(&b->busy, &sample);
			b->stall_rises++;
			rose = true;
		}
		sampled = true;
	}
	b->rose = false;
	if (b->disk_rose) {
		b->disk_rises++;
		rose = true;
	}
	b->disk_rose = false;
	if (poll_interval(b) < (uint64_t)b->poll.interval_ns)
		b->busy_polls++;
	b->next_poll_ns = now + poll_interval(b);

	/* Stopped by someone else (we hold nothing stopped now): not ours to
	 * judge nor to continue; its stopped time is no running time. */
	bool stopped = b->alive && jobtree_stopped(&b->tree);
	if (stopped != b->others_stopped) {
		if (stopped)
			b->others_since_ns = now;
		else
			b->others_ns += now - b->others_since_ns;
		b->others_stopped = stopped;
	}
	if (stopped) {
		restart_measurement(b, now);
		publish(b, now);
		return;
	}

	double values[BENICE_METRICS_MAX], delta[BENICE_METRICS_MAX];
	char why[128];
	const struct progress_cancel cancel = { progress_not_wanted, b };
	int count = progress_read(&c->progress, &b->tree, &cancel, values, BENICE_METRICS_MAX, why,
				  sizeof why);
	if (count == -ECANCELED) {
		/* A sample skipped, unsaid: the loop sees why at once, and
		 * the end says so if no count ever came. */
		b->skipped++;
		restart_measurement(b, now);
		return;
	}
	/* The next poll an interval after this one ended: a cmd: that takes
	 * its time would otherwise make every poll overdue at once, and the
	 * loop would run it again before reaping a job that has ended. */
	if (c->progress.kind == PROGRESS_CMD)
		b->next_poll_ns = clock_now_ns() + poll_interval(b);
	/* Another number of metrics than the first reading's: skipped, and
	 * said, whether or not a base is held (after one such sample the
	 * base was dropped, and every later one went by unsaid and
	 * uncounted: the job was no longer regulated). */
	if (count < 0 || (b->count && count != b->count)) {
		if (count >= 0)
			snprintf(why, sizeof why, "%d metrics where there were %d", count, b->count);
		/* A counter file the program has not written yet is no news
		 * at first; after 10 s it is said once (a misspelled path
		 * left the job unregulated without a word), and again at the
		 * end. */
		bool quiet = count == -ENOENT && !b->count;
		if (quiet && !b->missing_since_ns)
			b->missing_since_ns = now;
		if (quiet && !b->warned_missing && now - b->missing_since_ns >= 10 * NS_PER_SEC) {
			b->warned_missing = true;
			warnf("progress %s: %s after 10 s; the job is not regulated until it "
			      "appears", c->progress.spec, why);
		}
		if (!quiet && b->warned_read++ < BENICE_WARNINGS_MAX)
			warnf("progress %s: %s; sample skipped%s", c->progress.spec, why,
			      b->warned_read == BENICE_WARNINGS_MAX ? " (no more such warnings)" : "");
		b->skipped++;
		restart_measurement(b, now);
		publish(b, now);
		return;
	}
	/* Running time, as far as polls can tell it: an interval in which
	 * the job made no progress and was idle (asleep, no CPU used) is not
	 * counted - waiting for input is not contention, and a zero rate
	 * averaged into the target would drag it down (§4.3). */
	int64_t interval = (int64_t)(now - b->mark_ns + b->carried_ns);
	b->mark_ns = now;
	b->carried_ns = 0;
	if (!b->have_base) {
		if (!b->count) {
			/* The number of metrics is known now: the phase is made
			 * and seeded with the target kept, if any. */
			b->count = count;
			targets_restore(&b->targets, &b->controller.phases, count);
		}
		if (count == b->count) {
			memcpy(b->base, values, sizeof values[0] * (size_t)count);
			b->have_base = true;
		}
		b->run_ns = 0;
		publish(b, now);
		return;
	}
	if (manners_progress_delta(b->base, values, count, delta) < 0) {
		if (b->warned_down++ < BENICE_WARNINGS_MAX)
			warnf("progress %s went down (a reset counter?); sample skipped%s",
			      c->progress.spec,
			      b->warned_down == BENICE_WARNINGS_MAX ? " (no more such warnings)" : "");
		b->skipped++;
		restart_measurement(b, now);
		memcpy(b->base, values, sizeof values[0] * (size_t)count);
		b->have_base = true;
		publish(b, now);
		return;
	}
	memcpy(b->base, values, sizeof values[0] * (size_t)count);
	if (rose) {
		/* A rival has just come: what the job did before says nothing
		 * of now.  The interval so far (mostly alone) is not measured,
		 * and the sign test begins a new sample, so that the first
		 * quick polls judge contention alone
		 * (manners_controller_new_sample()). */
		memset(b->pending, 0, sizeof b->pending);
		b->run_ns = 0;
		manners_controller_discard(&b->controller);
		manners_controller_new_sample(&b->controller);
		publish(b, now);
		return;
	}
	bool changed = false;
	for (int k = 0; k < count; k++) {
		b->pending[k] += delta[k];
		changed |= delta[k] > 0;
	}
	if (!changed && jobtree_idle(&b->tree)) {
		b->idle_ns += (uint64_t)interval;
		publish(b, now);
		return;
	}
	b->run_ns += interval;
	if (manners_poll_record(&b->poll, changed) != 1 || b->run_ns <= 0) {
		publish(b, now);
		return;
	}
	/* A testpoint (§4.1): the progress since the last one, over the time
	 * the job ran since. */
	if (b->use_quiet && manners_quiet_history_wants(&b->seen, &b->quiet, (int64_t)now) &&
	    (sampled || jobtree_machine_sample(&b->tree, now, &sample)))
		manners_quiet_history_add(&b->seen, &b->quiet, &sample);
	manners_controller_machine_quiet(&b->controller,
					 b->use_quiet &&
					 manners_quiet_history_quiet(&b->seen, &b->quiet,
								     b->use_busy ? &b->busy : NULL));
	int judgment;
	int64_t wait = manners_controller_testpoint(&b->controller, 0, count, b->pending, b->run_ns,
						    (int64_t)now, &judgment);
	memset(b->pending, 0, sizeof b->pending);
	b->run_ns = 0;
	b->next_poll_ns = now + poll_interval(b);
	if (wait >= 0)
		targets_update(&b->targets, &b->phases[0], now);
	if (wait < 0) {
		if (b->warned_controller++ < BENICE_WARNINGS_MAX)
			warnf("testpoint refused: %s; sample skipped", strerror((int)-wait));
		b->skipped++;
	} else {
		uint64_t before = b->suspensions;
		take_turn(b, now, wait);
		/* Why, for the summary and the report: a turn's wait is
		 * counted in take_turn(). */
		if (b->suspensions > before && wait > 0) {
			if (judgment == MANNERS_POOR)
				b->poor_waits++;
			else
				b->probation_waits++;
		}
		if (b->suspended)
			return;
	}
	publish(b, now);
}

/* "3 suspensions: 1 after a poor judgment, 2 of probation": a suspension
 * with no poor judgment beside it read as a contradiction. */
static void summary_suspensions(const struct benice_state *b, char *out, size_t size)
{
	uint64_t known = b->poor_waits + b->probation_waits + b->turn_waits;
	uint64_t other = b->suspensions > known ? b->suspensions - known : 0;
	int n = snprintf(out, size, "%" PRIu64 " suspension%s", b->suspensions,
			 b->suspensions == 1 ? "" : "s");
	const struct {
		uint64_t count;
		const char *what;
	} parts[] = {
		{ b->poor_waits, "after a poor judgment" },
		{ b->probation_waits, "of probation" },
		{ b->turn_waits, "waiting a turn" },
		{ other, "other" },
	};
	const char *sep = ": ";
	for (size_t i = 0; i < sizeof parts / sizeof parts[0] && n > 0 && (size_t)n < size; i++) {
		if (!parts[i].count)
			continue;
		n += snprintf(out + n, size - (size_t)n, "%s%" PRIu64 " %s", sep, parts[i].count,
			      parts[i].what);
		sep = ", ";
	}
}

/* ---- the report ------------------------------------------------------------ */

struct benice_result {
	double elapsed_s, run_s;
	int exit_status, signal;
	bool detached;
};

/* The calibrated targets (§4.3, §4.4): per metric, the rate in units per
 * second (for several metrics, 1 / the regression's coefficient). */
static void json_targets(FILE *f, struct benice_state *b)
{
	struct manners_phase *phase = NULL;
	for (size_t i = 0; i < b->controller.phases.capacity; i++)
		if (b->phases[i].count > 0)
			phase = &b->phases[i];
	fprintf(f, "  \"target_rate_per_s\": [");
	if (phase && phase->count == 1 && phase->calib.samples > 0) {
		fprintf(f, "%.6g", phase->calib.rate);
	} else if (phase && phase->count > 1 && manners_regress_solve(&phase->regress) == 0) {
		for (int k = 0; k < phase->count; k++)
			fprintf(f, "%s%.6g", k ? ", " : "",
				phase->regress.coef[k] > 0 ? 1e9 / phase->regress.coef[k] : 0.0);
	}
	fprintf(f, "],\n");
}

static int report_write(const char *path, struct benice_state *b, const struct benice_result *r)
{
	const struct benice_config *c = b->config;
	const struct manners_controller_stats *s = &b->controller.stats;
	char tmp[PATH_MAX + 32];
	FILE *f = report_file_open(path, tmp, sizeof tmp);
	if (!f)
		return -errno;
	fprintf(f, "{\n  \"%s\": [", c->pid_mode ? "pids" : "command");
	for (unsigned i = 0; i < c->noperands; i++) {
		if (i)
			fputs(", ", f);
		if (c->pid_mode)
			fprintf(f, "%s", c->operands[i]); /* checked: whole numbers */
		else
			json_print_string(f, c->operands[i]);
	}
	fprintf(f, "],\n  \"class\": ");
	json_print_string(f, c->class_name);
	fprintf(f, ",\n  \"policy\": \"benice\",\n  \"progress\": ");
	json_print_string(f, c->progress.spec);
	fprintf(f, ",\n  \"metrics\": %d,\n", b->count);
	fprintf(f, "  \"elapsed_s\": %.6f,\n  \"run_s\": %.6f,\n  \"suspended_s\": %.6f,\n"
		   "  \"stopped_by_others_s\": %.6f,\n  \"idle_s\": %.6f,\n  \"suspensions\": %" PRIu64 ",\n",
		r->elapsed_s, r->run_s, (double)b->suspended_ns / 1e9, (double)b->others_ns / 1e9,
		(double)b->idle_ns / 1e9, b->suspensions);
	fprintf(f, "  \"testpoints\": %" PRIu64 ",\n  \"compared\": %" PRIu64
		   ",\n  \"below_target\": %" PRIu64 ",\n  \"judged_good\": %" PRIu64
		   ",\n  \"judged_poor\": %" PRIu64 ",\n  \"discarded\": %" PRIu64
		   ",\n  \"skipped_samples\": %" PRIu64 ",\n  \"forgiven\": %" PRIu64
		   ",\n  \"shortened\": %" PRIu64 ",\n",
		s->testpoints, s->compared, s->below, s->judged_good, s->judged_poor, s->discarded,
		b->skipped, s->forgiven, b->shortened);
	fprintf(f, "  \"ordered_suspension_s\": %.6f,\n  \"ordered_probation_s\": %.6f,\n",
		(double)s->suspended_ns / 1e9, (double)s->probation_ns / 1e9);
	json_targets(f, b);
	fprintf(f, "  \"state_file\": ");
	if (b->targets.persist)
		json_print_string(f, b->targets.path);
	else
		fputs("null", f);
	fprintf(f, ",\n  \"target_restored\": %s,\n  \"restored_samples\": %" PRIu64 ",\n",
		b->targets.restored ? "true" : "false", b->targets.restored_samples);
	fprintf(f, "  \"poll_interval_s\": %.3f,\n  \"poll_busy_s\": %.3f,\n  \"busy_polls\": %" PRIu64
		   ",\n  \"cpu_pressure\": %s,\n  \"pressure_rises\": %" PRIu64
		   ",\n  \"new_samples\": %" PRIu64 ",\n  \"disk_rises\": %" PRIu64 ",\n",
		(double)b->poll.interval_ns / 1e9, (double)c->poll_busy_ns / 1e9, b->busy_polls,
		b->use_stall ? "true" : "false", b->stall_rises, b->controller.stats.new_samples,
		b->disk_rises);
	fprintf(f, "  \"turns\": %s,\n  \"turn_waits\": %" PRIu64 ",\n",
		b->turns ? "true" : "false", b->turn_waits);
	fprintf(f, "  \"poor_suspensions\": %" PRIu64 ",\n  \"probation_suspensions\": %" PRIu64
		   ",\n", b->poor_waits, b->probation_waits);
	fprintf(f, "  \"io_chars\": %" PRIu64 ",\n  \"disk_read_bytes\": %" PRIu64
		   ",\n  \"disk_write_bytes\": %" PRIu64 ",\n",
		b->tree.total.chars, b->tree.total.read_bytes, b->tree.total.write_bytes);
	const struct manners_controller_config *cc = &c->controller;
	fprintf(f, "  \"alpha\": %g,\n  \"beta\": %g,\n  \"n\": %" PRIu32 ",\n  \"bootstrap\": %" PRIu32
		   ",\n  \"probation_s\": %.3f,\n  \"duty\": %g,\n  \"suspend_initial_s\": %.3f,\n"
		   "  \"suspend_limit_s\": %.3f,\n",
		c->alpha, c->beta, cc->calib.n, cc->calib.bootstrap,
		(double)cc->calib.probation_ns / 1e9, cc->calib.probation_duty,
		(double)cc->suspend_initial_ns / 1e9, (double)cc->suspend_limit_ns / 1e9);
	fprintf(f, "  \"detached\": %s,\n  \"exit_status\": %d,\n  \"signal\": %d\n}\n",
		r->detached ? "true" : "false", r->exit_status, r->signal);
	return report_file_commit(f, tmp, path);
}

/* ---- the command ------------------------------------------------------------ */

/* fork and exec the command; exec errors come back over a CLOEXEC pipe.
 * Returns the pid, or -1 with *exec_errno set. */
static pid_t start_command(const char *program, char **argv, const sigset_t *old_mask,
			   bool own_turns, int *exec_errno)
{
	int exec_pipe[2];
	*exec_errno = 0;
	if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
		*exec_errno = errno;
		return -1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		*exec_errno = errno;
		close(exec_pipe[0]);
		close(exec_pipe[1]);
		return -1;
	}
	if (pid == 0) {
		close(exec_pipe[0]);
		sigprocmask(SIG_SETMASK, old_mask, NULL);
		const int reset[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU,
				      SIGPIPE };
		for (unsigned i = 0; i < sizeof reset / sizeof reset[0]; i++)
			signal(reset[i], SIG_DFL);
		/* The job is one thread of the turn table (MS Manners 4.5):
		 * a testpoint library inside it must not be another, or the
		 * table gives that thread the turn while we hold the whole
		 * process stopped for it, presume it hung, and so on - the
		 * job never runs.  Its threads take turns among themselves
		 * (the library's "none": a table of the process's threads). */
		if (own_turns)
			setenv("MANNERS_SHARE_FILE", "none", 1);
		int e = program_exec(program, argv);
		if (write(exec_pipe[1], &e, sizeof e) < 0)
			_exit(EXIT_CANNOT_EXEC);
		_exit(e == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
	}
	close(exec_pipe[1]);
	if (read(exec_pipe[0], exec_errno, sizeof *exec_errno) != (ssize_t)sizeof *exec_errno)
		*exec_errno = 0;
	close(exec_pipe[0]);
	return pid;
}

int tool_benice(int argc, char **argv)
{
	static struct benice_config config;
	benice_options_parse(&config, argc, argv);

	/* Everything the controller would refuse, refused now (exit 2). */
	static struct benice_state b;
	memset(&b, 0, sizeof b);
	b.config = &config;
	if (manners_sign_table_init(&b.signs, config.alpha, config.beta, MANNERS_SIGN_P1_DEFAULT,
				    MANNERS_SIGN_N_MAX) < 0)
		usage_error("--alpha %g, --beta %g: no sign test has these error rates", config.alpha,
			    config.beta);
	if (manners_controller_init(&b.controller, &b.signs, b.phases, BENICE_PHASES,
				    &config.controller) < 0)
		usage_error("the controller refuses these settings (see 'discnice benice --help')");
	if (manners_poll_init(&b.poll, &config.poll) < 0)
		usage_error("--poll-min/--poll-max: not a valid polling range");
	b.use_quiet = config.quiet_ns > 0 &&
		      manners_quiet_init(&b.quiet, config.quiet_ns, MANNERS_QUIET_CPU_DEFAULT,
					 MANNERS_QUIET_DISK_DEFAULT) == 0;
	b.use_busy = config.poll_busy_ns > 0 &&
		     manners_busy_init(&b.busy, MANNERS_BUSY_SPAN_NS_DEFAULT,
				       MANNERS_BUSY_CPUS_DEFAULT) == 0;
	uint64_t some;
	b.use_stall = b.use_busy && machine_cpu_stall_read(&some) == 0 &&
		      manners_stall_init(&b.stall, MANNERS_STALL_STEP_NS_DEFAULT,
					 MANNERS_STALL_SHARE_DEFAULT) == 0;
	b.use_disk_rise = config.disk_rise &&
			  manners_disk_rise_init(&b.disk_rise, MANNERS_DISK_RISE_STEP_NS_DEFAULT,
						 MANNERS_DISK_RISE_BPS_DEFAULT,
						 MANNERS_DISK_RISE_SHARE_DEFAULT) == 0;

	/* The job: every PID checked before any is touched, or the command
	 * found. */
	static pid_t pids[MAX_PIDS];
	unsigned npids = 0;
	char program[PATH_MAX] = "", first_name[32] = "";
	int lock = -1; /* --pid: checked and published as one step (tool_regulators.h) */
	if (config.pid_mode) {
		bool bad = false;
		for (unsigned i = 0; i < config.noperands; i++) {
			pid_t pid;
			char comm[32];
			if (!attach_pid_check(config.operands[i], &pid, comm, sizeof comm)) {
				bad = true;
				continue;
			}
			bool seen = false;
			for (unsigned k = 0; k < npids; k++)
				seen |= pids[k] == pid;
			if (seen)
				continue;
			if (npids == MAX_PIDS) {
				errorf("more than %u processes given", MAX_PIDS);
				return EXIT_USAGE;
			}
			if (!npids)
				snprintf(first_name, sizeof first_name, "%s", comm);
			pids[npids++] = pid;
		}
		if (bad)
			return EXIT_USAGE;
		lock = regulators_lock();
		if (!pids_free_of_regulators(pids, npids, ASKER_BENICE)) {
			regulators_unlock(lock);
			return EXIT_USAGE;
		}
	} else {
		int err, rc = program_find(config.operands[0], program, sizeof program, &err);
		if (rc) {
			errorf("%s: %s", config.operands[0], strerror(err));
			return rc;
		}
	}
	if (config.report_path)
		config.report_path = output_path_check("report", config.report_path);
	if (config.persist && config.state_file)
		config.state_file = output_path_check("state-file", config.state_file);

	/* The target an earlier run of this program kept (tool_targets.h):
	 * the program is the command's executable, or the first PID's. */
	if (config.pid_mode) {
		char exe[32];
		snprintf(exe, sizeof exe, "/proc/%d/exe", (int)pids[0]);
		ssize_t n = readlink(exe, program, sizeof program - 1);
		program[n > 0 ? n : 0] = '\0';
	}
	static const char *const kinds[] = { [PROGRESS_IO] = "io", [PROGRESS_FILE] = "file",
					     [PROGRESS_CMD] = "cmd" };
	char metric[MANNERS_STATE_METRIC_MAX];
	targets_metric_name(kinds[config.progress.kind], config.progress.arg, metric, sizeof metric);
	targets_open(&b.targets, config.persist, config.state_file, program[0] ? program : NULL,
		     metric, clock_now_ns());

	/* A run slot, for `discnice ls` and `top`: a class with no cap. */
	struct run_config run;
	memset(&run, 0, sizeof run);
	run.window_ns = NS_PER_SEC;
	run.predict_mask = DN_PREDICT_ALL;
	run.cache_backend = DN_CACHE_AUTO;
	if (!config.class_given)
		snprintf(config.class_name, sizeof config.class_name, "benice-%d", (int)getpid());
	snprintf(run.class_name, sizeof run.class_name, "%s", config.class_name);
	run.class_given = true;
	int rc = run_class_join(&run, RUN_KIND_BENICE, &b.seg, &b.slot);
	if (rc) {
		regulators_unlock(lock);
		return rc;
	}
	/* (run_class_join() marked the slot DN_RUN_BENICE.)  Seen by the
	 * next attach or benice --pid from now on; before the guard forks
	 * (the lock would go with it).  A command's job is published once
	 * it is started, below. */
	if (config.pid_mode)
		__atomic_store_n(&b.seg->runs[b.slot].attached_pid, (uint32_t)pids[0],
				 __ATOMIC_RELEASE);
	regulators_unlock(lock);

	rc = suspender_start(&b.suspender);
	if (rc < 0) {
		errorf("cannot start the guard process: %s", strerror(-rc));
		segment_release_run(b.seg, b.slot);
		segment_detach(b.seg, config.class_name);
		return EXIT_INTERNAL;
	}

	/* The turn table before the command: whether the job takes turns
	 * decides its environment (start_command()). */
	rc = turns_open(&b);
	if (rc) {
		suspender_end(&b.suspender);
		segment_release_run(b.seg, b.slot);
		segment_detach(b.seg, config.class_name);
		return rc;
	}

	sigset_t chld, old_mask;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old_mask);
	int exec_errno = 0;
	if (config.pid_mode) {
		jobtree_init(&b.tree, pids, npids, false);
	} else {
		/* The job's orphans are re-parented to us, so they stay in the
		 * tree and their counts come back to us when reaped. */
		prctl(PR_SET_CHILD_SUBREAPER, 1);
		b.job = start_command(program, config.operands, &old_mask, b.turns, &exec_errno);
		if (b.job < 0) {
			errorf("fork: %s", strerror(exec_errno));
			if (b.turns)
				multiplex_leave(&b.mux, b.mux_slot);
			suspender_end(&b.suspender);
			segment_release_run(b.seg, b.slot);
			segment_detach(b.seg, config.class_name);
			return EXIT_INTERNAL;
		}
		if (exec_errno)
			errorf("cannot run %s: %s", program, strerror(exec_errno));
		jobtree_init(&b.tree, &b.job, 1, true);
		snprintf(first_name, sizeof first_name, "%s", config.operands[0]);
	}
	b.tree.skip = b.suspender.guard.pid;
	if (!config.pid_mode)
		__atomic_store_n(&b.seg->runs[b.slot].attached_pid, (uint32_t)b.job,
				 __ATOMIC_RELAXED);
	catch_signals();

	uint64_t start = clock_now_ns();
	b.mark_ns = start;
	b.alive = jobtree_scan(&b.tree);
	b.next_poll_ns = start; /* the first reading is the base */
	publish(&b, start);
	take_turn(&b, start, 0); /* the job runs in its turn from the start */
	if (!config.quiet && !exec_errno) {
		/* --pid with several: the first and how many more (ls and top
		 * show the first; the report lists them all). */
		char more[48] = "";
		if (config.pid_mode && npids > 1)
			snprintf(more, sizeof more, " and %u more", npids - 1);
		errorf("benice: regulating %s %d (%s)%s by progress %s; class %s; %s",
		       config.pid_mode ? "process" : "job", (int)(config.pid_mode ? pids[0] : b.job),
		       first_name, more, config.progress.spec, config.class_name,
		       config.pid_mode ? "Ctrl-C detaches" : "Ctrl-C goes to the job");
	}

	int job_status = 0;
	bool job_done = false, detached = false;
	while (!job_done) {
		int status;
		pid_t r;
		while ((r = waitpid(-1, &status, WNOHANG)) > 0) {
			if (r == b.suspender.guard.pid)
				b.suspender.guard.pid = -1; /* stop nothing more */
			else if (r == b.job) {
				job_status = status;
				job_done = true;
			}
		}
		if (job_done)
			break;
		uint64_t now = clock_now_ns();
		if (stop_signal) {
			/* Stopped ourselves.  Ctrl-Z at the terminal stopped our
			 * command too (same process group): a SIGCONT of ours
			 * now would cancel its pending SIGTSTP (kernel/signal.c:
			 * prepare_signal() flushes stop signals on SIGCONT), so
			 * what we stopped stays stopped and the shell's fg
			 * continues both.  Otherwise (kill -TSTP to benice, or
			 * --pid, whose processes the terminal did not stop):
			 * continue the job first, nothing stays stopped while
			 * we are.  The next poll judges afresh. */
			int sig = stop_signal;
			stop_signal = 0;
			if (!(stop_from_terminal && !config.pid_mode))
				resume(&b, now);
			stop_self(sig);
			uint64_t back = clock_now_ns();
			if (b.suspended) {
				/* Continued.  The shell's fg or bg continued the
				 * whole group, our job too: the suspension is
				 * over, and left on the books the job ran
				 * unjudged until it would have ended.  A SIGCONT
				 * of benice alone left the job stopped by the
				 * user (resume() leaves a stop that is not ours).
				 * The time we were stopped was the user's stop,
				 * not our suspension. */
				b.suspend_since_ns += back - now;
				resume(&b, back);
			}
			restart_measurement(&b, back);
			continue;
		}
		if (interrupt_signal) {
			int sig = interrupt_signal;
			interrupt_signal = 0;
			resume(&b, now);
			if (config.pid_mode) {
				detached = true;
				if (!config.quiet)
					errorf("benice: detached (%s); the processes run on", strsignal(sig));
				break;
			}
			/* A signal sent to benice alone goes to the job; one the
			 * terminal sent to the foreground group it has already. */
			if (!config.pid_mode && interrupt_from_user)
				kill(b.job, sig);
			restart_measurement(&b, now);
			continue;
		}
		if (config.pid_mode && !b.alive)
			break;
		uint64_t wake;
		if (b.suspended) {
			/* ls and top show the suspension's time as it grows. */
			publish(&b, now);
			if (b.turns) {
				/* The end of the suspension is the table's too. */
				if (turn_ready(&b, now, &wake) == 1) {
					resume(&b, now);
					continue;
				}
			} else if (now >= b.suspend_until_ns) {
				resume(&b, now);
				continue;
			} else {
				wake = b.suspend_until_ns;
				if (wake - now > NS_PER_SEC)
					wake = now + NS_PER_SEC;
			}
			struct manners_activity sample;
			if (b.use_quiet && now < b.suspend_until_ns &&
			    jobtree_machine_sample(&b.tree, now, &sample)) {
				busy_feed(&b, &sample);
				if (manners_quiet_feed(&b.quiet, &sample) == 1) {
					b.shortened++;
					b.suspend_until_ns = now;
					if (b.turns) {
						multiplex_end_suspension(&b.mux, b.mux_slot);
						continue; /* its turn, next */
					}
					resume(&b, now);
					continue;
				}
				if (wake - now > (uint64_t)MANNERS_QUIET_STEP_NS)
					wake = now + (uint64_t)MANNERS_QUIET_STEP_NS;
			}
		} else {
			if (now >= b.next_poll_ns || stall_rise(&b, now) || disk_rise_look(&b, now)) {
				poll_once(&b, now);
				continue;
			}
			wake = b.next_poll_ns;
			if (b.use_disk_rise && (uint64_t)b.disk_rise.next_ns > now &&
			    (uint64_t)b.disk_rise.next_ns < wake)
				wake = (uint64_t)b.disk_rise.next_ns;
			/* stall_rise() said no: the look is due later (never now,
			 * which would spin). */
			if (b.use_stall && quick_possible(&b) && stall_due(&b) > now &&
			    stall_due(&b) < wake)
				wake = stall_due(&b);
			if (turn_keep(&b, now, &wake))
				continue;
		}
		/* Sleep until then, woken by a child's exit or a signal. */
		uint64_t left = wake - now;
		struct timespec wait = { (time_t)(left / NS_PER_SEC), (long)(left % NS_PER_SEC) };
		sigtimedwait(&chld, NULL, &wait);
	}
	uint64_t end = clock_now_ns();
	resume(&b, end);
	if (b.turns)
		multiplex_leave(&b.mux, b.mux_slot);
	if (b.others_stopped)
		b.others_ns += end - b.others_since_ns;
	jobtree_scan(&b.tree); /* the last counts, for the report */
	suspender_end(&b.suspender);
	/* Orphans that already finished: reap them (their counts are ours). */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;

	targets_close(&b.targets, &b.phases[0], end);

	struct benice_result result = { .detached = detached };
	result.elapsed_s = (double)(end - start) / 1e9;
	/* Running: neither suspended, nor stopped by others, nor idle (the
	 * help: "idle time is not running time"); the job that slept most
	 * of its 15 s was said to have run 14.2 s. */
	uint64_t not_running = b.suspended_ns + b.others_ns + b.idle_ns;
	result.run_s = end - start > not_running ? (double)(end - start - not_running) / 1e9 : 0;
	if (!config.pid_mode)
		result.exit_status = exec_errno ? (exec_errno == ENOENT ? EXIT_NOT_FOUND
									: EXIT_CANNOT_EXEC)
						: wait_status_to_exit(job_status, &result.signal);
	segment_release_run(b.seg, b.slot);
	segment_detach(b.seg, config.class_name);

	int exit_status = result.exit_status;
	if (config.report_path) {
		rc = report_write(config.report_path, &b, &result);
		if (rc < 0) {
			errorf("cannot write report %s: %s (the job's exit status was %d)",
			       config.report_path, strerror(-rc), result.exit_status);
			if (exit_status == 0)
				exit_status = EXIT_INTERNAL;
		}
	}
	if (!exec_errno && !b.count && b.skipped)
		warnf("progress %s: never read while the job ran (%" PRIu64 " samples skipped): "
		      "it was not regulated", config.progress.spec, b.skipped);
	if (!config.quiet && !exec_errno) {
		const struct manners_controller_stats *s = &b.controller.stats;
		char why[160], forgiven[64] = "";
		summary_suspensions(&b, why, sizeof why);
		if (s->forgiven)
			snprintf(forgiven, sizeof forgiven, " (%" PRIu64 " forgiven: the machine was quiet)",
				 s->forgiven);
		errorf("benice: ran %.1f s, idle %.1f s, suspended %.1f s (%s); %" PRIu64
		       " testpoints, judged %" PRIu64 " good, %" PRIu64 " poor%s%s",
		       result.run_s, (double)b.idle_ns / 1e9, (double)b.suspended_ns / 1e9, why,
		       s->testpoints, s->judged_good, s->judged_poor, forgiven,
		       b.targets.restored ? "; started from the kept target" : "");
	}
	if (!exec_errno && result.signal)
		die_of_signal(result.signal, WIFSIGNALED(job_status) && WCOREDUMP(job_status));
	return exit_status;
}
