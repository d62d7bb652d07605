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
		if (stopped_already(s, pid) || proc_process_stat_read(pid, &st) < 0 || st.state == 'T' ||
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

void suspend_continue_handing_back(pid_t pid)
{
	struct proc_signals sig;
	uint64_t again = 0;
	if (proc_thread_signals(pid, pid, &sig) == 0)
		again = (sig.pending | sig.shared_pending) & PROC_STOP_SIGNALS & ~sig.ignored &
			~(1ull << (SIGSTOP - 1));
	stop_guard_continue_then_send(pid, again);
}

void suspender_continue(struct suspender *s)
{
	if (!s->n)
		return;
	for (unsigned i = 0; i < s->n; i++)
		stop_guard_continue(s->stopped[i]);
	s->n = 0;
	stop_guard_all_continued(&s->guard);
}

void suspender_end(struct suspender *s)
{
	suspender_continue(s);
	stop_guard_end(&s->guard); /* it has nothing more to continue */
}
