/*
 * agent.c - start-up, the re-entry guard, fork, counters and trace of
 * libdiscnice.so (see agent.h).
 *
 * Start-up is once-only and may happen from the constructor or from the
 * first hooked call (a program's own constructors, or the dynamic loader,
 * may call read() before ours runs).  Whatever goes wrong here, the agent
 * says so once on stderr and the program runs unregulated: it is never
 * stopped, and no call it makes fails because of us.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/cache_drop.h"
#include "agent/io.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "agent/pieces_in_hand.h"
#include "agent/writeback.h"
#include "common/clock.h"
#include "common/private_fd.h"
#include "common/segment.h"

struct agent agent = { .trace_fd = -1 };

enum { AGENT_UNSTARTED, AGENT_STARTING, AGENT_ON, AGENT_OFF };
static int agent_state = AGENT_UNSTARTED;

/* The re-entry guard, one word per thread (initial-exec: no __tls_get_addr
 * call and no allocation on the hot path; interpose.c's vfork writes it
 * from assembly).  AGENT_GUARD_VFORKED: this thread called vfork(), so a
 * child may be running on its stack with our memory (agent_enter()). */
__thread int agent_guard __attribute__((tls_model("initial-exec")));

/* Our pid as of start-up or the last fork, to tell a vfork or CLONE_VM
 * child - same memory, other process - from ourselves. */
static pid_t agent_pid;
/* clone(CLONE_VM) children (without CLONE_VFORK) that may still run in our
 * memory: while any may, every hook asks getpid() whose it is. */
static unsigned shared_vm_children;
/* Set in a child forked from a signal handler that interrupted the agent:
 * its locks may belong to threads that do not exist there (spin.h). */
bool agent_locks_abandoned;

/* The vfork child shares our memory, TLS included, until it execs or
 * exits (CLONE_VM | CLONE_VFORK); the kernel suspends the parent thread
 * meanwhile.  It has its own fd table, so nothing it does may touch our
 * tables: it runs every call plain, and the agent loads afresh in what it
 * execs.  The first hook back in the parent finds the guard still set to
 * AGENT_GUARD_VFORKED, sees its own pid and clears it; the child's file
 * descriptions are shared with us, so the offsets we knew are stale. */
static bool vfork_parent_resumed(void)
{
	if (agent_pid && getpid() != agent_pid)
		return false; /* the child */
	agent_guard = AGENT_GUARD_FREE;
	open_file_forget_positions();
	return true;
}

bool agent_enter(void)
{
	int guard = agent_guard;
	if (__builtin_expect(guard != AGENT_GUARD_FREE, 0)) {
		if (guard != AGENT_GUARD_VFORKED || !vfork_parent_resumed())
			return false;
	}
	if (__builtin_expect(__atomic_load_n(&shared_vm_children, __ATOMIC_RELAXED) != 0, 0) &&
	    getpid() != agent_pid)
		return false;
	int state = __atomic_load_n(&agent_state, __ATOMIC_ACQUIRE);
	if (state != AGENT_ON) {
		if (state != AGENT_UNSTARTED)
			return false;
		agent_init();
		if (__atomic_load_n(&agent_state, __ATOMIC_ACQUIRE) != AGENT_ON)
			return false;
	}
	agent_guard = AGENT_GUARD_IN_AGENT;
	/* A hook that does not doze (fork, exec, epoll_ctl) finds the caps
	 * still unset; one that would have finds a cap: the doze is over. */
	if (__builtin_expect(__atomic_load_n(&agent.dozing, __ATOMIC_RELAXED), 0) && !agent_doze_allowed())
		agent_doze_end();
	return true;
}

void agent_doze_end(void)
{
	if (!__atomic_exchange_n(&agent.dozing, false, __ATOMIC_ACQ_REL))
		return; /* another thread ended it */
	/* Nothing was watched meanwhile: every file is classified afresh,
	 * and the disk models start anew (agent_idle, agent_wake). */
	__atomic_store_n(&agent.was_idle, true, __ATOMIC_RELAXED);
	open_file_forget_range(0, ~0u);
}

void agent_leave(void)
{
	agent_guard = AGENT_GUARD_FREE;
}

static __thread bool agent_asleep __attribute__((tls_model("initial-exec")));

int agent_sleep(int flags, const struct timespec *ts)
{
	agent_asleep = true;
	int rc = clock_nanosleep(CLOCK_MONOTONIC, flags, ts, NULL);
	agent_asleep = false;
	return rc;
}

void agent_left_by_jump(void)
{
	if (agent_guard != AGENT_GUARD_IN_AGENT || !agent_asleep)
		return;
	int saved = errno;
	agent_asleep = false;
	io_net_thread_left();
	in_hand_thread_left();
	throttle_call_abandoned();
	agent_guard = AGENT_GUARD_FREE;
	errno = saved;
}

