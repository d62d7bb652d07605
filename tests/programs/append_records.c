/* Description: processes append whole records to one file, O_APPEND set at open or later by fcntl (issue #8 item 4). */
/*
 * Usage: append_records MODE FILE WRITERS RECORDS SIZE
 * WRITERS processes each append RECORDS records of SIZE bytes with one
 * write() per record; the file descriptor's O_APPEND comes from MODE:
 *   open        O_APPEND at open(2)
 *   setfl       open without it, fcntl(F_SETFL, O_APPEND) before writing
 *   setfl-dup   F_SETFL on a dup of the fd; writes go through the original
 *   setfl-child a child sets F_SETFL on the inherited fd and exits; the
 *               writers, forked later, inherit the description
 *   pwritev2    open without it, pwritev2(..., RWF_APPEND)
 * Then reads FILE back and prints how many records are intact.  O_APPEND
 * makes each write land whole at the end (write(2)): any torn record means
 * a write was cut in pieces.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static void fill(char *rec, size_t size, int writer, int seq)
{
	memset(rec, 'A' + writer % 26, size);
	snprintf(rec, size, "<%d:%d>", writer, seq);
	rec[size - 1] = '\n';
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: append_records MODE FILE WRITERS RECORDS SIZE\n");
		return 2;
	}
	const char *mode = argv[1];
	int writers = atoi(argv[3]), records = atoi(argv[4]);
	size_t size = (size_t)atol(argv[5]);
	int flags = O_WRONLY | O_CREAT | O_TRUNC | (!strcmp(mode, "open") ? O_APPEND : 0);
	int fd = open(argv[2], flags, 0600);
	if (fd < 0) {
		perror(argv[2]);
		return 1;
	}
	if (!strcmp(mode, "setfl")) {
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_APPEND);
	} else if (!strcmp(mode, "setfl-dup")) {
		int d = dup(fd);
		fcntl(d, F_SETFL, fcntl(d, F_GETFL) | O_APPEND);
		close(d);
	} else if (!strcmp(mode, "setfl-child")) {
		/* A first write so the parent's agent knows the fd before the
		 * child changes its description. */
		if (write(fd, "", 0) != 0)
			return 1;
		pid_t pid = fork();
		if (pid == 0) {
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_APPEND);
			_exit(0);
		}
		waitpid(pid, NULL, 0);
	}
	char *rec = malloc(size);
	for (int w = 0; w < writers; w++) {
		if (fork() == 0) {
			for (int s = 0; s < records; s++) {
				fill(rec, size, w, s);
				ssize_t r;
				if (!strcmp(mode, "pwritev2")) {
					struct iovec iov = { rec, size };
					r = pwritev2(fd, &iov, 1, -1, RWF_APPEND);
				} else {
					r = write(fd, rec, size);
				}
				if (r != (ssize_t)size)
					_exit(1);
			}
			_exit(0);
		}
	}
	int failed = 0, status;
	while (wait(&status) > 0)
		failed |= !WIFEXITED(status) || WEXITSTATUS(status);
	close(fd);

	FILE *f = fopen(argv[2], "r");
	char *back = malloc(size);
	int intact = 0, total = 0;
	while (f && fread(back, 1, size, f) == size) {
		int w, s;
		total++;
		if (sscanf(back, "<%d:%d>", &w, &s) == 2 && w >= 0 && w < writers) {
			fill(rec, size, w, s);
			intact += !memcmp(back, rec, size);
		}
	}
	printf("%s: %d of %d records intact, %d expected%s\n", mode, intact, total,
	       writers * records, failed ? ", a writer failed" : "");
	return failed || intact != writers * records;
}
