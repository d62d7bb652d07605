/*
 * tool_ls.c - `discnice ls`: the user's classes, their caps and their runs.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/rate.h"
#include "tool/tool_class.h"
#include "tool/tool_msg.h"

enum { LS_HELP, LS_JSON };

/* Sorted by long name; indexed by the enum above. */
static const struct command_option ls_options[] = {
	[LS_HELP] = { "help", 'h', NULL, "show this help and exit" },
	[LS_JSON] = { "json", 0, NULL, "print one JSON document: an array of classes,\n"
				       "each with its runs" },
};
#define N_LS_OPTIONS (sizeof ls_options / sizeof ls_options[0])

static void ls_help(void)
{
	printf("Usage: discnice ls [--json]\n"
	       "List your classes (the budgets of running jobs): caps, window, predictors,\n"
	       "and per run its supervisor, whether it is alive, and its counters; a run of\n"
	       "'discnice attach' also names the process it was attached to, and a run of\n"
	       "'discnice benice' its job and whether it is running, suspended by benice,\n"
	       "or stopped (by someone else).\n\n");
	command_options_help(ls_options, N_LS_OPTIONS);
	printf("\nExit status: 0; 2 for bad options or arguments; 4 if the class directory\n"
	       "is not yours; 125 on other errors.  See discnice(1).\n");
}

static void print_json_run(const struct class_run_view *run)
{
	const struct dn_counters *c = &run->counters;
	printf("{\"slot\": %u, \"pid\": %" PRIu32 ", \"alive\": %s, "
	       "\"file_read_bytes\": %" PRIu64 ", \"file_write_bytes\": %" PRIu64 ", "
	       "\"predicted_read_bytes\": %" PRIu64 ", \"predicted_write_bytes\": %" PRIu64 ", "
	       "\"slept_s\": %.6f, \"throttled_calls\": %" PRIu64 ", \"stopped\": %s, "
	       "\"stopped_s\": %.6f, \"suspended\": %s, \"suspended_s\": %.6f, "
	       "\"attached_pid\": %" PRIu32,
	       run->slot, run->pid, run->alive ? "true" : "false", c->file_read_bytes,
	       c->file_write_bytes, c->predicted_read_bytes, class_predicted_writes(c),
	       (double)c->slept_ns / 1e9, c->throttled_calls, run->stopped ? "true" : "false",
	       (double)run->stopped_ns / 1e9, run->suspended ? "true" : "false",
	       (double)run->suspended_ns / 1e9, run->attached_pid);
	printf(", \"policy\": \"%s\"", class_run_policy(run));
	/* Sockets (src/agent/io_net.c): bytes that crossed them, and the
	 * agent's sleeps for the network window. */
	printf(", \"net_sent_bytes\": %" PRIu64 ", \"net_received_bytes\": %" PRIu64
	       ", \"net_slept_s\": %.6f", c->net_sent_bytes, c->net_received_bytes,
	       (double)c->net_slept_ns / 1e9);
	/* --policy manners: its calibrated target, once there is one. */
	if (run->manners_read_ns_per_gib || run->manners_write_ns_per_gib)
		printf(", \"manners_s_per_gib_read\": %.6f, \"manners_s_per_gib_written\": %.6f",
		       (double)run->manners_read_ns_per_gib / 1e9,
		       (double)run->manners_write_ns_per_gib / 1e9);
	/* benice: its job's state (suspended_s above: the time it kept it
	 * suspended). */
	if (run->kind == RUN_KIND_BENICE)
		printf(", \"benice_state\": \"%s\"", class_benice_state(run));
	/* A run inside a Slurm job: its job and step. */
	if (run->slurm_job)
		printf(", \"slurm_job_id\": %" PRIu32 ", \"slurm_step\": \"%s\"", run->slurm_job,
		       run->slurm_step);
	/* An attach (attached_pid not 0): what the kernel counted for it. */
	if (run->attached_pid)
		printf(", \"attached_processes\": %" PRIu32 ", \"measured_read_bytes\": %" PRIu64
		       ", \"measured_write_bytes\": %" PRIu64, run->attached_processes,
		       run->measured_read_bytes, run->measured_write_bytes);
	putchar('}');
}

static void print_json(const struct class_view *views, int n)
{
	printf("[");
	for (int i = 0; i < n; i++) {
		const struct class_view *v = &views[i];
		printf("%s\n  {", i ? "," : "");
		class_json_head(stdout, v);
		if (!v->error) {
			printf(", \"slept_s\": %.6f, \"runs\": [", (double)v->total.slept_ns / 1e9);
			for (unsigned r = 0; r < v->n_runs; r++) {
				printf("%s\n    ", r ? "," : "");
				print_json_run(&v->runs[r]);
			}
			printf("%s]", v->n_runs ? "\n  " : "");
		}
		printf("}");
	}
	printf("%s]\n", n ? "\n" : "");
}

