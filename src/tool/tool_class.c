/*
 * tool_class.c - the user's classes as the control commands see them
 * (see tool_class.h).
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <signal.h>

#include "common/clock.h"
#include "common/proc_io.h"
#include "common/rate.h"
#include "common/segment.h"
#include "policy/rate_window.h"
#include "tool/tool_class.h"
#include "tool/tool_json.h"
#include "tool/tool_msg.h"

#define N_COUNTERS (sizeof(struct dn_counters) / sizeof(uint64_t))

/* Counters are bumped by every process with relaxed atomic adds: read each
 * the same way, never with a plain copy. */
static void counters_add(struct dn_counters *sum, const struct dn_counters *live)
{
	uint64_t *to = (uint64_t *)sum;
	const uint64_t *from = (const uint64_t *)live;
	for (size_t i = 0; i < N_COUNTERS; i++)
		to[i] += segment_read_counter(&from[i]);
}

uint32_t class_slurm_from_environ(const char *block, size_t len, char *step, size_t step_len)
{
	unsigned long job = 0;
	const char *step_text = NULL;
	size_t step_text_len = 0;
	step[0] = '\0';
	for (size_t at = 0; at < len;) {
		const char *entry = block + at;
		size_t n = strnlen(entry, len - at);
		if (n > 13 && strncmp(entry, "SLURM_JOB_ID=", 13) == 0)
			job = strtoul(entry + 13, NULL, 10);
		else if (n > 14 && strncmp(entry, "SLURM_STEP_ID=", 14) == 0) {
			step_text = entry + 14;
			step_text_len = n - 14;
		}
		at += n + 1;
	}
	if (!job || job > UINT32_MAX)
		return 0;
	/* slurm.h: SLURM_BATCH_SCRIPT 0xfffffffb, SLURM_EXTERN_CONT
	 * 0xfffffffc, SLURM_INTERACTIVE_STEP 0xfffffffa; a batch script's
	 * environment names no step at all. */
	unsigned long id = step_text ? strtoul(step_text, NULL, 10) : 0xfffffffbul;
	if (id == 0xfffffffbul)
		snprintf(step, step_len, "batch");
	else if (id == 0xfffffffcul)
		snprintf(step, step_len, "extern");
	else if (id == 0xfffffffaul)
		snprintf(step, step_len, "interactive");
	else
		snprintf(step, step_len, "%.*s", (int)(step_text_len < 10 ? step_text_len : 10),
			 step_text);
	return (uint32_t)job;
}

/* The Slurm job and step a run's supervisor was started in, if any. */
static void run_slurm_job(struct class_run_view *run)
{
	char path[64], block[32768];
	snprintf(path, sizeof path, "/proc/%" PRIu32 "/environ", run->pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, block, sizeof block);
	close(fd);
	if (n > 0)
		run->slurm_job = class_slurm_from_environ(block, (size_t)n, run->slurm_step,
							  sizeof run->slurm_step);
}

