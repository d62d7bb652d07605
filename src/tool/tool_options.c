/*
 * tool_options.c - the one table of `discnice run` options (CONVENTIONS §5).
 * Environment variables give defaults; flags override them.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/rate.h"
#include "common/segment.h"
#include "policy/policy.h"
#include "policy/scavenger.h"
#include "tool/tool_manners.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"

bool decimal_number(const char *text, double *out)
{
	const char *p = text;
	size_t digits = 0;
	while (*p >= '0' && *p <= '9')
		p++, digits++;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			digits++;
	if (!digits)
		return false;
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!(*p >= '0' && *p <= '9'))
			return false;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p)
		return false;
	errno = 0;
	double v = strtod(text, NULL);
	if (errno || !(v <= 1e300))
		return false;
	*out = v;
	return true;
}

bool whole_number(const char *text, unsigned long long *out)
{
	if (!(*text >= '0' && *text <= '9'))
		return false;
	for (const char *p = text; *p; p++)
		if (!(*p >= '0' && *p <= '9'))
			return false;
	errno = 0;
	unsigned long long v = strtoull(text, NULL, 10);
	if (errno)
		return false;
	*out = v;
	return true;
}

enum option_id {
	OPT_CACHE, OPT_CACHE_BACKEND, OPT_CHUNK, OPT_CLASS, OPT_EXEC, OPT_FEEDBACK, OPT_HELP, OPT_MANNERS_BOOTSTRAP,
	OPT_MANNERS_CALIBRATION, OPT_MANNERS_DISK_RISE,
	OPT_MANNERS_LIMIT, OPT_MANNERS_PERSIST, OPT_MANNERS_POLL_BUSY, OPT_MANNERS_PROBATION,
	OPT_MANNERS_SUSPEND_INITIAL,
	OPT_MANNERS_QUIET,
	OPT_MANNERS_STATE_FILE, OPT_NET_POLICY, OPT_NET_RATE,
	OPT_NET_UNIX, OPT_NET_YIELD_ABOVE, OPT_NET_YIELD_BELOW,
	OPT_POLICY, OPT_PREDICT, OPT_RECV_RATE, OPT_SEND_RATE,
	OPT_PREDICT_UNCAPPED, OPT_PROGRESS, OPT_QUIET, OPT_RATE, OPT_READ_RATE, OPT_REPORT, OPT_TRACE, OPT_WINDOW, OPT_WRITEBACK,
	OPT_WRITE_RATE, OPT_YIELD_ABOVE, OPT_YIELD_BELOW,
	OPT_WINDOW_POLICY,
};

struct option_spec {
	enum option_id id;
	const char *name;      /* long flag, without "--"                   */
	int short_name;        /* 0 = none                                  */
	const char *arg;       /* NULL = takes no value                     */
	const char *env;       /* environment default, NULL = none          */
	const char *fallback;  /* default, as shown in --help                */
	const char *help;
};

