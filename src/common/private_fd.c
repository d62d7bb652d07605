/*
 * private_fd.c - see private_fd.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/private_fd.h"

/* Above this the reserve stays put: a program with a larger limit rarely
 * reaches 1016 descriptors, and when it does it simply gets the numbers
 * above ours, while a reserve near a limit of 1048576 would make the
 * kernel allocate an fd table that large (expand_files()). */
#define PRIVATE_FD_CEILING 1024

#define PRIVATE_FD_SCARCE 256

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
	return high >= 0 ? high : -EMFILE;
}

int private_fd_move(int fd)
{
	int saved = errno, base;
	reserve_top(&base);
	if (fd >= base) {
		errno = saved;
		return fd; /* already out of the way */
	}
	/* F_DUPFD: the lowest free number >= base (fs/fcntl.c f_dupfd()). */
	int high = fcntl(fd, F_DUPFD_CLOEXEC, base);
	close(fd);
	errno = saved;
	return high >= 0 ? high : -EMFILE;
}
