/*
 * tool_run.c - `discnice run`: the supervisor.
 *
 * Order matters, so that bad input never leaves a half-started job:
 *   1. parse and validate every option, find the command (exit 2/126/127);
 *   2. find the agent, make or join the class segment (exit 125);
 *   3. become a child subreaper, note our own /proc/self/io, fork, exec;
 *   4. wait, redrawing the status line, reaping orphans that are done,
 *      stopping when the job stops itself;
 *   5. the kernel's count of the job's I/O is the growth of our own
 *      /proc/self/io: every reaped descendant's counts were added to its
 *      reaper (wait_task_zombie), and we reaped the job;
 *   6. report, summary, leave the class; exit with the job's status, or
 *      die of the signal the job died of.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc_io.h"
#include "common/segment.h"
#include "common/signal_disposition.h"
#include "graybox/cache_detector.h"
#include "graybox/toolbox/parameters.h"
#include "policy/policy.h"
#include "policy/paper_window.h"
#include "policy/rate_window.h"
#include "policy/scavenger.h"
#include "tool/tool_class.h"
#include "tool/tool_exec.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"
#include "tool/tool_regulate.h"
#include "tool/tool_manners.h"
#include "tool/tool_yield.h"
#include "tool/tool_report.h"
#include "tool/tool_run.h"

#define AGENT_NAME "libdiscnice.so"
#define PROBE_THRESHOLD_FALLBACK_NS 40000u /* a cold 4 KiB read on SSD ~ 50-100 us */
#define STATUS_INTERVAL_NS (250 * 1000 * 1000ull)
#define YIELD_INTERVAL_NS (50 * 1000 * 1000ull)
#define REGULATE_INTERVAL_NS (5 * 1000 * 1000ull) /* first tick; then tool_regulate.c's */

static volatile sig_atomic_t job_pid;            /* 0 once reaped */
static volatile sig_atomic_t interrupt_seen;     /* an INT, TERM, HUP or QUIT came */
static volatile sig_atomic_t settle_interrupted; /* one came after the job's end */
/* Our slot, where an interrupt is published for the job's agents. */
static struct dn_run *volatile interrupt_run;
static volatile sig_atomic_t continued;
/* The watcher of a followed stop (follow_job_stop()): its SIGCONT says the
 * job was continued already, and is not passed on. */
static volatile sig_atomic_t stop_watcher;
static volatile sig_atomic_t continued_by_watcher;

/* glibc's internal signals (SIGCANCEL and SIGSETXID, 32 and 33: below
 * SIGRTMIN) are set to SIG_IGN in the child by posix_spawn (glibc 2.36,
 * posix/spawni.c __spawni_child: "if (is_internal_signal (sig))
 * sa.sa_handler = SIG_IGN"), and the exec keeps them ignored: the job
 * survived a `kill -33` that kills it without us.  Asked to, the child
 * defaults them instead - those that were not ignored here already, as
 * our parent left them.  sigaddset() refuses them, so their bits are set
 * by hand (bit sig - 1 of the set's first word, as glibc's __sigaddset). */
_Static_assert(sizeof(unsigned long) == 8, "signals 32 and 33 are in the set's first word");

static void internal_signals_default(sigset_t *set)
{
	sigemptyset(set);
#ifdef __GLIBC__
	for (int sig = 32; sig < SIGRTMIN; sig++) {
		void *handler;
		unsigned long flags;
		if (signal_disposition(sig, &handler, &flags) == 0 && handler != (void *)SIG_IGN)
			set->__val[0] |= 1UL << (sig - 1); /* 64-bit words: static assert above */
	}
#endif
}

/*
 * Start the job: posix_spawn(3), whose clone(CLONE_VM | CLONE_VFORK)
 * copies no address space.  A fork() copied ours, and the job's execve()
 * then tore the copy down with a TLB shootdown across CPUs (exit_mmap,
 * flush_tlb_mm_range): with the copy-on-write faults between, about
 * 0.4 ms of every run on a 2-CPU VM (`run --rate inf -- true`, perf stat).
 * The child's signal mask is the caller's from before SIGCHLD was
 * blocked, and the exec's errno is the return value (glibc reports it
 * through the CLONE_VFORK wait).  A script without "#!" is handed to
 * /bin/sh, as execvp(3) and env(1) do (POSIX: "as if ... by the shell").
 * Returns 0 or an errno, and then no process was left behind.
 */
static int spawn_job(pid_t *pid, const char *program, char *const argv[], const sigset_t *mask)
{
	posix_spawnattr_t attr;
	int e = posix_spawnattr_init(&attr);
	if (e)
		return e;
	sigset_t defaults;
	internal_signals_default(&defaults);
	if ((e = posix_spawnattr_setsigmask(&attr, mask)) == 0 &&
	    (e = posix_spawnattr_setsigdefault(&attr, &defaults)) == 0 &&
	    (e = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)) == 0)
		e = posix_spawn(pid, program, NULL, &attr, argv, environ);
	char **sh_argv;
	if (e == ENOEXEC && (sh_argv = program_sh_argv(program, argv))) {
		e = posix_spawn(pid, "/bin/sh", NULL, &attr, sh_argv, environ);
		free(sh_argv);
	}
	posix_spawnattr_destroy(&attr);
	return e;
}

/*
 * --exec: become the job.  The run's slot was claimed with our pid, which
 * the job keeps, so `ls`, `top` and `set` find it as they find a
 * supervised run, and the agent that loads into it gives the slot and the
 * class back when that process exits (agent.c, agent_destructor).  A job
 * killed outright leaves them to the next `discnice run` (reap_stale_classes),
 * as a supervisor killed with SIGKILL does.  Nothing here has touched a
 * signal disposition or mask yet: the job gets ours, which are its
 * parent's, as under nice(1).  Returns only if the exec failed, with
 * nothing left behind (exit 126 or 127, as without --exec).
 */
static int exec_job(struct dn_segment *seg, int slot, const char *class_name,
		    const char *program, char *const argv[])
{
	fflush(NULL);
	int e = program_exec(program, argv);
	segment_release_run(seg, slot);
	segment_detach(seg, class_name);
	errorf("cannot run %s: %s", program, strerror(e));
	return e == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
}

/* Is pid one of ours - the job or a descendant (re-parented ones too: we
 * are their subreaper)?  By the parent links in /proc/PID/stat; for a
 * signal handler: proc_read_small() (open, read, close) and hand-made
 * text only.  A process gone already is not (then the signal is passed
 * on, as before). */