/* Sorted by long name, as in curl's tool. */
static const struct option_spec options[] = {
	{ OPT_CACHE, "cache", 0, "keep|drop", "DISCNICE_CACHE", "keep",
	  "drop: pages the job read in from disk (not those cached before it)\n"
	  "and pages it wrote, once paced writeback has sent them, are dropped\n"
	  "from the page cache behind it, so it does not push other programs'\n"
	  "files out; files it maps or reads twice are kept; keep: the kernel\n"
	  "decides, as for any program" },
	{ OPT_CACHE_BACKEND, "cache-backend", 0, "B", "DISCNICE_CACHE_BACKEND", "auto",
	  "cache detector: auto, probe (timed one-byte reads, DiscNice 4.2),\n"
	  "cachestat (Linux >= 6.5) or mincore; auto uses the best one that is\n"
	  "exact for each file and falls back to probe" },
	{ OPT_CHUNK, "chunk", 0, "SIZE", "DISCNICE_CHUNK", "cap x window / 8, 16KiB..1MiB",
	  "cut throttled reads and writes into pieces of at most SIZE bytes" },
	{ OPT_CLASS, "class", 'c', "NAME", "DISCNICE_CLASS", "one class per run",
	  "share one budget with every other run of class NAME" },
	{ OPT_EXEC, "exec", 0, NULL, NULL, NULL,
	  "no supervisor: discnice becomes COMMAND (the same process, as with\n"
	  "nice and ionice), so starting the job costs one exec and its parent\n"
	  "(the shell, systemd) sees the job itself; the agent alone regulates it\n"
	  "(--feedback off) and 'discnice set' still changes its caps; no status\n"
	  "line, summary or report; not with --report, --policy yield or manners,\n"
	  "--feedback on, or a program the agent cannot load into (static, setuid)" },
	{ OPT_FEEDBACK, "feedback", 0, "on|off", "DISCNICE_FEEDBACK", "on",
	  "on: every 20 ms, charge the I/O the kernel counted for the job\n"
	  "beyond the agent's predictions (mmap, io_uring, O_DIRECT, static\n"
	  "programs) - and, under a network cap, the TCP bytes its sockets\n"
	  "moved beyond the agent's count (sock_diag; not UDP) - and hold the\n"
	  "job's running threads (ptrace; SIGSTOP where ptrace is refused)\n"
	  "while it is over its cap;\n"
	  "off: the agent's gray-box predictions alone (DiscNice as published)" },
	{ OPT_HELP, "help", 'h', NULL, NULL, NULL, "show this help and exit" },
	{ OPT_MANNERS_BOOTSTRAP, "manners-bootstrap", 0, "N", "DISCNICE_MANNERS_BOOTSTRAP", "40",
	  "--policy manners: testpoints (one per 250 ms of I/O) that only\n"
	  "calibrate the target before the first judgment (MS Manners 4.3)" },
	{ OPT_MANNERS_CALIBRATION, "manners-calibration", 0, "quick|paper",
	  "DISCNICE_MANNERS_CALIBRATION", "quick",
	  "--policy manners: paper: the target is the average of every testpoint's\n"
	  "rate (MS Manners 4.3); quick: also raised at once when the job beats it\n"
	  "at most of its last 20 testpoints (a target calibrated under load)" },
	{ OPT_MANNERS_DISK_RISE, "manners-disk-rise", 0, "on|off", "DISCNICE_MANNERS_DISK_RISE", "on",
	  "--policy manners: when others' disk traffic rises (/proc/diskstats less\n"
	  "the job's own), the sign test begins a new sample, so that a rival on\n"
	  "the disk is judged in 5 testpoints; it never causes a suspension\n"
	  "itself; off: the samples run on" },
	{ OPT_MANNERS_LIMIT, "manners-limit", 0, "SECONDS", "DISCNICE_MANNERS_LIMIT", "60",
	  "--policy manners: the longest suspension; each poor judgment doubles\n"
	  "it from 4 s up to this, a good one resets it (MS Manners 4.1)" },
	{ OPT_MANNERS_SUSPEND_INITIAL, "manners-suspend-initial", 0, "SECONDS",
	  "DISCNICE_MANNERS_SUSPEND_INITIAL", "4",
	  "--policy manners: the first suspension (MS Manners 4.1; the paper's\n"
	  "is 1 s); at most --manners-limit" },
	{ OPT_MANNERS_PERSIST, "manners-persist", 0, "on|off", "DISCNICE_MANNERS_PERSIST", "on",
	  "--policy manners: on: start from the target an earlier run of this\n"
	  "program calibrated (no bootstrap, no probation) and keep it for the\n"
	  "next, in $XDG_STATE_HOME/discnice/manners (discnice(1) FILES); off:\n"
	  "calibrate afresh and keep nothing" },
	{ OPT_MANNERS_POLL_BUSY, "manners-poll-busy", 0, "SECONDS", "DISCNICE_MANNERS_POLL_BUSY", "0.05",
	  "--policy manners: while others use a CPU (a quarter of one or more,\n"
	  "the job's own time left out) a testpoint every SECONDS instead of\n"
	  "every 0.25 s, so that a shared CPU is judged in a quarter second; it\n"
	  "never causes a suspension itself; 0: every 0.25 s always" },
	{ OPT_MANNERS_PROBATION, "manners-probation", 0, "SECONDS", "DISCNICE_MANNERS_PROBATION", "0",
	  "--policy manners: for this long from the start the job runs at most a\n"
	  "quarter of the time, in case the target was calibrated under load (4.3)" },
	{ OPT_MANNERS_QUIET, "manners-quiet", 0, "SECONDS", "DISCNICE_MANNERS_QUIET", "1",
	  "--policy manners: a suspension ends early once the machine's CPUs and\n"
	  "disks (/proc/stat, /proc/diskstats) have been quiet this long, and a\n"
	  "poor judgment after that long with nobody else on them (the job's own\n"
	  "CPU time left out) orders none; 0: the paper's rule" },
	{ OPT_MANNERS_STATE_FILE, "manners-state-file", 0, "FILE", "DISCNICE_MANNERS_STATE_FILE",
	  "named after the program",
	  "--policy manners: keep the target in FILE (manners(3) format)" },
	{ OPT_NET_POLICY, "net-policy", 0, "cap|scavenger[=MS]", "DISCNICE_NET_POLICY", "cap",
	  "cap: the network caps alone; scavenger: no number needed - the job's\n"
	  "sends are paced so that the queueing delay its TCP connections see\n"
	  "(TCP_INFO rtt - min_rtt) stays under MS milliseconds (25-100,\n"
	  "default 50; LEDBAT, RFC 6817): it uses a free link and gives way to\n"
	  "other traffic; network caps given too still hold" },
	{ OPT_NET_RATE, "net-rate", 0, "RATE", "DISCNICE_NET_RATE", "none",
	  "cap on what the job's sockets send plus receive together (TCP and\n"
	  "UDP over IPv4 and IPv6; a window of its own, independent of the disk\n"
	  "caps: rate-windows 5)" },
	{ OPT_NET_UNIX, "net-unix", 0, "on|off", "DISCNICE_NET_UNIX", "off",
	  "on: Unix-domain sockets count as network under the --net, --send and\n"
	  "--recv caps; off: they are local IPC (X11, D-Bus, the journal) and\n"
	  "pass unpoliced" },
	{ OPT_NET_YIELD_ABOVE, "net-yield-above", 0, "RATE", "DISCNICE_NET_YIELD_ABOVE", "256KiB/s",
	  "--policy yield with network caps: the machine's other network\n"
	  "traffic (/proc/net/dev less the job's) above RATE holds the job at\n"
	  "its network caps" },
	{ OPT_NET_YIELD_BELOW, "net-yield-below", 0, "RATE", "DISCNICE_NET_YIELD_BELOW", "64KiB/s",
	  "--policy yield with network caps: others' traffic at or below\n"
	  "RATE for 1 s sets the network free again" },
	{ OPT_POLICY, "policy", 0, "cap|yield|manners", "DISCNICE_POLICY", "cap",
	  "cap: the caps hold all the time; yield: the job runs free while the\n"
	  "disks are otherwise idle and is held at its caps while other processes\n"
	  "(of this user; all, for root) read from them - and its network caps\n"
	  "likewise while the machine has other network traffic; manners: the job is\n"
	  "suspended, at its next file read or write, while its own file I/O runs\n"
	  "slower than the rate it calibrated alone (MS Manners; no cap needed,\n"
	  "caps given too still hold)" },
	{ OPT_PREDICT, "predict", 0, "MODE", "DISCNICE_PREDICT", "all",
	  "which gray-box predictors run (DiscNice Table 5): none (police file\n"
	  "I/O), cache, readahead, cache+readahead, all (adds delayed writes)" },
	{ OPT_PREDICT_UNCAPPED, "predict-uncapped", 0, "on|off", "DISCNICE_PREDICT_UNCAPPED",
	  "off (on with --trace or --policy yield)",
	  "on: the predictors run while no cap is set too, so that the report's\n"
	  "predicted_* bytes cover the whole job; off: while the class has no cap\n"
	  "(--rate inf, or lifted by `discnice set`) the agent does nothing per\n"
	  "call or file, and classifies a file when a cap arrives" },
	{ OPT_PROGRESS, "progress", 0, NULL, NULL, NULL,
	  "a status line on a terminal while the job runs (rates, cap, time\n"
	  "slept), redrawn over the job's own output there: for jobs that print\n"
	  "nothing" },
	{ OPT_QUIET, "quiet", 'q', NULL, NULL, NULL,
	  "no status line and no summary at exit" },
	{ OPT_RATE, "rate", 'r', "RATE", "DISCNICE_RATE", "none",
	  "cap on disk reads plus writes together" },
	{ OPT_READ_RATE, "read-rate", 0, "RATE", "DISCNICE_READ_RATE", "none",
	  "cap on disk reads" },
	{ OPT_RECV_RATE, "recv-rate", 0, "RATE", "DISCNICE_RECV_RATE", "none",
	  "cap on what the job's sockets receive" },
	{ OPT_REPORT, "report", 0, "FILE", NULL, NULL,
	  "write a JSON report to FILE when the job ends (a regular file; checked\n"
	  "before the job starts; if it still fails, exit 125 for a job that succeeded)" },
	{ OPT_SEND_RATE, "send-rate", 0, "RATE", "DISCNICE_SEND_RATE", "none",
	  "cap on what the job's sockets send" },
	{ OPT_TRACE, "trace", 0, "FILE", NULL, NULL,
	  "append one line per predicted disk I/O to FILE:\n"
	  "seconds pid operation file-bytes predicted-bytes delay-seconds\n"
	  "(lines a full disk refuses are counted: report trace_lost_lines, a warning)" },
	{ OPT_WINDOW, "window", 0, "SECONDS", "DISCNICE_WINDOW", "1",
	  "length N of the sliding rate window (DiscNice 5.3)" },
	{ OPT_WINDOW_POLICY, "window-policy", 0, "sliding|paper", "DISCNICE_WINDOW_POLICY",
	  "sliding",
	  "the rule both windows (disk and network) police by: sliding = the\n"
	  "window of N seconds above; paper = rate-windows 3.2's own: the last\n"
	  "<= 100 operations within 5 s, sleep Bw/R - Tw, none under 1 ms,\n"
	  "pieces of cap x 100 ms (a class setting, for comparing the two)" },
	{ OPT_WRITEBACK, "writeback", 0, "MODE", "DISCNICE_WRITEBACK", "paced",
	  "paced or kernel.  Under a write or total cap, paced: the agent starts\n"
	  "the writeback of what the job dirtied a quarter second of the cap behind\n"
	  "it, so the disk writes at the cap; kernel: the kernel's flusher writes\n"
	  "it, 30 s later and at full speed (the job is held at the cap either way)" },
	{ OPT_WRITE_RATE, "write-rate", 0, "RATE", "DISCNICE_WRITE_RATE", "none",
	  "cap on disk writes (pages newly dirtied)" },
	{ OPT_YIELD_ABOVE, "yield-above", 0, "RATE", "DISCNICE_YIELD_ABOVE", "1MiB/s",
	  "--policy yield: others' disk reads above RATE hold the job at its caps" },
	{ OPT_YIELD_BELOW, "yield-below", 0, "RATE", "DISCNICE_YIELD_BELOW", "256KiB/s",
	  "--policy yield: others' reads at or below RATE for 1 s set it free again" },
};
#define N_OPTIONS (sizeof options / sizeof options[0])
_Static_assert(N_OPTIONS <= COMMAND_OPTIONS_MAX, "raise COMMAND_OPTIONS_MAX (tool_msg.h)");

