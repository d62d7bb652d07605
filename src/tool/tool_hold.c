/*
 * tool_hold.c - holding the job's threads from outside (see tool_hold.h).
 *
 * What the kernel does, and why each step is as it is (Linux 6.18):
 *
 * - PTRACE_SEIZE attaches without stopping anything and sends no signal
 *   (kernel/ptrace.c: ptrace_attach(), "SEIZE doesn't trap tracee on
 *   attach").  PTRACE_INTERRUPT sets JOBCTL_TRAP_STOP and calls
 *   ptrace_signal_wake_up(child, false) -> signal_wake_up_state(t, 0)
 *   (kernel/signal.c): TIF_SIGPENDING is set and a thread in
 *   TASK_INTERRUPTIBLE is woken.  A thread in user space traps at its next
 *   return to it (get_signal() -> do_jobctl_trap() -> ptrace_stop()), a
 *   thread in TASK_UNINTERRUPTIBLE (D) when its disk wait is over.  But a
 *   thread asleep in S is woken with a signal pending, exactly as by
 *   SIGSTOP: ep_poll() returns -EINTR, pipe_write() returns the bytes it
 *   had written.  Hence only threads in R or D are interrupted.  What stays
 *   is a race: a thread seen in R that goes to sleep before the interrupt
 *   lands (a few microseconds), or one that is inside pipe_write() copying
 *   when the pipe fills up after the interrupt (pipe_write() checks
 *   signal_pending() before it waits).  Measured: about one short pipe
 *   write per hold for a writer feeding a fast reader.  What the interrupt
 *   did to a system call is undone at the trap, below ("Mending").
 * - The trap is a ptrace stop (TASK_TRACED), reported only to the tracer.
 *   A tracer that is also the real parent sees the child's stops as a
 *   tracer (kernel/exit.c: wait_consider_task(), "hides group stop state
 *   from real parent"), and ptrace_stop() notifies the real parent only of
 *   a completed group stop.  A shell waiting with WUNTRACED for a job
 *   process whose parent it is sees nothing.
 * - Signals sent to a held thread stay queued: TASK_TRACED is woken by
 *   SIGKILL only (signal_wake_up_state() with __TASK_TRACED only for a
 *   fatal signal).  A signal the thread dequeued between SEIZE and its
 *   trap is reported as a signal-delivery stop and would be lost: it is
 *   handed back with PTRACE_DETACH's data argument (ptrace_detach() sets
 *   child->exit_code, which ptrace_signal() delivers).
 * - PTRACE_DETACH needs the thread in a ptrace stop (ptrace_check_attach()
 *   with ignore_state false), so a thread interrupted but not trapped yet
 *   is detached when its trap is reported.  __ptrace_unlink() clears the
 *   pending traps and, if a group stop is in effect (the user's SIGSTOP
 *   arrived while we held the thread), puts the thread into it
 *   (JOBCTL_STOP_PENDING) instead of resuming it: the user's stop stays in
 *   force.  Otherwise the thread resumes (ptrace_signal_wake_up(child,
 *   true)).
 * - When the tracer dies, exit_ptrace() runs __ptrace_detach() on every
 *   tracee: held threads resume by themselves.  No guard is needed for a
 *   ptrace hold; the guard stays for the SIGSTOP fallback.
 *
 * Mending (x86-64, and i386 programs on it).  Our trap comes on the way back
 * to user space (exit_to_user_mode_loop() -> arch_do_signal_or_restart() ->
 * get_signal() -> do_jobctl_trap()), after the system call returned and
 * before the kernel's own restart logic, so the registers show what the
 * interrupt did, and no signal is delivered:
 * - -EINTR (ep_poll(), sigtimedwait(), semop(): calls the kernel never
 *   restarts): we restart it as the kernel restarts -ERESTARTNOHAND
 *   (arch/x86/kernel/signal.c: ax = orig_ax, ip -= 2 - every system call
 *   instruction, syscall, int $0x80, sysenter, is 2 bytes long).
 *   -ERESTART* codes are left alone: the kernel restarts those itself.
 * - A blocking write(2) that returned fewer bytes than asked: we point it
 *   at the rest, let it run under PTRACE_SYSCALL at release, and at its
 *   syscall-exit stop put the total into its return value, so the program
 *   sees one write of every byte, as without us.  Should the program's
 *   own signal or the user's SIGSTOP come before the rest has begun, the
 *   thread is given back its short write as it was (a signal handler's
 *   first system call would otherwise pass for the rest's entry stop).
 * - A read(2) of /dev/zero, /dev/full, /dev/random or /dev/urandom that
 *   returned fewer bytes than asked, mended the same way.  Those drivers
 *   stop a read at any pending signal (drivers/char/mem.c:
 *   read_iter_zero(), drivers/char/random.c: get_random_bytes_user()), and
 *   a program may count on full blocks from them: `dd if=/dev/zero bs=1M
 *   count=256` without iflag=fullblock writes a short record as it is, and
 *   its output came out 94,208 bytes short.  Other reads are not mended: a
 *   pipe, socket or terminal returns what it has whether or not a signal
 *   is pending, and asking for the rest would wait for data the program
 *   did not wait for; a regular file's read stops only for a fatal signal
 *   (mm/filemap.c: filemap_read()).
 * Neither is done when the thread has a signal of its own to take (then
 * the short count or EINTR is the program's, not ours), nor for a
 * non-blocking descriptor, whose short counts are the program's to handle.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#if defined(__x86_64__)
#include <sys/user.h>
#endif
#include <time.h>
#include <unistd.h>

#include "common/proc_io.h"
#include "tool/tool_guard.h"
#include "tool/tool_hold.h"
#include "tool/tool_msg.h"
#include "tool/tool_suspend.h"

#define MAX_HELD 4096
#define MAX_REFUSED 256
/* hold_free(): how long to wait for traps still pending at the end. */
#define FINAL_TRAP_WAIT_NS (1000 * 1000 * 1000ull)

