/*
 * tool_guard.c - the stop guard (see tool_guard.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/proc_io.h"
#include "tool/tool_guard.h"

/* SIGCONT, then the stop signals in again (each a process-wide kill(),
 * the SIGCONT having flushed them). */
void stop_guard_continue_then_send(pid_t pid, uint64_t again)
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
void stop_guard_continue(pid_t pid)
{
	struct proc_stat st;
	struct proc_signals sig;
	uint64_t again = 0;
	if (proc_process_stat_read(pid, &st) == 0 && (st.state == 'T' || st.state == 't') &&
	    proc_thread_signals(pid, pid, &sig) == 0) {
		uint64_t requested = proc_stop_requested(&sig);
		/* A terminal's stop in an orphaned group (benice leading its
		 * session: script -c, tmux new CMD, ssh -t) stops nothing
		 * once the process runs, and nobody will continue it: left
		 * pending, it kept the job stopped for good. */
		if (requested && !(requested & 1ull << (SIGSTOP - 1)) && proc_pgrp_orphaned(pid))
			requested = 0;
		if (requested)
			return; /* someone else's stop: theirs to continue */
		again = (sig.pending | sig.shared_pending) & PROC_STOP_SIGNALS & ~sig.ignored &
			(sig.caught | sig.blocked);
	}
	stop_guard_continue_then_send(pid, again);
}

/* The guard's whole life: remember which pids are stopped, and continue
 * them when the pipe reaches EOF - each unless someone else asked it to
 * stop meanwhile (stop_guard_continue: a kill -STOP or Ctrl-Z the user
 * sent while discnice held the job stays the user's when discnice dies). */
static void __attribute__((noreturn)) guard_main(int fd)
{
	static pid_t stopped[STOP_GUARD_MAX];
	unsigned n = 0;
	char line[32];
	/* The terminal's signals are for the job and discnice. */
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGTSTP, SIG_IGN);
	signal(SIGTTIN, SIG_IGN);
	signal(SIGTTOU, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	FILE *in = fdopen(fd, "r");
	while (in && fgets(line, sizeof line, in)) {
		if (line[0] == 'S' && n < STOP_GUARD_MAX)
			stopped[n++] = (pid_t)atoi(line + 2);
		else if (line[0] == 'C')
			n = 0;
		else if (line[0] == 'F')
			for (unsigned i = 0; i < n; i++)
				if (stopped[i] == (pid_t)atoi(line + 2)) {
					stopped[i] = stopped[--n];
					break;
				}
	}
	for (unsigned i = 0; i < n; i++)
		stop_guard_continue(stopped[i]);
	_exit(0);
}

int stop_guard_start(struct stop_guard *g)
{
	if (g->pid > 0)
		return 0;
	if (g->pid < 0)
		return -EPIPE;
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0) {
		int e = errno;
		g->pid = -1;
		return -e;
	}
	fflush(NULL);
	pid_t guard = fork();
	if (guard == 0) {
		setpgid(0, 0);
		close(fds[1]);
		guard_main(fds[0]);
	}
	int e = errno;
	close(fds[0]);
	if (guard < 0) {
		close(fds[1]);
		g->pid = -1;
		return -e;
	}
	/* Out of our group before we stop anything (EACCES: the child has
	 * already done it itself, and cannot have exec'd). */
	if (setpgid(guard, guard) != 0 && errno != EACCES) {
		e = errno;
		close(fds[1]);
		kill(guard, SIGKILL);
		while (waitpid(guard, NULL, 0) < 0 && errno == EINTR)
			;
		g->pid = -1;
		return -e;
	}
	g->pid = guard;
	g->fd = fds[1];
	g->told = 0;
	return 0;
}

static bool guard_say(struct stop_guard *g, const char *line)
{
	size_t len = strlen(line);
	if (g->pid <= 0 || write(g->fd, line, len) != (ssize_t)len) {
		/* The guard is gone: nothing would continue the job after us,
		 * so stop nothing more. */
		g->pid = -1;
		return false;
	}
	return true;
}

bool stop_guard_will_stop(struct stop_guard *g, pid_t pid)
{
	char line[32];
	if (g->told >= STOP_GUARD_MAX)
		return false;
	snprintf(line, sizeof line, "S %d\n", (int)pid);
	if (!guard_say(g, line))
		return false;
	g->told++;
	return true;
}

void stop_guard_forget(struct stop_guard *g, pid_t pid)
{
	char line[32];
	snprintf(line, sizeof line, "F %d\n", (int)pid);
	if (g->told)
		guard_say(g, line);
}

void stop_guard_all_continued(struct stop_guard *g)
{
	if (g->told && guard_say(g, "C\n"))
		g->told = 0;
}

void stop_guard_end(struct stop_guard *g)
{
	if (g->fd >= 0)
		close(g->fd); /* EOF: the guard continues what it remembers, exits */
	g->fd = -1;
	if (g->pid > 0)
		while (waitpid(g->pid, NULL, 0) < 0 && errno == EINTR)
			;
	g->pid = 0;
	g->told = 0;
}
