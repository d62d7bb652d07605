/*
 * tool_report.c - report, summary and status line (see tool_report.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/rate.h"
#include "policy/rate_window.h"
#include "tool/tool_class.h"
#include "tool/tool_json.h"
#include "tool/tool_report.h"

static const char *predict_name(uint32_t mask)
{
	switch (mask) {
	case 0: return "none";
	case DN_PREDICT_CACHE: return "cache";
	case DN_PREDICT_READAHEAD: return "readahead";
	case DN_PREDICT_CACHE | DN_PREDICT_READAHEAD: return "cache+readahead";
	default: return "all";
	}
}

static const char *backend_name(uint32_t backend)
{
	static const char *const names[] = { "auto", "probe", "cachestat", "mincore" };
	return backend < 4 ? names[backend] : "?";
}

/* Net predicted writes: dirtied minus cancelled, the quantity comparable
 * with the kernel's write_bytes - cancelled_write_bytes. */
static uint64_t predicted_writes(const struct dn_counters *c)
{
	return c->predicted_write_bytes > c->cancelled_write_bytes
		       ? c->predicted_write_bytes - c->cancelled_write_bytes : 0;
}

static uint64_t actual_writes(const struct proc_io *io)
{
	return io->write_bytes > io->cancelled_write_bytes
		       ? io->write_bytes - io->cancelled_write_bytes : 0;
}

