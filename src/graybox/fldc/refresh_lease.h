/*
 * refresh_lease.h - write leases for refresh: the kernel's own word that
 * no process, of any user, has a file open, and its notice when one starts
 * to open it.
 *
 * Why: refresh must not swap a tree that somebody is using (graybox-icl
 * §4.2.5; refresh.h).  /proc shows only the processes we may look at, and
 * it cannot see an open(2) that starts after the look.  A write lease
 * (fcntl(2) F_SETLEASE F_WRLCK, fs/locks.c) can do both, for regular files:
 *   - the kernel grants it only while no other open file description of
 *     the file exists (check_conflicting_open(): i_readcount and
 *     i_writecount are ours alone) - open, mapped or executed by anyone;
 *   - while we hold it, any open(2) of the file waits in break_lease()
 *     until we release it (at most /proc/sys/fs/lease-break-time), and
 *     F_GETLEASE stops answering F_WRLCK: we see the opener coming.
 * The kernel grants a lease to the file's owner or to CAP_LEASE only, on
 * filesystems that have them (not NFS); elsewhere the caller falls back to
 * its /proc look.  Leases exist for regular files only: a working
 * directory inside the tree is still /proc's to find.
 *
 * The break notice is a signal (SIGIO, whose default action ends the
 * process).  A leased descriptor is therefore set to signal SIGURG, whose
 * default action is to ignore it, before the lease, and to signal no one
 * (F_SETOWN 0) right after: nothing is ever delivered, and we poll.
 */
#ifndef DISCNICE_FLDC_REFRESH_LEASE_H
#define DISCNICE_FLDC_REFRESH_LEASE_H

#include <stdbool.h>

/* Take a write lease on `fd`, the caller's only descriptor of a regular
 * file, opened read-only and O_NONBLOCK (so that its open failed with
 * EWOULDBLOCK, in use, rather than waiting if somebody else held a lease).
 * Returns 0, or:
 *   -EAGAIN  another open file description exists: the file is open,
 *            mapped or executing somewhere - in use;
 *   -errno   no lease possible here (EACCES/EPERM: not ours and no
 *            CAP_LEASE; EINVAL: no leases on this filesystem, or
 *            disabled; ...).  The caller decides.
 * close(fd) releases the lease. */
int refresh_lease_take(int fd);

/* Has an open(2) of the leased file begun (a break pending), or has the
 * kernel already taken the lease back (lease-break-time passed)? */
bool refresh_lease_broken(int fd);

#endif
