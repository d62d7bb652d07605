/* Description: read/write/pread/pwrite/writev with counts far beyond the buffer: the kernel's answer, unchanged. */
/*
 * Usage: huge_count FILE
 * FILE gets 8 MiB; the buffer is 4 MiB of anonymous memory followed by a
 * PROT_NONE guard page.  Each call's count runs past the end of user
 * space (the kernel checks the whole range first and says EFAULT, moving
 * nothing), or past SSIZE_MAX, or stays inside user space but runs into
 * the guard (the kernel moves what it can and returns that).  Prints one
 * line per call: the result, errno's name, the file's offset and size
 * after it.  The output is compared with a plain run; under the agent a
 * count of 2^44 used to spin for minutes predicting it, and the first
 * piece of a call the kernel refuses moved bytes from past the buffer.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define MiB (1024 * 1024)
#define BUF (4 * MiB)

static const char *err_name(int e)
{
	switch (e) {
	case EFAULT: return "EFAULT";
	case EINVAL: return "EINVAL";
	case EOVERFLOW: return "EOVERFLOW";
	default: return strerror(e);
	}
}

static void report(int fd, const char *what, ssize_t r, int err)
{
	struct stat st;
	fstat(fd, &st);
	printf("%-24s -> %zd %s offset %lld size %lld\n", what, r, r < 0 ? err_name(err) : "",
	       (long long)lseek(fd, 0, SEEK_CUR), (long long)st.st_size);
}

/* Counts the compiler cannot see (it warns of a read past any object). */
static size_t count_of(size_t n)
{
	volatile size_t v = n;
	return v;
}

#define TRY(fd, what, call)                      \
	do {                                     \
		errno = 0;                       \
		ssize_t r_ = (call);             \
		report(fd, what, r_, errno);     \
	} while (0)

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: huge_count FILE\n");
		return 2;
	}
	char *buf = mmap(NULL, BUF + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
	if (buf == MAP_FAILED || mprotect(buf + BUF, 4096, PROT_NONE) != 0) {
		perror("mmap");
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(buf, 'x', BUF);
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	for (int i = 0; i < 8; i++)
		if (write(fd, buf, MiB) != MiB) {
			perror("write");
			return 1;
		}
	lseek(fd, 1000, SEEK_SET);
	/* Past the end of user space: EFAULT, nothing moved. */
	TRY(fd, "read SSIZE_MAX", read(fd, buf, count_of(SSIZE_MAX)));
	TRY(fd, "read 2^46", read(fd, buf, count_of((size_t)1 << 46)));
	TRY(fd, "read SIZE_MAX", read(fd, buf, count_of(SIZE_MAX)));
	TRY(fd, "write SSIZE_MAX", write(fd, buf, count_of(SSIZE_MAX)));
	TRY(fd, "write 2^46", write(fd, buf, count_of((size_t)1 << 46)));
	TRY(fd, "pread SSIZE_MAX", pread(fd, buf, count_of(SSIZE_MAX), 0));
	TRY(fd, "pwrite SSIZE_MAX", pwrite(fd, buf, count_of(SSIZE_MAX), 0));
	/* An offset the count carries past LLONG_MAX: EINVAL. */
	TRY(fd, "pread past LLONG_MAX", pread(fd, buf, MiB, INT64_MAX - 10));
	TRY(fd, "pwrite past LLONG_MAX", pwrite(fd, buf, MiB, INT64_MAX - 10));
	/* Inside user space, into the guard page: what fits, then the call
	 * stops short (or EFAULT at its first byte). */
	TRY(fd, "pwrite 2^30 to guard", pwrite(fd, buf, count_of((size_t)1 << 30), 4096));
	TRY(fd, "pread 2^30 to guard", pread(fd, buf, count_of((size_t)1 << 30), 0));
	lseek(fd, 0, SEEK_SET);
	TRY(fd, "read 2^30 to guard", read(fd, buf, count_of((size_t)1 << 30)));
	TRY(fd, "write 2^30 to guard", write(fd, buf, count_of((size_t)1 << 30)));
	TRY(fd, "write at the guard", write(fd, buf + BUF, MiB));
	/* Vectored: one segment is cut to MAX_RW_COUNT before it is
	 * checked (import_ubuf()), two are checked whole. */
	struct iovec one = { buf, SSIZE_MAX };
	TRY(fd, "writev 1 x SSIZE_MAX", writev(fd, &one, 1));
	struct iovec two[2] = { { buf, 4096 }, { buf, SSIZE_MAX - 4096 } };
	TRY(fd, "writev 2, SSIZE_MAX", writev(fd, two, 2));
	close(fd);
	return 0;
}