int report_write_json(const char *path, const struct run_config *config,
		      const struct run_result *r)
{
	char tmp[4096];
	FILE *f = report_file_open(path, tmp, sizeof tmp);
	if (!f)
		return -errno;
	const struct dn_counters *c = &r->counters;
	uint64_t actual = r->actual.read_bytes + actual_writes(&r->actual);
	fprintf(f, "{\n  \"command\": [");
	for (char **a = config->command; *a; a++) {
		json_print_string(f, *a);
		if (a[1])
			fputs(", ", f);
	}
	fprintf(f, "],\n  \"class\": ");
	json_print_string(f, config->class_name);
	fprintf(f, ",\n  \"read_cap_bps\": %" PRIu64 ",\n  \"write_cap_bps\": %" PRIu64
		   ",\n  \"total_cap_bps\": %" PRIu64 ",\n",
		config->caps.read_bps, config->caps.write_bps, config->caps.total_bps);
	fprintf(f, "  \"window_s\": %.3f,\n  \"predict\": \"%s\",\n  \"cache_backend\": \"%s\",\n",
		(double)config->window_ns / 1e9, predict_name(config->predict_mask),
		backend_name(config->cache_backend));
	fprintf(f, "  \"window_policy\": \"%s\",\n", window_policy_name(config->window_policy));
	fprintf(f, "  \"writeback\": \"%s\",\n  \"cache\": \"%s\",\n",
		config->writeback_kernel ? "kernel" : "paced", config->cache_drop ? "drop" : "keep");
	fprintf(f, "  \"probe_threshold_ns\": %" PRIu64 ",\n", r->probe_threshold_ns);
	fprintf(f, "  \"elapsed_s\": %.6f,\n  \"slept_s\": %.6f,\n", r->elapsed_s,
		(double)c->slept_ns / 1e9);
	fprintf(f, "  \"throttled_calls\": %" PRIu64 ",\n", c->throttled_calls);
	fprintf(f, "  \"file_read_bytes\": %" PRIu64 ",\n  \"file_write_bytes\": %" PRIu64 ",\n",
		c->file_read_bytes, c->file_write_bytes);
	fprintf(f, "  \"predicted_read_bytes\": %" PRIu64 ",\n  \"predicted_write_bytes\": %" PRIu64
		   ",\n",
		c->predicted_read_bytes, predicted_writes(c));
	fprintf(f, "  \"predicted_dirtied_bytes\": %" PRIu64 ",\n  \"predicted_cancelled_bytes\": %" PRIu64
		   ",\n",
		c->predicted_write_bytes, c->cancelled_write_bytes);
	fprintf(f, "  \"dir_read_bytes\": %" PRIu64 ",\n  \"mmapped_bytes\": %" PRIu64 ",\n",
		c->dir_read_bytes, c->mmapped_bytes);
	fprintf(f, "  \"trace_lost_lines\": %" PRIu64 ",\n", c->trace_lost_lines);
	fprintf(f, "  \"agent_loads\": %" PRIu64 ",\n", c->agent_loads);
	fprintf(f, "  \"actual_read_bytes\": %" PRIu64 ",\n  \"actual_write_bytes\": %" PRIu64 ",\n",
		r->actual.read_bytes, actual_writes(&r->actual));
	fprintf(f, "  \"actual_dirtied_bytes\": %" PRIu64 ",\n  \"actual_cancelled_bytes\": %" PRIu64
		   ",\n",
		r->actual.write_bytes, r->actual.cancelled_write_bytes);
	fprintf(f, "  \"feedback\": %s,\n  \"feedback_read_bytes\": %" PRIu64
		   ",\n  \"feedback_write_bytes\": %" PRIu64 ",\n",
		r->feedback ? "true" : "false", r->feedback_read_bytes, r->feedback_write_bytes);
	fprintf(f, "  \"feedback_net_sent_bytes\": %" PRIu64
		   ",\n  \"feedback_net_received_bytes\": %" PRIu64 ",\n",
		r->feedback_net_sent_bytes, r->feedback_net_received_bytes);
	fprintf(f, "  \"recv_cap_bps\": %" PRIu64 ",\n  \"send_cap_bps\": %" PRIu64
		   ",\n  \"net_cap_bps\": %" PRIu64 ",\n",
		config->net_caps.read_bps, config->net_caps.write_bps, config->net_caps.total_bps);
	fprintf(f, "  \"net_sent_bytes\": %" PRIu64 ",\n  \"net_received_bytes\": %" PRIu64
		   ",\n  \"net_slept_s\": %.6f,\n",
		c->net_sent_bytes, c->net_received_bytes, (double)c->net_slept_ns / 1e9);
	fprintf(f, "  \"stopped_s\": %.6f,\n  \"stops\": %" PRIu64 ",\n  \"settle_s\": %.6f,\n",
		r->stopped_s, r->stops, r->settle_s);
	fprintf(f, "  \"supervisor_cpu_s\": %.6f,\n", r->supervisor_cpu_s);
	fprintf(f, "  \"policy\": \"%s\",\n  \"yield_throttled_s\": %.6f,\n  \"yield_switches\": %" PRIu64
		   ",\n", r->yield ? "yield" : r->manners ? "manners" : "cap", r->yield_throttled_s,
		r->yield_switches);
	fprintf(f, "  \"manners_suspended_s\": %.6f,\n  \"manners_testpoints\": %" PRIu64
		   ",\n  \"manners_judged_good\": %" PRIu64 ",\n  \"manners_judged_poor\": %" PRIu64
		   ",\n  \"manners_forgiven\": %" PRIu64 ",\n  \"manners_shortened\": %" PRIu64
		   ",\n  \"manners_busy_testpoints\": %" PRIu64 ",\n  \"manners_s_per_mib_read\": %.9f,\n  \"manners_s_per_mib_written\": %.9f,\n",
		r->manners_suspended_s, r->manners_testpoints, r->manners_judged_good,
		r->manners_judged_poor, r->manners_forgiven, r->manners_shortened,
		r->manners_busy_testpoints, r->manners_s_per_mib_read,
		r->manners_s_per_mib_written);
	fprintf(f, "  \"manners_cpu_pressure\": %s,\n  \"manners_pressure_rises\": %" PRIu64
		   ",\n  \"manners_new_samples\": %" PRIu64 ",\n  \"manners_disk_rises\": %" PRIu64 ",\n",
		r->manners_cpu_pressure ? "true" : "false", r->manners_pressure_rises,
		r->manners_new_samples, r->manners_disk_rises);
	fprintf(f, "  \"manners_state_file\": ");
	if (r->manners_state_file[0])
		json_print_string(f, r->manners_state_file);
	else
		fputs("null", f);
	fprintf(f, ",\n  \"manners_target_restored\": %s,\n  \"manners_restored_samples\": %" PRIu64
		   ",\n", r->manners_target_restored ? "true" : "false", r->manners_restored_samples);
	fprintf(f, "  \"achieved_bps\": %.1f,\n",
		r->elapsed_s > 0 ? (double)actual / r->elapsed_s : 0.0);
	fprintf(f, "  \"exit_status\": %d,\n  \"signal\": %d\n}\n", r->exit_status, r->signal);
	return report_file_commit(f, tmp, path);
}

FILE *report_file_open(const char *path, char *tmp, size_t size)
{
	snprintf(tmp, size, "%s.tmp.%d", path, (int)getpid());
	return fopen(tmp, "w");
}

