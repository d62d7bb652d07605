/*
 * tool_top.c - `discnice top`: every class and run, refreshed: caps, the
 * predicted rate in the class's window, file rates from counter deltas
 * between refreshes, time slept, and whether the job is being held back.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc_io.h"
#include "common/rate.h"
#include "tool/tool_class.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"

enum { TOP_COUNT, TOP_HELP, TOP_INTERVAL, TOP_JSON };

/* Sorted by long name; indexed by the enum above. */
static const struct command_option top_options[] = {
	[TOP_COUNT] = { "count", 'n', "N", "stop after N refreshes [default: until Ctrl-C]" },
	[TOP_HELP] = { "help", 'h', NULL, "show this help and exit" },
	[TOP_INTERVAL] = { "interval", 'd', "SECONDS", "time between refreshes, 0.01 to 3600\n"
						       "[default: 1]" },
	[TOP_JSON] = { "json", 0, NULL, "print one JSON object per refresh, one per line" },
};
#define N_TOP_OPTIONS (sizeof top_options / sizeof top_options[0])

static void top_help(void)
{
	printf("Usage: discnice top [--json] [--interval SECONDS] [--count N]\n"
	       "Watch your classes and their runs: the cap, the predicted disk rate in the\n"
	       "class's rate window, the disk rates the kernel counted (/proc/PID/io of each\n"
	       "run's supervisor and every process below it) and the file read and write\n"
	       "rates since the last refresh, time slept, and the policy state since the\n"
	       "last refresh: \"stopped\" if the supervisor held the job (I/O the agent\n"
	       "cannot see), \"suspended\" if --policy manners suspended it (its file I/O\n"
	       "judged slowed by others), \"throttled\" if the agent slept it or the yield\n"
	       "policy holds it at its caps, else \"free\"; a run whose supervisor died\n"
	       "shows \"gone\".  A run of 'discnice attach' names the process it was\n"
	       "attached to; its disk rates are its processes' /proc/PID/io, summed by its\n"
	       "supervisor.\n\n");
	command_options_help(top_options, N_TOP_OPTIONS);
	printf("\nExit status: 0 (also on Ctrl-C); 2 for bad options; 4 if the class\n"
	       "directory is not yours; 125 on other errors.  See discnice(1).\n");
}

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* Rates of one class or run over the last refresh. */
struct top_rates {
	double file_read_bps, file_write_bps;
	double predicted_read_bps, predicted_write_bps;
	double actual_read_bps, actual_write_bps;
	const char *state;
};

/* ---- the kernel's count: one pass over /proc per refresh ---------------- */

/* A run's disk I/O as the kernel counts it: its supervisor's /proc/PID/io
 * holds every child it reaped (wait_task_zombie; it is the job's
 * subreaper), the live processes below it the rest.  An attach's processes
 * are not below it: its supervisor sums their /proc/PID/io at every tick
 * and publishes it (tool_regulate.c: publish_measured()). */
static void fill_actual(struct class_view *views, int n)
{
	struct proc_node *all;
	int count = proc_nodes(&all);
	if (count < 0)
		return; /* out of memory: rates show 0, nothing worse */
	for (int i = 0; i < n; i++)
		for (unsigned k = 0; k < views[i].n_runs; k++) {
			struct class_run_view *run = &views[i].runs[k];
			if (run->attached_pid) {
				/* discnice attach: its processes are not below it;
				 * it publishes their kernel counts itself. */
				run->actual_read_bytes = run->measured_read_bytes;
				run->actual_write_bytes = run->measured_write_bytes;
				continue;
			}
			for (int j = 0; j < count; j++)
				if (proc_node_below(all, (unsigned)count, all[j].pid, (pid_t)run->pid)) {
					run->actual_read_bytes += all[j].read_bytes;
					run->actual_write_bytes += all[j].write_bytes;
				}
		}
	free(all);
}

static double delta_rate(uint64_t now, uint64_t before, double secs)
{
	/* A slot claimed anew starts again from 0: no negative rates. */
	return now > before ? (double)(now - before) / secs : 0;
}

/* A class or run that was not there at the last refresh appeared during
 * it, so its counters from zero are its counts over the interval. */
static struct top_rates rates_between(const struct dn_counters *now, const struct dn_counters *before,
				      double secs)
{
	static const struct dn_counters zero;
	if (!before)
		before = &zero;
	return (struct top_rates){
		.file_read_bps = delta_rate(now->file_read_bytes, before->file_read_bytes, secs),
		.file_write_bps = delta_rate(now->file_write_bytes, before->file_write_bytes, secs),
		.predicted_read_bps =
			delta_rate(now->predicted_read_bytes, before->predicted_read_bytes, secs),
		.predicted_write_bps = delta_rate(class_predicted_writes(now),
						  class_predicted_writes(before), secs),
	};
}

