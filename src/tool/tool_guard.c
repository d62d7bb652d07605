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

#include "tool/tool_guard.h"

/* The guard's whole life: remember which pids are stopped, and continue
 * them when the pipe reaches EOF. */
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
		kill(stopped[i], SIGCONT);
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