enum mend {
	MEND_NONE,
	MEND_REST,        /* a short read or write, pointed at the rest: run it */
	MEND_ENTRY,       /* running it: its syscall-entry stop is next     */
	MEND_EXIT,        /* in it: its syscall-exit stop is next           */
};

struct held_thread {
	pid_t tid, pid;
	int signal;       /* to hand back at detach (a signal-delivery stop) */
	bool trapped;     /* in a ptrace stop now                          */
	bool releasing;   /* let go as soon as the trap is reported        */
	enum mend mend;
	long long done;   /* MEND_*: bytes the cut-short call had moved       */
	unsigned long long call_nr;  /* MEND_*: its system call number (orig_ax) */
	unsigned long long call_ip;  /* MEND_*: address of its syscall instruction */
};

struct hold {
	struct held_thread threads[MAX_HELD];
	unsigned nthreads;
	pid_t sigstopped[MAX_HELD]; /* fallback: processes held with SIGSTOP */
	unsigned nsigstopped;
	pid_t refused[MAX_REFUSED]; /* processes that refused ptrace         */
	unsigned nrefused;
	bool warned;
	/* Hold threads asleep in socket calls and event waits as well
	 * (hold_socket_waits()). */
	bool socket_waits;
	struct stop_guard guard;    /* for the SIGSTOP fallback (tool_guard.h) */
};

/* ---- bookkeeping ---------------------------------------------------------- */

struct hold *hold_new(void)
{
	struct hold *hold = calloc(1, sizeof *hold);
	if (hold)
		hold->guard = (struct stop_guard)STOP_GUARD_INIT;
	return hold;
}

static struct held_thread *held_find(struct hold *hold, pid_t tid)
{
	for (unsigned i = 0; i < hold->nthreads; i++)
		if (hold->threads[i].tid == tid)
			return &hold->threads[i];
	return NULL;
}

static void held_forget(struct hold *hold, struct held_thread *t)
{
	*t = hold->threads[--hold->nthreads];
}

static bool pid_in(const pid_t *set, unsigned n, pid_t pid)
{
	for (unsigned i = 0; i < n; i++)
		if (set[i] == pid)
			return true;
	return false;
}

bool hold_sigstopped(const struct hold *hold, pid_t pid)
{
	return hold && pid_in(hold->sigstopped, hold->nsigstopped, pid);
}

pid_t hold_guard(const struct hold *hold)
{
	return hold && hold->guard.pid > 0 ? hold->guard.pid : 0;
}

unsigned hold_count(const struct hold *hold)
{
	unsigned n = hold ? hold->nsigstopped : 0;
	for (unsigned i = 0; hold && i < hold->nthreads; i++)
		n += !hold->threads[i].releasing && hold->threads[i].mend < MEND_ENTRY;
	return n;
}