/* The policy state over the last refresh, the strongest seen: "stopped"
 * (the supervisor held the job, tool_hold.c), "suspended" (--policy
 * manners judged its progress poor, tool_manners.c), "throttled" (the
 * agent slept it, or the yield policy holds it at its caps), else "free". */
static const char *state_between(bool stopped, uint64_t stopped_ns, uint64_t stopped_before_ns,
				 bool suspended, uint64_t slept_ns, uint64_t slept_before_ns, bool held)
{
	if (stopped || stopped_ns > stopped_before_ns)
		return "stopped";
	if (suspended)
		return "suspended";
	if (held || slept_ns > slept_before_ns)
		return "throttled";
	return "free";
}

static const struct class_run_view *find_run(const struct class_view *view,
					     const struct class_run_view *run);

static struct top_rates class_rates(const struct class_view *v, const struct class_view *old,
				    double secs)
{
	struct top_rates r = rates_between(&v->total, old ? &old->total : NULL, secs);
	/* Runs that were there at both refreshes: a count that starts or ends
	 * between them has no rate. */
	for (unsigned k = 0; k < v->n_runs; k++) {
		const struct class_run_view *was = find_run(old, &v->runs[k]);
		if (was) {
			r.actual_read_bps += delta_rate(v->runs[k].actual_read_bytes,
							was->actual_read_bytes, secs);
			r.actual_write_bps += delta_rate(v->runs[k].actual_write_bytes,
							 was->actual_write_bytes, secs);
		}
	}
	r.state = state_between(v->stopped, v->stopped_ns, old ? old->stopped_ns : 0, v->suspended,
				v->total.slept_ns, old ? old->total.slept_ns : 0, v->yield_throttled);
	return r;
}

static struct top_rates run_rates(const struct class_run_view *run,
				  const struct class_run_view *old, double secs)
{
	struct top_rates r = rates_between(&run->counters, old ? &old->counters : NULL, secs);
	if (old) {
		r.actual_read_bps = delta_rate(run->actual_read_bytes, old->actual_read_bytes, secs);
		r.actual_write_bps = delta_rate(run->actual_write_bytes, old->actual_write_bytes, secs);
	}
	bool benice = run->kind == RUN_KIND_BENICE;
	r.state = benice ? (run->alive && !run->job_stopped && !run->stopped &&
			    old && run->stopped_ns > old->stopped_ns ? "suspended"
								     : class_benice_state(run))
		  : !run->alive ? "gone"
			      : state_between(run->stopped, run->stopped_ns, old ? old->stopped_ns : 0,
					      run->suspended, run->counters.slept_ns,
					      old ? old->counters.slept_ns : 0, false);
	return r;
}

static const struct class_view *find_class(const struct class_view *views, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!views[i].error && strcmp(views[i].name, name) == 0)
			return &views[i];
	return NULL;
}

static const struct class_run_view *find_run(const struct class_view *view,
					     const struct class_run_view *run)
{
	for (unsigned i = 0; view && i < view->n_runs; i++)
		if (view->runs[i].slot == run->slot && view->runs[i].pid == run->pid)
			return &view->runs[i];
	return NULL;
}

static void json_rates(const struct top_rates *r)
{
	printf("\"state\": \"%s\", \"file_read_bps\": %.1f, \"file_write_bps\": %.1f, "
	       "\"actual_read_bps\": %.1f, \"actual_write_bps\": %.1f, ", r->state, r->file_read_bps,
	       r->file_write_bps, r->actual_read_bps, r->actual_write_bps);
}

static void print_json(const struct class_view *now, int n, const struct class_view *before,
		       int n_before, double secs)
{
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	printf("{\"time\": %.3f, \"interval_s\": %.3f, \"classes\": [",
	       (double)wall.tv_sec + (double)wall.tv_nsec / 1e9, secs);
	for (int i = 0; i < n; i++) {
		const struct class_view *v = &now[i];
		printf("%s{", i ? ", " : "");
		class_json_head(stdout, v);
		if (v->error) {
			printf("}");
			continue;
		}
		const struct class_view *old = find_class(before, n_before, v->name);
		struct top_rates r = class_rates(v, old, secs);
		printf(", ");
		json_rates(&r);
		printf("\"predicted_read_bps\": %.1f, \"predicted_write_bps\": %.1f, "
		       "\"slept_s\": %.6f, \"stopped_s\": %.6f, \"runs\": [",
		       v->window_read_bps, v->window_write_bps, (double)v->total.slept_ns / 1e9,
		       (double)v->stopped_ns / 1e9);
		for (unsigned k = 0; k < v->n_runs; k++) {
			const struct class_run_view *run = &v->runs[k];
			struct top_rates rr = run_rates(run, find_run(old, run), secs);
			printf("%s{\"slot\": %u, \"pid\": %" PRIu32 ", \"alive\": %s, "
			       "\"attached_pid\": %" PRIu32 ", \"policy\": \"%s\", ", k ? ", " : "",
			       run->slot, run->pid, run->alive ? "true" : "false", run->attached_pid,
			       class_run_policy(run));
			if (run->slurm_job)
				printf("\"slurm_job_id\": %" PRIu32 ", \"slurm_step\": \"%s\", ",
				       run->slurm_job, run->slurm_step);
			json_rates(&rr);
			printf("\"predicted_read_bps\": %.1f, \"predicted_write_bps\": %.1f, "
			       "\"slept_s\": %.6f, \"stopped_s\": %.6f}",
			       rr.predicted_read_bps, rr.predicted_write_bps,
			       (double)run->counters.slept_ns / 1e9, (double)run->stopped_ns / 1e9);
		}
		printf("]}");
	}
	printf("]}\n");
}