static void class_snapshot(struct dn_segment *seg, struct class_view *view)
{
	int64_t read_bytes, write_bytes;
	uint64_t now = clock_now_ns();

	/* Read without the lock, as report_print_status() does: a listing
	 * must never wait on a job (one stopped inside its few-hundred-ns
	 * section would hold the lock until continued), and a window updated
	 * while we sum it only shifts a displayed rate a little. */
	view->caps = segment_caps_now(seg);
	view->window_ns = seg->window.span_ns;
	view->window_policy = seg->window_policy;
	rate_window_sums(&seg->window, now, &read_bytes, &write_bytes);
	uint64_t origin = seg->window.origin_ns;

	/* As report_print_status(): a window younger than its span counts
	 * over the time it has existed. */
	uint64_t span = now - origin < view->window_ns ? now - origin : view->window_ns;
	double secs = span ? (double)span / 1e9 : 1;
	view->window_read_bps = read_bytes > 0 ? (double)read_bytes / secs : 0;
	view->window_write_bps = write_bytes > 0 ? (double)write_bytes / secs : 0;
	view->net_caps.read_bps = __atomic_load_n(&seg->net_caps.read_bps, __ATOMIC_RELAXED);
	view->net_caps.write_bps = __atomic_load_n(&seg->net_caps.write_bps, __ATOMIC_RELAXED);
	view->net_caps.total_bps = __atomic_load_n(&seg->net_caps.total_bps, __ATOMIC_RELAXED);
	rate_window_sums(&seg->net_window, now, &read_bytes, &write_bytes);
	view->window_recv_bps = read_bytes > 0 ? (double)read_bytes / secs : 0;
	view->window_send_bps = write_bytes > 0 ? (double)write_bytes / secs : 0;
	view->scavenger_target_ns = __atomic_load_n(&seg->scavenger.target_ns, __ATOMIC_RELAXED);
	view->scavenger_rate_bps = __atomic_load_n(&seg->scavenger.rate_bps, __ATOMIC_RELAXED);
	view->scavenger_delay_ns = __atomic_load_n(&seg->scavenger.delay_ns, __ATOMIC_RELAXED);
	view->predict_mask = seg->predict_mask;
	view->attached_runs = __atomic_load_n(&seg->attached_runs, __ATOMIC_RELAXED);
	uint32_t flags = __atomic_load_n(&seg->flags, __ATOMIC_RELAXED); /* one moment's */
	view->yield_throttled = flags & DN_FLAG_YIELD_THROTTLED;
	view->net_yield_free = flags & DN_FLAG_NET_YIELD_FREE;

	/* A released slot keeps its counters until it is claimed again, so
	 * the class total sums every slot, free or not. */
	counters_add(&view->total, &seg->counters);
	for (unsigned i = 0; i < DN_MAX_RUNS; i++) {
		counters_add(&view->total, &seg->runs[i].counters);
		uint32_t pid = __atomic_load_n(&seg->runs[i].pid, __ATOMIC_ACQUIRE);
		if (!pid)
			continue;
		struct class_run_view *run = &view->runs[view->n_runs++];
		run->slot = i;
		run->pid = pid;
		run->alive = segment_run_alive(&seg->runs[i]);
		uint32_t state = __atomic_load_n(&seg->runs[i].state, __ATOMIC_ACQUIRE);
		run->stopped = run->alive && (state & DN_RUN_STOPPED);
		run->kind = segment_run_kind(&seg->runs[i]);
		run->job_stopped = run->alive && (state & DN_RUN_JOB_STOPPED);
		run->stopped_ns = __atomic_load_n(&seg->runs[i].stopped_ns, __ATOMIC_RELAXED);
		view->stopped |= run->stopped;
		view->stopped_ns += run->stopped_ns;
		uint64_t until = __atomic_load_n(&seg->runs[i].suspend_until_ns, __ATOMIC_ACQUIRE);
		run->suspended = run->alive && until > clock_now_ns();
		run->suspended_ns = __atomic_load_n(&seg->runs[i].suspended_ns, __ATOMIC_RELAXED);
		run->manners_read_ns_per_gib =
			__atomic_load_n(&seg->runs[i].manners_read_ns_per_gib, __ATOMIC_RELAXED);
		run->manners_write_ns_per_gib =
			__atomic_load_n(&seg->runs[i].manners_write_ns_per_gib, __ATOMIC_RELAXED);
		if (run->kind == RUN_KIND_BENICE) {
			/* benice's suspensions are its SIGSTOPs (DN_RUN_STOPPED). */
			run->suspended = run->stopped && !run->job_stopped;
			run->suspended_ns = run->stopped_ns;
		}
		view->suspended |= run->suspended;
		view->suspended_ns += run->suspended_ns;
		counters_add(&run->counters, &seg->runs[i].counters);
		run->attached_pid = __atomic_load_n(&seg->runs[i].attached_pid, __ATOMIC_RELAXED);
		run->attached_processes =
			__atomic_load_n(&seg->runs[i].attached_processes, __ATOMIC_RELAXED);
		run->measured_read_bytes =
			__atomic_load_n(&seg->runs[i].measured_read_bytes, __ATOMIC_RELAXED);
		run->measured_write_bytes =
			__atomic_load_n(&seg->runs[i].measured_write_bytes, __ATOMIC_RELAXED);
		if (run->alive)
			run_slurm_job(run);
	}
}

static int view_by_name(const void *a, const void *b)
{
	return strcmp(((const struct class_view *)a)->name, ((const struct class_view *)b)->name);
}