static const struct { const char *name; uint32_t mask; } predict_modes[] = {
	{ "none", 0 },
	{ "cache", DN_PREDICT_CACHE },
	{ "readahead", DN_PREDICT_READAHEAD },
	{ "cache+readahead", DN_PREDICT_CACHE | DN_PREDICT_READAHEAD },
	{ "all", DN_PREDICT_ALL },
};

static const struct { const char *name; uint32_t backend; } backends[] = {
	{ "auto", DN_CACHE_AUTO },
	{ "probe", DN_CACHE_PROBE },
	{ "cachestat", DN_CACHE_CACHESTAT },
	{ "mincore", DN_CACHE_MINCORE },
};

/* What RATE means, for run's and attach's --help; which caps each needs. */
static void rate_help(bool run)
{
	printf("RATE is bytes per second: a number (fractions allowed) with an optional\n"
	       "unit k, M, G, T, P or E, optional \"i\", \"B\" and \"/s\".  k, M, G... are\n"
	       "powers of 1000; Ki, Mi, Gi... powers of 1024.  5M = 5,000,000 B/s;\n"
	       "5MiB/s = 5,242,880 B/s; 500k = 500,000 B/s; \"inf\" = no cap.\n");
	if (run)
		printf("At least one cap is required (--rate, --read-rate, --write-rate,\n"
		       "--net-rate, --send-rate or --recv-rate), or --policy manners or\n"
		       "--net-policy scavenger, which need no number.  Disk and network caps\n"
		       "are independent budgets.\n\n");
	else
		printf("At least one cap is required: --rate, --read-rate or --write-rate.\n\n");
}

