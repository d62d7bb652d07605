/*
 * tool_attach.c - `discnice attach`: regulate processes that are already
 * running (issue #9 item 5), as `renice -p`, `ionice -p` and `cpulimit -p`
 * act on a running process.
 *
 * No agent can be preloaded into a running process, so this is the
 * supervisor's regulation from outside alone (tool_regulate.c): every tick
 * the kernel's count of the processes' disk I/O (/proc/PID/io) is charged
 * to the class's rate window, and while the window cannot take it their
 * running threads are held (tool_hold.c: ptrace stops, SIGSTOP where
 * ptrace is refused).  Their future children are found by their parent
 * links at every pass over /proc.
 *
 * Order, so that bad input never touches a process:
 *   1. parse the options (tool_options.c, run's table; exit 2);
 *   2. check every PID (exists, a process and not a thread, not init nor a
 *      kernel thread, not discnice nor one of its ancestors, not a zombie,
 *      the caller's own unless root, its /proc/PID/io readable, and no
 *      other discnice regulating it or anything below it; exit 2);
 *   3. make or join the class, claim a run slot (exit 125);
 *   4. regulate until every process is gone (exit 0) or SIGINT, SIGTERM or
 *      SIGHUP asks us to detach (exit 0); either way every hold is let go.
 *
 * Never left stopped: a ptrace hold ends with its tracer - if we are
 * killed, even by SIGKILL, the kernel detaches and resumes every tracee
 * (kernel/ptrace.c: exit_ptrace()).  A process held with SIGSTOP is known
 * to the guard (tool_hold.c: guard_main(), a fork of ours in a process
 * group of its own), which continues it when our end of its pipe closes,
 * however we died.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc_io.h"
#include "common/rate.h"
#include "common/segment.h"
#include "tool/tool_attach.h"
#include "tool/tool_class.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"
#include "tool/tool_regulators.h"
#include "tool/tool_regulate.h"
#include "tool/tool_run.h"

#define MAX_TARGETS 256
#define FIRST_TICK_NS (5 * 1000 * 1000ull)
#define PF_KTHREAD_FLAG 0x00200000u /* include/linux/sched.h: PF_KTHREAD */

static volatile sig_atomic_t detach_requested;
static volatile sig_atomic_t stop_requested;

static void on_detach_signal(int sig)
{
	detach_requested = sig;
}

static void on_stop_signal(int sig)
{
	stop_requested = sig;
}

/* ---- checking the PIDs -------------------------------------------------- */

struct target {
	pid_t pid;
	char comm[32];
};

/* What /proc/PID/stat and /proc/PID/status say about a process. */
struct target_facts {
	char comm[32];
	char state;
	pid_t ppid;
	unsigned flags;
	pid_t tgid;
	long uid;       /* real uid, -1 if unknown */
};

static int read_small(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	size_t n = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[n] = '\0';
	return 0;
}

/* 0, or -errno (-ENOENT: no such process). */
static int target_facts_read(pid_t pid, struct target_facts *out)
{
	char path[64], buf[4096];
	memset(out, 0, sizeof *out);
	out->uid = -1;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int rc = read_small(path, buf, sizeof buf);
	if (rc < 0)
		return rc;
	/* "pid (comm) state ppid pgrp session tty_nr tpgid flags ..." */
	char *open = strchr(buf, '('), *close = strrchr(buf, ')');
	if (!open || !close || close < open)
		return -EPROTO;
	size_t len = (size_t)(close - open - 1);
	if (len >= sizeof out->comm)
		len = sizeof out->comm - 1;
	memcpy(out->comm, open + 1, len);
	out->comm[len] = '\0';
	int ppid, pgrp, session, tty, tpgid;
	if (sscanf(close + 1, " %c %d %d %d %d %d %u", &out->state, &ppid, &pgrp, &session, &tty,
		   &tpgid, &out->flags) != 7)
		return -EPROTO;
	out->ppid = (pid_t)ppid;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	if (read_small(path, buf, sizeof buf) == 0) {
		const char *tgid = strstr(buf, "\nTgid:");
		const char *uid = strstr(buf, "\nUid:");
		if (tgid)
			out->tgid = (pid_t)atoi(tgid + 6);
		if (uid)
			out->uid = atol(uid + 5);
	}
	return 0;
}

static bool same_program(pid_t pid)
{
	char path[64], mine[PATH_MAX], theirs[PATH_MAX];
	snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
	ssize_t a = readlink("/proc/self/exe", mine, sizeof mine - 1);
	ssize_t b = readlink(path, theirs, sizeof theirs - 1);
	if (a <= 0 || b <= 0)
		return false;
	mine[a] = theirs[b] = '\0';
	return strcmp(mine, theirs) == 0;
}

/* Is pid one of our ancestors (the shell that started us, its parent, ...)?
 * Their children include us: regulating them would hold discnice itself. */
static bool is_ancestor(pid_t pid)
{
	pid_t up = getppid();
	for (int depth = 0; depth < 4096 && up > 0; depth++) {
		if (up == pid)
			return true;
		struct proc_stat st;
		if (proc_stat_read(up, &st) < 0)
			return false;
		up = st.ppid;
	}
	return false;
}

