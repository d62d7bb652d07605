/* Description: one thread reads FILE (disk I/O the agent cannot see) while another waits in MODE (epoll, sigwaitinfo, pipe-write, poll, select, nanosleep, pipe-read) with no signal handler installed; prints the file's checksum and how often the wait was interrupted (EINTR) or cut short, which must be never. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

static const char *mode;
static int wake[2];         /* main -> waiter: "done"               */
static int stream[2];       /* pipe-write: waiter -> drainer        */
static volatile int done;
static volatile unsigned interrupted, short_writes, bad_stream;
static sigset_t usr1;

static void note(const char *what)
{
	interrupted++;
	fprintf(stderr, "%s: %s\n", mode, what);
}

/* pipe-write: drain the stream slowly (64 KiB every 2 ms), checking that
 * every byte is the next of a counting pattern. */
static void *drainer(void *arg)
{
	(void)arg;
	unsigned char buf[65536];
	uint8_t next = 0;
	for (;;) {
		ssize_t n = read(stream[0], buf, sizeof buf);
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != next++) {
				bad_stream++;
				next = (uint8_t)(buf[i] + 1);
			}
		struct timespec ts = { 0, 2 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void *waiter(void *arg)
{
	(void)arg;
	char c;
	if (!strcmp(mode, "epoll")) {
		int ep = epoll_create1(0);
		struct epoll_event ev = { .events = EPOLLIN };
		epoll_ctl(ep, EPOLL_CTL_ADD, wake[0], &ev);
		for (;;) {
			int n = epoll_wait(ep, &ev, 1, -1);
			if (n < 0 && errno == EINTR)
				note("epoll_wait: EINTR");
			else
				break;
		}
	} else if (!strcmp(mode, "sigwaitinfo")) {
		for (;;) {
			int s = sigwaitinfo(&usr1, NULL);
			if (s < 0 && errno == EINTR)
				note("sigwaitinfo: EINTR");
			else
				break;
		}
	} else if (!strcmp(mode, "poll")) {
		struct pollfd p = { .fd = wake[0], .events = POLLIN };
		while (poll(&p, 1, -1) < 0)
			note(strerror(errno));
	} else if (!strcmp(mode, "select")) {
		for (;;) {
			fd_set in;
			FD_ZERO(&in);
			FD_SET(wake[0], &in);
			if (select(wake[0] + 1, &in, NULL, NULL, NULL) >= 0)
				break;
			note(strerror(errno));
		}
	} else if (!strcmp(mode, "nanosleep")) {
		for (;;) {
			struct timespec ts = { 3600, 0 };
			if (nanosleep(&ts, NULL) < 0)
				note(strerror(errno));
		}
	} else if (!strcmp(mode, "pipe-read")) {
		while (read(wake[0], &c, 1) < 0)
			note(strerror(errno));
	} else if (!strcmp(mode, "pipe-write")) {
		static unsigned char block[1 << 20];
		uint8_t next = 0;
		while (!done) {
			for (size_t i = 0; i < sizeof block; i++)
				block[i] = next++;
			ssize_t w = write(stream[1], block, sizeof block);
			if (w < 0) {
				note(strerror(errno));
				next = (uint8_t)(next - sizeof block);
			} else if ((size_t)w < sizeof block) {
				short_writes++;
				fprintf(stderr, "%s: write %zd of %zu\n", mode, w, sizeof block);
				next = (uint8_t)(next - (sizeof block - (size_t)w));
			}
		}
		close(stream[1]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s MODE FILE\n", argv[0]);
		return 2;
	}
	mode = argv[1];
	int fd = open(argv[2], O_RDONLY);
	if (fd < 0 || pipe(wake) || pipe(stream)) {
		perror(argv[2]);
		return 2;
	}
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);
	pthread_t wait_thread, drain_thread;
	pthread_create(&wait_thread, NULL, waiter, NULL);
	if (!strcmp(mode, "pipe-write"))
		pthread_create(&drain_thread, NULL, drainer, NULL);
	/* Let the waiter settle into its wait before the disk I/O starts. */
	struct timespec settle = { 0, 100 * 1000 * 1000 };
	nanosleep(&settle, NULL);

	static char buf[256 * 1024];
	uint64_t sum = 1469598103934665603u; /* FNV-1a */
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) != 0) {
		if (n < 0) {
			if (errno == EINTR) {
				note("read: EINTR");
				continue;
			}
			perror("read");
			return 2;
		}
		for (ssize_t i = 0; i < n; i++)
			sum = (sum ^ (unsigned char)buf[i]) * 1099511628211u;
	}
	done = 1;
	if (write(wake[1], "x", 1) != 1)
		return 2;
	if (!strcmp(mode, "sigwaitinfo"))
		pthread_kill(wait_thread, SIGUSR1);
	if (strcmp(mode, "nanosleep"))
		pthread_join(wait_thread, NULL);
	if (!strcmp(mode, "pipe-write"))
		pthread_join(drain_thread, NULL);
	printf("%s: checksum %016llx, interrupted %u, short writes %u, stream errors %u\n", mode,
	       (unsigned long long)sum, interrupted, short_writes, bad_stream);
	return interrupted || short_writes || bad_stream ? 1 : 0;
}
