/* Description: readv/writev and their p*v/p*v2 forms with iovecs the kernel refuses (issue #8 item 10). */
/*
 * Usage: bad_iovec FILE
 * On FILE (a disk file), a pipe and /dev/null, calls every vectored read
 * and write with: a NULL iovec, an iovec in unmapped memory, an iovec
 * whose element points to unmapped memory, iovcnt -1, 0 and IOV_MAX + 1,
 * and lengths whose sum overflows.  Prints one line per call: what it
 * returned and errno's name.  The output is compared with a plain run.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *err_name(int e)
{
	switch (e) {
	case 0: return "0";
	case EFAULT: return "EFAULT";
	case EINVAL: return "EINVAL";
	case EBADF: return "EBADF";
	case EAGAIN: return "EAGAIN";
	default: return strerror(e);
	}
}

static void report(const char *target, const char *call, const char *what, ssize_t r)
{
	printf("%-9s %-9s %-12s -> %zd %s\n", target, call, what, r, r < 0 ? err_name(errno) : "");
}

static void try_all(const char *target, int fd)
{
	void *hole = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char buf[64];
	struct iovec bad_elem[2] = { { buf, 8 }, { hole, 8 } };
	struct iovec overflow[2] = { { buf, SIZE_MAX / 2 + 2 }, { buf, SIZE_MAX / 2 + 2 } };
	struct iovec one = { buf, 8 };
	struct { const char *what; const struct iovec *iov; int cnt; } cases[] = {
		{ "NULL", NULL, 1 },
		{ "unmapped", hole, 1 },
		{ "bad-element", bad_elem, 2 },
		{ "cnt-1", &one, -1 },
		{ "cnt0", &one, 0 },
		{ "cnt-max+1", &one, IOV_MAX + 1 },
		{ "overflow", overflow, 2 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct iovec *v = cases[i].iov;
		int n = cases[i].cnt;
		errno = 0; report(target, "readv", cases[i].what, readv(fd, v, n));
		errno = 0; report(target, "writev", cases[i].what, writev(fd, v, n));
		if (strcmp(target, "pipe")) {
			errno = 0; report(target, "preadv", cases[i].what, preadv(fd, v, n, 0));
			errno = 0; report(target, "pwritev", cases[i].what, pwritev(fd, v, n, 0));
		}
		errno = 0; report(target, "preadv2", cases[i].what, preadv2(fd, v, n, -1, 0));
		errno = 0; report(target, "pwritev2", cases[i].what, pwritev2(fd, v, n, -1, 0));
	}
	munmap(hole, 4096);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	int fd = open(argv[1], O_RDWR | O_CREAT, 0600);
	int p[2];
	int null = open("/dev/null", O_RDWR);
	if (fd < 0 || pipe(p) != 0 || null < 0)
		return 1;
	if (write(fd, "0123456789abcdef", 16) != 16)
		return 1;
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	try_all("file", fd);
	try_all("pipe", p[0]);
	try_all("devnull", null);
	return 0;
}