/* One operand: a PID we may regulate, or one line on stderr and false. */
static bool target_check(const char *text, struct target *out)
{
	/* The rule another regulator reading our command line uses too
	 * (tool_options.c command_line_pids()). */
	pid_t pid;
	if (!pid_text(text, &pid)) {
		errorf("'%s' is not a process ID (a positive whole number, as for kill(1))", text);
		return false;
	}
	out->pid = pid;
	struct target_facts f;
	int rc = target_facts_read(pid, &f);
	if (rc == -ENOENT || rc == -ESRCH) {
		errorf("no process %d", (int)pid);
		return false;
	}
	if (rc < 0) {
		errorf("cannot read /proc/%d/stat: %s", (int)pid, strerror(-rc));
		return false;
	}
	snprintf(out->comm, sizeof out->comm, "%s", f.comm);
	if (f.tgid && f.tgid != pid) {
		errorf("%d is a thread of process %d (%s): give the process's ID", (int)pid,
		       (int)f.tgid, f.comm);
		return false;
	}
	if (f.flags & PF_KTHREAD_FLAG) {
		errorf("process %d (%s) is a kernel thread: it cannot be stopped, and its I/O is "
		       "not a job's", (int)pid, f.comm);
		return false;
	}
	if (pid == 1) {
		errorf("process 1 (%s) is init: discnice never holds it", f.comm);
		return false;
	}
	if (pid == getpid()) {
		errorf("process %d is this discnice itself", (int)pid);
		return false;
	}
	if (pid == getppid()) {
		errorf("process %d (%s) started discnice (your shell?): holding it would hold "
		       "discnice too", (int)pid, f.comm);
		return false;
	}
	if (is_ancestor(pid)) {
		errorf("process %d (%s) is an ancestor of discnice: its children include "
		       "discnice itself", (int)pid, f.comm);
		return false;
	}
	if (f.state == 'Z' && proc_thread_count(pid) <= 1) {
		errorf("process %d (%s) has exited (a zombie)", (int)pid, f.comm);
		return false;
	}
	if (getuid() != 0 && f.uid != (long)getuid()) {
		errorf("process %d (%s) belongs to another user (uid %ld): you may attach only to "
		       "your own processes", (int)pid, f.comm, f.uid);
		return false;
	}
	if (same_program(pid)) {
		errorf("process %d is discnice, whose job is regulated already: change its "
		       "class's caps with 'discnice set' (see 'discnice ls'), or run the job with "
		       "'discnice run --policy manners' to regulate it by progress", (int)pid);
		return false;
	}
	struct proc_io io;
	rc = proc_io_read(pid, &io);
	if (rc < 0) {
		errorf("cannot read /proc/%d/io (%s): %s", (int)pid, f.comm,
		       rc == -EACCES || rc == -EPERM
			       ? "not readable to you (a set-user-ID program?), so its disk I/O "
				 "cannot be measured"
			       : strerror(-rc));
		return false;
	}
	return true;
}

bool attach_pid_check(const char *text, pid_t *pid, char *comm, size_t comm_len)
{
	struct target t;
	if (!target_check(text, &t))
		return false;
	*pid = t.pid;
	if (comm && comm_len)
		snprintf(comm, comm_len, "%s", t.comm);
	return true;
}

/* ---- regulating --------------------------------------------------------- */