static bool our_descendant(pid_t pid)
{
	pid_t self = getpid();
	for (int depth = 0; depth < 64 && pid > 1; depth++) {
		char path[32] = "/proc/", digits[16], buf[512];
		int nd = 0;
		for (unsigned v = (unsigned)pid; v && nd < 15; v /= 10)
			digits[nd++] = (char)('0' + v % 10);
		size_t at = 6;
		while (nd)
			path[at++] = digits[--nd];
		memcpy(path + at, "/stat", 6);
		if (proc_read_small(path, buf, sizeof buf) <= 0)
			return false;
		const char *p = strrchr(buf, ')'); /* comm may hold spaces and ')' */
		if (!p || p[1] != ' ' || !p[2] || p[3] != ' ')
			return false;
		pid_t parent = 0;
		for (p += 4; *p >= '0' && *p <= '9'; p++)
			parent = parent * 10 + (*p - '0');
		if (parent == self)
			return true;
		pid = parent;
	}
	return false;
}

/* Signals sent to discnice with kill(1) are passed on to the job; those
 * the terminal sent to the whole foreground group the job got already
 * (tty_io.c sends them with SI_KERNEL).  So did one a process of the job
 * sent (a `kill 0` in the job signals its group, discnice with it).  Not
 * "a process of the job's group", sudo's rule: a shell without job
 * control runs discnice in its own group, and its `kill $!` must reach the
 * job.  A kill of the whole group from outside (kill -- -PGID, systemd's
 * control-group kill) cannot be told from one sent to discnice alone, and
 * reaches the job twice (discnice(1), LIMITS AND BUGS; looking for it
 * pending on the job was tried: the job has mostly taken it by then, and
 * the look only delayed our copy past the point where the kernel would
 * have merged the two).  SIGTSTP is one of them:
 * a `kill -TSTP` of discnice stops the job, and discnice follows it
 * (follow_job_stop()); Ctrl-Z stops the job, and discnice follows it the
 * same way - a job that catches SIGTSTP and runs on leaves discnice
 * running too, as the plain command would be. */
static void forward_signal(int sig, siginfo_t *info, void *context)
{
	(void)context;
	bool interrupt = sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
	/* Whoever interrupts wants the run over: its debt is not settled
	 * after the job (regulator_settle()).  Once the job is gone, the
	 * signal is not passed on - its pid may be someone else's by now -
	 * but ends discnice, after the report, as it would have ended the
	 * plain command. */
	if (interrupt) {
		interrupt_seen = 1;
		/* For the agents: a call of the job held in our throttle when
		 * its handler for this signal ran ends there (throttle.c).
		 * The signal first, then the time that publishes it. */
		struct dn_run *run = interrupt_run;
		if (run && sig != SIGHUP) { /* a daemon's HUP means "reload" */
			__atomic_store_n(&run->interrupted_sig, (uint32_t)sig, __ATOMIC_RELAXED);
			__atomic_store_n(&run->interrupted_ns, clock_now_ns(), __ATOMIC_RELEASE);
		}
	}
	if (job_pid == 0 && interrupt) {
		settle_interrupted = sig;
		return;
	}
	if (sig == SIGCONT) {
		continued = 1;
		if (stop_watcher > 0 && info->si_pid == (pid_t)stop_watcher) {
			continued_by_watcher = 1;
			return;
		}
	}
	if (job_pid > 0 && (info->si_code == SI_USER || info->si_code == SI_QUEUE)) {
		pid_t job = (pid_t)job_pid, sender = info->si_pid;
		if (sender > 0 && (sender == job || our_descendant(sender)))
			return;
		kill(job, sig);
	}
}

/* Is dir on procfs or sysfs, where no report can be created? */
static bool statfs_is_proc(const char *dir)
{
	struct statfs fs;
	return statfs(dir, &fs) == 0 && (fs.f_type == PROC_SUPER_MAGIC || fs.f_type == SYSFS_MAGIC);
}

/* The directory path names its last component in, into buf (size
 * PATH_MAX): "/" for "/x", "." for a bare name. */
static const char *dir_part(const char *path, char *buf)
{
	snprintf(buf, PATH_MAX, "%s", path);
	char *slash = strrchr(buf, '/');
	if (!slash)
		return ".";
	*(slash == buf ? slash + 1 : slash) = '\0';
	return buf;
}

/* Where a symbolic link at path leads, followed link by link (at most 40,
 * as the kernel): the final name, into out; or "" when path is no link.
 * *via_proc: some link led into /proc (/dev/stdout -> /proc/self/fd/1). */
static int follow_links(const char *path, char *out, size_t size, bool *via_proc)
{
	char cur[PATH_MAX], target[PATH_MAX];
	*via_proc = false;
	out[0] = '\0';
	snprintf(cur, sizeof cur, "%s", path);
	for (int hop = 0; hop < 40; hop++) {
		struct stat st;
		if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
			if (hop)
				snprintf(out, size, "%s", cur);
			return 0;
		}
		/* A link in a directory of /proc (/proc/self/fd/1, and
		 * /dev/fd/1 through /dev/fd -> /proc/self/fd) is a
		 * descriptor's, whatever file its target names. */
		char dir[PATH_MAX];
		if (statfs_is_proc(dir_part(cur, dir)))
			*via_proc = true;
		ssize_t n = readlink(cur, target, sizeof target - 1);
		if (n < 0)
			return -errno;
		target[n] = '\0';
		if (strncmp(target, "/proc/", 6) == 0)
			*via_proc = true;
		if (target[0] == '/') {
			snprintf(cur, sizeof cur, "%s", target);
		} else {
			char *slash = strrchr(cur, '/');
			if (slash)
				slash[1] = '\0';
			else
				cur[0] = '\0';
			size_t len = strlen(cur);
			if (len + (size_t)n >= sizeof cur)
				return -ENAMETOOLONG;
			memcpy(cur + len, target, (size_t)n + 1);
		}
	}
	return -ELOOP;
}

/* Fail now, not after an hour's job, if the report (or a state file)
 * cannot be written (exit 2 with one line).  Returns the name to write:
 * path, or where its symbolic links lead - the file is replaced, never the
 * link.  Each call's answer is its own copy, kept for the run. */
const char *output_path_check(const char *option, const char *path)
{
	char *resolved = malloc(PATH_MAX);
	if (!resolved)
		usage_error("--%s %s: %s", option, path, strerror(ENOMEM));
	bool via_proc;
	int rc = follow_links(path, resolved, PATH_MAX, &via_proc);
	if (rc < 0)
		usage_error("--%s %s: %s", option, path, strerror(-rc));
	/* /dev/stdout, /proc/self/fd/N: a descriptor, shared with the job
	 * (renaming a report over the file behind it would throw away the
	 * job's output), or a pipe or terminal, which cannot be replaced. */
	if (via_proc)
		usage_error("--%s %s: names a descriptor (through /proc); the file is "
			    "written beside its name and renamed into place: name a file",
			    option, path);
	if (resolved[0])
		path = resolved;
	char buf[PATH_MAX];
	const char *dir = dir_part(path, buf);
	struct stat rst;
	if (access(dir, W_OK) != 0)
		usage_error("--%s %s: cannot write there: %s", option, path, strerror(errno));
	/* access(W_OK) says yes for a regular file as well: the file's
	 * directory must be one (a/b/report with a a file failed only at
	 * the end, exit 125, the job run). */
	if (stat(dir, &rst) != 0 || !S_ISDIR(rst.st_mode))
		usage_error("--%s %s: cannot write there: %s", option, path, strerror(ENOTDIR));
	/* The file is written to a temporary file beside it and renamed
	 * over it: a directory, or a file that is not a regular one
	 * (/proc, a device), can never be replaced that way. */
	if (stat(path, &rst) == 0 && !S_ISREG(rst.st_mode))
		usage_error("--%s %s: not a regular file (%s)", option, path,
			    S_ISDIR(rst.st_mode) ? "a directory" : "a special file");
	if (statfs_is_proc(dir))
		usage_error("--%s %s: cannot write files into /proc or /sys", option, path);
	return path;
}