static void print_table(const struct class_view *views, int n)
{
	if (n)
		printf("%-20s %-12s %-12s %-12s %-8s %-15s %s\n", "CLASS", "READ CAP", "WRITE CAP",
		       "TOTAL CAP", "WINDOW", "PREDICT", "RUNS");
	for (int i = 0; i < n; i++) {
		const struct class_view *v = &views[i];
		/* Names as C escapes (a name is a file name: a newline or a
		 * terminal control sequence in one must stay inert). */
		char name[4 * sizeof v->name + 1];
		name_cell(name, sizeof name, v->name, 20);
		if (v->error) {
			printf("%-20s (%s)\n", name, class_error_text(v->error));
			continue;
		}
		char caps[3][24], window[16];
		class_cap_text(caps[0], sizeof caps[0], v->caps.read_bps);
		class_cap_text(caps[1], sizeof caps[1], v->caps.write_bps);
		class_cap_text(caps[2], sizeof caps[2], v->caps.total_bps);
		snprintf(window, sizeof window, "%.2f s", (double)v->window_ns / 1e9);
		printf("%-20s %-12s %-12s %-12s %-8s %-15s %u\n", name, caps[0], caps[1], caps[2],
		       window, class_predict_name(v->predict_mask), v->n_runs);
		if (v->window_policy == DN_WINDOW_POLICY_PAPER)
			printf("  window policy: paper (rate-windows 3.2: the last <= 100 "
			       "operations within 5 s, for disk and network)\n");
		if (v->net_caps.read_bps || v->net_caps.write_bps || v->net_caps.total_bps ||
		    v->scavenger_target_ns) {
			/* The network's budget, independent of the disk's. */
			char net[3][24], sent[24], received[24];
			class_cap_text(net[0], sizeof net[0], v->net_caps.read_bps);
			class_cap_text(net[1], sizeof net[1], v->net_caps.write_bps);
			class_cap_text(net[2], sizeof net[2], v->net_caps.total_bps);
			size_format(sent, sizeof sent, (double)v->total.net_sent_bytes);
			size_format(received, sizeof received, (double)v->total.net_received_bytes);
			printf("  network: recv cap %s, send cap %s, net cap %s; sent %s, received %s, "
			       "slept %.2f s%s\n", net[0], net[1], net[2], sent, received,
			       (double)v->total.net_slept_ns / 1e9,
			       v->net_yield_free ? " (yield: free now, caps lifted)" : "");
			if (v->scavenger_target_ns) {
				char rate[24];
				class_cap_text(rate, sizeof rate, v->scavenger_rate_bps);
				printf("  network policy: scavenger, target %.0f ms; send rate now %s, "
				       "queueing delay %.1f ms\n", (double)v->scavenger_target_ns / 1e6,
				       rate, (double)v->scavenger_delay_ns / 1e6);
			}
		}
		if (v->n_runs)
			printf("  %-10s %-9s %-12s %-12s %-12s %-12s %s\n", "PID", "STATE", "FILE READ",
			       "FILE WRITE", "PRED READ", "PRED WRITE", "SLEPT");
		for (unsigned r = 0; r < v->n_runs; r++) {
			const struct class_run_view *run = &v->runs[r];
			const struct dn_counters *c = &run->counters;
			char sizes[4][24];
			size_format(sizes[0], sizeof sizes[0], (double)c->file_read_bytes);
			size_format(sizes[1], sizeof sizes[1], (double)c->file_write_bytes);
			size_format(sizes[2], sizeof sizes[2], (double)c->predicted_read_bytes);
			size_format(sizes[3], sizeof sizes[3], (double)class_predicted_writes(c));
			printf("  %-10" PRIu32 " %-9s %-12s %-12s %-12s %-12s %.2f s", run->pid,
			       run->kind == RUN_KIND_BENICE ? class_benice_state(run)
			       : !run->alive ? "gone" : run->stopped ? "stopped"
			       : run->suspended ? "suspended" : "alive",
			       sizes[0], sizes[1], sizes[2], sizes[3],
			       (double)c->slept_ns / 1e9);
			if (run->kind == RUN_KIND_BENICE) {
				char kr[24], kw[24];
				size_format(kr, sizeof kr, (double)run->measured_read_bytes);
				size_format(kw, sizeof kw, (double)run->measured_write_bytes);
				printf("  benice of %" PRIu32 " (%" PRIu32 " process%s): %s read, "
				       "%s written by the kernel's count, suspended %.2f s",
				       run->attached_pid, run->attached_processes,
				       run->attached_processes == 1 ? "" : "es", kr, kw,
				       (double)run->stopped_ns / 1e9);
			} else if (run->attached_pid) {
				/* No agent: the file and predicted columns stay 0;
				 * what counts is the kernel's tally since attaching. */
				char kr[24], kw[24];
				size_format(kr, sizeof kr, (double)run->measured_read_bytes);
				size_format(kw, sizeof kw, (double)run->measured_write_bytes);
				printf("  attached to %" PRIu32 " (%" PRIu32 " process%s): %s read, "
				       "%s written by the kernel's count, held %.2f s",
				       run->attached_pid, run->attached_processes,
				       run->attached_processes == 1 ? "" : "es", kr, kw,
				       (double)run->stopped_ns / 1e9);
			}
			if (run->slurm_job)
				printf("  slurm job %" PRIu32 " step %s", run->slurm_job, run->slurm_step);
			putchar('\n');
		}
	}
}

int tool_ls(int argc, char **argv)
{
	int json = 0, opt;
	while ((opt = command_option_next("ls", ls_options, N_LS_OPTIONS, false, argc, argv)) >= 0) {
		if (opt == LS_HELP) {
			ls_help();
			return 0;
		}
		json = 1;
	}
	if (optind < argc)
		command_usage_error("ls", "unexpected argument '%s'", argv[optind]);

	struct class_view *views;
	int n = class_list(&views);
	if (n < 0) {
		if (n == -EPERM) {
			class_dir_error(n, "cannot list classes");
			return EXIT_BAD_CLASS;
		}
		errorf("cannot list classes: %s", class_error_text(n));
		return EXIT_INTERNAL;
	}
	if (json)
		print_json(views, n);
	else
		print_table(views, n);
	free(views);
	return 0;
}