static void catch_signal(int sig, void (*handler)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler; /* no SA_RESTART: the wait must end */
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

/* Ctrl-Z (or SIGTTOU: a background discnice writing to a TOSTOP terminal)
 * stops discnice, and nothing may stay held while nobody ticks: let go,
 * then stop with the signal's default action.  The processes run free
 * meanwhile (they are not in our process group), and what they do then is
 * forgiven: charged at fg, it held them at 0 B/s for as long again.  The
 * next tick holds again.  Returns the ns we were stopped. */
static uint64_t stop_self(struct regulator *reg, int sig)
{
	regulator_release(reg);
	uint64_t since = clock_now_ns();
	signal(sig, SIG_DFL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	catch_signal(sig, on_stop_signal);
	regulator_forgive(reg);
	return clock_now_ns() - since;
}

static void caps_text(char *buf, size_t len, const struct dn_caps *caps)
{
	class_caps_text(buf, len, caps);
	if (!buf[0])
		snprintf(buf, len, "none (measuring only)");
}

int tool_attach(int argc, char **argv)
{
	struct run_config config;
	attach_options_parse(&config, argc, argv);

	/* Every PID first: one line for each bad one, and then nothing is
	 * touched. */
	static struct target targets[MAX_TARGETS];
	static pid_t pids[MAX_TARGETS];
	unsigned n = 0;
	bool bad = false;
	for (unsigned i = 0; i < config.npids; i++) {
		struct target t;
		if (!target_check(config.pids[i], &t)) {
			bad = true;
			continue;
		}
		bool seen = false;
		for (unsigned k = 0; k < n; k++)
			seen |= targets[k].pid == t.pid;
		if (seen)
			continue;
		if (n == MAX_TARGETS) {
			errorf("more than %u processes given", MAX_TARGETS);
			return EXIT_USAGE;
		}
		pids[n] = t.pid;
		targets[n++] = t;
	}
	if (bad)
		return EXIT_USAGE;
	/* Checked and published as one step (tool_regulators.h), before
	 * anything forks (the lock would go with a child). */
	int lock = regulators_lock();
	if (!pids_free_of_regulators(pids, n, ASKER_ATTACH)) {
		regulators_unlock(lock);
		return EXIT_USAGE;
	}

	if (!config.class_given)
		snprintf(config.class_name, sizeof config.class_name, "attach-%d", (int)getpid());
	struct dn_segment *seg;
	int slot;
	int rc = run_class_join(&config, RUN_KIND_ATTACH, &seg, &slot);
	if (rc) {
		regulators_unlock(lock);
		return rc;
	}
	__atomic_store_n(&seg->runs[slot].attached_pid, (uint32_t)pids[0], __ATOMIC_RELEASE);
	regulators_unlock(lock);
	struct regulator *reg = regulator_new(seg, slot, true);
	if (!reg) {
		errorf("out of memory");
		segment_release_run(seg, slot);
		segment_detach(seg, config.class_name);
		return EXIT_INTERNAL;
	}

	/* Traps of held threads come as SIGCHLD (we are their tracer). */
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	catch_signal(SIGINT, on_detach_signal);
	catch_signal(SIGTERM, on_detach_signal);
	catch_signal(SIGHUP, on_detach_signal);
	catch_signal(SIGTSTP, on_stop_signal);
	catch_signal(SIGTTOU, on_stop_signal);
	signal(SIGPIPE, SIG_IGN); /* a closed stderr must not cut the detach short */

	uint64_t start = clock_now_ns();
	regulator_attach(reg, pids, n);
	if (!config.quiet) {
		char caps[128];
		caps_text(caps, sizeof caps, &config.caps);
		char more[48] = "";
		if (n > 1)
			snprintf(more, sizeof more, " and %u more", n - 1);
		errorf("attached to %d (%s)%s and its future children: class %s, cap %s; "
		       "Ctrl-C detaches", (int)targets[0].pid, targets[0].comm, more,
		       config.class_name, caps);
	}

	uint64_t next_tick = start + FIRST_TICK_NS, stopped_ns = 0;
	while (!detach_requested && regulator_alive(reg)) {
		int status;
		pid_t r;
		/* Traps of the threads we hold, and their exits (a tracer hears
		 * of those first); the guard, if it ever dies. */
		while ((r = waitpid(-1, &status, WNOHANG | __WALL)) > 0)
			regulator_child_event(reg, r, status);
		if (stop_requested) {
			int sig = stop_requested;
			stop_requested = 0;
			stopped_ns += stop_self(reg, sig);
			continue;
		}
		uint64_t now = clock_now_ns();
		if (now < next_tick) {
			struct timespec wait = { (time_t)((next_tick - now) / NS_PER_SEC),
						 (long)((next_tick - now) % NS_PER_SEC) };
			sigtimedwait(&chld, NULL, &wait);
			continue;
		}
		next_tick = now + regulator_tick(reg, now);
	}
	bool all_gone = !regulator_alive(reg);
	uint64_t end = clock_now_ns();
	regulator_release(reg); /* (counts a hold in progress into the stats) */
	struct regulator_stats stats;
	regulator_stats(reg, &stats);
	uint64_t read_bytes = __atomic_load_n(&seg->runs[slot].measured_read_bytes, __ATOMIC_RELAXED);
	uint64_t write_bytes = __atomic_load_n(&seg->runs[slot].measured_write_bytes,
					       __ATOMIC_RELAXED);
	/* Let go of every hold, wait for traps still on their way, end the
	 * guard (which continues nothing more). */
	regulator_end(reg);
	segment_release_run(seg, slot);
	segment_detach(seg, config.class_name);

	if (!config.quiet) {
		double secs = (double)(end - start) / 1e9;
		char r[24], w[24], rate[24];
		size_format(r, sizeof r, (double)read_bytes);
		size_format(w, sizeof w, (double)write_bytes);
		size_format(rate, sizeof rate, secs > 0 ? (double)(read_bytes + write_bytes) / secs : 0);
		char why[96];
		if (all_gone)
			snprintf(why, sizeof why, "every process it regulated has exited");
		else
			snprintf(why, sizeof why, "detached (%s), nothing held",
				 strsignal((int)detach_requested));
		/* Stopped by the user: the processes ran free and unwatched,
		 * and one that exited then took what it did after our last
		 * look with it (its parent, not we, reaped it). */
		char stopped[128] = "";
		if (stopped_ns)
			snprintf(stopped, sizeof stopped,
				 "; discnice was stopped %.1f s, when they ran free (a process that "
				 "exited then is counted only to that point)",
				 (double)stopped_ns / 1e9);
		errorf("%s: %s read, %s written in %.1f s (%s/s), held %.1f s%s", why, r, w, secs,
		       rate, (double)stats.stopped_ns / 1e9, stopped);
	}
	return 0;
}