/* While we are stopped with the job, a process that continues us if the
 * job is continued without us: someone's kill -CONT of the job's PID, or
 * a regulator of the job's own (discnice benice --pid, which ends each
 * suspension with a SIGCONT of the job only).  A stopped process notices
 * nothing, and we stayed stopped for good, a finished job unreaped.  With
 * the plain command a shell would see the job continued (WCONTINUED) and
 * mark it running; it now sees us continued the same way.  The watcher is
 * in a process group of its own, so that neither the terminal's Ctrl-Z nor
 * the shell's fg or bg reaches it; it ends when we run again (fg, bg, its
 * own SIGCONT), or die (PR_SET_PDEATHSIG).  It looks every 20 ms: /proc
 * (the state letter of fs/proc/array.c) is all it needs.  Returns its pid,
 * or -1 (no watcher: stopped as before). */
#define STOP_WATCH_STEP_NS (20 * 1000 * 1000L)
static pid_t start_stop_watcher(pid_t job)
{
	pid_t supervisor = getpid();
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	setpgid(0, 0);
	for (int fd = 3; fd < 1024; fd++)
		close(fd); /* no guard pipe or segment held open by us */
	bool seen_stopped = false;
	for (;;) {
		struct timespec step = { 0, STOP_WATCH_STEP_NS };
		nanosleep(&step, NULL);
		struct proc_stat us, it;
		if (getppid() != supervisor || proc_stat_read(supervisor, &us) < 0)
			_exit(0);
		if (us.state != 'T') {
			if (seen_stopped)
				_exit(0); /* continued (fg, bg): the job is ours again */
			continue;      /* not stopped yet */
		}
		seen_stopped = true;
		/* The job running, or gone (a SIGKILL ends a stopped process). */
		if (proc_stat_read(job, &it) < 0 || it.state != 'T') {
			kill(supervisor, SIGCONT);
			_exit(1);
		}
	}
}

/* The job stopped by itself (kill -TSTP $$, SIGTTIN from the terminal, a
 * user's kill -STOP): the shell waits for us, not for it, so we stop the
 * same way - with the same signal and its default action - and the shell
 * sees its job stopped, as with the plain command.  When we are continued
 * (fg, bg), so is the job; when the job is continued without us, so are we
 * (start_stop_watcher()).  A SIGTSTP, SIGTTIN or SIGTTOU that the kernel
 * discards because our process group is orphaned (kernel/signal.c:
 * get_signal(), is_current_pgrp_orphaned()) leaves us running and the job
 * as it is, as it would any process of that group. */
static void follow_job_stop(struct regulator *regulator, pid_t job, int sig)
{
	/* A stop reported late - we were stopped ourselves meanwhile, as a
	 * Slurm suspension stops every process of the step, and everyone was
	 * continued since - is over: stopping now would leave us stopped
	 * with nobody to continue us (and a finished job waiting on us). */
	struct proc_stat now;
	if (proc_stat_read(job, &now) == 0 && now.state != 'T')
		return;
	/* Nothing stays held while nobody ticks. */
	regulator_release(regulator);
	struct sigaction dfl, old;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	bool restore = sigaction(sig, &dfl, &old) == 0; /* fails for SIGSTOP: fine */
	continued = 0;
	continued_by_watcher = 0;
	pid_t watcher = start_stop_watcher(job);
	stop_watcher = watcher;
	kill(getpid(), sig); /* single-threaded: we stop before kill() returns */
	if (restore)
		sigaction(sig, &old, NULL);
	if (watcher > 0) {
		int status = 0;
		kill(watcher, SIGKILL);
		while (waitpid(watcher, &status, 0) < 0 && errno == EINTR)
			;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 1)
			continued_by_watcher = 1; /* its SIGCONT may be on its way */
	}
	stop_watcher = 0;
	/* Continued by fg or bg: the job too.  By the watcher: the job runs
	 * already, and a SIGCONT of ours would undo a stop sent since. */
	if (continued && !continued_by_watcher)
		kill(job, SIGCONT);
}

/* The job was killed by signal sig: so is discnice, after its report, so
 * that the shell sees what it sees for the plain command.  (bash leaves a
 * loop on Ctrl-C only if the foreground command died of SIGINT: an exit
 * status of 130 means the command handled it.)  As coreutils' timeout
 * does, a core-dumping signal dumps no core of ours: RLIMIT_CORE 0, and
 * not dumpable, which also stops a core_pattern pipe (fs/coredump.c:
 * vfs_coredump() gives up for a task that is not dumpable). */