/* ---- mending what the interrupt did (see the top of the file) ------------ */

/* Would this signal, pending now, make the thread do something (run a
 * handler, die, stop)?  Ignored and default-ignored signals would not. */
static bool signal_acts(const struct proc_signals *s)
{
	const uint64_t default_ignored = 1ull << (SIGCHLD - 1) | 1ull << (SIGCONT - 1) |
					 1ull << (SIGURG - 1) | 1ull << (SIGWINCH - 1);
	uint64_t pending = (s->pending | s->shared_pending) & ~s->blocked & ~s->ignored;
	return (pending & ~(default_ignored & ~s->caught)) != 0;
}

#if defined(__x86_64__)
#define X86_COMPAT_CS 0x23 /* user code segment of an i386 program */

static bool fd_blocking(pid_t pid, long long fd)
{
	char path[64], buf[256];
	snprintf(path, sizeof path, "/proc/%d/fdinfo/%lld", (int)pid, fd);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	unsigned long flags = 0;
	bool found = false;
	while (!found && fgets(buf, sizeof buf, f))
		found = sscanf(buf, "flags: %lo", &flags) == 1;
	fclose(f);
	return found && !(flags & O_NONBLOCK);
}

/* Is fd one of the character devices whose reads a pending signal cuts
 * short (drivers/char/mem.c: the memory devices' major 1, minors 5 zero,
 * 7 full, 8 random, 9 urandom)? */
static bool fd_reads_stop_at_signals(pid_t pid, long long fd)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof path, "/proc/%d/fd/%lld", (int)pid, fd);
	if (stat(path, &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != 1)
		return false;
	unsigned minor_nr = minor(st.st_rdev);
	return minor_nr == 5 || minor_nr == 7 || minor_nr == 8 || minor_nr == 9;
}

/* At the trap of our interrupt: undo what it did to a system call. */
static void mend_inspect(struct held_thread *t)
{
	struct user_regs_struct regs;
	if (ptrace(PTRACE_GETREGS, t->tid, NULL, &regs) != 0)
		return;
	bool compat = regs.cs == X86_COMPAT_CS;
	long long nr = compat ? (int)regs.orig_rax : (long long)regs.orig_rax;
	long long ret = compat ? (int)regs.rax : (long long)regs.rax;
	/* orig_ax is -1 unless the thread is on its way back from a system
	 * call: an exception's entry moves its error code out and stores -1
	 * (arch/x86/entry/entry_64.S, idtentry "no syscall to restart"), the
	 * same test the kernel's own restart logic makes (syscall_get_nr()). */
	if (nr < 0)
		return; /* trapped on the way back from user space: nothing cut short */
	/* sendto (x86-64 only: i386 programs send through socketcall) has
	 * write's first three arguments; its address is ignored on a
	 * connected stream, the only kind whose short count we cause (a
	 * datagram goes whole or not at all). */
	bool is_write = nr == (compat ? 4 : 1) || (!compat && nr == 44);
	bool is_read = nr == (compat ? 3 : 0);
	unsigned long long fd = compat ? regs.rbx : regs.rdi;
	unsigned long long count = compat ? (unsigned)regs.rdx : regs.rdx;
	bool short_count = (is_write || is_read) && ret > 0 && (unsigned long long)ret < count;
	if (ret != -EINTR && !short_count)
		return;
	struct proc_signals sigs;
	if (proc_thread_signals(t->pid, t->tid, &sigs) != 0 || signal_acts(&sigs))
		return; /* the program's own signal did it */
	if (ret != -EINTR) {
		if (!fd_blocking(t->pid, (long long)fd))
			return;
		if (is_read && !fd_reads_stop_at_signals(t->pid, (long long)fd))
			return;
		if (compat)
			regs.rcx += (unsigned long long)ret;
		else
			regs.rsi += (unsigned long long)ret;
		regs.rdx = count - (unsigned long long)ret;
		t->done = ret;
	}
	regs.rax = regs.orig_rax;
	regs.rip -= 2;
	t->call_ip = regs.rip;
	t->call_nr = regs.orig_rax;
	if (ptrace(PTRACE_SETREGS, t->tid, NULL, &regs) == 0 && ret != -EINTR)
		t->mend = MEND_REST;
}