void agent_wake(void)
{
	/* Two threads may both get here: forgetting twice is harmless. */
	__atomic_store_n(&agent.was_idle, false, __ATOMIC_RELAXED);
	open_file_forget_range(0, ~0u);
}

/* One line on stderr, once per process, through the real write. */
static void agent_warn(const char *fmt, const char *arg, int err)
{
	char line[512];
	int n = snprintf(line, sizeof line, "discnice: ");
	n += snprintf(line + n, sizeof line - (size_t)n, fmt, arg, err ? strerror(err) : "");
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	if (libc_real.write)
		libc_real.write(STDERR_FILENO, line, (size_t)n);
}

static uint64_t read_centisecs(const char *path, uint64_t fallback)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fallback;
	ssize_t n = libc_real.read(fd, buf, sizeof buf - 1);
	libc_real.close(fd);
	if (n <= 0)
		return fallback;
	buf[n] = '\0';
	return strtoull(buf, NULL, 10);
}

static void open_trace(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		agent_warn("cannot open trace file %s: %s", path, errno);
		return;
	}
	/* Keep out of the low numbers programs expect to get from open(). */
	fd = private_fd_move(fd);
	if (fd < 0) {
		agent_warn("no descriptor free for the trace file %s%s", path, 0);
		return;
	}
	agent.trace_fd = fd;
}

/*
 * fork.  In a threaded program the prepare handler takes the region
 * table's lock, so no other thread is half-way through it when the address
 * space is copied; the child then resets every lock, since the threads that
 * held them do not exist there (CONVENTIONS: libfaketime's "re-done after
 * fork").  Both sides forget file offsets: they are shared now.
 *
 * fork() is async-signal-safe, and a signal handler may call it while its
 * thread is inside the agent, holding a lock the prepare handler would wait
 * for forever (issue #8 item 2).  Then nothing is taken: the parent only
 * forgets offsets (lock-free), and the child - whose interrupted frame will
 * resume holding locks no reset may steal - runs plain from then on, with
 * abandoned locks breakable; its exec loads the agent afresh.
 */
static __thread int fork_locked __attribute__((tls_model("initial-exec")));

void agent_before_fork(void)
{
	if (agent_guard == AGENT_GUARD_VFORKED)
		vfork_parent_resumed();
	fork_locked = agent_guard == AGENT_GUARD_FREE;
	if (!fork_locked)
		return;
	/* A handler that runs before the fork completes must not wait for
	 * the lock its own thread holds: guard it. */
	agent_guard = AGENT_GUARD_IN_AGENT;
	io_before_fork();
}

void agent_after_fork_parent(void)
{
	if (fork_locked) {
		io_after_fork(false);
		agent_guard = AGENT_GUARD_FREE;
	}
	open_file_forget_positions();
}

void agent_after_fork_child(void)
{
	agent_pid = getpid();
	io_net_after_fork_child();
	segment_forget_pid();
	open_file_forget_positions();
	if (fork_locked) {
		io_after_fork(true);
		open_file_after_fork_child();
		agent_guard = AGENT_GUARD_FREE;
	} else {
		agent_locks_abandoned = true;
		__atomic_store_n(&agent_state, AGENT_OFF, __ATOMIC_RELEASE);
	}
}

/*
 * clone(2) through glibc's wrapper, as programs call it directly.  Without
 * CLONE_VM the child is a fork: the same handlers run around it, the
 * child's from a trampoline on its new stack (it reads `start` from its
 * copy of our stack).  With CLONE_VM the child shares our memory but not
 * our process: like a vfork child it must run every call plain, which
 * agent_enter() checks by pid while such a child may be alive - until the
 * call returns for CLONE_VFORK, for ever otherwise.  CLONE_THREAD is
 * pthread_create's business and never comes here.
 */
struct clone_start {
	int (*fn)(void *);
	void *arg;
};

static int clone_child_start(void *p)
{
	struct clone_start *start = p;
	int (*fn)(void *) = start->fn;
	void *arg = start->arg;
	agent_after_fork_child();
	return fn(arg);
}

int agent_clone(int (*real)(int (*)(void *), void *, int, void *, ...), int (*fn)(void *),
		void *stack, int flags, void *arg, pid_t *ptid, void *tls, pid_t *ctid)
{
	int r;
	if (flags & CLONE_VM) {
		__atomic_add_fetch(&shared_vm_children, 1, __ATOMIC_ACQ_REL);
		r = real(fn, stack, flags, arg, ptid, tls, ctid);
		int err = errno;
		if ((flags & CLONE_VFORK) || r < 0)
			__atomic_sub_fetch(&shared_vm_children, 1, __ATOMIC_ACQ_REL);
		if (flags & CLONE_VFORK)
			open_file_forget_positions();
		errno = err;
		return r;
	}
	if (flags & CLONE_SETTLS) {
		/* The child's thread pointer is not ours to reach: plain. */
		return real(fn, stack, flags, arg, ptid, tls, ctid);
	}
	struct clone_start start = { fn, arg };
	agent_before_fork();
	r = real(clone_child_start, stack, flags, &start, ptid, tls, ctid);
	int err = errno;
	agent_after_fork_parent();
	errno = err;
	return r;
}