static void print_row(const char *name, const char *state, double pred_read, double pred_write,
		      const struct top_rates *r, uint64_t slept_ns, const char *cap)
{
	char rates[6][24];
	class_rate_text(rates[0], sizeof rates[0], pred_read);
	class_rate_text(rates[1], sizeof rates[1], pred_write);
	class_rate_text(rates[2], sizeof rates[2], r->actual_read_bps);
	class_rate_text(rates[3], sizeof rates[3], r->actual_write_bps);
	class_rate_text(rates[4], sizeof rates[4], r->file_read_bps);
	class_rate_text(rates[5], sizeof rates[5], r->file_write_bps);
	printf("%-18s %-9s %-13s %-13s %-13s %-13s %-13s %-13s %7.2f s%s%s\n", name, state, rates[0],
	       rates[1], rates[2], rates[3], rates[4], rates[5], (double)slept_ns / 1e9,
	       *cap ? "  " : "", cap);
}

static void print_screen(const struct class_view *now, int n, const struct class_view *before,
			 int n_before, double secs, double interval)
{
	if (isatty(STDOUT_FILENO))
		printf("\033[H\033[2J");
	time_t t = time(NULL);
	char clock_text[16] = "";
	strftime(clock_text, sizeof clock_text, "%H:%M:%S", localtime(&t));
	printf("discnice top - %s, every %.2f s, %d class%s (Ctrl-C to quit)\n\n", clock_text,
	       interval, n, n == 1 ? "" : "es");
	printf("%-18s %-9s %-13s %-13s %-13s %-13s %-13s %-13s %9s  %s\n", "CLASS / RUN PID", "STATE",
	       "PRED READ", "PRED WRITE", "DISK READ", "DISK WRITE", "FILE READ", "FILE WRITE",
	       "SLEPT", "CAP");
	for (int i = 0; i < n; i++) {
		const struct class_view *v = &now[i];
		char name[4 * sizeof v->name + 1];
		name_cell(name, sizeof name, v->name, 18);
		if (v->error) {
			printf("%-18s (%s)\n", name, class_error_text(v->error));
			continue;
		}
		const struct class_view *old = find_class(before, n_before, v->name);
		struct top_rates r = class_rates(v, old, secs);
		char cap[96];
		class_caps_text(cap, sizeof cap, &v->caps);
		if (v->window_policy == DN_WINDOW_POLICY_PAPER)
			snprintf(cap + strlen(cap), sizeof cap - strlen(cap), "%spaper window",
				 cap[0] ? ", " : "none, ");
		print_row(name, r.state, v->window_read_bps, v->window_write_bps, &r,
			  v->total.slept_ns, cap[0] ? cap : "none");
		if (v->net_caps.read_bps || v->net_caps.write_bps || v->net_caps.total_bps ||
		    v->scavenger_target_ns) {
			/* The network's window and caps (independent of the disk's):
			 * what the class's sockets sent and received over the last
			 * refresh, by the agent's count after each call. */
			static const struct dn_counters zero;
			const struct dn_counters *was = old ? &old->total : &zero;
			char net[160], sent[24], received[24];
			class_net_caps_text(net, sizeof net, &v->net_caps);
			if (v->scavenger_target_ns) {
				char text[24];
				class_cap_text(text, sizeof text, v->scavenger_rate_bps);
				snprintf(net + strlen(net), sizeof net - strlen(net),
					 "%sscavenger %.0f ms: %s, delay %.0f ms", net[0] ? ", " : "",
					 (double)v->scavenger_target_ns / 1e6, text,
					 (double)v->scavenger_delay_ns / 1e6);
			}
			class_rate_text(sent, sizeof sent,
					delta_rate(v->total.net_sent_bytes, was->net_sent_bytes, secs));
			class_rate_text(received, sizeof received,
					delta_rate(v->total.net_received_bytes,
						   was->net_received_bytes, secs));
			printf("  %-16s %-9s sent %-12s received %-12s slept %.2f s  %s\n", "network",
			       v->total.net_slept_ns > was->net_slept_ns ? "throttled" : "free", sent,
			       received, (double)v->total.net_slept_ns / 1e9, net);
		}
		for (unsigned k = 0; k < v->n_runs; k++) {
			const struct class_run_view *run = &v->runs[k];
			struct top_rates rr = run_rates(run, find_run(old, run), secs);
			char pid[24], note[64] = "";
			snprintf(pid, sizeof pid, "  %" PRIu32, run->pid);
			if (run->kind == RUN_KIND_BENICE)
				snprintf(note, sizeof note, "benice of %" PRIu32 " (%" PRIu32
					 " process%s)", run->attached_pid, run->attached_processes,
					 run->attached_processes == 1 ? "" : "es");
			else if (run->attached_pid)
				snprintf(note, sizeof note, "attached to %" PRIu32 " (%" PRIu32
					 " process%s)", run->attached_pid, run->attached_processes,
					 run->attached_processes == 1 ? "" : "es");
			else if (run->slurm_job)
				snprintf(note, sizeof note, "slurm job %" PRIu32 " step %s",
					 run->slurm_job, run->slurm_step);
			print_row(pid, rr.state, rr.predicted_read_bps,
				  rr.predicted_write_bps, &rr, run->counters.slept_ns, note);
		}
	}
	if (!isatty(STDOUT_FILENO))
		putchar('\n');
}