/* Before the rest of a mended call has begun, something must run first:
 * the program's own signal (its handler would otherwise be taken for the
 * write - the first system call it makes, rt_sigreturn at the latest,
 * would be mistaken for the write's entry) or a group stop.  Give the
 * thread back the short write it had, as a signal arriving mid-write does
 * without us: the count written so far, the instruction after the system
 * call, and rsi/rdx (ecx/edx) as they were, since the system call ABI
 * keeps them. */
static void mend_undo(struct held_thread *t)
{
	struct user_regs_struct regs;
	if (ptrace(PTRACE_GETREGS, t->tid, NULL, &regs) != 0 || regs.rip != t->call_ip)
		return;
	bool compat = regs.cs == X86_COMPAT_CS;
	unsigned long long w = (unsigned long long)t->done;
	if (compat) {
		regs.rcx -= w;
		regs.rax = (unsigned long long)(unsigned)t->done;
	} else {
		regs.rsi -= w;
		regs.rax = w;
	}
	regs.rdx += w;
	regs.rip += 2;
	ptrace(PTRACE_SETREGS, t->tid, NULL, &regs);
}

/* At the restarted call's syscall-exit stop: the program sees the bytes
 * of both parts, or only the first part's if the rest failed. */
static void mend_finish(struct held_thread *t)
{
	struct user_regs_struct regs;
	if (ptrace(PTRACE_GETREGS, t->tid, NULL, &regs) != 0 || regs.orig_rax != t->call_nr)
		return;
	bool compat = regs.cs == X86_COMPAT_CS;
	long long rest = compat ? (int)regs.rax : (long long)regs.rax;
	long long total = t->done + (rest > 0 ? rest : 0);
	regs.rax = compat ? (unsigned long long)(unsigned)total : (unsigned long long)total;
	ptrace(PTRACE_SETREGS, t->tid, NULL, &regs);
}
#else
/* Elsewhere the registers are not mended: a thread interrupted inside a
 * system call sees what SIGSTOP would have done to it (discnice(1)). */
static void mend_inspect(struct held_thread *t)
{
	(void)t;
}

static void mend_finish(struct held_thread *t)
{
	(void)t;
}

static void mend_undo(struct held_thread *t)
{
	(void)t;
}
#endif

/* Let go of a thread in a ptrace stop, handing back a signal it had
 * dequeued; a cut-short read or write is first run to its end under
 * PTRACE_SYSCALL (the entry stays until its syscall-exit stop). */
static void detach(struct hold *hold, struct held_thread *t)
{
	if (t->mend == MEND_REST &&
	    ptrace(PTRACE_SYSCALL, t->tid, NULL, (void *)(long)t->signal) == 0) {
		t->mend = MEND_ENTRY;
		t->signal = 0;
		t->trapped = false;
		t->releasing = true;
		return;
	}
	ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(long)t->signal);
	held_forget(hold, t);
}

/* A stop of a thread whose read or write is being run to its end. */
static void mend_event(struct hold *hold, struct held_thread *t, int status)
{
	int sig = WSTOPSIG(status);
	if (sig == (SIGTRAP | 0x80) && t->mend == MEND_ENTRY) {
		t->mend = MEND_EXIT;
		ptrace(PTRACE_SYSCALL, t->tid, NULL, NULL);
	} else if (sig == (SIGTRAP | 0x80)) {
		mend_finish(t);
		t->mend = MEND_NONE;
		ptrace(PTRACE_DETACH, t->tid, NULL, NULL);
		held_forget(hold, t);
	} else {
		/* Before the rest began (a signal-delivery or group stop comes
		 * only on the way to user space, never between the write's
		 * entry and exit stops): the program's own signal, delivered
		 * with the detach, or the user's SIGSTOP, kept in force by
		 * __ptrace_unlink().  The thread sees the short write. */
		if (t->mend == MEND_ENTRY)
			mend_undo(t);
		t->mend = MEND_NONE;
		ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(long)(status >> 16 ? 0 : sig));
		held_forget(hold, t);
	}
}

/* ---- holding -------------------------------------------------------------- */

static bool runs_or_reads(char state)
{
	return state == 'R' || state == 'D';
}

void hold_socket_waits(struct hold *hold, bool on)
{
	if (hold)
		hold->socket_waits = on;
}

