/*
 * Description: leave in the ways the agent of a `run --exec` job must see,
 * and check from inside that a child's exit did not end the run.
 *
 *   exit_ways _exit N        _exit(N)
 *   exit_ways _Exit N        _Exit(N)
 *   exit_ways threads N      four threads call _exit(N) at once while the
 *                            main thread calls exit(N): one run, one end
 *   exit_ways fork N         a fork child and a vfork child call _exit(0);
 *                            then the class's file ($DISCNICE_SEGMENT) must
 *                            still be there (exit 3 if not), then _exit(N)
 *   exit_ways signal N FILE  write to FILE (under a write cap, so that it
 *                            sleeps in the agent) until SIGALRM after 1 s,
 *                            whose handler calls _exit(N)
 *
 * tests/integration/test_exec.py judges by the exit status and by the class
 * directory.  Prints nothing.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int status;
static pthread_barrier_t start;

static void *leave(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&start);
	_exit(status);
}

static void on_alarm(int sig)
{
	(void)sig;
	_exit(status);
}

static int class_still_there(void)
{
	const char *path = getenv("DISCNICE_SEGMENT");
	return path && access(path, F_OK) == 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: exit_ways _exit|_Exit|threads|fork|signal N [FILE]\n");
		return 2;
	}
	status = atoi(argv[2]);
	const char *how = argv[1];
	if (strcmp(how, "_exit") == 0)
		_exit(status);
	if (strcmp(how, "_Exit") == 0)
		_Exit(status);
	if (strcmp(how, "threads") == 0) {
		enum { THREADS = 4 };
		pthread_t t[THREADS];
		pthread_barrier_init(&start, NULL, THREADS + 1);
		for (int i = 0; i < THREADS; i++)
			if (pthread_create(&t[i], NULL, leave, NULL) != 0)
				return 2;
		pthread_barrier_wait(&start);
		exit(status);
	}
	if (strcmp(how, "fork") == 0) {
		pid_t child = fork();
		if (child == 0)
			_exit(0);
		if (child < 0 || waitpid(child, NULL, 0) != child)
			return 2;
		child = vfork();
		if (child == 0)
			_exit(0);
		if (child < 0 || waitpid(child, NULL, 0) != child)
			return 2;
		if (!class_still_there())
			_exit(3);
		_exit(status);
	}
	if (strcmp(how, "signal") == 0 && argc == 4) {
		signal(SIGALRM, on_alarm);
		alarm(1);
		static char buf[65536];
		memset(buf, 'x', sizeof buf);
		int fd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0)
			return 2;
		for (;;)
			if (write(fd, buf, sizeof buf) < 0)
				return 2;
	}
	fprintf(stderr, "exit_ways: unknown way %s\n", how);
	return 2;
}