/* Sleep, unless Ctrl-C comes first. */
static void pause_for(double seconds)
{
	struct timespec left = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
	while (!stop_requested && nanosleep(&left, &left) != 0 && errno == EINTR)
		;
}

static int snapshot(struct class_view **views)
{
	int n = class_list(views);
	if (n > 0)
		fill_actual(*views, n);
	if (n == -EPERM)
		class_dir_error(n, "cannot list classes");
	else if (n < 0)
		errorf("cannot list classes: %s", class_error_text(n));
	return n;
}

int tool_top(int argc, char **argv)
{
	int json = 0, opt;
	double interval = 1.0;
	unsigned long long count = 0;
	while ((opt = command_option_next("top", top_options, N_TOP_OPTIONS, false, argc, argv)) >= 0) {
		switch (opt) {
		case TOP_HELP:
			top_help();
			return 0;
		case TOP_JSON:
			json = 1;
			break;
		case TOP_INTERVAL:
			if (!decimal_number(optarg, &interval) || !(interval >= 0.01 && interval <= 3600))
				command_usage_error("top", "--interval '%s': the interval is a number of "
						    "seconds from 0.01 to 3600", optarg);
			break;
		case TOP_COUNT:
			if (!whole_number(optarg, &count)) {
				bool digits = optarg[0] && !optarg[strspn(optarg, "0123456789")];
				command_usage_error("top", "--count '%s': %s", optarg,
						    digits ? "too large"
							   : "the count is a whole number of "
							     "refreshes, at least 1");
			}
			if (count == 0)
				command_usage_error("top", "--count '%s': the count is a whole number "
						    "of refreshes, at least 1", optarg);
			break;
		}
	}
	if (optind < argc)
		command_usage_error("top", "unexpected argument '%s'", argv[optind]);

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop_signal; /* no SA_RESTART: the sleep must end */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	/* The first refresh needs a baseline one interval earlier. */
	struct class_view *before, *now;
	int n_before = snapshot(&before), n;
	if (n_before < 0)
		return n_before == -EPERM ? EXIT_BAD_CLASS : EXIT_INTERNAL;
	uint64_t before_ns = clock_now_ns();
	for (unsigned long shown = 0; !count || shown < count; shown++) {
		pause_for(interval);
		if (stop_requested)
			break;
		if ((n = snapshot(&now)) < 0) {
			free(before);
			return n == -EPERM ? EXIT_BAD_CLASS : EXIT_INTERNAL;
		}
		uint64_t now_ns = clock_now_ns();
		double secs = (double)(now_ns - before_ns) / 1e9;
		if (json)
			print_json(now, n, before, n_before, secs);
		else
			print_screen(now, n, before, n_before, secs, interval);
		/* A refresh lost (a full disk, a closed pipe) ends top, with
		 * the reason: the next flush would have nothing left to say
		 * it with ("write error"). */
		if (!stdout_flush_checked()) {
			free(before);
			free(now);
			return EXIT_INTERNAL;
		}
		free(before);
		before = now;
		n_before = n;
		before_ns = now_ns;
	}
	free(before);
	return 0;
}