void die_of_signal(int sig, bool core_dumped)
{
	/* The shell says "Aborted (core dumped)" from our own wait status,
	 * which cannot carry a core we did not dump: said here instead. */
	if (core_dumped)
		fprintf(stderr, "discnice: the job dumped core (%s)\n", strsignal(sig));
	static const int dumping[] = { SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE,
				       SIGSEGV, SIGXCPU, SIGXFSZ, SIGSYS };
	for (unsigned i = 0; i < sizeof dumping / sizeof dumping[0]; i++)
		if (sig == dumping[i]) {
			struct rlimit none = { 0, 0 };
			setrlimit(RLIMIT_CORE, &none);
			prctl(PR_SET_DUMPABLE, 0);
		}
	fflush(NULL);
	signal(sig, SIG_DFL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	/* Still here: a signal that cannot kill (the caller exits 128+N). */
}

/* The agent: $DISCNICE_AGENT, else beside this binary (build tree), else
 * ../lib/discnice/ (installed tree).  On failure, why says it. */
static int find_agent(char *buf, size_t len, char *why, size_t why_len)
{
	const char *env = getenv("DISCNICE_AGENT");
	if (env && *env) {
		if (env[0] != '/') {
			snprintf(why, why_len, "DISCNICE_AGENT '%s' is not an absolute path", env);
			return -1;
		}
		if (access(env, R_OK) != 0) {
			snprintf(why, why_len, "DISCNICE_AGENT '%s': %s", env, strerror(errno));
			return -1;
		}
		snprintf(buf, len, "%s", env);
		return 0;
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0) {
		snprintf(why, why_len, "cannot find the agent %s: /proc/self/exe: %s "
			 "(set DISCNICE_AGENT to its absolute path)", AGENT_NAME,
			 n < 0 ? strerror(errno) : "empty");
		return -1;
	}
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	*slash = '\0';
	const char *places[2] = { "%s/%s", "%s/../lib/discnice/%s" };
	for (int i = 0; i < 2; i++) {
		int n1 = snprintf(buf, len, places[i], self, AGENT_NAME);
		if (n1 <= 0 || (size_t)n1 >= len)
			continue;
		if (access(buf, R_OK) == 0)
			return 0;
		if (errno != ENOENT) {
			/* There, but not for us (EACCES): say so, not "cannot find". */
			snprintf(why, why_len, "the agent %s: %s", buf, strerror(errno));
			return -1;
		}
	}
	snprintf(why, why_len, "cannot find the agent %s in %s or %s/../lib/discnice "
		 "(set DISCNICE_AGENT to its absolute path)", AGENT_NAME, self, self);
	return -1;
}

/* The agent's own pages are discnice's cost, not the job's.  Out of the
 * page cache (a node's first job after a drop), the job's loader read its
 * 1.1 MiB, the kernel counted the reads as the job's, and feedback
 * charged them at the cap: `run --rate 100k -- true` took 11 s.  The
 * readahead started here is submitted by this process, before the job's
 * counts are taken (mm/readahead.c: force_page_cache_ra() in the caller);
 * on a cached file it only looks the pages up. */
static void agent_readahead(const char *path)
{
	int saved = errno;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	if (fd >= 0 && fstat(fd, &st) == 0)
		/* In steps of 128 KiB: one WILLNEED reads no more than
		 * max(io_pages, ra_pages) from its start, 128 KiB on some
		 * disks. */
		for (off_t at = 0; at < st.st_size; at += 128 << 10)
			posix_fadvise(fd, at, 128 << 10, POSIX_FADV_WILLNEED);
	if (fd >= 0)
		close(fd);
	errno = saved;
}

/* Can LD_PRELOAD carry entry (the agent's path, as preload_path() wrote
 * it)?  ld.so splits the variable at spaces and colons, with no escape,
 * and drops an entry of 1024 bytes or more (elf/rtld.c,
 * handle_preload_list(): strcspn(p, " :"), fname[SECURE_PATH_LIMIT]): the
 * job would start without the agent, its loader printing "cannot be
 * preloaded" on its stderr. */
#define LOADER_PATH_LIMIT 1024
static int preload_carries(const char *path, const char *entry, char *why, size_t why_len)
{
	if (strpbrk(entry, " :")) {
		snprintf(why, why_len, "the agent's path '%s' holds a %s, where the loader splits "
			 "LD_PRELOAD: install discnice in a directory without one, or set "
			 "DISCNICE_AGENT to a path without one (a symbolic link to the agent)",
			 path, strchr(path, ' ') ? "space" : "colon");
		return -1;
	}
	if (strlen(entry) >= LOADER_PATH_LIMIT) {
		snprintf(why, why_len, "the agent's path is %zu bytes long in LD_PRELOAD, more than "
			 "the loader takes (%d): set DISCNICE_AGENT to a shorter one (a symbolic "
			 "link to the agent)", strlen(entry), LOADER_PATH_LIMIT - 1);
		return -1;
	}
	return 0;
}

/*
 * LD_PRELOAD is inherited by every program of the job, 32-bit ones too,
 * whose loader would print "wrong ELF class: ELFCLASS64" for our agent
 * (issue #8 item 12).  Where the agent's directory holds one object per
 * platform (DIR/x86_64/, DIR/i686/ and their kin, `make`, `make install`),
 * name it through the loader's $PLATFORM token, which ld.so expands per
 * process (elf/dl-load.c, _dl_dst_substitute): a 64-bit program loads the
 * agent, a 32-bit one a valid empty ELF32 object, and nobody prints a line.
 *
 * ld.so's $PLATFORM is the kernel's AT_PLATFORM only by default: glibc
 * 2.26 to 2.36 replace "x86_64" by "haswell" or "xeon_phi" on an Intel CPU
 * with their features (sysdeps/x86/cpu-features.c, init_cpu_features), and
 * no interface tells us which.  So the token is used only where every name
 * the loader may choose for a program of our own class has its directory;
 * otherwise the path stays as it is, and a 32-bit program prints its line.
 */
/* The Makefile's AGENT_PLATFORMS_64: keep the two lists alike. */
static const char *const loader_platforms_x86_64[] = { "x86_64", "haswell", "xeon_phi", NULL };

static bool platform_dir_has(const char *dir, const char *platform, const char *name)
{
	char probe[PATH_MAX];
	int n = snprintf(probe, sizeof probe, "%s/%s/%s", dir, platform, name);
	return n > 0 && (size_t)n < sizeof probe && access(probe, R_OK) == 0;
}

static void preload_path(char *agent, size_t len)
{
	const char *platform = (const char *)getauxval(AT_PLATFORM);
	char dir[PATH_MAX], probe[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", agent);
	char *slash = strrchr(dir, '/');
	if (!platform || !slash || strchr(dir, '$'))
		return;
	*slash = '\0';
	const char *name = slash + 1;
	if (strcmp(platform, "x86_64") == 0) {
		for (const char *const *p = loader_platforms_x86_64; *p; p++)
			if (!platform_dir_has(dir, *p, name))
				return;
	} else if (!platform_dir_has(dir, platform, name)) {
		return;
	}
	int n = snprintf(probe, sizeof probe, "%s/$PLATFORM/%s", dir, name);
	if (n > 0 && (size_t)n < len)
		memcpy(agent, probe, (size_t)n + 1);
}

/* True when the job's program could load the agent and no program of the
 * job did (dn_counters.agent_loads): the loader refused LD_PRELOAD - a
 * $PLATFORM it expands to a name we did not foresee, a file it cannot map -
 * and the only regulation was the supervisor's.  Silence here once hid
 * exactly that on Intel CPUs (preload_path).  A job whose loader failed
 * (exit 127: a missing library) never ran a program to load it into. */
static bool agent_absent(enum program_reach reach, int exec_errno, const struct run_result *r)
{
	return reach == PROGRAM_PRELOADABLE && !exec_errno && r->counters.agent_loads == 0 &&
	       !(r->signal == 0 && r->exit_status == 127);
}

/* The smallest cap sets the default chunk: an eighth of a window. */
static uint64_t default_chunk(const struct run_config *c)
{
	uint64_t cap = caps_smallest(&c->caps);
	if (!cap)
		return 1u << 20;
	unsigned __int128 chunk = (unsigned __int128)cap * c->window_ns / NS_PER_SEC / 8;
	if (chunk < 16384)
		chunk = 16384;
	if (chunk > (1u << 20))
		chunk = 1u << 20;
	return (uint64_t)chunk & ~UINT64_C(4095);
}

/* The probe threshold: from the calibration file's entry for the disk
 * of the first of these directories that gives one (graybox-icl §5),
 * else measured there (~0.1 s) and stored for the next run
 * (toolbox/parameters.h).  A real disk, ours to write. */
static uint64_t calibrate_probe(void)
{
	const char *dirs[] = { getenv("TMPDIR"), "/var/tmp", "." };
	for (unsigned i = 0; i < 3; i++) {
		enum parameter_source source;
		if (!dirs[i] || !*dirs[i])
			continue;
		int64_t t = parameters_probe_threshold(dirs[i], true, &source);
		if (t > 0)
			return (uint64_t)t;
	}
	return PROBE_THRESHOLD_FALLBACK_NS;
}

/* A supervisor killed with SIGKILL cannot remove its class, and its job's
 * last process removes it only if it exits through exit() (agent.c): remove
 * classes older than a few seconds whose runs' supervisors are all gone and
 * that no process maps any more. */
static void reap_stale_classes(void)
{
	char dir[DN_PATH_MAX], path[2 * DN_PATH_MAX];
	if (segment_dir(dir, sizeof dir, 0) < 0)
		return;
	DIR *d = opendir(dir);
	if (!d)
		return;
	uint64_t now = clock_now_ns();
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		struct dn_segment *seg;
		ino_t ino;
		if (segment_attach_path_ino(path, &seg, &ino) < 0)
			continue;
		if (now - seg->created_ns >= 5 * NS_PER_SEC)
			segment_remove_abandoned(seg, path, ino, true);
		munmap(seg, sizeof *seg);
	}
	closedir(d);
}

static void prepend_env(const char *name, const char *value, char sep)
{
	const char *old = getenv(name);
	if (!old || !*old) {
		setenv(name, value, 1);
		return;
	}
	size_t len = strlen(value) + strlen(old) + 2;
	char *both = malloc(len);
	if (!both) {
		setenv(name, value, 1);
		return;
	}
	snprintf(both, len, "%s%c%s", value, sep, old);
	setenv(name, both, 1);
	free(both);
}

/* The class as this process would create it (its trace path is read again
 * at the end of a run). */
static struct dn_segment class_init; /* large: not on the stack */

/* Does the class hold a live run of the other kind than ours: benice's
 * beside a capped one, or a capped one beside benice's?  A cap set by the
 * one does nothing to the other, and `discnice ls` showed benice's job
 * under a cap that was not its own.  (A killed one's slot stays until the
 * class is reaped.) */
static bool class_of_other_kind(struct dn_segment *seg, unsigned self, enum run_kind kind)
{
	for (unsigned i = 0; i < DN_MAX_RUNS; i++) {
		if (i == self || !__atomic_load_n(&seg->runs[i].pid, __ATOMIC_ACQUIRE))
			continue;
		bool benice = segment_run_kind(&seg->runs[i]) == RUN_KIND_BENICE;
		if (benice != (kind == RUN_KIND_BENICE) && segment_run_alive(&seg->runs[i]))
			return true;
	}
	return false;
}

int run_class_join(struct run_config *config, enum run_kind kind,
		   struct dn_segment **seg_out, int *slot_out)
{
	bool agent = kind == RUN_KIND_AGENT;
	reap_stale_classes();

	uint64_t now = clock_now_ns();
	memset(&class_init, 0, sizeof class_init);
	class_init.magic = DN_SEGMENT_MAGIC;
	class_init.version = DN_SEGMENT_VERSION;
	class_init.size = sizeof class_init;
	class_init.owner_uid = (uint32_t)getuid();
	class_init.predict_mask = config->predict_mask;
	class_init.cache_backend = config->cache_backend;
	class_init.chunk_bytes = config->chunk_bytes ? config->chunk_bytes : default_chunk(config);
	class_init.created_ns = now;
	class_init.caps = config->caps;
	class_init.net_caps = config->net_caps;
	if (config->net_unix)
		class_init.flags |= DN_FLAG_NET_UNIX;
	snprintf(class_init.class_name, sizeof class_init.class_name, "%s", config->class_name);
	if (config->trace_path) {
		char abs[PATH_MAX];
		int n;
		if (config->trace_path[0] != '/' && getcwd(abs, sizeof abs))
			n = snprintf(class_init.trace_path, sizeof class_init.trace_path, "%s/%s",
				     abs, config->trace_path);
		else
			n = snprintf(class_init.trace_path, sizeof class_init.trace_path, "%s",
				     config->trace_path);
		if (n < 0 || (size_t)n >= sizeof class_init.trace_path)
			usage_error("--trace %s: path too long", config->trace_path);
		int fd = open(class_init.trace_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0)
			usage_error("--trace %s: %s", config->trace_path, strerror(errno));
		close(fd);
	}
	/* An attach has no agent to use the probe: it does not calibrate
	 * (a run that joins its class later gets the fallback). */
	class_init.probe_threshold_ns = agent && (config->cache_backend == DN_CACHE_AUTO ||
						  config->cache_backend == DN_CACHE_PROBE)
				  ? calibrate_probe() : PROBE_THRESHOLD_FALLBACK_NS;
	rate_window_init(&class_init.window, config->window_ns, now);
	/* Under the scavenger the network's window is two targets long: what
	 * a window lets through at once after a pause (up to its budget)
	 * lands in the bottleneck's queue as one burst, and a window of 1 s
	 * would make that a second of delay (src/policy/scavenger.h). */
	uint64_t net_span = config->window_ns;
	if (config->scavenger_target_ns) {
		scavenger_init(&class_init.scavenger, config->scavenger_target_ns);
		uint64_t short_span = 2 * class_init.scavenger.target_ns;
		short_span -= short_span % DN_WINDOW_BUCKETS;
		if (short_span < net_span)
			net_span = short_span;
	}
	rate_window_init(&class_init.net_window, net_span, now);
	/* The paper's event queues, used under --window-policy paper only
	 * (policy/paper_window.c): 5 s, 100 events, 1 ms .. 100 ms. */
	paper_window_init(&class_init.window, 0, 0, 0);
	paper_window_init(&class_init.net_window, 0, 0, 0);
	class_init.window_policy = config->window_policy;

	int created;
	char seg_dir[DN_PATH_MAX];
	int rc = segment_dir(seg_dir, sizeof seg_dir, 1);
	if (rc < 0) {
		/* The directory, not the class: say which and what to do. */
		class_dir_error(rc, NULL);
		return EXIT_INTERNAL;
	}
	rc = segment_open_or_create(config->class_name, &class_init, seg_out, &created);
	struct dn_segment *seg = *seg_out;
	if (rc < 0) {
		errorf("cannot open class '%s' under %s: %s", config->class_name, seg_dir,
		       rc == -EPROTO ? "the segment is corrupt"
		       : rc == -EPROTONOSUPPORT
			       ? "another version of discnice made it, for jobs started before an "
				 "upgrade: choose another class name, or remove the file once they "
				 "have ended"
		       : rc == -EPERM ? "it belongs to someone else or is not mode 0600"
				      : strerror(-rc));
		return EXIT_INTERNAL;
	}
	/* A place in the class first: a run refused for want of one
	 * changes nothing of it (its caps were set first, and a full class's
	 * 32 jobs slowed to the refused run's cap). */
	*slot_out = segment_claim_run(seg, (uint32_t)getpid());
	if (*slot_out < 0) {
		errorf("class '%s' already has %u runs attached", config->class_name, DN_MAX_RUNS);
		segment_detach(seg, config->class_name);
		return EXIT_INTERNAL;
	}
	if (kind == RUN_KIND_BENICE)
		/* Marked at once, so that a run joining now sees it. */
		__atomic_store_n(&seg->runs[*slot_out].state, DN_RUN_BENICE, __ATOMIC_RELEASE);
	/* Our mark, then the others': of two of other kinds joining at once
	 * (the class just created included), at least one sees the other. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (class_of_other_kind(seg, (unsigned)*slot_out, kind)) {
		if (kind == RUN_KIND_BENICE)
			errorf("class '%s' holds capped jobs ('discnice run' or 'attach'); benice "
			       "regulates by progress and takes no cap: choose another --class",
			       config->class_name);
		else
			errorf("class '%s' is benice's: it regulates by progress and has no caps "
			       "to share: choose another --class", config->class_name);
		segment_release_run(seg, *slot_out);
		segment_detach(seg, config->class_name);
		return EXIT_USAGE;
	}
	if (!created) {
		/* Joining: the caps the newcomer named become the class's (the
		 * budget is one); the rest of the class stays as its creator
		 * made it, and this run's report says so. */
		uint64_t token = segment_lock(seg);
		if (config->read_given)
			seg->caps.read_bps = config->caps.read_bps;
		if (config->write_given)
			seg->caps.write_bps = config->caps.write_bps;
		if (config->total_given)
			seg->caps.total_bps = config->caps.total_bps;
		config->caps = seg->caps;
		if (config->net_recv_given)
			seg->net_caps.read_bps = config->net_caps.read_bps;
		if (config->net_send_given)
			seg->net_caps.write_bps = config->net_caps.write_bps;
		if (config->net_total_given)
			seg->net_caps.total_bps = config->net_caps.total_bps;
		config->net_caps = seg->net_caps;
		/* --net-policy is a class setting too, like a cap: the
		 * newcomer's word holds (the window's span stays). */
		if (config->net_policy_given &&
		    config->scavenger_target_ns != seg->scavenger.target_ns)
			scavenger_init(&seg->scavenger, config->scavenger_target_ns);
		config->scavenger_target_ns = seg->scavenger.target_ns;
		segment_unlock(seg, token);
		if (seg->predict_mask != config->predict_mask ||
		    seg->cache_backend != config->cache_backend ||
		    seg->window.span_ns != class_init.window.span_ns ||
		    (config->trace_path && !seg->trace_path[0]) ||
		    config->net_unix != ((seg->flags & DN_FLAG_NET_UNIX) != 0) ||
		    (config->window_policy_given && config->window_policy != seg->window_policy))
			warnf("class '%s' exists: its window, --window-policy, --predict, "
			      "--cache-backend, --trace and --net-unix stay as its first run set "
			      "them", config->class_name);
		config->window_policy = seg->window_policy;
		config->net_unix = (seg->flags & DN_FLAG_NET_UNIX) != 0;
		config->predict_mask = seg->predict_mask;
		config->cache_backend = seg->cache_backend;
		config->window_ns = seg->window.span_ns;
	}
	return 0;
}

