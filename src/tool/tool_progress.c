/*
 * tool_progress.c - reading a benice job's progress (see tool_progress.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "manners/progress_text.h"
#include "tool/tool_progress.h"

#define PROGRESS_TEXT_MAX 4096

int progress_source_parse(const char *spec, struct progress_source *out)
{
	memset(out, 0, sizeof *out);
	out->spec = spec;
	if (strcmp(spec, "io") == 0) {
		out->kind = PROGRESS_IO;
		return 0;
	}
	if (strncmp(spec, "file:", 5) == 0 && spec[5]) {
		out->kind = PROGRESS_FILE;
		out->arg = spec + 5;
		return 0;
	}
	if (strncmp(spec, "cmd:", 4) == 0 && spec[4]) {
		out->kind = PROGRESS_CMD;
		out->arg = spec + 4;
		return 0;
	}
	return -EINVAL;
}

static int read_file_text(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	size_t len = 0;
	ssize_t n;
	while (len < size - 1 && (n = read(fd, buf + len, size - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	return 0;
}

/* Is the count no longer wanted (tool_progress.h: struct progress_cancel)? */
static bool cancelled(const struct progress_cancel *cancel)
{
	return cancel && cancel->now && cancel->now(cancel->ctx);
}

/* Reap the command by the deadline, or kill its process group then and
 * reap it: -ETIMEDOUT (-ECANCELED, sooner, when cancel says so).  A
 * command that closed its stdout and runs on (`echo 1; exec >&-; sleep
 * 20`) gave the read loop its EOF, not its exit;
 * a wait with no deadline held benice - the job unregulated, its exit and
 * Ctrl-C unseen - for as long as the command chose.  SIGCHLD is blocked
 * meanwhile and waited for with sigtimedwait(): a job's SIGCHLD taken
 * here is no loss, the caller's loop reaps with waitpid() before it
 * sleeps. */
static int command_wait(pid_t pid, uint64_t deadline, const struct progress_cancel *cancel,
			int *status)
{
	sigset_t chld, old;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	int rc = 0;
	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid || (r < 0 && errno != EINTR))
			break;
		uint64_t now = clock_now_ns();
		bool given_up = cancelled(cancel);
		if (now >= deadline || given_up) {
			rc = given_up ? -ECANCELED : -ETIMEDOUT;
			kill(-pid, SIGKILL); /* its group (setpgid in both processes) */
			while (waitpid(pid, status, 0) < 0 && errno == EINTR)
				;
			break;
		}
		/* In slices of 20 ms, to ask cancel between them. */
		uint64_t left = deadline - now < 20000000u ? deadline - now : 20000000u;
		struct timespec wait = { (time_t)(left / 1000000000u), (long)(left % 1000000000u) };
		sigtimedwait(&chld, NULL, &wait);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* Run the command, its stdout into buf; killed after the timeout, which
 * covers its exit as well as its output. */
static int run_command_text(const char *command, const struct progress_cancel *cancel, char *buf,
			    size_t size, char *why, size_t why_len)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return -errno;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(fds[0]);
		close(fds[1]);
		return -e;
	}
	if (pid == 0) {
		/* Its own group, so a hung command and its children can be
		 * killed together; default signal actions and mask. */
		setpgid(0, 0);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		dup2(fds[1], STDOUT_FILENO);
		execl("/bin/sh", "sh", "-c", command, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid);
	close(fds[1]);
	size_t len = 0;
	int rc = 0, status = 0;
	bool exited = false;
	uint64_t deadline = clock_now_ns() + (uint64_t)PROGRESS_CMD_TIMEOUT_MS * 1000000u;
	for (;;) {
		uint64_t now = clock_now_ns();
		if (now >= deadline) {
			rc = -ETIMEDOUT;
			snprintf(why, why_len, "did not finish within %d s", PROGRESS_CMD_TIMEOUT_MS / 1000);
			kill(-pid, SIGKILL);
			break;
		}
		/* The job ended, or a signal came: its count is not wanted
		 * any more (a hung command kept benice 5 s past its job). */
		if (cancelled(cancel)) {
			rc = -ECANCELED;
			snprintf(why, why_len, "given up");
			kill(-pid, SIGKILL);
			break;
		}
		/* Until end of file, or the shell's exit and then what its
		 * output holds: a child it left in the background keeps the
		 * pipe open (cmd:'echo 5; sleep 10 &' always ran out of
		 * time), but the number was printed and the command is done. */
		if (!exited && waitpid(pid, &status, WNOHANG) == pid)
			exited = true;
		struct pollfd p = { .fd = fds[0], .events = POLLIN };
		int wait_ms = exited ? 0 : (int)((deadline - now) / 1000000u) + 1;
		int r = poll(&p, 1, wait_ms < 20 ? wait_ms : 20);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0 && exited)
			break;
		if (r <= 0)
			continue;
		ssize_t n = read(fds[0], buf + len, len < size - 1 ? size - 1 - len : 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || len >= size - 1)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(fds[0]);
	if (rc == -ECANCELED) {
		while (!exited && waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		return rc;
	}
	if (!exited) {
		int waited = command_wait(pid, deadline, cancel, &status);
		if (waited == -ECANCELED) {
			snprintf(why, why_len, "given up");
			return waited;
		}
		if (waited < 0 && rc == 0) {
			rc = -ETIMEDOUT;
			snprintf(why, why_len, "did not finish within %d s",
				 PROGRESS_CMD_TIMEOUT_MS / 1000);
		}
	}
	if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		rc = -ECHILD;
		if (WIFEXITED(status))
			snprintf(why, why_len, "exited with status %d", WEXITSTATUS(status));
		else
			snprintf(why, why_len, "was killed by signal %d", WTERMSIG(status));
	}
	return rc;
}

int progress_read(const struct progress_source *src, const struct jobtree *tree,
		  const struct progress_cancel *cancel, double *values, int max, char *why,
		  size_t why_len)
{
	static char text[PROGRESS_TEXT_MAX];
	int rc;
	why[0] = '\0';
	switch (src->kind) {
	case PROGRESS_IO:
		values[0] = (double)tree->total.chars;
		return 1;
	case PROGRESS_FILE:
		rc = read_file_text(src->arg, text, sizeof text);
		if (rc < 0) {
			snprintf(why, why_len, "%s", strerror(-rc));
			return rc;
		}
		break;
	case PROGRESS_CMD:
		rc = run_command_text(src->arg, cancel, text, sizeof text, why, why_len);
		if (rc < 0) {
			if (!why[0])
				snprintf(why, why_len, "%s", strerror(-rc));
			return rc;
		}
		break;
	}
	rc = manners_progress_parse(text, values, max);
	if (rc < 0) {
		size_t n = strcspn(text, "\n");
		snprintf(why, why_len, "not %d or fewer non-negative numbers: \"%.*s\"", max,
			 n > 40 ? 40 : (int)n, text);
	}
	return rc;
}