static void option_help(const struct option_spec *o)
{
	help_option_print(o->short_name, o->name, o->arg, o->help, 28);
	if (o->fallback || o->env) {
		char note[512];
		snprintf(note, sizeof note, "[%s%s%s%s%s]", o->fallback ? "default: " : "",
			 o->fallback ? o->fallback : "", o->fallback && o->env ? "; " : "",
			 o->env ? "env: " : "", o->env ? o->env : "");
		printf("\n  %-28s", "");
		help_wrap(note, 30, 30);
	}
	putchar('\n');
}

void run_options_help(void)
{
	printf("Usage: discnice run [OPTION]... [--] COMMAND [ARG]...\n"
	       "Run COMMAND with its real disk I/O held under a cap, at user level:\n"
	       "no root, no kernel change, no change to the program.\n\n");
	for (size_t i = 0; i < N_OPTIONS; i++)
		option_help(&options[i]);
	putchar('\n');
	rate_help(true);
	printf("Exit status: the job's own; 128+N if it died of signal N; 2 for bad\n"
	       "options (the job is not started); 125 if discnice itself failed;\n"
	       "126 if COMMAND cannot be executed; 127 if it is not found.\n\n"
	       "Examples:\n"
	       "  discnice run --rate 5MiB/s -- rsync -a ~/photos /backup\n"
	       "  discnice run --read-rate 20M --write-rate 5M -- tar czf /backup/home.tgz ~\n"
	       "  discnice run --class backup --rate 10M --report r.json -- ./nightly.sh\n\n"
	       "See discnice(1) for the model, the report fields and the limits.\n");
}

static bool is_backend(const char *value)
{
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
		if (strcmp(value, backends[i].name) == 0)
			return true;
	return false;
}

static void set_rate(uint64_t *field, const char *value, const char *source, struct run_config *c)
{
	int rc = rate_parse(value, field);
	if (rc < 0)
		usage_error("%s '%s': %s", source, value, rate_error(rc));
	c->cap_given = true;
}

