/*
 * refresh_lease.c - write leases on a tree's files (refresh_lease.h says
 * why and what the kernel promises).
 */
#include "graybox/fldc/refresh_lease.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>

int refresh_lease_take(int fd)
{
	/* The notice goes to a signal ignored by default until F_SETOWN 0
	 * below: lease_setup() makes us the owner, and SIGIO would end us. */
	if (fcntl(fd, F_SETSIG, SIGURG) < 0 || fcntl(fd, F_SETLEASE, F_WRLCK) < 0)
		return -errno;
	fcntl(fd, F_SETOWN, 0);
	return 0;
}

bool refresh_lease_broken(int fd)
{
	/* fcntl_getlease(): a lease being broken answers the type it is
	 * going down to (F_UNLCK for a write lease broken by any open). */
	return fcntl(fd, F_GETLEASE) != F_WRLCK;
}
