/*
 * alternate.c - time commands against each other, for the overhead bench
 * (bench/overhead.py --wrappers; issue #9 §3).
 *
 *   alternate RUNS WARM CMD0... :: CMD1... [:: CMD2...]
 *
 * Runs every command WARM times untimed, then RUNS rounds; in each round
 * every command once, in an order that rotates from round to round, so
 * that drift in the machine (the host's other guests, the cache) falls on
 * all of them alike.  Each run: posix_spawn (stdout and stderr to
 * /dev/null), wait4, wall clock around both.  Prints one JSON object:
 * {"wall_s": [[...run times of CMD0...], [...CMD1...], ...]}.
 *
 * Why C and not Python's subprocess: the difference under test is a
 * millisecond in 80 (an exec, the agent's start, its hooks); an
 * interpreter's own fork path and garbage collector add their jitter to
 * every sample and needed ten times the runs to resolve it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

#define MAX_CMDS 16

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One timed run; -1 if the command could not start or did not exit 0. */
static double run_once(char **argv, const posix_spawn_file_actions_t *fa)
{
	pid_t pid;
	double t0 = now_s();
	int err = posix_spawnp(&pid, argv[0], fa, NULL, argv, environ);
	if (err) {
		fprintf(stderr, "alternate: %s: %s\n", argv[0], strerror(err));
		return -1;
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	double took = now_s() - t0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "alternate: %s: exit status %d\n", argv[0],
			WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
		return -1;
	}
	return took;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: alternate RUNS WARM CMD0... [:: CMD1...]...\n");
		return 2;
	}
	long runs = strtol(argv[1], NULL, 10), warm = strtol(argv[2], NULL, 10);
	char **cmds[MAX_CMDS];
	int n = 0;
	cmds[n++] = &argv[3];
	for (int i = 3; i < argc; i++) {
		if (strcmp(argv[i], "::") != 0)
			continue;
		argv[i] = NULL;
		if (n == MAX_CMDS || i + 1 >= argc) {
			fprintf(stderr, "alternate: at most %d commands, none empty\n", MAX_CMDS);
			return 2;
		}
		cmds[n++] = &argv[i + 1];
	}
	if (runs < 1 || warm < 0) {
		fprintf(stderr, "alternate: RUNS >= 1, WARM >= 0\n");
		return 2;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	double *wall = calloc((size_t)runs * (size_t)n, sizeof *wall);
	if (!wall)
		return 1;
	for (long w = 0; w < warm; w++)
		for (int c = 0; c < n; c++)
			if (run_once(cmds[c], &fa) < 0)
				return 1;
	for (long r = 0; r < runs; r++)
		for (int k = 0; k < n; k++) {
			int c = (int)((k + r) % n);
			if ((wall[c * runs + r] = run_once(cmds[c], &fa)) < 0)
				return 1;
		}
	printf("{\"wall_s\": [");
	for (int c = 0; c < n; c++) {
		printf("%s[", c ? ", " : "");
		for (long r = 0; r < runs; r++)
			printf("%s%.7f", r ? ", " : "", wall[c * runs + r]);
		printf("]");
	}
	printf("]}\n");
	free(wall);
	return 0;
}
