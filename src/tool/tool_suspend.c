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

/* The guard's whole life: remember which pids benice stopped, continue
 * them when its pipe reaches EOF. */
static void __attribute__((noreturn)) guard_main(int fd)
{
	static pid_t stopped[JOBTREE_MAX];
	unsigned n = 0;
	char line[32];
	/* The terminal's signals are for the job and benice. */
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGTSTP, SIG_IGN);
	signal(SIGTTIN, SIG_IGN);
	signal(SIGTTOU, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	FILE *in = fdopen(fd, "r");
	while (in && fgets(line, sizeof line, in)) {
		if (line[0] == 'S' && n < JOBTREE_MAX)
			stopped[n++] = (pid_t)atoi(line + 2);
		else if (line[0] == 'C')
			n = 0;
	}
	for (unsigned i = 0; i < n; i++)
		kill(stopped[i], SIGCONT);
	_exit(0);
}

int suspender_start(struct suspender *s)
{
	memset(s, 0, sizeof *s);
	s->guard_fd = -1;
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return -errno;
	fflush(NULL);
	pid_t guard = fork();
	if (guard < 0) {
		int e = errno;
		close(fds[0]);
		close(fds[1]);
		s->guard = -1;
		return -e;
	}
	if (guard == 0) {
		/* A process group of its own: kill -9 -PGID of benice's group
		 * must not take the guard with it.  Only the pipe ends it. */
		setpgid(0, 0);
		close(fds[1]);
		guard_main(fds[0]);
	}
	close(fds[0]);
	s->guard = guard;
	s->guard_fd = fds[1];
	return 0;
}

static bool guard_say(struct suspender *s, const char *line)
{
	size_t len = strlen(line);
	if (s->guard <= 0 || write(s->guard_fd, line, len) != (ssize_t)len) {
		/* The guard is gone: nothing would continue the job after us,
		 * so stop nothing more. */
		s->guard = -1;
		return false;
	}
	return true;
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
		char line[32];
		snprintf(line, sizeof line, "S %d\n", (int)pid);
		if (!guard_say(s, line))
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
 * prepare_signal() flushes the pending stop signals on SIGCONT). */
static bool stop_pending(pid_t pid)
{
	const uint64_t stops = 1ull << (SIGSTOP - 1) | 1ull << (SIGTSTP - 1) |
			       1ull << (SIGTTIN - 1) | 1ull << (SIGTTOU - 1);
	struct proc_signals sig;
	return proc_thread_signals(pid, pid, &sig) == 0 &&
	       ((sig.pending | sig.shared_pending) & stops);
}

void suspender_continue(struct suspender *s)
{
	if (!s->n)
		return;
	for (unsigned i = 0; i < s->n; i++)
		if (!stop_pending(s->stopped[i]))
			kill(s->stopped[i], SIGCONT);
	s->n = 0;
	guard_say(s, "C\n");
}

void suspender_end(struct suspender *s)
{
	suspender_continue(s);
	if (s->guard_fd >= 0)
		close(s->guard_fd); /* EOF: the guard continues nothing more, exits */
	s->guard_fd = -1;
	if (s->guard > 0)
		while (waitpid(s->guard, NULL, 0) < 0 && errno == EINTR)
			;
	s->guard = 0;
}