static void apply(struct run_config *c, enum option_id id, const char *value,
		  const char *source)
{
	switch (id) {
	case OPT_RATE:
		set_rate(&c->caps.total_bps, value, source, c);
		c->total_given = true;
		break;
	case OPT_READ_RATE:
		set_rate(&c->caps.read_bps, value, source, c);
		c->read_given = true;
		break;
	case OPT_WRITE_RATE:
		set_rate(&c->caps.write_bps, value, source, c);
		c->write_given = true;
		break;
	case OPT_NET_RATE:
		set_rate(&c->net_caps.total_bps, value, source, c);
		c->net_total_given = true;
		break;
	case OPT_RECV_RATE:
		set_rate(&c->net_caps.read_bps, value, source, c);
		c->net_recv_given = true;
		break;
	case OPT_SEND_RATE:
		set_rate(&c->net_caps.write_bps, value, source, c);
		c->net_send_given = true;
		break;
	case OPT_NET_POLICY: {
		int rc = net_policy_parse(value, &c->scavenger_target_ns);
		if (rc == -ERANGE)
			usage_error("%s '%s': the scavenger's target is 25 to 100 ms (RFC 6817 "
				    "allows at most 100)", source, value);
		if (rc < 0)
			usage_error("%s '%s': expected cap, scavenger or scavenger=MS (e.g. "
				    "scavenger=50)", source, value);
		c->net_policy_given = true;
		break;
	}
	case OPT_WINDOW_POLICY:
		if (window_policy_parse(value, &c->window_policy) < 0)
			usage_error("%s '%s': expected sliding or paper", source, value);
		c->window_policy_given = true;
		break;
	case OPT_NET_UNIX:
		c->net_unix = on_off_arg(source, value);
		break;
	case OPT_CLASS:
		if (!segment_name_ok(value))
			usage_error("%s '%s': " SEGMENT_NAME_RULE, source, value);
		snprintf(c->class_name, sizeof c->class_name, "%s", value);
		c->class_given = true;
		break;
	case OPT_WINDOW: {
		double s;
		if (!decimal_number(value, &s) || !(s >= 0.01 && s <= 60))
			usage_error("%s '%s': the window is a number of seconds from 0.01 to 60",
				    source, value);
		/* A whole number of ns per bucket keeps the window arithmetic exact. */
		uint64_t bucket = (uint64_t)(s * 1e9 / DN_WINDOW_BUCKETS + 0.5);
		c->window_ns = bucket * DN_WINDOW_BUCKETS;
		break;
	}
	case OPT_CHUNK: {
		int rc = size_parse(value, &c->chunk_bytes);
		if (rc == -ERANGE)
			usage_error("%s '%s': too large for a size", source, value);
		if (rc < 0 || c->chunk_bytes < 4096)
			usage_error("%s '%s': the chunk is a size of at least 4096 bytes (e.g. 256k, "
				    "1MiB)", source, value);
		break;
	}
	case OPT_PREDICT:
		for (size_t i = 0; i < sizeof predict_modes / sizeof predict_modes[0]; i++)
			if (strcmp(value, predict_modes[i].name) == 0) {
				c->predict_mask = predict_modes[i].mask;
				return;
			}
		usage_error("%s '%s': expected none, cache, readahead, cache+readahead or all",
			    source, value);
	case OPT_CACHE_BACKEND:
		for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
			if (strcmp(value, backends[i].name) == 0) {
				c->cache_backend = backends[i].backend;
				return;
			}
		usage_error("%s '%s': expected auto, probe, cachestat or mincore", source, value);
	case OPT_REPORT:
		if (!*value)
			usage_error("%s: empty file name", source);
		c->report_path = value;
		break;
	case OPT_TRACE:
		if (!*value || strlen(value) >= DN_PATH_MAX)
			usage_error("%s '%s': the trace path must be 1-%u bytes", source, value,
				    DN_PATH_MAX - 1);
		c->trace_path = value;
		break;
	case OPT_PROGRESS:
		c->progress = true;
		break;
	case OPT_QUIET:
		c->quiet = true;
		break;
	case OPT_POLICY:
		c->yield = c->manners = false;
		if (strcmp(value, "yield") == 0)
			c->yield = true;
		else if (strcmp(value, "manners") == 0)
			c->manners = true;
		else if (strcmp(value, "cap") != 0)
			usage_error("%s '%s': expected cap, yield or manners", source, value);
		break;
	case OPT_MANNERS_BOOTSTRAP: {
		unsigned long long n;
		if (!whole_number(value, &n) || n < 1 || n > 100000)
			usage_error("%s '%s': a number of testpoints from 1 to 100000", source, value);
		c->manners_bootstrap = (uint32_t)n;
		break;
	}
	case OPT_MANNERS_CALIBRATION:
		if (strcmp(value, "quick") == 0)
			c->manners_paper_calibration = false;
		else if (strcmp(value, "paper") == 0)
			c->manners_paper_calibration = true;
		else
			usage_error("%s '%s': expected quick or paper", source, value);
		break;
	case OPT_MANNERS_PERSIST:
		c->manners_persist = on_off_arg(source, value);
		break;
	case OPT_MANNERS_DISK_RISE:
		c->manners_disk_rise = on_off_arg(source, value);
		break;
	case OPT_MANNERS_STATE_FILE:
		if (!*value)
			usage_error("%s: empty file name", source);
		c->manners_state_file = value;
		break;
	case OPT_MANNERS_LIMIT:
	case OPT_MANNERS_SUSPEND_INITIAL:
	case OPT_MANNERS_PROBATION:
	case OPT_MANNERS_POLL_BUSY:
	case OPT_MANNERS_QUIET: {
		double s;
		bool number = decimal_number(value, &s);
		/* The least: a limit of a second, a first suspension of 10 ms. */
		double least = id == OPT_MANNERS_LIMIT ? 1 : id == OPT_MANNERS_SUSPEND_INITIAL ? 0.01 : 0;
		if (id == OPT_MANNERS_POLL_BUSY && !(number && (s == 0 || (s >= 0.001 && s <= 0.25))))
			usage_error("%s '%s': 0 (off), or from 0.001 to 0.25 seconds", source, value);
		if (!number || !(s >= least && s <= 86400 * 7))
			usage_error("%s '%s': a number of seconds from %g to 604800", source, value,
				    least);
		uint64_t *field = id == OPT_MANNERS_LIMIT ? &c->manners_limit_ns
				  : id == OPT_MANNERS_SUSPEND_INITIAL ? &c->manners_initial_ns
				  : id == OPT_MANNERS_QUIET ? &c->manners_quiet_ns
				  : id == OPT_MANNERS_POLL_BUSY ? &c->manners_busy_ns
								: &c->manners_probation_ns;
		*field = (uint64_t)(s * 1e9);
		break;
	}
	case OPT_YIELD_ABOVE:
	case OPT_YIELD_BELOW:
	case OPT_NET_YIELD_ABOVE:
	case OPT_NET_YIELD_BELOW: {
		uint64_t *field = id == OPT_YIELD_ABOVE ? &c->yield_above_bps
				  : id == OPT_YIELD_BELOW ? &c->yield_below_bps
				  : id == OPT_NET_YIELD_ABOVE ? &c->net_yield_above_bps
							      : &c->net_yield_below_bps;
		int rc = rate_parse(value, field);
		if (rc == -EILSEQ)
			usage_error("%s '%s': %s", source, value, rate_error(rc));
		if (rc < 0 || *field == 0)
			usage_error("%s '%s': not a rate (expected e.g. 1MiB/s or 500k)", source, value);
		break;
	}
	case OPT_CACHE:
		if (strcmp(value, "keep") == 0) {
			c->cache_drop = false;
		} else if (strcmp(value, "drop") == 0) {
			c->cache_drop = true;
		} else if (source[0] == '-' && is_backend(value)) {
			/* Before --cache existed, "--cache probe" was an
			 * abbreviation of --cache-backend: scripts keep working. */
			warnf("%s '%s' taken as --cache-backend %s (--cache is keep or drop; "
			      "write --cache-backend in full)", source, value, value);
			apply(c, OPT_CACHE_BACKEND, value, "--cache-backend");
		} else {
			usage_error("%s '%s': expected keep or drop", source, value);
		}
		break;
	case OPT_WRITEBACK:
		if (strcmp(value, "paced") == 0)
			c->writeback_kernel = false;
		else if (strcmp(value, "kernel") == 0)
			c->writeback_kernel = true;
		else
			usage_error("%s '%s': expected paced or kernel", source, value);
		break;
	case OPT_PREDICT_UNCAPPED:
		c->predict_uncapped = on_off_arg(source, value);
		break;
	case OPT_FEEDBACK:
		c->feedback = on_off_arg(source, value);
		c->feedback_given = true;
		break;
	case OPT_EXEC:
		c->exec_in_place = true;
		break;
	case OPT_HELP:
		run_options_help();
		exit(0);
	}
}

/* --policy yield's thresholds when not given (B/s). */
enum {
	YIELD_ABOVE_DEFAULT = 1u << 20,
	YIELD_BELOW_DEFAULT = 256u << 10,
	NET_YIELD_ABOVE_DEFAULT = 256u << 10,
	NET_YIELD_BELOW_DEFAULT = 64u << 10,
};

