/*
 * microbench.c - the DiscNice paper's six micro-benchmarks (§6.1, Table 4)
 * and the hook-cost loop (Table 8), as one small program run under
 * `discnice run` by bench/predict.py, bench/rate.py and bench/overhead.py.
 *
 *   microbench sequential FILE              read FILE in 64 KiB reads
 *   microbench random FILE PASSES SEED [N]  PASSES x (pages/10) random 4 KiB preads
 *                                           (at most N of them, if given)
 *   microbench stride FILE                  one byte every 12 KiB
 *   microbench create FILE MIB              write MIB MiB of 'a' in 64 KiB writes
 *   microbench region-write FILE COUNT      write 10 KB at offset 0, COUNT times
 *   microbench create-delete DIR COUNT      create, write 10 KB, close, unlink
 *   microbench pread-loop FILE COUNT        COUNT cached 4 KiB preads; prints ns/call of
 *                                           wall clock, then of this thread's CPU time
 *
 * Plain read/write/pread calls, nothing clever: the point is what the
 * kernel does with them.  Exit 0 on success, 1 with a message otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what, const char *arg)
{
	fprintf(stderr, "microbench: %s %s: %s\n", what, arg, strerror(errno));
	exit(1);
}

static uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* xorshift64: the same "random" offsets in every configuration. */
static uint64_t next_random(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *state = x;
}

static int open_or_die(const char *path, int flags)
{
	int fd = open(path, flags, 0644);
	if (fd < 0)
		die("open", path);
	return fd;
}

static off_t size_of(int fd, const char *path)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		die("fstat", path);
	return st.st_size;
}

int main(int argc, char **argv)
{
	static char buf[1 << 16];
	if (argc < 3) {
		fprintf(stderr, "usage: see the comment at the top of bench/microbench.c\n");
		return 1;
	}
	const char *mode = argv[1], *path = argv[2];
	long arg3 = argc > 3 ? atol(argv[3]) : 0;

	if (strcmp(mode, "sequential") == 0) {
		int fd = open_or_die(path, O_RDONLY);
		ssize_t n;
		while ((n = read(fd, buf, sizeof buf)) > 0)
			;
		if (n < 0)
			die("read", path);
		close(fd);
	} else if (strcmp(mode, "random") == 0) {
		int fd = open_or_die(path, O_RDONLY);
		uint64_t pages = (uint64_t)size_of(fd, path) / 4096;
		uint64_t state = argc > 4 ? (uint64_t)atoll(argv[4]) | 1 : 88172645463325252ull;
		uint64_t left = argc > 5 ? (uint64_t)atoll(argv[5]) : UINT64_MAX;
		for (long pass = 0; pass < arg3; pass++)
			for (uint64_t i = 0; i < pages / 10 && left; i++, left--) {
				off_t off = (off_t)(next_random(&state) % pages) * 4096;
				if (pread(fd, buf, 4096, off) < 0)
					die("pread", path);
			}
		close(fd);
	} else if (strcmp(mode, "stride") == 0) {
		int fd = open_or_die(path, O_RDONLY);
		off_t size = size_of(fd, path);
		for (off_t off = 0; off < size; off += 12288)
			if (pread(fd, buf, 1, off) < 0)
				die("pread", path);
		close(fd);
	} else if (strcmp(mode, "create") == 0) {
		int fd = open_or_die(path, O_WRONLY | O_CREAT | O_TRUNC);
		memset(buf, 'a', sizeof buf);
		for (long i = 0; i < arg3 * 16; i++)
			if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
				die("write", path);
		close(fd);
	} else if (strcmp(mode, "region-write") == 0) {
		int fd = open_or_die(path, O_WRONLY);
		memset(buf, 'b', 10240);
		for (long i = 0; i < arg3; i++)
			if (pwrite(fd, buf, 10240, 0) != 10240)
				die("pwrite", path);
		close(fd);
	} else if (strcmp(mode, "create-delete") == 0) {
		char file[4096];
		snprintf(file, sizeof file, "%s/create-delete.tmp", path);
		memset(buf, 'c', 10240);
		for (long i = 0; i < arg3; i++) {
			int fd = open_or_die(file, O_WRONLY | O_CREAT | O_TRUNC);
			if (write(fd, buf, 10240) != 10240)
				die("write", file);
			close(fd);
			if (unlink(file) != 0)
				die("unlink", file);
		}
	} else if (strcmp(mode, "pread-loop") == 0) {
		int fd = open_or_die(path, O_RDONLY);
		for (int i = 0; i < 1000; i++) /* warm: page and branch caches */
			if (pread(fd, buf, 4096, 0) != 4096)
				die("pread", path);
		/* The thread's CPU time beside the wall clock: an excess in
		 * both is work, in the wall clock alone time the thread did
		 * not run (preempted; on this VM the two agreed, host steal
		 * included). */
		uint64_t t0 = now_ns(), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		for (long i = 0; i < arg3; i++)
			if (pread(fd, buf, 4096, 0) != 4096)
				die("pread", path);
		uint64_t t1 = now_ns(), c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		printf("%.1f %.1f\n", (double)(t1 - t0) / (double)arg3,
		       (double)(c1 - c0) / (double)arg3);
		close(fd);
	} else {
		fprintf(stderr, "microbench: unknown mode '%s'\n", mode);
		return 1;
	}
	return 0;
}
