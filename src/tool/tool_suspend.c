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
		if (!stop_guard_will_stop(&s->guard, pid))
			break;
		if (kill(pid, SIGSTOP) == 0) {
			s->stopped[s->n++] = pid;
			count++;
		}
	}
	return count;
}

/* Did someone else ask this process, stopped by us, to stop?  A stop
 * signal sent to a stopped process stays pending (kill -STOP shows in
 * ShdPnd), and our SIGCONT would throw it away (kernel/signal.c:
 * prepare_signal() flushes the pending stop signals on SIGCONT).
 * Only a process that has stopped can tell: ours is the signal that
 * stopped it, so one pending beside it is another's.  A process not
 * stopped yet may still hold our own SIGSTOP pending - a continue soon
 * after the stop, before the signal reached a task asleep on another CPU
 * or in the kernel - and that one is ours to take back: left alone it
 * would stop the process after our SIGCONT, for good, and look like
 * someone else's stop (tool_hold.c's hold_let_signals_through() had the
 * same mistake).  A stop someone else sends in that instant is lost with
 * ours. */
static bool stop_pending(pid_t pid)
{
	struct proc_stat st;
	struct proc_signals sig;
	return proc_stat_read(pid, &st) == 0 && (st.state == 'T' || st.state == 't') &&
	       proc_thread_signals(pid, pid, &sig) == 0 &&
	       ((sig.pending | sig.shared_pending) & PROC_STOP_SIGNALS);
}

void suspender_continue(struct suspender *s)
{
	if (!s->n)
		return;
	for (unsigned i = 0; i < s->n; i++)
		if (!stop_pending(s->stopped[i]))
			kill(s->stopped[i], SIGCONT);
	s->n = 0;
	stop_guard_all_continued(&s->guard);
}

void suspender_end(struct suspender *s)
{
	suspender_continue(s);
	stop_guard_end(&s->guard); /* it has nothing more to continue */
}
