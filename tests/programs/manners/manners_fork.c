/*
 * Description: libmanners across fork(): a process with two regulated
 * threads forks while both take turns; the child (one thread) takes turns
 * as a new process, and holds no file descriptor the library opened.
 *
 *   manners_fork SECONDS
 *
 * Output: the worker's "interval PID THREAD START END" lines of parent and
 * child (the test checks they never overlap), then "child fds N" (open
 * descriptors in the child beyond those the program started with) and
 * "child exit STATUS".
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <discnice/manners.h>

static double seconds = 1.0;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Testpoints with 3 ms of sleep between them, until `until`. */
static void take_turns(int id, int64_t until)
{
	double one = 1.0;
	for (;;) {
		int rc = manners_testpoint(id, 1, &one);
		if (rc != 0) {
			fprintf(stderr, "manners_testpoint: %s\n", strerror(-rc));
			exit(1);
		}
		int64_t start = now_ns();
		if (start >= until)
			break;
		struct timespec pause = { 0, 3000000 };
		nanosleep(&pause, NULL);
		printf("interval %d %d %" PRId64 " %" PRId64 "\n", (int)getpid(), id, start, now_ns());
	}
	manners_leave();
}

static void *second_thread(void *unused)
{
	(void)unused;
	take_turns(1, now_ns() + (int64_t)(2 * seconds * 1e9));
	return NULL;
}

static int count_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	int n = 0;
	struct dirent *entry;
	while (dir != NULL && (entry = readdir(dir)) != NULL) {
		int fd = atoi(entry->d_name);
		if (entry->d_name[0] != '.' && fd > 2 && fd != dirfd(dir))
			n++;
	}
	if (dir != NULL)
		closedir(dir);
	return n;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		seconds = atof(argv[1]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	int inherited = count_fds();
	pthread_t thread;
	pthread_create(&thread, NULL, second_thread, NULL);
	take_turns(0, now_ns() + (int64_t)(seconds * 0.5e9));
	/* Fork while the second thread is taking turns. */
	pid_t child = fork();
	if (child == 0) {
		take_turns(0, now_ns() + (int64_t)(seconds * 1e9));
		printf("child fds %d\n", count_fds() - inherited);
		exit(0);
	}
	take_turns(0, now_ns() + (int64_t)(seconds * 1e9));
	int status = -1;
	waitpid(child, &status, 0);
	pthread_join(thread, NULL);
	printf("child exit %d\n", status);
	return 0;
}
