/*
 * private_fd.h - descriptors a library opens for itself, kept out of the
 * program's way.
 *
 * open() returns the lowest free number, and programs see it: a program
 * that counts on its next open() being fd 3, or that opens up to its
 * RLIMIT_NOFILE, must not find our descriptors there (issue #8 item 8).
 * So a private descriptor moves to the top of the range the program can
 * use: at most PRIVATE_FD_RESERVE numbers just below the soft limit (and
 * never above 1024, where the kernel would grow the fd table for us).
 */
#ifndef DISCNICE_COMMON_PRIVATE_FD_H
#define DISCNICE_COMMON_PRIVATE_FD_H

#include <stdbool.h>

/* How many numbers at the top we may take: the probe's descriptors
 * (CACHE_PROBE_MAX_FDS) and the trace, with room to spare. */
#define PRIVATE_FD_RESERVE 16

/* True when the program's descriptor space is small (a soft
 * RLIMIT_NOFILE under 256): then a library keeps no private descriptor
 * open between uses, so that even a program that opens files up to its
 * limit finds every number it would have without us. */
bool private_fd_scarce(void);

/* Move fd (close-on-exec) into the reserve and return the new number; when
 * the reserve is full, close fd and return -EMFILE.  errno is left as it
 * was. */
int private_fd_move(int fd);

/* A close-on-exec duplicate of fd in the reserve, fd left as it is: the
 * number, or -EMFILE when the reserve is full.  errno is left as it was. */
int private_fd_dup(int fd);

/* A description of fd's file of our own, read-only: /proc/self/fd/N
 * opened afresh (close-on-exec, O_NONBLOCK so that an open that would
 * break a lease fails instead of waiting for it: break_lease()).  Unlike a
 * dup, it neither keeps the program's description open after the
 * program's close() (ETXTBSY, a flock held) nor shares its writeback error
 * state.  At the lowest free number: move it (private_fd_move()) to keep
 * it.  -1 and errno when it cannot be opened. */
int private_fd_reopen(int fd);

/*
 * Which numbers are ours, so that the program never loses a descriptor to
 * us nor we one to it.  Without us the reserve's numbers are free: the
 * program's close() of one of ours must fail with EBADF and leave ours
 * open (interpose.c; private_fd_is_ours), and its dup2()/dup3() onto one,
 * or a close_range() over some, takes them from us (private_fd_taken):
 * the kernel closed ours, and the number is the program's now.  Every
 * descriptor from private_fd_move()/private_fd_dup() is ours until
 * private_fd_close() or private_fd_taken().
 */
bool private_fd_is_ours(int fd);
/* Close fd if it is still ours (a raw close(2): no interposer sees it);
 * a number the program took is left alone.  errno is left as it was. */
void private_fd_close(int fd);
/* The program takes the numbers [first, last] (dup2 onto, close_range). */
void private_fd_taken(unsigned first, unsigned last);

#endif
