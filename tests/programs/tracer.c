/* Description: runs COMMAND as its own ptrace tracee (PTRACE_SEIZE, as a debugger would), passing every signal on and letting group stops stop it, so that nobody else may ptrace the command; exits with the command's status. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s COMMAND [ARG]...\n", argv[0]);
		return 2;
	}
	pid_t child = fork();
	if (child == 0) {
		raise(SIGSTOP); /* wait to be seized */
		execvp(argv[1], argv + 1);
		perror(argv[1]);
		_exit(127);
	}
	int status;
	if (waitpid(child, &status, WUNTRACED) != child || !WIFSTOPPED(status) ||
	    ptrace(PTRACE_SEIZE, child, NULL, NULL) != 0) {
		perror("seize");
		return 2;
	}
	kill(child, SIGCONT);
	for (;;) {
		if (waitpid(child, &status, __WALL) != child)
			return 2;
		if (WIFEXITED(status))
			return WEXITSTATUS(status);
		if (WIFSIGNALED(status))
			return 128 + WTERMSIG(status);
		int sig = WSTOPSIG(status);
		if (status >> 16 == PTRACE_EVENT_STOP) {
			/* A group stop: stay stopped, but hear of SIGCONT. */
			if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU)
				ptrace(PTRACE_LISTEN, child, NULL, NULL);
			else
				ptrace(PTRACE_CONT, child, NULL, NULL);
		} else {
			/* A signal on its way: deliver it (SIGCONT from our kill
			 * above, SIGSTOP from the supervisor, anything). */
			ptrace(PTRACE_CONT, child, NULL, (void *)(long)sig);
		}
	}
}