#if defined(__x86_64__)
/*
 * A thread asleep (S) in a call that moves or waits for socket data
 * (issue #12 item 5).  Unlike a disk reader, a TCP sender blocked in
 * write() keeps copying into the socket as the buffer drains, without
 * ever returning to user space, and an event loop (Go's netpoller,
 * epoll) spends its time asleep between short bursts of sends: neither is
 * ever seen in R by a tick.  What our interrupt does to these calls is
 * invisible or mended: with nothing moved, a socket's read or write
 * returns -ERESTARTSYS (sock_intr_errno() of an infinite timeout), which
 * the kernel restarts; a read that moved some returns its short count, as
 * a socket read may at any time; a short blocking write() or sendto() is
 * pointed at the rest (mend_inspect()); poll and select return
 * -ERESTARTNOHAND (restarted), epoll_wait and io_uring_enter -EINTR
 * (io_cqring_wait; restarted by
 * mend_inspect(), with its whole timeout again: a timer the event loop
 * waits for may fire up to that much late, once per hold).  Measured: a
 * static Go sender, whose netpoller waits in epoll_pwait, ran free for
 * 6 MiB at a time without the event waits held (0.78 MiB/s average
 * against 1 MiB/s, in steps), within 8 % with them.  Not held: sendmsg,
 * writev and sendmmsg (their short
 * counts are not mended), and every other sleep.  The call and its fd are
 * read from /proc/PID/task/TID/syscall ("NR ARG1 ..."), which a tracer
 * may read (proc_pid_syscall(), PTRACE_MODE_ATTACH_FSCREDS).
 */
static bool fd_is_socket(pid_t pid, unsigned long long fd)
{
	char path[64], target[32];
	snprintf(path, sizeof path, "/proc/%d/fd/%llu", (int)pid, fd);
	ssize_t n = readlink(path, target, sizeof target - 1);
	return n > 8 && memcmp(target, "socket:[", 8) == 0;
}

static bool waits_on_sockets(pid_t pid, pid_t tid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	long nr = -1;
	unsigned long long fd = 0;
	bool got = fgets(line, sizeof line, f) && sscanf(line, "%ld %llx", &nr, &fd) >= 1;
	fclose(f);
	if (!got)
		return false;
	switch (nr) {
	case 0:   /* read     */
	case 1:   /* write    */
	case 44:  /* sendto   */
	case 45:  /* recvfrom */
	case 47:  /* recvmsg  */
		return fd_is_socket(pid, fd);
	case 7:   /* poll        */
	case 23:  /* select      */
	case 232: /* epoll_wait  */
	case 270: /* pselect6    */
	case 271: /* ppoll       */
	case 281: /* epoll_pwait */
	case 426: /* io_uring_enter, waiting for completions */
		return true;
	default:
		return false;
	}
}
#else
static bool waits_on_sockets(pid_t pid, pid_t tid)
{
	(void)pid;
	(void)tid;
	return false; /* nothing mended here: only R and D are held */
}
#endif

/* The last resort, for a process ptrace may not touch: SIGSTOP, which the
 * process and its parent can see (see tool_hold.h). */
static void hold_with_sigstop(struct hold *hold, pid_t pid)
{
	struct proc_stat st;
	if (hold->nsigstopped >= MAX_HELD || proc_stat_read(pid, &st) < 0 ||
	    st.state == 'T' || st.state == 't' || st.state == 'Z' || !proc_process_busy(pid))
		return;
	/* A stop signal of another's pending (handed back by
	 * hold_let_signals_through(), or just sent): the process is about to
	 * stop as they asked, and a SIGSTOP of ours beside it would be taken
	 * first (next_signal(): the lower number) and hand it back again, for
	 * ever. */
	struct proc_signals sig;
	if (proc_thread_signals(pid, pid, &sig) == 0 && proc_stop_requested(&sig))
		return;
	if (stop_guard_start(&hold->guard) != 0 || !stop_guard_will_stop(&hold->guard, pid))
		return;
	if (kill(pid, SIGSTOP) == 0)
		hold->sigstopped[hold->nsigstopped++] = pid;
}

static void refuse(struct hold *hold, pid_t pid, int err)
{
	if (hold->nrefused < MAX_REFUSED)
		hold->refused[hold->nrefused++] = pid;
	if (hold->warned)
		return;
	hold->warned = true;
	char comm[64];
	proc_comm(pid, comm, sizeof comm);
	warnf("cannot hold process %d (%s) with ptrace: %s; it is held with SIGSTOP instead, "
	      "which the program and its parent can see (see discnice(1), Measured feedback)",
	      (int)pid, comm, strerror(err));
}

