/*
 * tool_suspend.c - stopping and continuing a benice job's tree, with a
 * guard against being killed meanwhile (see tool_suspend.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/proc_io.h"
#include "tool/tool_suspend.h"

int suspender_start(struct suspender *s)
{
	memset(s, 0, sizeof *s);
	s->guard = (struct stop_guard)STOP_GUARD_INIT;
	return stop_guard_start(&s->guard);
}

static bool stopped_already(const struct suspender *s, pid_t pid)
{
	for (unsigned i = 0; i < s->n; i++)
		if (s->stopped[i] == pid)
			return true;
	return false;
}

unsigned suspender_stop(struct suspender *s, const struct jobtree *tree)
{
	unsigned count = 0;
	for (unsigned i = 0; i < tree->n && s->n < JOBTREE_MAX; i++) {
		pid_t pid = tree->procs[i].pid;
		struct proc_stat st;
		/* Read again now: a stop by someone else since the scan stays
		 * theirs (T, t), a zombie needs nothing. */
		if (stopped_already(s, pid) || proc_stat_read(pid, &st) < 0 || st.state == 'T' ||
		    st.state == 't' || st.state == 'Z' || st.state == 'X')
			continue;
		/* A traced process is left to its tracer.  Our SIGSTOP would go
		 * to the tracer first (a signal-delivery stop), which our
		 * SIGCONT cannot end; the tracer, once it runs again, hands the
		 * SIGSTOP in, and the process stops for good with nobody to
		 * continue it (`benice -- strace -f job`).  The tracer, when it
		 * is in the job, is stopped, and holds the tracee at its next
		 * traced event (strace: its next system call). */
		if (proc_tracer_pid(pid) != 0)
			continue;
		if (!stop_guard_will_stop(&s->guard, pid))
			break;
		if (kill(pid, SIGSTOP) == 0) {
			s->stopped[s->n++] = pid;
			count++;
		}
	}
	return count;
}

/* SIGCONT, then the stop signals in again (each a process-wide kill(),
 * the SIGCONT having flushed them). */
static void continue_then_send(pid_t pid, uint64_t again)
{
	kill(pid, SIGCONT);
	for (int signo = 1; signo <= 64; signo++)
		if (again & 1ull << (signo - 1))
			kill(pid, signo);
}

/* Continue a process we stopped, unless someone else asked it to stop
 * meanwhile.  A stop signal sent to a stopped process stays pending (kill
 * -STOP shows in ShdPnd), and our SIGCONT would throw it away (kernel/
 * signal.c: prepare_signal() flushes the pending stop signals on SIGCONT).
 * Only a process that has stopped can tell: ours is the signal that
 * stopped it, so one pending beside it is another's.  A process not
 * stopped yet may still hold our own SIGSTOP pending - a continue soon
 * after the stop, before the signal reached a task asleep on another CPU
 * or in the kernel - and that one is ours to take back: left alone it
 * would stop the process after our SIGCONT, for good, and look like
 * someone else's stop (tool_hold.c's hold_let_signals_through() had the
 * same mistake).  A stop someone else sends in that instant is lost with
 * ours.
 *
 * A SIGTSTP, SIGTTIN or SIGTTOU the process catches (SigCgt) is no request
 * to stop: the handler decides, and it runs only once the process runs
 * (kernel/signal.c: get_signal() calls do_signal_stop() only for a stop
 * signal whose action is the default).  Left pending it kept the process
 * stopped for good with the signal undelivered; our SIGCONT flushes it
 * all the same, so it is sent again after the SIGCONT (as a process-wide
 * signal, even if it was sent to one thread), and the handler runs once.
 * One the process blocks (SigBlk) is no request either until it is
 * unblocked, and is sent again the same way: left pending, it kept the
 * process stopped for good with nobody to continue it.  One ignored but
 * blocked (pending, SigIgn) is dropped, as it would be. */
static void continue_unless_asked_to_stop(pid_t pid)
{
	struct proc_stat st;
	struct proc_signals sig;
	uint64_t again = 0;
	if (proc_stat_read(pid, &st) == 0 && (st.state == 'T' || st.state == 't') &&
	    proc_thread_signals(pid, pid, &sig) == 0) {
		if (proc_stop_requested(&sig))
			return; /* someone else's stop: theirs to continue */
		again = (sig.pending | sig.shared_pending) & PROC_STOP_SIGNALS & ~sig.ignored &
			(sig.caught | sig.blocked);
	}
	continue_then_send(pid, again);
}

void suspend_continue_handing_back(pid_t pid)
{
	struct proc_signals sig;
	uint64_t again = 0;
	if (proc_thread_signals(pid, pid, &sig) == 0)
		again = (sig.pending | sig.shared_pending) & PROC_STOP_SIGNALS & ~sig.ignored &
			~(1ull << (SIGSTOP - 1));
	continue_then_send(pid, again);
}

void suspender_continue(struct suspender *s)
{
	if (!s->n)
		return;
	for (unsigned i = 0; i < s->n; i++)
		continue_unless_asked_to_stop(s->stopped[i]);
	s->n = 0;
	stop_guard_all_continued(&s->guard);
}

void suspender_end(struct suspender *s)
{
	suspender_continue(s);
	stop_guard_end(&s->guard); /* it has nothing more to continue */
}