/* --[net-]yield-below above --[net-]yield-above: refused, both values
 * named, and said which one the user did not give (its default). */
static void yield_pair_check(const char *net, uint64_t below, uint64_t above, uint64_t below_default)
{
	if (below <= above)
		return;
	char b[24], a[24];
	cap_format(b, sizeof b, below);
	cap_format(a, sizeof a, above);
	usage_error("--%syield-below (%s/s%s) must not be above --%syield-above (%s/s): "
		    "the job is held above one and set free at or below the other", net, b,
		    below == below_default ? ", its default" : "", net, a);
}

/* The policy an option belongs to, or NULL for one of every policy. */
static const char *policy_of_option(enum option_id id)
{
	switch (id) {
	case OPT_MANNERS_BOOTSTRAP:
	case OPT_MANNERS_CALIBRATION:
	case OPT_MANNERS_DISK_RISE:
	case OPT_MANNERS_LIMIT:
	case OPT_MANNERS_PERSIST:
	case OPT_MANNERS_POLL_BUSY:
	case OPT_MANNERS_PROBATION:
	case OPT_MANNERS_SUSPEND_INITIAL:
	case OPT_MANNERS_QUIET:
	case OPT_MANNERS_STATE_FILE:
		return "manners";
	case OPT_YIELD_ABOVE:
	case OPT_YIELD_BELOW:
	case OPT_NET_YIELD_ABOVE:
	case OPT_NET_YIELD_BELOW:
		return "yield";
	default:
		return NULL;
	}
}

void run_options_parse(struct run_config *c, int argc, char **argv)
{
	memset(c, 0, sizeof *c);
	c->window_ns = NS_PER_SEC;
	c->predict_mask = DN_PREDICT_ALL;
	c->cache_backend = DN_CACHE_AUTO;
	c->feedback = true;
	c->yield_above_bps = YIELD_ABOVE_DEFAULT;
	c->yield_below_bps = YIELD_BELOW_DEFAULT;
	c->net_yield_above_bps = NET_YIELD_ABOVE_DEFAULT;
	c->net_yield_below_bps = NET_YIELD_BELOW_DEFAULT;
	c->manners_bootstrap = 40;
	c->manners_limit_ns = 60 * NS_PER_SEC;
	c->manners_quiet_ns = NS_PER_SEC;
	c->manners_busy_ns = MANNERS_RUN_BUSY_DEFAULT;
	c->manners_persist = true;
	c->manners_disk_rise = true;

	/* The table as the shared parser wants it (tool_msg.c). */
	struct command_option flat[N_OPTIONS];
	for (size_t i = 0; i < N_OPTIONS; i++)
		flat[i] = (struct command_option){ options[i].name, options[i].short_name,
						   options[i].arg, options[i].help };
	/* The environment's defaults first, so that the command line wins -
	 * and a default the command line replaces is not even read: a stale
	 * DISCNICE_RATE in a profile cannot refuse 'run --rate 1M'. */
	bool on_command_line[N_OPTIONS] = { false };
	optind = 1;
	int i;
	while ((i = command_option_next("run", flat, N_OPTIONS, true, argc, argv)) >= 0)
		on_command_line[i] = true;
	bool feedback_from_env = false;
	for (size_t k = 0; k < N_OPTIONS; k++) {
		const char *value = options[k].env && !on_command_line[k] ? getenv(options[k].env) : NULL;
		if (value && *value) {
			apply(c, options[k].id, value, options[k].env);
			feedback_from_env |= options[k].id == OPT_FEEDBACK;
		}
	}
	optind = 1;
	while ((i = command_option_next("run", flat, N_OPTIONS, true, argc, argv)) >= 0) {
		char source[48];
		snprintf(source, sizeof source, "--%s", options[i].name);
		apply(c, options[i].id, optarg, source);
	}
	if (optind >= argc)
		usage_error("no command given (usage: discnice run [OPTION]... [--] COMMAND [ARG]...)");
	if (!c->cap_given && !c->manners && !c->scavenger_target_ns)
		usage_error("no cap given: use --rate, --read-rate, --write-rate, --net-rate, "
			    "--send-rate or --recv-rate (e.g. --rate 5MiB/s, or --rate inf to "
			    "measure without a cap), --policy manners or --net-policy scavenger");
	if (c->exec_in_place) {
		/* What needs a process beside the job (tool_run.c): refused,
		 * not silently dropped. */
		if (c->report_path)
			usage_error("--exec: no report without a supervisor to write it "
				    "(drop --exec, or --report)");
		if (c->yield || c->manners)
			usage_error("--exec: --policy %s needs the supervisor, which watches the "
				    "machine (drop --exec)", c->yield ? "yield" : "manners");
		if (c->feedback_given && c->feedback)
			usage_error("--exec: measured feedback (%s) needs the supervisor "
				    "(drop --exec, or use --feedback off)",
				    feedback_from_env ? "DISCNICE_FEEDBACK=on in the environment"
						      : "--feedback on");
		c->feedback = false;
		c->quiet = true;
	}
	/* An option of a policy not in force would do nothing, silently:
	 * refused, as --exec refuses what it cannot do.  Only the command
	 * line's: a profile may set DISCNICE_MANNERS_* for the runs that use
	 * the policy. */
	for (size_t k = 0; k < N_OPTIONS; k++) {
		if (!on_command_line[k])
			continue;
		const char *policy = policy_of_option(options[k].id);
		if (policy && !(strcmp(policy, "manners") == 0 ? c->manners : c->yield))
			usage_error("--%s: only --policy %s uses it (add --policy %s, or drop "
				    "--%s)", options[k].name, policy, policy, options[k].name);
	}
	if (c->manners_initial_ns > c->manners_limit_ns)
		usage_error("--manners-suspend-initial must not be above --manners-limit");
	/* A piece is charged and slept for whole, then moved at disk speed:
	 * one larger than the window's budget at the cap reaches the disk as
	 * a burst (--chunk 1G at 16MiB/s: nothing for 13 s, then 12x the cap
	 * in one second).  Allowed - the average holds - but said. */
	uint64_t smallest = caps_smallest(&c->caps);
	unsigned __int128 budget = (unsigned __int128)smallest * c->window_ns / NS_PER_SEC;
	if (c->chunk_bytes && smallest && c->chunk_bytes > budget) {
		char chunk[24], room[24];
		/* In the base each was most likely given in (1G: 1.00 GB). */
		cap_format(chunk, sizeof chunk, c->chunk_bytes);
		cap_format(room, sizeof room, (uint64_t)budget);
		warnf("--chunk %s is more than one window of the cap (%s): each piece is slept for "
		      "whole and then reaches the disk at full speed, a burst", chunk, room);
	}
	yield_pair_check("", c->yield_below_bps, c->yield_above_bps, YIELD_BELOW_DEFAULT);
	yield_pair_check("net-", c->net_yield_below_bps, c->net_yield_above_bps,
			 NET_YIELD_BELOW_DEFAULT);
	c->command = argv + optind;
}