int report_file_commit(FILE *f, const char *tmp, const char *path)
{
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		int e = errno ? errno : EIO;
		unlink(tmp);
		return -e;
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return -e;
	}
	return 0;
}

static bool caps_empty(const struct dn_caps *c)
{
	return !c->read_bps && !c->write_bps && !c->total_bps;
}

/* 1000 when every cap set is shown in decimal units (cap_base()), else
 * 1024 (none set included). */
static unsigned caps_base(const struct dn_caps *c)
{
	const uint64_t bps[3] = { c->read_bps, c->write_bps, c->total_bps };
	unsigned base = 0;
	for (unsigned i = 0; i < 3; i++)
		if (bps[i]) {
			unsigned b = cap_base(bps[i]);
			if (base && b != base)
				return 1024;
			base = b;
		}
	return base ? base : 1024;
}

void report_print_summary(const struct run_config *config, const struct run_result *r)
{
	char moved[32], rate[32], predicted[32], actual[32], caps[256] = "";
	const struct dn_counters *c = &r->counters;
	uint64_t act = r->actual.read_bytes + actual_writes(&r->actual);
	uint64_t pred = c->predicted_read_bytes + predicted_writes(c);
	/* The caps the run ended under: `discnice set` may have changed the
	 * class's meanwhile.  Not under --policy yield, whose caps come and go
	 * by design: there the user's caps are the ones to name. */
	const struct dn_caps *end = config->yield ? &config->caps : &r->caps_at_end;
	/* Amounts in the units the caps are shown in (cap_format()): a job
	 * capped at 5M is told it moved 4.99 MB/s, not 4.76 MiB/s. */
	unsigned base = caps_base(end);
	size_format_base(moved, sizeof moved, (double)act, base);
	size_format_base(rate, sizeof rate, r->elapsed_s > 0 ? (double)act / r->elapsed_s : 0, base);
	size_format_base(predicted, sizeof predicted, (double)pred, base);
	size_format_base(actual, sizeof actual, (double)act, base);
	bool changed = end->read_bps != config->caps.read_bps || end->write_bps != config->caps.write_bps ||
		       end->total_bps != config->caps.total_bps;
	class_caps_text(caps, sizeof caps, end);
	bool capped = caps[0] != '\0' || !caps_empty(&config->caps);
	if (!caps[0])
		snprintf(caps, sizeof caps, "no cap");
	/* Under yield the caps hold only while others read: the rate beside
	 * them read as a broken cap (171 MiB/s, "cap: total 5.00 MiB/s"). */
	if (r->yield)
		snprintf(caps + strlen(caps), sizeof caps - strlen(caps),
			 " while others read, --policy yield: held at it %.2f s of %.2f s",
			 r->yield_throttled_s, r->elapsed_s);
	if (changed) {
		char start[128];
		class_caps_text(start, sizeof start, &config->caps);
		snprintf(caps + strlen(caps), sizeof caps - strlen(caps), ", set during the run; %s at the start",
			 start[0] ? start : "no cap");
	}
	/* With no cap the agent predicts nothing unless asked (agent.h
	 * agent_idle, agent_counting): 0 against the kernel's bytes is then
	 * no error of the model's, and the line says so. */
	bool asked = config->predict_uncapped || config->yield || config->trace_path || config->cache_drop;
	char prediction[128];
	if (!pred && !asked && !capped) {
		snprintf(prediction, sizeof prediction,
			 "not predicted (no cap; --predict-uncapped on predicts)");
	} else if (!pred && !asked && r->slack_seen) {
		/* A cap far above what the job did: the agent dozed
		 * (tool_regulate.c update_slack), as with no cap. */
		snprintf(prediction, sizeof prediction,
			 "not predicted (the cap was far above the job's I/O; "
			 "--predict-uncapped on predicts)");
	} else if (changed && (caps_empty(&config->caps) || caps_empty(end)) && !asked) {
		/* Capped for a part of the run only (`discnice set`): the
		 * agent predicted while a cap was set, the kernel counted all
		 * along - no error of the model's to compute. */
		snprintf(prediction, sizeof prediction,
			 "predicted %s while capped, kernel says %s for the whole run", predicted,
			 actual);
	} else {
		char error[32] = "n/a";
		if (act)
			snprintf(error, sizeof error, "%+.2f%%",
				 100.0 * ((double)pred - (double)act) / (double)act);
		snprintf(prediction, sizeof prediction, "predicted %s, kernel says %s (%s)", predicted,
			 actual, error);
	}
	/* Reads and writes both: each its own rate, so that `cat f > out`
	 * under a read cap does not seem to run at twice it. */
	char split[96] = "";
	uint64_t act_w = actual_writes(&r->actual);
	/* ... and where a cap is one direction's, always: a read-only job
	 * under a write cap showed 49 MB/s beside "cap: write 1.00 MB/s". */
	bool one_way = end->read_bps || end->write_bps;
	if (((r->actual.read_bytes && act_w) || (one_way && act)) && r->elapsed_s > 0) {
		char rr[32], wr[32];
		size_format_base(rr, sizeof rr, (double)r->actual.read_bytes / r->elapsed_s, base);
		size_format_base(wr, sizeof wr, (double)act_w / r->elapsed_s, base);
		snprintf(split, sizeof split, "read %s/s, write %s/s; ", rr, wr);
	}
	fprintf(stderr, "discnice: %s of disk I/O in %.2f s = %s/s (%scap: %s); slept %.2f s; %s\n",
		moved, r->elapsed_s, rate, split, caps, (double)c->slept_ns / 1e9, prediction);
	/* The network's own line, when the run had a network cap: the disk's
	 * "no cap" alone read as if nothing had been regulated. */
	if (!caps_empty(&config->net_caps) || config->scavenger_target_ns) {
		char net[128], sent[32], received[32], sent_rate[32], received_rate[32];
		class_net_caps_text(net, sizeof net, &config->net_caps);
		double secs = r->elapsed_s > 0 ? r->elapsed_s : 1;
		unsigned net_base = caps_base(&config->net_caps);
		size_format_base(sent, sizeof sent, (double)c->net_sent_bytes, net_base);
		size_format_base(received, sizeof received, (double)c->net_received_bytes, net_base);
		size_format_base(sent_rate, sizeof sent_rate, (double)c->net_sent_bytes / secs, net_base);
		size_format_base(received_rate, sizeof received_rate,
				 (double)c->net_received_bytes / secs, net_base);
		fprintf(stderr, "discnice: network: %s sent, %s received = %s/s, %s/s (cap: %s%s%s); "
			"slept %.2f s\n", sent, received, sent_rate, received_rate,
			config->scavenger_target_ns ? "scavenger" : "",
			config->scavenger_target_ns && net[0] ? ", " : "", net,
			(double)c->net_slept_ns / 1e9);
	}
}

