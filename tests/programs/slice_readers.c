/* Description: N threads pread disjoint slices of one file, all through one descriptor (or each through its own), as a parallel scanner does. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* usage: slice_readers FILE THREADS BLOCK shared|own
 * Prints the bytes read; exits 1 on any error or short slice. */

static const char *path;
static int threads, shared_fd = -1;
static off_t slice;
static size_t block;

static void *reader(void *arg)
{
	long i = (long)arg;
	int fd = shared_fd >= 0 ? shared_fd : open(path, O_RDONLY);
	char *buf = malloc(block);
	off_t start = slice * i, done = 0;
	if (fd < 0 || !buf)
		return (void *)-1L;
	while (done < slice) {
		size_t want = (size_t)(slice - done) < block ? (size_t)(slice - done) : block;
		ssize_t n = pread(fd, buf, want, start + done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += n;
	}
	if (shared_fd < 0)
		close(fd);
	free(buf);
	return (void *)(long)done;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: slice_readers FILE THREADS BLOCK shared|own\n");
		return 2;
	}
	path = argv[1];
	threads = atoi(argv[2]);
	block = (size_t)atol(argv[3]);
	if (threads < 1 || threads > 256 || !block)
		return 2;
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	off_t size = lseek(fd, 0, SEEK_END);
	slice = size / threads;
	if (!strcmp(argv[4], "shared"))
		shared_fd = fd;
	pthread_t t[256];
	for (long i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, reader, (void *)i) != 0)
			return 1;
	long long total = 0;
	int bad = 0;
	for (int i = 0; i < threads; i++) {
		void *r;
		pthread_join(t[i], &r);
		if ((long)r != (long)slice)
			bad = 1;
		else
			total += (long)r;
	}
	printf("%lld\n", total);
	return bad;
}
