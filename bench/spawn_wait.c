/*
 * spawn_wait.c - the least a supervisor can be: start the job with
 * posix_spawn and wait for it.  bench/overhead.py --wrappers times it
 * beside `discnice run` (issue #9 §3): what is left above it is what
 * discnice itself costs, not what any wrapper that outlives its job pays.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: spawn_wait CMD [ARG]...\n");
		return 2;
	}
	pid_t pid;
	int err = posix_spawnp(&pid, argv[1], NULL, NULL, &argv[1], environ);
	if (err) {
		fprintf(stderr, "spawn_wait: %s: %s\n", argv[1], strerror(err));
		return 127;
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return 1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
