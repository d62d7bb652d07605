/*
 * private_fd.c - see private_fd.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/private_fd.h"

/* Above this the reserve stays put: a program with a larger limit rarely
 * reaches 1016 descriptors, and when it does it simply gets the numbers
 * above ours, while a reserve near a limit of 1048576 would make the
 * kernel allocate an fd table that large (expand_files()). */
#define PRIVATE_FD_CEILING 1024

#define PRIVATE_FD_SCARCE 256

/* Bit n: number n is a descriptor of ours (all below the ceiling).
 * Inherited by a fork child with the descriptors themselves; an exec
 * closes them all (close-on-exec) and starts a new image. */
static uint64_t ours[PRIVATE_FD_CEILING / 64];

static void mark(int fd)
{
	if (fd >= 0 && fd < PRIVATE_FD_CEILING)
		__atomic_fetch_or(&ours[fd / 64], UINT64_C(1) << (fd % 64), __ATOMIC_RELAXED);
}

/* Clear fd's bit; was it set? */
static bool unmark(int fd)
{
	if (fd < 0 || fd >= PRIVATE_FD_CEILING)
		return false;
	uint64_t bit = UINT64_C(1) << (fd % 64);
	return __atomic_fetch_and(&ours[fd / 64], ~bit, __ATOMIC_RELAXED) & bit;
}

bool private_fd_is_ours(int fd)
{
	return fd >= 0 && fd < PRIVATE_FD_CEILING &&
	       (__atomic_load_n(&ours[fd / 64], __ATOMIC_RELAXED) >> (fd % 64) & 1);
}

void private_fd_close(int fd)
{
	int saved = errno;
	if (unmark(fd))
		syscall(SYS_close, fd);
	errno = saved;
}

void private_fd_taken(unsigned first, unsigned last)
{
	if (first >= PRIVATE_FD_CEILING)
		return;
	if (last >= PRIVATE_FD_CEILING)
		last = PRIVATE_FD_CEILING - 1;
	for (unsigned fd = first; fd <= last; fd++)
		unmark((int)fd);
}

int private_fd_reopen(int fd)
{
	char path[40];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	return open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
}

bool private_fd_scarce(void)
{
	int saved = errno;
	struct rlimit rl;
	bool scarce = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < PRIVATE_FD_SCARCE;
	errno = saved;
	return scarce;
}

/* The reserve: [*base, top) below the soft limit and the ceiling. */
static int reserve_top(int *base)
{
	struct rlimit rl;
	rlim_t top = PRIVATE_FD_CEILING;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < top)
		top = rl.rlim_cur;
	*base = (int)top - PRIVATE_FD_RESERVE;
	if (*base < 3)
		*base = 3;
	return (int)top;
}

int private_fd_dup(int fd)
{
	int saved = errno, base;
	int top = reserve_top(&base);
	/* Straight into the reserve: no low number is taken even for an
	 * instant, where another thread's open() would have had it; and none
	 * at or above the top, where the kernel would grow the fd table. */
	int high = fcntl(fd, F_DUPFD_CLOEXEC, base);
	if (high >= top) {
		close(high);
		high = -1;
	}
	errno = saved;
	if (high < 0)
		return -EMFILE;
	mark(high);
	return high;
}

int private_fd_move(int fd)
{
	int saved = errno, base;
	reserve_top(&base);
	if (fd >= base) {
		errno = saved;
		mark(fd);
		return fd; /* already out of the way */
	}
	/* F_DUPFD: the lowest free number >= base (fs/fcntl.c f_dupfd()). */
	int high = fcntl(fd, F_DUPFD_CLOEXEC, base);
	close(fd);
	errno = saved;
	if (high < 0)
		return -EMFILE;
	mark(high);
	return high;
}