int wait_status_to_exit(int status, int *signal_out)
{
	*signal_out = 0;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status)) {
		*signal_out = WTERMSIG(status);
		return 128 + WTERMSIG(status);
	}
	return EXIT_INTERNAL;
}

int tool_run(int argc, char **argv)
{
	struct run_config config;
	run_options_parse(&config, argc, argv);

	char program[PATH_MAX], judged[PATH_MAX];
	int err, rc = program_find(config.command[0], program, sizeof program, &err);
	if (rc) {
		errorf("%s: %s", config.command[0], strerror(err));
		return rc;
	}
	enum program_reach reach = program_reach(program, judged, sizeof judged);
	if (config.exec_in_place && (reach == PROGRAM_STATIC || reach == PROGRAM_SECURE ||
				     reach == PROGRAM_OTHER_CLASS))
		/* Nothing would regulate it: there is no supervisor to
		 * measure it from outside. */
		usage_error("--exec: the agent cannot load into %s (%s), and without a "
			    "supervisor nothing would regulate it; drop --exec", judged,
			    reach == PROGRAM_STATIC	    ? "statically linked"
			    : reach == PROGRAM_OTHER_CLASS ? "a 32-bit program"
							   : "setuid/setgid");
	switch (reach) {
	case PROGRAM_STATIC:
		if (config.feedback)
			warnf("%s is statically linked: LD_PRELOAD cannot reach it; it is regulated "
			      "from outside only (measured I/O, held with ptrace)", judged);
		else
			warnf("%s is statically linked: LD_PRELOAD cannot reach it, so with "
			      "--feedback off it runs UNREGULATED", judged);
		break;
	case PROGRAM_OTHER_CLASS:
		if (config.feedback)
			warnf("%s is a 32-bit program: the agent cannot load into it; it is "
			      "regulated from outside only (measured I/O)", judged);
		else
			warnf("%s is a 32-bit program: the agent cannot load into it, so with "
			      "--feedback off it runs UNREGULATED", judged);
		break;
	case PROGRAM_SECURE:
		if (config.feedback)
			warnf("%s is setuid/setgid: the loader ignores LD_PRELOAD; it is regulated "
			      "from outside only (measured I/O, held with ptrace, or with SIGSTOP "
			      "where ptrace is refused)", judged);
		else
			warnf("%s is setuid/setgid: the loader ignores LD_PRELOAD, so with "
			      "--feedback off it runs UNREGULATED", judged);
		break;
	default:
		break;
	}

	char agent_path[PATH_MAX], why[2 * PATH_MAX + 256];
	if (find_agent(agent_path, sizeof agent_path, why, sizeof why) < 0) {
		errorf("%s", why);
		return EXIT_INTERNAL;
	}
	char as_found[PATH_MAX];
	snprintf(as_found, sizeof as_found, "%s", agent_path);
	agent_readahead(as_found);
	preload_path(agent_path, sizeof agent_path);
	if (preload_carries(as_found, agent_path, why, sizeof why) < 0) {
		errorf("%s", why);
		return EXIT_INTERNAL;
	}
	if (config.report_path)
		config.report_path = output_path_check("report", config.report_path);
	if (config.manners && config.manners_persist && config.manners_state_file)
		config.manners_state_file =
			output_path_check("manners-state-file", config.manners_state_file);
	if (!config.class_given)
		snprintf(config.class_name, sizeof config.class_name, "run-%d", (int)getpid());
	struct dn_segment *seg;
	int slot;
	rc = run_class_join(&config, RUN_KIND_AGENT, &seg, &slot);
	if (rc)
		return rc;
	interrupt_run = &seg->runs[slot];

	char seg_path[DN_PATH_MAX], slot_text[16];
	segment_path(seg_path, sizeof seg_path, config.class_name);
	snprintf(slot_text, sizeof slot_text, "%d", slot);
	prepend_env("LD_PRELOAD", agent_path, ':');
	setenv(DN_ENV_SEGMENT, seg_path, 1);
	setenv(DN_ENV_RUN_SLOT, slot_text, 1);
	/* Read by the agent (src/agent/writeback.c). */
	setenv("DISCNICE_WRITEBACK", config.writeback_kernel ? "kernel" : "paced", 1);
	/* Read by the agent (src/agent/cache_drop.c). */
	setenv("DISCNICE_CACHE", config.cache_drop ? "drop" : "keep", 1);
	/* Under yield the caps come and go: the agent keeps the model in step
	 * with the kernel's readahead meanwhile, so a cap that comes finds
	 * the kernel's window (io_read.c, kernel_paced). */
	/* Under manners the agent's counts of the job's file I/O are its
	 * progress (tool_manners.c), so the hooks may not pass calls by; they
	 * count them, and predict only under a cap (agent.h agent_counting). */
	setenv("DISCNICE_PREDICT_UNCAPPED",
	       config.predict_uncapped || config.yield || config.trace_path ? "on"
	       : config.manners                                            ? "count"
									   : "off",
	       1);

	if (config.exec_in_place)
		return exec_job(seg, slot, config.class_name, program, config.command);

	/* Orphans of the job are re-parented to us, so their I/O is reaped
	 * into our counts instead of init's. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	sigset_t chld, old_mask;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old_mask);

	struct regulator *regulator = regulator_new(seg, slot, config.feedback);
	if (config.feedback && !regulator)
		warnf("out of memory for measured feedback: the job is regulated by its agent only");

	struct yield_state *yielder = NULL;
	if (config.yield) {
		struct yield_config yc = {
			.caps = config.caps,
			.high_bps = config.yield_above_bps,
			.low_bps = config.yield_below_bps,
			.hold_ns = NS_PER_SEC,
			.net = (config.net_caps.read_bps | config.net_caps.write_bps |
				config.net_caps.total_bps) != 0,
			.net_caps = config.net_caps,
			.net_high_bps = config.net_yield_above_bps,
			.net_low_bps = config.net_yield_below_bps,
		};
		yielder = yield_new(seg, &yc);
		if (!yielder)
			warnf("cannot start the yield policy (out of memory): the caps hold throughout");
	}

	struct manners_run *manners = NULL;
	if (config.manners) {
		struct manners_run_config mc = {
			.bootstrap = config.manners_bootstrap,
			.probation_ns = config.manners_probation_ns,
			.limit_ns = config.manners_limit_ns,
			.initial_ns = config.manners_initial_ns,
			.quiet_ns = config.manners_quiet_ns,
			.busy_ns = config.manners_busy_ns,
			.disk_rise = config.manners_disk_rise,
			.paper_calibration = config.manners_paper_calibration,
			.persist = config.manners_persist,
			.state_file = config.manners_state_file,
			.program = program,
		};
		manners = manners_run_new(seg, slot, &mc, clock_now_ns());
		if (!manners)
			warnf("cannot start the manners policy (out of memory): the job is not "
			      "suspended; its caps, if any, hold");
	}

	struct proc_io before, after;
	proc_io_read(0, &before);
	uint64_t start = clock_now_ns();

	fflush(NULL);
	pid_t pid = -1;
	int exec_errno = spawn_job(&pid, program, config.command, &old_mask);
	if (exec_errno == EAGAIN) {
		/* posix_spawn's clone() failed (RLIMIT_NPROC, pid_max, the
		 * cgroup's pids.max): no process, our failure, not the
		 * command's (exit 125, as the man page says of fork). */
		errorf("cannot start a process for %s: %s (the process limit: ulimit -u, "
		       "pids.max)", program, strerror(exec_errno));
	} else if (exec_errno) {
		errorf("cannot run %s: %s", program, strerror(exec_errno));
	} else {
		job_pid = pid;
		regulator_watch(regulator, pid, &before);
		manners_run_watch(manners, pid);
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = forward_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	/* Every signal kill(1) may send that would end discnice by default
	 * (and leave the job running, unregulated, with no report), or that
	 * the job acts on: SIGALRM, SIGPROF, SIGPWR... and the real-time ones
	 * killed the supervisor and orphaned the job. */
	const int forwarded[] = { SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCONT,
				  SIGTSTP, SIGALRM, SIGVTALRM, SIGPROF, SIGPWR, SIGSTKFLT };
	for (unsigned i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
		sigaction(forwarded[i], &sa, NULL);
	for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
		sigaction(sig, &sa, NULL);

	/* Asked for only: on the job's own terminal it is drawn over what the
	 * job prints there (a prompt erased, "result: 42" gone). */
	bool status_line = config.progress && !config.quiet && isatty(STDERR_FILENO);
	int job_status = 0;
	bool job_done = exec_errno != 0; /* no job: nothing to wait for */
	uint64_t tick_ns = regulator ? REGULATE_INTERVAL_NS : STATUS_INTERVAL_NS;
	uint64_t next_status = start + STATUS_INTERVAL_NS, next_tick = start + tick_ns;
	while (!job_done) {
		int status;
		pid_t r;
		/* __WALL: the regulator's tracees include threads (tool_hold.c);
		 * WUNTRACED: the job may stop by itself. */
		while ((r = waitpid(-1, &status, WNOHANG | __WALL | WUNTRACED)) > 0) {
			/* A held thread's trap, any thread, an orphan, the guard. */
			if (regulator_child_event(regulator, r, status) || r != pid)
				continue;
			if (WIFSTOPPED(status)) {
				if (!regulator_stopped_it(regulator, pid))
					follow_job_stop(regulator, pid, WSTOPSIG(status));
			} else if (WIFEXITED(status) || WIFSIGNALED(status)) {
				job_status = status;
				job_done = true;
				job_pid = 0; /* reaped: its pid may be reused */
			}
		}
		if (job_done)
			break;
		if (r < 0 && errno == ECHILD)
			break;
		uint64_t tick_at = clock_now_ns();
		if (tick_at < next_tick) {
			/* Woken early by SIGCHLD (a trap, an exit): reap, then
			 * wait for the rest of the tick. */
			struct timespec wait = { (time_t)((next_tick - tick_at) / NS_PER_SEC),
						 (long)((next_tick - tick_at) % NS_PER_SEC) };
			sigtimedwait(&chld, NULL, &wait);
			continue;
		}
		if (regulator)
			tick_ns = regulator_tick(regulator, tick_at);
		else if (yielder)
			tick_ns = YIELD_INTERVAL_NS;
		yield_tick(yielder, tick_at);
		if (manners) {
			uint64_t due = manners_run_tick(manners, tick_at);
			if (due < tick_ns)
				tick_ns = due;
		}
		if (status_line && tick_at >= next_status) {
			report_print_status(seg, &seg->runs[slot].counters,
					    (double)(tick_at - start) / 1e9);
			next_status = tick_at + STATUS_INTERVAL_NS;
		}
		next_tick = tick_at + tick_ns;
	}
	/* Job done: the last tick may not have seen its last burst. */
	regulator_tick(regulator, clock_now_ns());
	uint64_t settled = regulator_settle(regulator, &interrupt_seen);
	uint64_t end = clock_now_ns();
	struct regulator_stats regulated;
	regulator_stats(regulator, &regulated);
	regulator_end(regulator);
	struct yield_stats yielded;
	yield_stats(yielder, end, &yielded);
	yield_free(yielder);
	/* Orphans still running must not stay suspended by a controller that
	 * is gone. */
	manners_run_end(manners);
	struct manners_run_stats mannered;
	manners_run_stats(manners, &mannered);
	manners_run_free(manners);
	/* Orphans that already finished: reap them into our counts too.
	 * Orphans still running are left to run (and stay regulated). */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	proc_io_read(0, &after);
	if (status_line)
		report_clear_status();

	struct run_result result;
	memset(&result, 0, sizeof result);
	result.elapsed_s = (double)(end - start) / 1e9;
	for (size_t i = 0; i < sizeof result.counters / sizeof(uint64_t); i++)
		((uint64_t *)&result.counters)[i] =
			segment_read_counter(&((uint64_t *)&seg->runs[slot].counters)[i]);
	result.actual.read_bytes = after.read_bytes - before.read_bytes;
	result.actual.write_bytes = after.write_bytes - before.write_bytes;
	result.actual.cancelled_write_bytes = after.cancelled_write_bytes - before.cancelled_write_bytes;
	result.exit_status = exec_errno == EAGAIN ? EXIT_INTERNAL
			     : exec_errno ? (exec_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC)
					  : wait_status_to_exit(job_status, &result.signal);
	result.probe_threshold_ns = seg->probe_threshold_ns;
	result.feedback = config.feedback;
	result.feedback_read_bytes = regulated.feedback_read_bytes;
	result.feedback_write_bytes = regulated.feedback_write_bytes;
	result.feedback_net_sent_bytes = regulated.feedback_net_sent_bytes;
	result.feedback_net_received_bytes = regulated.feedback_net_received_bytes;
	result.stopped_s = (double)regulated.stopped_ns / 1e9;
	result.stops = regulated.stops;
	result.slack_seen = regulated.slack_seen;
	result.settle_s = (double)settled / 1e9;
	/* What regulating cost, apart from the agent's share inside the job:
	 * the kernel's count of our own CPU time (children excluded). */
	struct rusage self;
	if (getrusage(RUSAGE_SELF, &self) == 0)
		result.supervisor_cpu_s = (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
					  (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
	result.yield = config.yield;
	result.yield_throttled_s = (double)yielded.throttled_ns / 1e9;
	result.yield_switches = yielded.switches;
	result.manners = config.manners;
	result.manners_suspended_s = (double)mannered.suspended_ns / 1e9;
	result.manners_testpoints = mannered.testpoints;
	result.manners_judged_good = mannered.judged_good;
	result.manners_judged_poor = mannered.judged_poor;
	result.manners_shortened = mannered.shortened;
	result.manners_forgiven = mannered.forgiven;
	result.manners_busy_testpoints = mannered.busy_testpoints;
	result.manners_cpu_pressure = mannered.cpu_pressure;
	result.manners_pressure_rises = mannered.pressure_rises;
	result.manners_new_samples = mannered.new_samples;
	result.manners_disk_rises = mannered.disk_rises;
	result.manners_s_per_mib_read = mannered.target_ns_per_mib_read / 1e9;
	result.manners_s_per_mib_written = mannered.target_ns_per_mib_written / 1e9;
	snprintf(result.manners_state_file, sizeof result.manners_state_file, "%s",
		 mannered.state_file);
	result.manners_target_restored = mannered.target_restored;
	result.manners_restored_samples = mannered.restored_samples;

	result.caps_at_end = segment_caps_now(seg);
	interrupt_run = NULL; /* the segment goes: no handler may write there */
	segment_release_run(seg, slot);
	segment_detach(seg, config.class_name);

	int status = result.exit_status;
	if (config.report_path) {
		rc = report_write_json(config.report_path, &config, &result);
		if (rc < 0) {
			/* The job ran, but what was asked for is missing: never
			 * report success for it (EXIT STATUS in discnice(1)). */
			errorf("cannot write report %s: %s (the job's exit status was %d)",
			       config.report_path, strerror(-rc), result.exit_status);
			if (status == 0)
				status = EXIT_INTERNAL;
		}
	}
	if (!config.quiet && !exec_errno)
		report_print_summary(&config, &result);
	if (agent_absent(reach, exec_errno, &result)) {
		/* A job killed before its loader got to the agent - held from
		 * outside for what exec read from disk under a tiny cap, then
		 * interrupted - did not show the loader refusing it. */
		char killed[96] = "";
		if (result.signal)
			snprintf(killed, sizeof killed, "it was killed by signal %d (%s) before, or ",
				 result.signal, strsignal(result.signal));
		warnf("the agent never started in the job (%sthe loader did not load %s%s): "
		      "%s", killed, agent_path,
		      strchr(agent_path, '$') ? ", see discnice(1) FILES" : "",
		      config.feedback ? "it was regulated from outside only (measured I/O)"
				      : "with --feedback off it ran UNREGULATED");
	}
	if (result.counters.trace_lost_lines)
		/* Diagnostics, not the job's work: the job's status stands, but
		 * the user must not take a trace with holes for a whole one. */
		warnf("%" PRIu64 " trace line(s) could not be written to %s (disk full?): "
		      "the trace is incomplete", result.counters.trace_lost_lines,
		      class_init.trace_path[0] ? class_init.trace_path : "the trace file");
	if (!exec_errno && result.signal)
		die_of_signal(result.signal, WIFSIGNALED(job_status) && WCOREDUMP(job_status));
	if (settle_interrupted)
		die_of_signal(settle_interrupted, false); /* as a plain command dies of it */
	return status;
}
