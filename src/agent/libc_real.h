/*
 * libc_real.h - the real libc functions behind the interposed names,
 * resolved once with dlsym(RTLD_NEXT) by interpose.c.  The agent's own
 * code calls libc through here, never through the interposed name, so it
 * can never recurse into itself.
 */
#ifndef DISCNICE_LIBC_REAL_H
#define DISCNICE_LIBC_REAL_H

#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct libc_real {
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*pread64)(int, void *, size_t, off_t);
	ssize_t (*pwrite64)(int, const void *, size_t, off_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*preadv64v2)(int, const struct iovec *, int, off_t, int);
	ssize_t (*pwritev64v2)(int, const struct iovec *, int, off_t, int);
	ssize_t (*sendfile64)(int, int, off_t *, size_t);
	ssize_t (*copy_file_range)(int, off_t *, int, off_t *, size_t, unsigned);
	ssize_t (*splice)(int, off_t *, int, off_t *, size_t, unsigned);
	int (*close)(int);
	off_t (*lseek64)(int, off_t, int);
	/* Sockets (io_net.c): send and recv are sendto and recvfrom with no
	 * address, as in glibc. */
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned, int, struct timespec *);
};

extern struct libc_real libc_real;

/* Resolve everything now (idempotent, thread-safe). */
void libc_real_resolve(void);

#endif
