/* Description: the main thread leaves by pthread_exit() (the leader becomes a zombie) while another thread writes to /dev/null for SECONDS, then exits 7. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double seconds;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	(void)arg;
	static char buf[4096];
	int fd = open("/dev/null", O_WRONLY);
	double end = now() + seconds;
	while (now() < end)
		if (write(fd, buf, sizeof buf) < 0)
			break;
	exit(7);
}

int main(int argc, char **argv)
{
	seconds = argc > 1 ? atof(argv[1]) : 3;
	pthread_t t;
	if (pthread_create(&t, NULL, worker, NULL) != 0)
		return 2;
	pthread_exit(NULL);
}