int class_list(struct class_view **views)
{
	char dir[DN_PATH_MAX], path[DN_PATH_MAX + sizeof views[0]->name + 1];
	int rc = segment_dir(dir, sizeof dir, 0);
	*views = NULL;
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;

	struct class_view *list = NULL;
	int n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		/* Dot files are not classes (the probe threshold, temp files). */
		if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof list->name)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			struct class_view *bigger = realloc(list, (size_t)cap * sizeof *list);
			if (!bigger) {
				free(list);
				closedir(d);
				return -ENOMEM;
			}
			list = bigger;
		}
		struct class_view *view = &list[n++];
		memset(view, 0, sizeof *view);
		snprintf(view->name, sizeof view->name, "%s", e->d_name);
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		struct dn_segment *seg;
		view->error = segment_attach_path(path, &seg);
		if (view->error == -ENOENT) {
			n--; /* its last run left while we looked */
			continue;
		}
		if (view->error == 0) {
			class_snapshot(seg, view);
			munmap(seg, sizeof *seg);
		}
	}
	closedir(d);
	if (n > 1)
		qsort(list, (size_t)n, sizeof *list, view_by_name);
	*views = list;
	return n;
}

const char *class_error_text(int error)
{
	switch (error) {
	case -EPROTO:
		return "corrupt segment: bad magic, size or window";
	case -EPROTONOSUPPORT:
		return "made by another version of discnice (its jobs started before an upgrade?)";
	case -EPERM:
	case -EACCES:
		return "not yours: owned by another user, or not mode 0600";
	case -ELOOP:
		return "not a regular file: a symbolic link";
	default:
		return strerror(-error);
	}
}

void class_dir_error(int rc, const char *doing)
{
	char dir[DN_PATH_MAX];
	struct stat st;
	const char *sep = doing ? ": " : "";
	doing = doing ? doing : "";
	if (segment_dir(dir, sizeof dir, 0) == -ENAMETOOLONG)
		errorf("%s%sthe class directory's path is too long", doing, sep);
	else if (rc == -EPERM && lstat(dir, &st) == 0)
		errorf("%s%s%s is not a private directory of yours (%s); remove it, or set "
		       "XDG_RUNTIME_DIR to a directory you own", doing, sep, dir,
		       !S_ISDIR(st.st_mode) ? "not a directory"
		       : st.st_uid != getuid() ? "it belongs to another user"
						 : "it is open to other users");
	else
		errorf("%s%sthe class directory %s: %s", doing, sep, dir, strerror(-rc));
}

int class_open(const char *name, struct dn_segment **seg)
{
	char dir[DN_PATH_MAX], path[2 * DN_PATH_MAX];
	size_t len = strlen(name);
	bool valid = len > 0 && len < DN_CLASS_NAME_MAX && name[0] != '.';
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)name[i] < 0x21 || (unsigned char)name[i] > 0x7e || name[i] == '/')
			valid = false;
	/* A name segment_path() would refuse can never be a class. */
	int rc = valid ? segment_dir(dir, sizeof dir, 0) : -ENOENT;
	if (rc == -EPERM) {
		char doing[DN_CLASS_NAME_MAX + 32];
		snprintf(doing, sizeof doing, "class '%s'", name);
		class_dir_error(rc, doing);
		return EXIT_BAD_CLASS;
	}
	if (rc == 0) {
		snprintf(path, sizeof path, "%s/%s", dir, name);
		rc = segment_attach_path(path, seg);
	}
	if (rc == 0)
		return 0;
	if (rc == -ENOENT || rc == -ENOTDIR) {
		errorf("no class '%s' (see 'discnice ls')", name);
		return EXIT_NO_CLASS;
	}
	if (rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EPERM || rc == -EACCES ||
	    rc == -ELOOP) {
		errorf("class '%s': %s", name, class_error_text(rc));
		return EXIT_BAD_CLASS;
	}
	errorf("class '%s': %s", name, strerror(-rc));
	return EXIT_INTERNAL;
}

void class_close(struct dn_segment *seg)
{
	munmap(seg, sizeof *seg);
}

void command_options_help(const struct command_option *options, size_t n_options)
{
	for (size_t i = 0; i < n_options; i++) {
		const struct command_option *o = &options[i];
		help_option_print(o->short_name, o->name, o->arg, o->help, 24);
		putchar('\n');
	}
}