void hold_process(struct hold *hold, pid_t pid)
{
	if (!hold || hold_sigstopped(hold, pid))
		return;
	if (pid_in(hold->refused, hold->nrefused, pid)) {
		hold_with_sigstop(hold, pid);
		return;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return;
	bool holding_some = false;
	struct dirent *e;
	while ((e = readdir(d)) && hold->nthreads < MAX_HELD) {
		if (e->d_name[0] == '.')
			continue;
		pid_t tid = (pid_t)atoi(e->d_name);
		struct held_thread *known = held_find(hold, tid);
		if (known) {
			holding_some = true;
			/* Released but not trapped yet: its trap comes, and the
			 * thread stays held instead of being let go.  (One
			 * finishing a mended call is left to finish it.) */
			if (known->mend < MEND_ENTRY)
				known->releasing = false;
			continue;
		}
		struct proc_stat st;
		/* Only R and D: see the top of the file.  T and t are stopped
		 * by someone else (job control, a debugger) and stay so. */
		if (proc_thread_stat_read(pid, tid, &st) < 0)
			continue;
		if (!runs_or_reads(st.state) &&
		    !(hold->socket_waits && st.state == 'S' && waits_on_sockets(pid, tid)))
			continue;
		/* TRACESYSGOOD: a mended call's syscall stops are told
		 * apart from a SIGTRAP of the program's own. */
		if (ptrace(PTRACE_SEIZE, tid, NULL, (void *)(long)PTRACE_O_TRACESYSGOOD) != 0) {
			int err = errno;
			if (err == ESRCH)
				continue;
			/* EPERM: not dumpable (setuid), another tracer, or a
			 * security module's no.  A process half held by ptrace
			 * keeps that half; one held not at all gets SIGSTOP. */
			if (!holding_some) {
				closedir(d);
				refuse(hold, pid, err);
				hold_with_sigstop(hold, pid);
				return;
			}
			continue;
		}
		/* ESRCH here means the thread is exiting: it is our tracee
		 * until its exit is reaped, and held_find() forgets it then. */
		ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
		hold->threads[hold->nthreads++] = (struct held_thread){ .tid = tid, .pid = pid };
		holding_some = true;
	}
	closedir(d);
}

void hold_let_signals_through(struct hold *hold)
{
	if (!hold)
		return;
	/* A SIGSTOPped process takes no signal but SIGKILL until continued.
	 * Our own SIGSTOP is not one of those: it stays pending while the
	 * process finishes a disk wait (D), or while a debugger that traces
	 * it has not passed it on yet, and a SIGCONT then would discard it
	 * (kernel/signal.c: prepare_signal() flushes pending stop signals):
	 * a disk-bound process was let go at every tick, and never held. */
	for (unsigned i = 0; i < hold->nsigstopped;) {
		struct proc_signals s;
		pid_t pid = hold->sigstopped[i];
		bool acts = false;
		if (proc_thread_signals(pid, pid, &s) == 0) {
			s.pending &= ~(1ull << (SIGSTOP - 1));
			s.shared_pending &= ~(1ull << (SIGSTOP - 1));
			acts = signal_acts(&s);
		}
		if (acts) {
			/* Another's stop signal among them (Ctrl-Z in the
			 * target's terminal, kill -TSTP) is sent again after
			 * the SIGCONT, which would flush it: the process stops
			 * as they asked, and is theirs, not ours, from then on
			 * (hold_with_sigstop() leaves a stopped process alone). */
			suspend_continue_handing_back(pid);
			stop_guard_forget(&hold->guard, pid);
			hold->sigstopped[i] = hold->sigstopped[--hold->nsigstopped];
			continue;
		}
		i++;
	}
	for (unsigned i = 0; i < hold->nthreads;) {
		struct held_thread *t = &hold->threads[i];
		struct proc_signals s;
		if (!t->releasing && t->mend < MEND_ENTRY &&
		    proc_thread_signals(t->pid, t->tid, &s) == 0 &&
		    (signal_acts(&s) || t->signal)) {
			/* Let its whole process go: the signal may be for any
			 * of its threads. */
			pid_t pid = t->pid;
			for (unsigned j = 0; j < hold->nthreads;) {
				struct held_thread *u = &hold->threads[j];
				if (u->pid != pid || u->releasing || u->mend >= MEND_ENTRY) {
					j++;
				} else if (u->trapped) {
					detach(hold, u);
				} else {
					u->releasing = true;
					j++;
				}
			}
			i = 0;
			continue;
		}
		i++;
	}
}

void hold_release(struct hold *hold)
{
	if (!hold)
		return;
	for (unsigned i = 0; i < hold->nthreads;) {
		struct held_thread *t = &hold->threads[i];
		if (t->trapped && t->mend < MEND_ENTRY) {
			unsigned before = hold->nthreads;
			detach(hold, t); /* forgets it (the last entry moves here) */
			if (hold->nthreads == before)
				i++; /* kept, running its mended call */
		} else {
			t->releasing = true;
			i++;
		}
	}
	if (hold->nsigstopped) {
		for (unsigned i = 0; i < hold->nsigstopped; i++)
			suspend_continue_handing_back(hold->sigstopped[i]);
		hold->nsigstopped = 0;
		stop_guard_all_continued(&hold->guard);
	}
}

bool hold_child_event(struct hold *hold, pid_t pid, int status)
{
	if (!hold)
		return false;
	struct held_thread *t = held_find(hold, pid);
	if (!t) {
		/* A tracee we no longer know by this id (a thread that called
		 * execve() takes its leader's pid, fs/exec.c: de_thread()):
		 * let it go.  For a stop that is not a ptrace stop of ours -
		 * the job stopped by job control - PTRACE_DETACH fails with
		 * ESRCH and the caller gets the status. */
		if (WIFSTOPPED(status)) {
			int sig = status >> 16 ? 0 : WSTOPSIG(status);
			return ptrace(PTRACE_DETACH, pid, NULL, (void *)(long)sig) == 0;
		}
		return false;
	}
	if (!WIFSTOPPED(status)) {
		/* Exited (killed while held: SIGKILL wakes TASK_TRACED) */
		if (WIFEXITED(status) || WIFSIGNALED(status))
			held_forget(hold, t);
		return false;
	}
	if (t->mend >= MEND_ENTRY) {
		mend_event(hold, t, status);
		return true;
	}
	/* status >> 16 is the ptrace event: PTRACE_EVENT_STOP for our
	 * interrupt (WSTOPSIG SIGTRAP) or a group stop (the stop signal);
	 * 0 for a signal-delivery stop, whose signal must be handed back. */
	if (!(status >> 16)) {
		t->signal = WSTOPSIG(status);
		/* A stop signal (a Slurm suspension's SIGSTOP, a user's kill
		 * -STOP) is handed back now, not when the hold ends: a
		 * SIGCONT sent meanwhile finds nothing to continue (the
		 * thread is ours, the signal in t->signal), and the stop
		 * handed back after it would stop the thread for good.  It
		 * stops at once, and does no I/O stopped. */
		if (proc_is_stop_signal(t->signal) && t->mend == MEND_NONE) {
			detach(hold, t);
			return true;
		}
	} else if (status >> 16 == PTRACE_EVENT_STOP && WSTOPSIG(status) == SIGTRAP && !t->trapped)
		mend_inspect(t);
	t->trapped = true;
	if (t->releasing)
		detach(hold, t);
	return true;
}

void hold_free(struct hold *hold)
{
	if (!hold)
		return;
	hold_release(hold);
	/* Traps still to come: take them, briefly.  Whatever is left is
	 * detached by the kernel when we exit (exit_ptrace()). */
	struct timespec pause = { 0, 1000 * 1000 };
	for (uint64_t waited = 0; hold->nthreads && waited < FINAL_TRAP_WAIT_NS;
	     waited += (uint64_t)pause.tv_nsec) {
		for (unsigned i = 0; i < hold->nthreads;) {
			int status;
			pid_t tid = hold->threads[i].tid;
			pid_t r = waitpid(tid, &status, WNOHANG | __WALL);
			if (r == tid)
				hold_child_event(hold, tid, status);
			if (r < 0 || (r == tid && !WIFSTOPPED(status))) {
				struct held_thread *t = held_find(hold, tid);
				if (t)
					held_forget(hold, t);
				continue;
			}
			i += held_find(hold, tid) == &hold->threads[i];
		}
		if (hold->nthreads)
			nanosleep(&pause, NULL);
	}
	stop_guard_end(&hold->guard); /* it has nothing more to continue */
	free(hold);
}