/* ---- discnice attach: the options of run that mean something without an
 * agent, from the same table ------------------------------------------- */

/* The network caps are in the table only to be refused with a reason. */
static const enum option_id attach_ids[] = {
	OPT_CLASS, OPT_HELP, OPT_NET_RATE, OPT_QUIET, OPT_RATE, OPT_READ_RATE, OPT_RECV_RATE,
	OPT_SEND_RATE, OPT_WINDOW, OPT_WRITE_RATE,
};
#define N_ATTACH_OPTIONS (sizeof attach_ids / sizeof attach_ids[0])

static const struct option_spec *option_of(enum option_id id)
{
	for (size_t i = 0; i < N_OPTIONS; i++)
		if (options[i].id == id)
			return &options[i];
	return NULL;
}

void attach_options_help(void)
{
	printf("Usage: discnice attach [OPTION]... PID...\n"
	       "Regulate processes that are already running, with their threads and every\n"
	       "child they start from now on, until they exit or discnice is interrupted.\n\n"
	       "No agent can be preloaded into a running process, so attach regulates from\n"
	       "outside only.  Every 1-20 ms it reads the kernel's count of the processes'\n"
	       "disk I/O (read_bytes and write_bytes in /proc/PID/io), charges it to the\n"
	       "class's rate window, and holds their running threads while they are over\n"
	       "the cap (ptrace stops; SIGSTOP where ptrace is refused).  Unlike 'run':\n"
	       "  - only bytes the kernel has already counted are charged: no gray-box\n"
	       "    prediction, so the disk sees bursts (a readahead window, a tick's worth\n"
	       "    of I/O) that are paid for afterwards; the average is the cap;\n"
	       "  - pacing is coarser: holds of 5-250 ms, not sleeps before each call;\n"
	       "  - a write cap counts pages as they are dirtied; there is no\n"
	       "    paced writeback: the kernel's flusher writes them later, at its pace.\n\n");
	/* Not the network caps: they are there only to be refused. */
	for (size_t i = 0; i < N_ATTACH_OPTIONS; i++)
		if (attach_ids[i] != OPT_NET_RATE && attach_ids[i] != OPT_RECV_RATE &&
		    attach_ids[i] != OPT_SEND_RATE)
			option_help(option_of(attach_ids[i]));
	putchar('\n');
	rate_help(false);
	printf("No network cap: sockets are policed by the agent, which cannot be loaded\n"
	       "into a running process (start the job with 'discnice run --net-rate').\n\n"
	       "Each PID must be a process of yours (for root: any but init and kernel\n"
	       "threads), not discnice, and not an ancestor of discnice (your shell).\n"
	       "Every PID is checked before any process is touched.  Without --class the\n"
	       "class is named attach-PID, PID being discnice's own.\n\n"
	       "Ctrl-C (SIGINT), SIGTERM and SIGHUP detach: every hold is let go and the\n"
	       "processes run on, unregulated.  If discnice is killed, even with SIGKILL,\n"
	       "the kernel ends its ptrace holds and a guard process continues whatever it\n"
	       "held with SIGSTOP: nothing is left stopped.  A process its user stopped\n"
	       "(Ctrl-Z, kill -STOP) is neither held nor continued.  Ctrl-Z to discnice\n"
	       "itself lets every hold go and stops it; the processes run free until it\n"
	       "is continued (fg), and what they did meanwhile is not charged.\n\n"
	       "Exit status: 0 when every process has exited or discnice was told to\n"
	       "detach; 2 for bad options or PIDs (no process is touched); 125 if\n"
	       "discnice itself failed.\n\n"
	       "Examples:\n"
	       "  discnice attach --rate 10MiB/s $(pgrep -x rsync)\n"
	       "  discnice attach --class backup --read-rate 20M 4242\n"
	       "  discnice set attach-5120 --rate 5M    # while it runs: see 'discnice ls'\n\n"
	       "See discnice(1), ATTACHING TO A RUNNING JOB.\n");
}

/* attach's table in command_option_next()'s form. */
static void attach_flat_options(struct command_option flat[N_ATTACH_OPTIONS])
{
	for (size_t i = 0; i < N_ATTACH_OPTIONS; i++) {
		const struct option_spec *o = option_of(attach_ids[i]);
		flat[i] = (struct command_option){ o->name, o->short_name, o->arg, o->help };
	}
}

