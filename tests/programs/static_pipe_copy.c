/* Description: copies FILE to stdout with one write(2) per block and never retries, as a naive program does: a short write or EINTR (what a stop from outside causes in a writer blocked on a pipe) loses data; each is reported on stderr and the exit status is 3. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE [BLOCK_BYTES]\n", argv[0]);
		return 2;
	}
	size_t block = argc > 2 ? strtoul(argv[2], NULL, 0) : 1u << 20;
	char *buf = malloc(block);
	int fd = open(argv[1], O_RDONLY);
	if (!buf || fd < 0) {
		perror(argv[1]);
		return 2;
	}
	unsigned short_writes = 0, interrupted = 0;
	for (;;) {
		ssize_t n = read(fd, buf, block);
		if (n < 0 && errno == EINTR) {
			interrupted++;
			fprintf(stderr, "read: EINTR\n");
			continue;
		}
		if (n < 0) {
			perror("read");
			return 2;
		}
		if (n == 0)
			break;
		ssize_t w = write(STDOUT_FILENO, buf, (size_t)n);
		if (w < 0 && errno == EINTR) {
			interrupted++;
			fprintf(stderr, "write: EINTR (%zd bytes lost)\n", n);
		} else if (w < 0) {
			perror("write");
			return 2;
		} else if (w < n) {
			short_writes++;
			fprintf(stderr, "write: %zd of %zd bytes\n", w, n);
		}
	}
	if (short_writes || interrupted) {
		fprintf(stderr, "short writes %u, EINTR %u\n", short_writes, interrupted);
		return 3;
	}
	return 0;
}
