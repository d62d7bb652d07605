/* Description: file I/O from a SIGALRM handler that interrupts malloc/free every 300 us (2 ms for fork) (issue #8 items 1-2). */
/*
 * Usage: signal_io MODE FILE SECONDS
 * The main loop allocates and frees blocks of varied sizes (so the handler
 * often interrupts malloc with its arena lock held) and, in the "fork"
 * modes, also pwrites FILE itself.  The handler, every 300 us:
 *   pwrite, write, writev   write record N (a 64-byte line) at N*256KiB
 *   pread, readv            read record 0 back
 *   sendfile                copy 64 bytes of FILE to /dev/null
 *   fork                    fork(); the child _exit()s at once
 *   fork-write              fork(); the child pwrites its own record, _exit()s
 * At the end every written record is checked; prints "MODE ok N" where N
 * is how many handler calls did their I/O, and exits 0, or says what broke.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RECORD 64
/* Records 256 KiB apart: each lands in a chunk of its own in the agent's
 * region table, so the write path allocates on every call. */
#define STRIDE (256 * 1024)
#define MAX_RECORDS 100000

static const char *mode;
static int fd, null_fd;
static volatile sig_atomic_t calls, failures, stop;
static volatile sig_atomic_t max_record;

static void make_record(char *rec, long n)
{
	memset(rec, 'a' + (int)(n % 26), RECORD);
	int len = snprintf(rec, RECORD, "record %ld ", n); /* async-signal-safe in glibc for %ld */
	rec[len] = '-';
	rec[RECORD - 1] = '\n';
}

static void handler(int sig)
{
	(void)sig;
	int saved = errno;
	long n = calls;
	if (n >= MAX_RECORDS || stop) {
		errno = saved;
		return;
	}
	char rec[RECORD], back[RECORD];
	make_record(rec, n);
	ssize_t r = RECORD;
	if (!strcmp(mode, "pwrite")) {
		r = pwrite(fd, rec, RECORD, (off_t)n * STRIDE);
	} else if (!strcmp(mode, "write")) {
		if (lseek(fd, (off_t)n * STRIDE, SEEK_SET) < 0)
			r = -1;
		else
			r = write(fd, rec, RECORD);
	} else if (!strcmp(mode, "writev")) {
		struct iovec iov[2] = { { rec, 10 }, { rec + 10, RECORD - 10 } };
		r = pwritev(fd, iov, 2, (off_t)n * STRIDE);
	} else if (!strcmp(mode, "pread")) {
		r = pread(fd, back, RECORD, 0);
	} else if (!strcmp(mode, "readv")) {
		struct iovec iov[2] = { { back, 1 }, { back + 1, RECORD - 1 } };
		r = preadv(fd, iov, 2, 0);
	} else if (!strcmp(mode, "sendfile")) {
		off_t off = 0;
		r = sendfile(null_fd, fd, &off, RECORD);
	} else if (!strncmp(mode, "fork", 4)) {
		pid_t pid = fork();
		if (pid == 0) {
			if (!strcmp(mode, "fork-write"))
				pwrite(fd, rec, RECORD, (off_t)(MAX_RECORDS + n % 1000) * STRIDE);
			_exit(0);
		}
		if (pid < 0 || waitpid(pid, NULL, 0) != pid)
			r = -1;
	}
	if (r != RECORD)
		failures++;
	else if (n + 1 > max_record)
		max_record = (sig_atomic_t)(n + 1);
	calls = n + 1;
	errno = saved;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: signal_io MODE FILE SECONDS\n");
		return 2;
	}
	mode = argv[1];
	double seconds = atof(argv[3]);
	fd = open(argv[2], O_RDWR | O_CREAT, 0600);
	null_fd = open("/dev/null", O_WRONLY);
	if (fd < 0 || null_fd < 0) {
		perror("open");
		return 1;
	}
	char rec[RECORD];
	make_record(rec, 0);
	if (pwrite(fd, rec, RECORD, 0) != RECORD)
		return 1;

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	/* A fork and its wait take longer than 300 us: a faster timer would
	 * leave the main loop no time between handlers. */
	long us = !strncmp(mode, "fork", 4) ? 2000 : 300;
	struct itimerval it = { { 0, us }, { 0, us } };
	setitimer(ITIMER_REAL, &it, NULL);

	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	void *blocks[64] = { 0 };
	unsigned seed = 1;
	for (unsigned long i = 0;; i++) {
		unsigned k = (seed = seed * 1103515245 + 12345) % 64;
		free(blocks[k]);
		blocks[k] = malloc(16 + (seed >> 8) % 70000);
		if (blocks[k])
			memset(blocks[k], 1, 16);
		if (!strncmp(mode, "fork", 4) && i % 64 == 0) {
			/* the interrupted frame is inside the agent's write path */
			pwrite(fd, rec, RECORD, (off_t)(MAX_RECORDS + 2000 + i % 500) * STRIDE);
		}
		if (i % 64 == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 > seconds)
				break;
		}
	}
	stop = 1;
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	for (int k = 0; k < 64; k++)
		free(blocks[k]);

	if (failures) {
		printf("%s: %d handler calls failed\n", mode, (int)failures);
		return 1;
	}
	if (!strcmp(mode, "pwrite") || !strcmp(mode, "write") || !strcmp(mode, "writev")) {
		char back[RECORD];
		for (long n = 1; n < max_record; n++) {
			make_record(rec, n);
			if (pread(fd, back, RECORD, (off_t)n * STRIDE) != RECORD ||
			    memcmp(back, rec, RECORD)) {
				printf("%s: record %ld is wrong\n", mode, n);
				return 1;
			}
		}
	}
	printf("%s ok %s\n", mode, calls > 100 ? "many" : "few");
	return 0;
}