void agent_init(void)
{
	int expected = AGENT_UNSTARTED;
	if (!__atomic_compare_exchange_n(&agent_state, &expected, AGENT_STARTING, 0,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	int saved = errno;
	agent_guard = AGENT_GUARD_IN_AGENT;
	agent_pid = getpid();
	libc_real_resolve();

	int state = AGENT_OFF;
	const char *path = getenv(DN_ENV_SEGMENT);
	struct dn_segment *seg = NULL;
	int rc;
	if (!path || !*path) {
		/* Preloaded by hand, not by `discnice run`: nothing to police. */
		agent_warn("libdiscnice.so loaded without a class%s (start jobs with 'discnice run'); "
			   "running unregulated", "", 0);
	} else if ((rc = segment_attach_path_ino(path, &seg, &agent.seg_ino)) < 0) {
		/* Expected, and no news to the user: a process that changed
		 * its uid (su, setpriv: the open fails with EACCES) or outlived
		 * its class (ENOENT) - the supervisor still regulates what it
		 * can from outside.  Only a segment that is there and wrong
		 * (EPERM: ours with a wrong mode; EPROTO) is worth a line
		 * (issue #8 item 12). */
		if (rc != -ENOENT && rc != -EACCES)
			agent_warn("class segment %s is unusable (%s); running unregulated", path,
				   -rc);
	} else {
		agent.seg = seg;
		/* The program may change its environment before it exits. */
		snprintf(agent.seg_path, sizeof agent.seg_path, "%s", path);
		const char *slot = getenv(DN_ENV_RUN_SLOT);
		if (slot) {
			unsigned long i = strtoul(slot, NULL, 10);
			if (i < DN_MAX_RUNS)
				agent.run = &seg->runs[i];
		}
		agent.predict_mask = seg->predict_mask;
		open_file_net_unix = (seg->flags & DN_FLAG_NET_UNIX) != 0;
		agent.chunk_bytes = seg->chunk_bytes ? seg->chunk_bytes : (256u << 10);
		/* Periodic writeback cleans a page within dirty_expire +
		 * dirty_writeback of its dirtying (mm/page-writeback.c). */
		agent.writeback_expire_ns =
			(read_centisecs("/proc/sys/vm/dirty_expire_centisecs", 3000) +
			 read_centisecs("/proc/sys/vm/dirty_writeback_centisecs", 500)) *
			(NS_PER_SEC / 100);
		if (seg->trace_path[0])
			open_trace(seg->trace_path);
		const char *uncapped = getenv("DISCNICE_PREDICT_UNCAPPED");
		agent.predict_uncapped = agent.trace_fd >= 0 || (uncapped && strcmp(uncapped, "on") == 0);
		agent.count_uncapped = !agent.predict_uncapped && uncapped &&
				       strcmp(uncapped, "count") == 0;
		if (io_init() == 0) {
			pthread_atfork(agent_before_fork, agent_after_fork_parent, agent_after_fork_child);
			/* After io_init: it reads --cache drop. */
			agent.dozing = !agent.predict_uncapped && !agent.count_uncapped && !agent.cache_drop;
			state = AGENT_ON;
			/* The supervisor's proof that the loader took LD_PRELOAD. */
			AGENT_COUNT(agent_loads, 1);
		}
	}
	agent_guard = AGENT_GUARD_FREE;
	errno = saved;
	__atomic_store_n(&agent_state, state, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void agent_constructor(void)
{
	agent_init();
}

/* A run started with --exec has no supervisor: its slot holds the job's
 * own pid (tool_run.c, exec_job), and the process that still has that pid
 * - the job, through any execs - ends the run when it exits.  Its
 * children, and every process of a supervised run, have other pids. */
static int exit_gate; /* 0: open; 1: a thread is deciding or ending; 2: ended */

static bool end_exec_run(void)
{
	if (!agent.run)
		return false;
	/* Threads that leave at once (one in exit(), others in _exit()):
	 * one decides and ends the run, the others wait for it (at most
	 * 100 ms; a lock holder that stopped is broken after 20 ms), since
	 * their exit_group() would kill it half-way.  The gate comes before
	 * the pid check: a thread that found the slot already cleared would
	 * not wait. */
	int open = 0;
	if (!__atomic_compare_exchange_n(&exit_gate, &open, 1, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		struct timespec pause = { 0, 100 * 1000 };
		for (int i = 0; i < 1000 && __atomic_load_n(&exit_gate, __ATOMIC_ACQUIRE) == 1; i++)
			nanosleep(&pause, NULL);
		return __atomic_load_n(&exit_gate, __ATOMIC_ACQUIRE) == 2;
	}
	uint32_t pid = (uint32_t)getpid();
	if (__atomic_load_n(&agent.run->pid, __ATOMIC_ACQUIRE) != pid) {
		/* Any other process (a child, every process of a supervised
		 * run): not ours to end. */
		__atomic_store_n(&exit_gate, 0, __ATOMIC_RELEASE);
		return false;
	}
	bool ended = segment_end_exec_run(agent.seg, agent.run, pid, agent.seg_path, agent.seg_ino);
	__atomic_store_n(&exit_gate, 2, __ATOMIC_RELEASE);
	return ended;
}

/* _exit(2), _Exit(2): how dash, and many a program's error path, leave -
 * without exit()'s destructors.  Only the --exec run's end is done here:
 * what the destructor does besides (cache drop's last pass, the scan for
 * an abandoned class) is not worth delaying a process that chose not to
 * run its handlers.  Not through agent_enter(): a signal handler that
 * interrupted the agent (a throttled job sleeps in it) must end the run
 * too.  What runs is a pid check, then atomics and system calls under the
 * segment lock; if the interrupted code held that lock, the holding is
 * broken after DN_LOCK_BREAK_NS.  A vfork or CLONE_VM child, which shares
 * our memory, has a pid of its own and passes by at the check. */
void agent_exit_now(void)
{
	if (__atomic_load_n(&agent_state, __ATOMIC_ACQUIRE) != AGENT_ON || !agent.seg_path[0])
		return;
	int saved = errno, was_in = agent_guard;
	agent_guard = AGENT_GUARD_IN_AGENT;
	end_exec_run();
	agent_guard = was_in;
	errno = saved;
}

/* exit(): a process of a class whose supervisor was killed may be the
 * last user of the class's file; then it removes it (issue #4 §5).  A
 * process that is killed, or leaves by exec or _exit, runs no destructor:
 * the next `discnice run` removes what is left (tool_run.c). */
__attribute__((destructor)) static void agent_destructor(void)
{
	if (__atomic_load_n(&agent_state, __ATOMIC_ACQUIRE) != AGENT_ON || !agent.seg_path[0])
		return;
	int saved = errno, was_in = agent_guard;
	agent_guard = AGENT_GUARD_IN_AGENT;
	if (agent.cache_drop) {
		writeback_exit();
		cache_drop_exit();
	}
	if (!end_exec_run())
		segment_remove_abandoned(agent.seg, agent.seg_path, agent.seg_ino, false);
	agent_guard = was_in;
	errno = saved;
}

/* One atomic add per event: to this run's counters, which the class's
 * readers sum; to the class's own only for a process with no run slot. */
void agent_count(size_t field_offset, uint64_t value)
{
	if (!value || !agent.seg)
		return;
	struct dn_counters *counters = agent.run ? &agent.run->counters : &agent.seg->counters;
	segment_count((uint64_t *)((char *)counters + field_offset), value);
}

void agent_trace(const char *op, uint64_t file_bytes, uint64_t predicted_bytes, uint64_t delay_ns)
{
	if (agent.trace_fd < 0)
		return;
	/* The program took the trace's number (dup2 onto it, close_range):
	 * our lines would go into its file.  The trace ends; the lines from
	 * here on are counted as lost. */
	if (!private_fd_is_ours(agent.trace_fd)) {
		AGENT_COUNT(trace_lost_lines, 1);
		return;
	}
	char line[160];
	uint64_t t = clock_now_ns() - agent.seg->created_ns;
	int n = snprintf(line, sizeof line, "%" PRIu64 ".%06" PRIu64 " %d %s %" PRIu64 " %" PRIu64
			 " %" PRIu64 ".%06" PRIu64 "\n",
			 t / NS_PER_SEC, t % NS_PER_SEC / 1000, (int)getpid(), op, file_bytes,
			 predicted_bytes, delay_ns / NS_PER_SEC, delay_ns % NS_PER_SEC / 1000);
	/* O_APPEND: whole lines.  A line the disk would not take (ENOSPC, a
	 * short write) is counted, and the supervisor says how many were lost
	 * (issue #8 item 14): a trace with holes must not pass for whole. */
	if (n > 0 && n < (int)sizeof line &&
	    libc_real.write(agent.trace_fd, line, (size_t)n) != (ssize_t)n)
		AGENT_COUNT(trace_lost_lines, 1);
}