bool pid_text(const char *text, pid_t *pid)
{
	/* A digit first: strtol() would also skip blanks and take a sign. */
	if (!(text[0] >= '0' && text[0] <= '9'))
		return false;
	char *end;
	int saved = errno;
	errno = 0;
	long v = strtol(text, &end, 10);
	bool ok = errno == 0 && *end == '\0' && v > 0 && v <= INT_MAX;
	errno = saved;
	if (ok)
		*pid = (pid_t)v;
	return ok;
}

unsigned command_line_pids(char **operands, int n, pid_t *pids, unsigned max)
{
	unsigned count = 0;
	for (int i = 0; i < n && count < max; i++)
		if (pid_text(operands[i], &pids[count]))
			count++;
	return count;
}

unsigned attach_argv_pids(int argc, char **argv, pid_t *pids, unsigned max)
{
	struct command_option flat[N_ATTACH_OPTIONS];
	attach_flat_options(flat);
	uint64_t seen;
	int first = command_options_scan(flat, N_ATTACH_OPTIONS, false, argc, argv, &seen);
	return first < 0 ? 0 : command_line_pids(argv + first, argc - first, pids, max);
}

void attach_options_parse(struct run_config *c, int argc, char **argv)
{
	/* The defaults of run_options_parse(); attach uses only some. */
	memset(c, 0, sizeof *c);
	c->window_ns = NS_PER_SEC;
	c->predict_mask = DN_PREDICT_ALL;
	c->cache_backend = DN_CACHE_AUTO;
	c->feedback = true;
	set_usage_command("attach");

	struct command_option flat[N_ATTACH_OPTIONS];
	attach_flat_options(flat);
	/* The environment's defaults first, as for run: a default the
	 * command line replaces is not even read (a stale DISCNICE_RATE in a
	 * profile cannot refuse 'attach --rate 1M'). */
	bool on_command_line[N_ATTACH_OPTIONS] = { false };
	optind = 1;
	int i;
	while ((i = command_option_next("attach", flat, N_ATTACH_OPTIONS, false, argc, argv)) >= 0)
		on_command_line[i] = true;
	for (size_t k = 0; k < N_ATTACH_OPTIONS; k++) {
		const struct option_spec *o = option_of(attach_ids[k]);
		bool net = o->id == OPT_NET_RATE || o->id == OPT_RECV_RATE || o->id == OPT_SEND_RATE;
		const char *value = o->env && !net && !on_command_line[k] ? getenv(o->env) : NULL;
		if (value && *value)
			apply(c, o->id, value, o->env);
	}
	optind = 1;
	/* Options and PIDs may be mixed (a PID never starts with '-'). */
	while ((i = command_option_next("attach", flat, N_ATTACH_OPTIONS, false, argc, argv)) >= 0) {
		const struct option_spec *o = option_of(attach_ids[i]);
		if (o->id == OPT_HELP) {
			attach_options_help();
			exit(0);
		}
		char source[48];
		snprintf(source, sizeof source, "--%s", o->name);
		if (o->id == OPT_NET_RATE || o->id == OPT_RECV_RATE || o->id == OPT_SEND_RATE)
			/* Sockets are policed by the agent, inside the process;
			 * none can be loaded into one already running, and the
			 * kernel counts a process's socket bytes nowhere a
			 * non-root user can read them apart from its pipes' and
			 * ttys' (rchar/wchar count them all). */
			usage_error("%s: attach cannot police the network of a running process "
				    "(no agent can be loaded into it); start the job with "
				    "'discnice run %s RATE -- COMMAND'", source, source);
		apply(c, o->id, optarg, source);
	}
	if (optind >= argc)
		usage_error("no process given (usage: discnice attach [OPTION]... PID...)");
	if (!c->cap_given)
		usage_error("no cap given: use --rate, --read-rate or --write-rate "
			    "(e.g. --rate 5MiB/s, or --rate inf to measure without a cap); "
			    "to make running processes give way without a cap, "
			    "'discnice benice --pid PID...'");
	c->pids = argv + optind;
	c->npids = (unsigned)(argc - optind);
}

int net_policy_parse(const char *value, uint64_t *scavenger_target_ns)
{
	static const char scavenger[] = "scavenger";
	if (strcmp(value, "cap") == 0) {
		*scavenger_target_ns = 0;
		return 0;
	}
	if (strncmp(value, scavenger, sizeof scavenger - 1) != 0)
		return -EINVAL;
	const char *rest = value + sizeof scavenger - 1;
	if (!*rest) {
		*scavenger_target_ns = SCAVENGER_TARGET_DEFAULT_NS;
		return 0;
	}
	if (*rest != '=' || rest[1] < '0' || rest[1] > '9')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long ms = strtoul(rest + 1, &end, 10);
	if (errno || (*end && strcmp(end, "ms") != 0))
		return -EINVAL;
	uint64_t ns = (uint64_t)ms * 1000000u;
	if (ms > 1000000 || ns < SCAVENGER_TARGET_MIN_NS || ns > SCAVENGER_TARGET_MAX_NS)
		return -ERANGE;
	*scavenger_target_ns = ns;
	return 0;
}

int window_policy_parse(const char *value, uint32_t *window_policy)
{
	if (strcmp(value, "sliding") == 0)
		*window_policy = DN_WINDOW_POLICY_SLIDING;
	else if (strcmp(value, "paper") == 0)
		*window_policy = DN_WINDOW_POLICY_PAPER;
	else
		return -EINVAL;
	return 0;
}

const char *window_policy_name(uint32_t window_policy)
{
	return window_policy == DN_WINDOW_POLICY_PAPER ? "paper" : "sliding";
}