const char *class_predict_name(uint32_t mask)
{
	switch (mask) {
	case 0: return "none";
	case DN_PREDICT_CACHE: return "cache";
	case DN_PREDICT_READAHEAD: return "readahead";
	case DN_PREDICT_CACHE | DN_PREDICT_READAHEAD: return "cache+readahead";
	case DN_PREDICT_ALL: return "all";
	default: return "?";
	}
}

void class_rate_text(char *buf, size_t len, double bps)
{
	char size[24];
	size_format(size, sizeof size, bps);
	snprintf(buf, len, "%s/s", size);
}

void class_cap_text(char *buf, size_t len, uint64_t bps)
{
	char size[24];
	if (!bps) {
		snprintf(buf, len, "none");
		return;
	}
	cap_format(size, sizeof size, bps); /* 5M: "5.00 MB/s" */
	snprintf(buf, len, "%s/s", size);
}

/* The caps set, each after its name (read_bps, write_bps, total_bps). */
static void caps_named_text(char *buf, size_t len, const struct dn_caps *caps,
			    const char *const names[3])
{
	const uint64_t bps[3] = { caps->read_bps, caps->write_bps, caps->total_bps };
	buf[0] = '\0';
	for (unsigned i = 0; i < 3; i++)
		if (bps[i]) {
			char text[32];
			class_cap_text(text, sizeof text, bps[i]);
			snprintf(buf + strlen(buf), len - strlen(buf), "%s%s %s", buf[0] ? ", " : "",
				 names[i], text);
		}
}

void class_caps_text(char *buf, size_t len, const struct dn_caps *caps)
{
	static const char *const names[3] = { "read", "write", "total" };
	caps_named_text(buf, len, caps, names);
}

void class_net_caps_text(char *buf, size_t len, const struct dn_caps *net_caps)
{
	static const char *const names[3] = { "recv", "send", "net" };
	caps_named_text(buf, len, net_caps, names);
}

void class_json_head(FILE *f, const struct class_view *view)
{
	fputs("\"class\": ", f);
	json_print_string(f, view->name);
	if (view->error) {
		fputs(", \"error\": ", f);
		json_print_string(f, class_error_text(view->error));
		return;
	}
	fprintf(f, ", \"read_cap_bps\": %" PRIu64 ", \"write_cap_bps\": %" PRIu64
		   ", \"total_cap_bps\": %" PRIu64 ", \"window_s\": %.3f, \"predict\": \"%s\""
		   ", \"attached_runs\": %" PRIu32 ", \"recv_cap_bps\": %" PRIu64
		   ", \"send_cap_bps\": %" PRIu64 ", \"net_cap_bps\": %" PRIu64,
		view->caps.read_bps, view->caps.write_bps, view->caps.total_bps,
		(double)view->window_ns / 1e9, class_predict_name(view->predict_mask),
		view->attached_runs, view->net_caps.read_bps, view->net_caps.write_bps,
		view->net_caps.total_bps);
	/* --window-policy (version 9): "sliding" or "paper". */
	fprintf(f, ", \"window_policy\": \"%s\"",
		view->window_policy == DN_WINDOW_POLICY_PAPER ? "paper" : "sliding");
	/* --net-policy (version 8): "cap" or "scavenger" with its state. */
	if (view->scavenger_target_ns)
		fprintf(f, ", \"net_policy\": \"scavenger\", \"scavenger_target_ms\": %.0f"
			   ", \"scavenger_rate_bps\": %" PRIu64 ", \"scavenger_delay_ms\": %.1f",
			(double)view->scavenger_target_ns / 1e6, view->scavenger_rate_bps,
			(double)view->scavenger_delay_ns / 1e6);
	else
		fputs(", \"net_policy\": \"cap\"", f);
}

uint64_t class_predicted_writes(const struct dn_counters *c)
{
	return c->predicted_write_bytes > c->cancelled_write_bytes
		       ? c->predicted_write_bytes - c->cancelled_write_bytes : 0;
}

const char *class_run_policy(const struct class_run_view *run)
{
	switch (run->kind) {
	case RUN_KIND_BENICE: return "benice";
	case RUN_KIND_ATTACH: return "attach";
	case RUN_KIND_AGENT:  break;
	}
	return "run";
}

const char *class_benice_state(const struct class_run_view *run)
{
	return !run->alive ? "gone" : run->job_stopped ? "stopped" : run->stopped ? "suspended"
										   : "running";
}