/* Is a status line drawn now (so there is one to clear)? */
static bool status_drawn;

void report_print_status(const struct dn_segment *seg, const struct dn_counters *run,
			 double elapsed_s)
{
	/* Not while discnice is in the background ("discnice run ... &"): the
	 * foreground's prompt would be redrawn over every quarter second. */
	pid_t fg = tcgetpgrp(STDERR_FILENO);
	if (fg < 0 || fg != getpgrp()) {
		status_drawn = false; /* what is on the line now is not ours */
		return;
	}
	int64_t rd, wr;
	uint64_t now = clock_now_ns();
	rate_window_sums(&seg->window, now, &rd, &wr);
	uint64_t span = now - seg->window.origin_ns < seg->window.span_ns
				? now - seg->window.origin_ns : seg->window.span_ns;
	double secs = span ? (double)span / 1e9 : 1;
	char r[32], w[32], cap[32];
	size_format(r, sizeof r, rd > 0 ? (double)rd / secs : 0);
	size_format(w, sizeof w, wr > 0 ? (double)wr / secs : 0);
	uint64_t c = seg->caps.total_bps ? seg->caps.total_bps
					 : seg->caps.read_bps ? seg->caps.read_bps : seg->caps.write_bps;
	class_cap_text(cap, sizeof cap, c);
	fprintf(stderr, "\r\033[Kdiscnice: %6.1f s  read %s/s  write %s/s  cap %s  slept %.1f s",
		elapsed_s, r, w, cap, (double)run->slept_ns / 1e9);
	fflush(stderr);
	status_drawn = true;
}

void report_clear_status(void)
{
	if (!status_drawn)
		return; /* nothing of ours to erase: the line may be the job's */
	fprintf(stderr, "\r\033[K");
	fflush(stderr);
	status_drawn = false;
}
