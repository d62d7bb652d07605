/*
 * interpose.c - the only file that defines libc names (CONVENTIONS §2).
 *
 * Every wrapper has the same shape:
 *   1. RESOLVE(sym): the real function, found once with dlsym(RTLD_NEXT);
 *      this also works before our constructor has run.
 *   2. agent_enter(): false before start-up, when the agent is off, or when
 *      the agent itself is calling libc - then straight to the real call.
 *      The data and file hooks use a variant (agent_enter_data(),
 *      agent_enter_fd(), agent_enter_file()...) that is also false while
 *      the agent dozes (agent.h agent_dozing: no cap yet).
 *   3. the io_* function that predicts, throttles and calls the real thing;
 *      it returns what the real call returned, with its errno.
 *   4. agent_leave().
 * The agent's own code reaches libc through libc_real (libc_real.h) or
 * through these wrappers with the guard up, so it never recurses.
 */
/* This file defines getline, putchar, vprintf...: glibc's optimised
 * headers must not give it their extern-inline bodies of the same names.
 * Nor their _FORTIFY_SOURCE ones (distributions' default flags, and
 * Ubuntu's compilers by default): bits/setjmp2.h renames longjmp to
 * __longjmp_chk, bits/unistd.h wraps read in an inline body, and the
 * wrappers below would define those names twice.  The fortified entries
 * the program itself calls are wrapped under their own names
 * (__longjmp_chk, __read_chk...). */
#undef _FORTIFY_SOURCE
#include <features.h>
#undef __USE_EXTERN_INLINES

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
#include <sched.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/private_fd.h"
#include "agent/io.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "common/clock.h"

#define EXPORT __attribute__((visibility("default")))

/*
 * Every real_<sym> is resolved at start-up (libc_real_resolve(), from the
 * constructor): dlsym takes the loader's lock and may allocate, so a hook
 * that runs in a signal handler must never be the first to call it.  Each
 * DECLARE_REAL drops an entry into the discnice_real section, whose bounds
 * the linker provides.  RESOLVE stays as the fallback for calls that come
 * before the constructor (another library's constructor, the loader).
 */
struct real_entry {
	void **slot;
	const char *name;
};
extern const struct real_entry __start_discnice_real[] __attribute__((visibility("hidden")));
extern const struct real_entry __stop_discnice_real[] __attribute__((visibility("hidden")));

#define REAL(sym) real_##sym
#define DECLARE_REAL(ret, sym, params) \
	static ret(*real_##sym) params; \
	static const struct real_entry real_entry_##sym \
		__attribute__((section("discnice_real"), used, aligned(sizeof(void *)))) = \
		{ (void **)&real_##sym, #sym }
#define RESOLVE(sym) \
	do { \
		if (__builtin_expect(!real_##sym, 0)) \
			real_##sym = (__typeof__(real_##sym))dlsym(RTLD_NEXT, #sym); \
	} while (0)

struct libc_real libc_real;
/* vfork's real address, for the assembly below; NULL before start-up. */
void *agent_real_vfork;

void libc_real_resolve(void)
{
	for (const struct real_entry *e = __start_discnice_real; e < __stop_discnice_real; e++)
		if (!*e->slot)
			*e->slot = dlsym(RTLD_NEXT, e->name);
	if (!agent_real_vfork)
		agent_real_vfork = dlsym(RTLD_NEXT, "vfork");
#define RESOLVE_INTO(field, sym) \
	if (!libc_real.field) \
		libc_real.field = (__typeof__(libc_real.field))dlsym(RTLD_NEXT, sym)
	RESOLVE_INTO(read, "read");
	RESOLVE_INTO(write, "write");
	RESOLVE_INTO(pread64, "pread64");
	RESOLVE_INTO(pwrite64, "pwrite64");
	RESOLVE_INTO(readv, "readv");
	RESOLVE_INTO(writev, "writev");
	RESOLVE_INTO(preadv64v2, "preadv64v2");
	RESOLVE_INTO(pwritev64v2, "pwritev64v2");
	RESOLVE_INTO(sendfile64, "sendfile64");
	RESOLVE_INTO(copy_file_range, "copy_file_range");
	RESOLVE_INTO(splice, "splice");
	RESOLVE_INTO(close, "close");
	RESOLVE_INTO(lseek64, "lseek64");
	RESOLVE_INTO(sendto, "sendto");
	RESOLVE_INTO(recvfrom, "recvfrom");
	RESOLVE_INTO(sendmsg, "sendmsg");
	RESOLVE_INTO(recvmsg, "recvmsg");
	RESOLVE_INTO(sendmmsg, "sendmmsg");
	RESOLVE_INTO(recvmmsg, "recvmmsg");
#undef RESOLVE_INTO
}

/* Names glibc exports without declaring them in its public headers. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);
int fcntl64(int fd, int cmd, ...);
int __uflow(FILE *fp);
int __underflow(FILE *fp);
void __longjmp_chk(struct __jmp_buf_tag env[1], int val) __attribute__((noreturn));
int __overflow(FILE *fp, int ch);
int _IO_getc(FILE *fp);
int _IO_putc(int ch, FILE *fp);
ssize_t __getdelim(char **line, size_t *n, int delim, FILE *fp);
int __fprintf_chk(FILE *fp, int flag, const char *fmt, ...);
int __vfprintf_chk(FILE *fp, int flag, const char *fmt, va_list ap);
int __printf_chk(int flag, const char *fmt, ...);
int __vprintf_chk(int flag, const char *fmt, va_list ap);
int __dprintf_chk(int fd, int flag, const char *fmt, ...);
int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);
int __vsnprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, va_list ap);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t count, off_t offset, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t count, off_t offset, size_t buflen);
size_t __fread_chk(void *ptr, size_t ptrlen, size_t size, size_t n, FILE *fp);
size_t __fread_unlocked_chk(void *ptr, size_t ptrlen, size_t size, size_t n, FILE *fp);
char *__fgets_chk(char *s, size_t buflen, int size, FILE *fp);
char *__fgets_unlocked_chk(char *s, size_t buflen, int size, FILE *fp);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
		       struct sockaddr *from, socklen_t *fromlen);
/* glibc 2.35: declared here too for headers older than the library. */
int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
		 const struct timespec *timeout, const sigset_t *sigmask);

/* ---- reads ---------------------------------------------------------- */

DECLARE_REAL(ssize_t, read, (int, void *, size_t));
EXPORT ssize_t read(int fd, void *buf, size_t count)
{
	RESOLVE(read);
	if (!agent_enter_fd(fd))
		return REAL(read)(fd, buf, count);
	ssize_t r = io_read(fd, buf, count, NULL);
	agent_leave();
	return r;
}

/* pread and pread64 are one function on LP64; each name gets a wrapper.
 * A negative offset is the kernel's EINVAL to give, untouched. */
#define WRAP_PREAD(sym) \
	DECLARE_REAL(ssize_t, sym, (int, void *, size_t, off_t)); \
	EXPORT ssize_t sym(int fd, void *buf, size_t count, off_t offset) \
	{ \
		RESOLVE(sym); \
		if (offset < 0 || !agent_enter_disk_fd(fd)) \
			return REAL(sym)(fd, buf, count, offset); \
		ssize_t r = io_read(fd, buf, count, &offset); \
		agent_leave(); \
		return r; \
	}
WRAP_PREAD(pread)
WRAP_PREAD(pread64)

/* The _FORTIFY_SOURCE entry points (bits/unistd.h): a program built with
 * -D_FORTIFY_SOURCE=2, as Debian builds its packages, calls these instead
 * of read/pread wherever the compiler knows the buffer's size and not the
 * count, and glibc's __read_chk goes to its internal __read, never through
 * our read.  A count beyond the buffer is glibc's to abort on, untouched. */
DECLARE_REAL(ssize_t, __read_chk, (int, void *, size_t, size_t));
EXPORT ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen)
{
	RESOLVE(__read_chk);
	if (count > buflen || !agent_enter_fd(fd))
		return REAL(__read_chk)(fd, buf, count, buflen);
	ssize_t r = io_read(fd, buf, count, NULL);
	agent_leave();
	return r;
}

#define WRAP_PREAD_CHK(sym) \
	DECLARE_REAL(ssize_t, sym, (int, void *, size_t, off_t, size_t)); \
	EXPORT ssize_t sym(int fd, void *buf, size_t count, off_t offset, size_t buflen) \
	{ \
		RESOLVE(sym); \
		if (count > buflen || offset < 0 || !agent_enter_disk_fd(fd)) \
			return REAL(sym)(fd, buf, count, offset, buflen); \
		ssize_t r = io_read(fd, buf, count, &offset); \
		agent_leave(); \
		return r; \
	}
WRAP_PREAD_CHK(__pread_chk)
WRAP_PREAD_CHK(__pread64_chk)

DECLARE_REAL(ssize_t, readv, (int, const struct iovec *, int));
EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	RESOLVE(readv);
	if (!agent_enter_fd(fd))
		return REAL(readv)(fd, iov, iovcnt);
	ssize_t r = io_readv(fd, iov, iovcnt, NULL, 0);
	agent_leave();
	return r;
}

#define WRAP_PREADV(sym) \
	DECLARE_REAL(ssize_t, sym, (int, const struct iovec *, int, off_t)); \
	EXPORT ssize_t sym(int fd, const struct iovec *iov, int iovcnt, off_t offset) \
	{ \
		RESOLVE(sym); \
		if (offset < 0 || !agent_enter_disk_fd(fd)) \
			return REAL(sym)(fd, iov, iovcnt, offset); \
		ssize_t r = io_readv(fd, iov, iovcnt, &offset, 0); \
		agent_leave(); \
		return r; \
	}
WRAP_PREADV(preadv)
WRAP_PREADV(preadv64)

/* preadv2: offset -1 means "at the file offset", as in the kernel. */
#define WRAP_PREADV2(sym) \
	DECLARE_REAL(ssize_t, sym, (int, const struct iovec *, int, off_t, int)); \
	EXPORT ssize_t sym(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) \
	{ \
		RESOLVE(sym); \
		if (offset < -1 || !agent_enter_fd(fd)) \
			return REAL(sym)(fd, iov, iovcnt, offset, flags); \
		ssize_t r = io_readv(fd, iov, iovcnt, offset == -1 ? NULL : &offset, flags); \
		agent_leave(); \
		return r; \
	}
WRAP_PREADV2(preadv2)
WRAP_PREADV2(preadv64v2)

/* ---- writes --------------------------------------------------------- */

DECLARE_REAL(ssize_t, write, (int, const void *, size_t));
EXPORT ssize_t write(int fd, const void *buf, size_t count)
{
	RESOLVE(write);
	if (!agent_enter_fd(fd))
		return REAL(write)(fd, buf, count);
	ssize_t r = io_write(fd, buf, count, NULL);
	agent_leave();
	return r;
}

#define WRAP_PWRITE(sym) \
	DECLARE_REAL(ssize_t, sym, (int, const void *, size_t, off_t)); \
	EXPORT ssize_t sym(int fd, const void *buf, size_t count, off_t offset) \
	{ \
		RESOLVE(sym); \
		if (offset < 0 || !agent_enter_disk_fd(fd)) \
			return REAL(sym)(fd, buf, count, offset); \
		ssize_t r = io_write(fd, buf, count, &offset); \
		agent_leave(); \
		return r; \
	}
WRAP_PWRITE(pwrite)
WRAP_PWRITE(pwrite64)

DECLARE_REAL(ssize_t, writev, (int, const struct iovec *, int));
EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	RESOLVE(writev);
	if (!agent_enter_fd(fd))
		return REAL(writev)(fd, iov, iovcnt);
	ssize_t r = io_writev(fd, iov, iovcnt, NULL, 0);
	agent_leave();
	return r;
}

#define WRAP_PWRITEV(sym) \
	DECLARE_REAL(ssize_t, sym, (int, const struct iovec *, int, off_t)); \
	EXPORT ssize_t sym(int fd, const struct iovec *iov, int iovcnt, off_t offset) \
	{ \
		RESOLVE(sym); \
		if (offset < 0 || !agent_enter_disk_fd(fd)) \
			return REAL(sym)(fd, iov, iovcnt, offset); \
		ssize_t r = io_writev(fd, iov, iovcnt, &offset, 0); \
		agent_leave(); \
		return r; \
	}
WRAP_PWRITEV(pwritev)
WRAP_PWRITEV(pwritev64)

#define WRAP_PWRITEV2(sym) \
	DECLARE_REAL(ssize_t, sym, (int, const struct iovec *, int, off_t, int)); \
	EXPORT ssize_t sym(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) \
	{ \
		RESOLVE(sym); \
		if (offset < -1 || !agent_enter_fd(fd)) \
			return REAL(sym)(fd, iov, iovcnt, offset, flags); \
		ssize_t r = io_writev(fd, iov, iovcnt, offset == -1 ? NULL : &offset, flags); \
		agent_leave(); \
		return r; \
	}
WRAP_PWRITEV2(pwritev2)
WRAP_PWRITEV2(pwritev64v2)

/* ---- kernel-side copies --------------------------------------------- */

#define WRAP_SENDFILE(sym) \
	DECLARE_REAL(ssize_t, sym, (int, int, off_t *, size_t)); \
	EXPORT ssize_t sym(int out_fd, int in_fd, off_t *offset, size_t count) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_fds(out_fd, in_fd)) \
			return REAL(sym)(out_fd, in_fd, offset, count); \
		ssize_t r = io_sendfile(out_fd, in_fd, offset, count); \
		agent_leave(); \
		return r; \
	}
WRAP_SENDFILE(sendfile)
WRAP_SENDFILE(sendfile64)

DECLARE_REAL(ssize_t, copy_file_range, (int, off_t *, int, off_t *, size_t, unsigned));
EXPORT ssize_t copy_file_range(int in_fd, off_t *off_in, int out_fd, off_t *off_out, size_t len,
			       unsigned flags)
{
	RESOLVE(copy_file_range);
	if (!agent_enter_disk_fds(in_fd, out_fd))
		return REAL(copy_file_range)(in_fd, off_in, out_fd, off_out, len, flags);
	ssize_t r = io_copy_file_range(in_fd, off_in, out_fd, off_out, len, flags);
	agent_leave();
	return r;
}

DECLARE_REAL(ssize_t, splice, (int, off_t *, int, off_t *, size_t, unsigned));
EXPORT ssize_t splice(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len,
		      unsigned flags)
{
	RESOLVE(splice);
	if (!agent_enter_fds(fd_in, fd_out))
		return REAL(splice)(fd_in, off_in, fd_out, off_out, len, flags);
	ssize_t r = io_splice(fd_in, off_in, fd_out, off_out, len, flags);
	agent_leave();
	return r;
}

/* ---- sockets (io_net.c) ---------------------------------------------- */
/* read/write/readv/writev on sockets come through the wrappers above;
 * these are the calls only sockets make, and the waits of event loops. */

DECLARE_REAL(ssize_t, send, (int, const void *, size_t, int));
EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	RESOLVE(send);
	if (!agent_enter_net())
		return REAL(send)(fd, buf, len, flags);
	ssize_t r = io_sendto(fd, buf, len, flags, NULL, 0);
	agent_leave();
	return r;
}

DECLARE_REAL(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t));
EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to,
		      socklen_t tolen)
{
	RESOLVE(sendto);
	if (!agent_enter_net())
		return REAL(sendto)(fd, buf, len, flags, to, tolen);
	ssize_t r = io_sendto(fd, buf, len, flags, to, tolen);
	agent_leave();
	return r;
}

DECLARE_REAL(ssize_t, sendmsg, (int, const struct msghdr *, int));
EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	RESOLVE(sendmsg);
	if (!agent_enter_net())
		return REAL(sendmsg)(fd, msg, flags);
	ssize_t r = io_sendmsg(fd, msg, flags);
	agent_leave();
	return r;
}

DECLARE_REAL(int, sendmmsg, (int, struct mmsghdr *, unsigned, int));
EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
	RESOLVE(sendmmsg);
	if (!agent_enter_net())
		return REAL(sendmmsg)(fd, vec, vlen, flags);
	int r = io_sendmmsg(fd, vec, vlen, flags);
	agent_leave();
	return r;
}

DECLARE_REAL(ssize_t, recv, (int, void *, size_t, int));
EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	RESOLVE(recv);
	if (!agent_enter_net())
		return REAL(recv)(fd, buf, len, flags);
	ssize_t r = io_recvfrom(fd, buf, len, flags, NULL, NULL);
	agent_leave();
	return r;
}

DECLARE_REAL(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *));
EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
			socklen_t *fromlen)
{
	RESOLVE(recvfrom);
	if (!agent_enter_net())
		return REAL(recvfrom)(fd, buf, len, flags, from, fromlen);
	ssize_t r = io_recvfrom(fd, buf, len, flags, from, fromlen);
	agent_leave();
	return r;
}

/* The _FORTIFY_SOURCE entry points (bits/socket2.h): a length beyond the
 * buffer is glibc's to abort on, untouched. */
DECLARE_REAL(ssize_t, __recv_chk, (int, void *, size_t, size_t, int));
EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	RESOLVE(__recv_chk);
	if (len > buflen || !agent_enter_net())
		return REAL(__recv_chk)(fd, buf, len, buflen, flags);
	ssize_t r = io_recvfrom(fd, buf, len, flags, NULL, NULL);
	agent_leave();
	return r;
}

DECLARE_REAL(ssize_t, __recvfrom_chk,
	     (int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *));
EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
			      struct sockaddr *from, socklen_t *fromlen)
{
	RESOLVE(__recvfrom_chk);
	if (len > buflen || !agent_enter_net())
		return REAL(__recvfrom_chk)(fd, buf, len, buflen, flags, from, fromlen);
	ssize_t r = io_recvfrom(fd, buf, len, flags, from, fromlen);
	agent_leave();
	return r;
}

DECLARE_REAL(ssize_t, recvmsg, (int, struct msghdr *, int));
EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	RESOLVE(recvmsg);
	if (!agent_enter_net())
		return REAL(recvmsg)(fd, msg, flags);
	ssize_t r = io_recvmsg(fd, msg, flags);
	agent_leave();
	return r;
}

DECLARE_REAL(int, recvmmsg, (int, struct mmsghdr *, unsigned, int, struct timespec *));
EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags, struct timespec *timeout)
{
	RESOLVE(recvmmsg);
	if (!agent_enter_net())
		return REAL(recvmmsg)(fd, vec, vlen, flags, timeout);
	int r = io_recvmmsg(fd, vec, vlen, flags, timeout);
	agent_leave();
	return r;
}

/* The waits of event loops: io_net_before_wait() pays what this thread's
 * non-blocking socket calls owe, within the caller's timeout, then the
 * real wait runs with what is left of it.  Readiness is never touched. */
static int64_t ms_to_ns(int ms)
{
	return ms < 0 ? -1 : (int64_t)ms * 1000000;
}

static int ns_to_ms(int64_t ns)
{
	return ns < 0 ? -1 : (int)((ns + 999999) / 1000000);
}

DECLARE_REAL(int, poll, (struct pollfd *, nfds_t, int));
EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	RESOLVE(poll);
	if (!agent_enter_net())
		return REAL(poll)(fds, nfds, timeout);
	int64_t left = ms_to_ns(timeout);
	int r = io_net_before_wait(&left, NULL) < 0 ? -1 : REAL(poll)(fds, nfds, ns_to_ms(left));
	agent_leave();
	return r;
}

/* A timespec the agent may read: NULL means no timeout; one it cannot
 * read is the kernel's EFAULT to give (then no wait of ours). */
static bool timespec_read(const struct timespec *ts, int64_t *ns)
{
	if (!ts) {
		*ns = -1;
		return true;
	}
	struct timespec copy;
	struct iovec local = { &copy, sizeof copy };
	struct iovec remote = { (void *)ts, sizeof copy };
	if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof copy ||
	    copy.tv_sec < 0 || copy.tv_nsec < 0 || copy.tv_nsec >= 1000000000)
		return false;
	*ns = copy.tv_sec > INT64_MAX / 1000000000 - 1 ? -1
						    : copy.tv_sec * 1000000000 + copy.tv_nsec;
	return true;
}

DECLARE_REAL(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *));
EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
		 const sigset_t *sigmask)
{
	RESOLVE(ppoll);
	int64_t left;
	if (!agent_enter_net())
		return REAL(ppoll)(fds, nfds, timeout, sigmask);
	if (!timespec_read(timeout, &left)) {
		agent_leave();
		return REAL(ppoll)(fds, nfds, timeout, sigmask);
	}
	int r;
	if (io_net_before_wait(&left, sigmask) < 0) {
		r = -1;
	} else if (left < 0) {
		r = REAL(ppoll)(fds, nfds, NULL, sigmask);
	} else {
		struct timespec rest = { (time_t)(left / 1000000000), (long)(left % 1000000000) };
		r = REAL(ppoll)(fds, nfds, &rest, sigmask);
	}
	agent_leave();
	return r;
}

DECLARE_REAL(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *));
EXPORT int select(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		  struct timeval *timeout)
{
	RESOLVE(select);
	if (!agent_enter_net())
		return REAL(select)(nfds, readfds, writefds, exceptfds, timeout);
	struct timeval copy;
	struct iovec local = { &copy, sizeof copy };
	struct iovec remote = { timeout, sizeof copy };
	int64_t left = -1;
	if (timeout) {
		if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof copy ||
		    copy.tv_sec < 0 || copy.tv_usec < 0 || copy.tv_usec >= 1000000) {
			agent_leave();
			return REAL(select)(nfds, readfds, writefds, exceptfds, timeout);
		}
		left = copy.tv_sec > INT64_MAX / 1000000000 - 1
			       ? -1 : copy.tv_sec * 1000000000 + (int64_t)copy.tv_usec * 1000;
	}
	int r;
	if (io_net_before_wait(&left, NULL) < 0) {
		r = -1;
	} else {
		/* Linux's select leaves the time not slept in *timeout: ours
		 * counts as slept. */
		if (timeout && left >= 0) {
			timeout->tv_sec = (time_t)(left / 1000000000);
			timeout->tv_usec = (suseconds_t)((left % 1000000000) / 1000);
		}
		r = REAL(select)(nfds, readfds, writefds, exceptfds, timeout);
	}
	agent_leave();
	return r;
}

DECLARE_REAL(int, pselect, (int, fd_set *, fd_set *, fd_set *, const struct timespec *,
			    const sigset_t *));
EXPORT int pselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		   const struct timespec *timeout, const sigset_t *sigmask)
{
	RESOLVE(pselect);
	int64_t left;
	if (!agent_enter_net())
		return REAL(pselect)(nfds, readfds, writefds, exceptfds, timeout, sigmask);
	if (!timespec_read(timeout, &left)) {
		agent_leave();
		return REAL(pselect)(nfds, readfds, writefds, exceptfds, timeout, sigmask);
	}
	int r;
	if (io_net_before_wait(&left, sigmask) < 0) {
		r = -1;
	} else if (left < 0) {
		r = REAL(pselect)(nfds, readfds, writefds, exceptfds, NULL, sigmask);
	} else {
		struct timespec rest = { (time_t)(left / 1000000000), (long)(left % 1000000000) };
		r = REAL(pselect)(nfds, readfds, writefds, exceptfds, &rest, sigmask);
	}
	agent_leave();
	return r;
}

DECLARE_REAL(int, epoll_wait, (int, struct epoll_event *, int, int));
EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	RESOLVE(epoll_wait);
	if (!agent_enter_net())
		return REAL(epoll_wait)(epfd, events, maxevents, timeout);
	int64_t left = ms_to_ns(timeout);
	int r = -1;
	if (io_net_before_wait(&left, NULL) == 0) {
		io_net_rearm(epfd);
		r = REAL(epoll_wait)(epfd, events, maxevents, ns_to_ms(left));
	}
	agent_leave();
	return r;
}

DECLARE_REAL(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *));
EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
		       const sigset_t *sigmask)
{
	RESOLVE(epoll_pwait);
	if (!agent_enter_net())
		return REAL(epoll_pwait)(epfd, events, maxevents, timeout, sigmask);
	int64_t left = ms_to_ns(timeout);
	int r = -1;
	if (io_net_before_wait(&left, sigmask) == 0) {
		io_net_rearm(epfd);
		r = REAL(epoll_pwait)(epfd, events, maxevents, ns_to_ms(left), sigmask);
	}
	agent_leave();
	return r;
}

/* epoll_pwait with a timespec (glibc 2.35, Linux 5.11; NULL = no limit,
 * {0, 0} = no wait), paid for as the others.  Under a glibc without it
 * our export is still found (by a program that probes with dlsym, or
 * links with weak symbols): -1 with ENOSYS then, what glibc's own
 * returns on a kernel without the system call, which is what callers
 * test before falling back to epoll_pwait. */
DECLARE_REAL(int, epoll_pwait2, (int, struct epoll_event *, int, const struct timespec *,
				 const sigset_t *));
EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
			const struct timespec *timeout, const sigset_t *sigmask)
{
	RESOLVE(epoll_pwait2);
	if (!REAL(epoll_pwait2)) {
		errno = ENOSYS;
		return -1;
	}
	int64_t left;
	if (!agent_enter_net())
		return REAL(epoll_pwait2)(epfd, events, maxevents, timeout, sigmask);
	if (!timespec_read(timeout, &left)) { /* the kernel's EINVAL or EFAULT */
		agent_leave();
		return REAL(epoll_pwait2)(epfd, events, maxevents, timeout, sigmask);
	}
	int r = -1;
	if (io_net_before_wait(&left, sigmask) == 0) {
		io_net_rearm(epfd);
		if (left < 0) {
			r = REAL(epoll_pwait2)(epfd, events, maxevents, NULL, sigmask);
		} else {
			struct timespec rest = { (time_t)(left / 1000000000),
						 (long)(left % 1000000000) };
			r = REAL(epoll_pwait2)(epfd, events, maxevents, &rest, sigmask);
		}
	}
	agent_leave();
	return r;
}

/* Registrations are recorded whatever the caps: a cap may come later
 * (`discnice set`), and the re-arm needs the program's own event. */
DECLARE_REAL(int, epoll_ctl, (int, int, int, struct epoll_event *));
EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	RESOLVE(epoll_ctl);
	if (!agent_enter())
		return REAL(epoll_ctl)(epfd, op, fd, event);
	int r = REAL(epoll_ctl)(epfd, op, fd, event);
	if (r == 0) {
		int saved = errno;
		io_net_epoll_ctl(epfd, op, fd, event);
		errno = saved;
	}
	agent_leave();
	return r;
}

/* ---- opening and closing -------------------------------------------- */

/* The mode argument exists only with O_CREAT or O_TMPFILE (open(2)). */
static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

static int opened(int fd, int flags, const struct io_victim *truncated)
{
	if (fd >= 0) {
		io_opened(fd, flags);
		if (truncated->valid)
			io_victim_truncated(truncated, 0);
	}
	return fd;
}

/* open(O_TRUNC) of an existing file cancels its dirty pages, like
 * truncate(2): note them before the call. */
static void note_open_trunc(int dirfd, const char *path, int flags, struct io_victim *victim)
{
	victim->valid = 0;
	if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY)
		io_victim_note_path(dirfd, path, 0, false, victim);
}

#define WRAP_OPEN(sym) \
	DECLARE_REAL(int, sym, (const char *, int, ...)); \
	EXPORT int sym(const char *path, int flags, ...) \
	{ \
		va_list ap; \
		va_start(ap, flags); \
		mode_t mode = mode_arg(flags, ap); \
		va_end(ap); \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(path, flags, mode); \
		struct io_victim trunc_; \
		note_open_trunc(AT_FDCWD, path, flags, &trunc_); \
		int fd = opened(REAL(sym)(path, flags, mode), flags, &trunc_); \
		agent_leave(); \
		return fd; \
	}
WRAP_OPEN(open)
WRAP_OPEN(open64)

#define WRAP_OPENAT(sym) \
	DECLARE_REAL(int, sym, (int, const char *, int, ...)); \
	EXPORT int sym(int dirfd, const char *path, int flags, ...) \
	{ \
		va_list ap; \
		va_start(ap, flags); \
		mode_t mode = mode_arg(flags, ap); \
		va_end(ap); \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(dirfd, path, flags, mode); \
		struct io_victim trunc_; \
		note_open_trunc(dirfd, path, flags, &trunc_); \
		int fd = opened(REAL(sym)(dirfd, path, flags, mode), flags, &trunc_); \
		agent_leave(); \
		return fd; \
	}
WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)

/* The _FORTIFY_SOURCE entry points (bits/fcntl2.h): no mode argument. */
#define WRAP_OPEN_2(sym) \
	DECLARE_REAL(int, sym, (const char *, int)); \
	EXPORT int sym(const char *path, int flags) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(path, flags); \
		struct io_victim trunc_; \
		note_open_trunc(AT_FDCWD, path, flags, &trunc_); \
		int fd = opened(REAL(sym)(path, flags), flags, &trunc_); \
		agent_leave(); \
		return fd; \
	}
WRAP_OPEN_2(__open_2)
WRAP_OPEN_2(__open64_2)

#define WRAP_OPENAT_2(sym) \
	DECLARE_REAL(int, sym, (int, const char *, int)); \
	EXPORT int sym(int dirfd, const char *path, int flags) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(dirfd, path, flags); \
		struct io_victim trunc_; \
		note_open_trunc(dirfd, path, flags, &trunc_); \
		int fd = opened(REAL(sym)(dirfd, path, flags), flags, &trunc_); \
		agent_leave(); \
		return fd; \
	}
WRAP_OPENAT_2(__openat_2)
WRAP_OPENAT_2(__openat64_2)

#define WRAP_CREAT(sym) \
	DECLARE_REAL(int, sym, (const char *, mode_t)); \
	EXPORT int sym(const char *path, mode_t mode) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(path, mode); \
		struct io_victim trunc_; \
		note_open_trunc(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, &trunc_); \
		int fd = opened(REAL(sym)(path, mode), O_CREAT | O_WRONLY | O_TRUNC, &trunc_); \
		agent_leave(); \
		return fd; \
	}
WRAP_CREAT(creat)
WRAP_CREAT(creat64)

DECLARE_REAL(int, close, (int));
EXPORT int close(int fd)
{
	RESOLVE(close);
	/* A number of ours is one the program never had: without us it is
	 * free, and close() says EBADF; ours stays open (private_fd.h). */
	if (agent_guard == AGENT_GUARD_FREE && private_fd_is_ours(fd)) {
		errno = EBADF;
		return -1;
	}
	if (!agent_enter_file())
		return REAL(close)(fd);
	int r = io_close(fd);
	agent_leave();
	return r;
}

/* Closes the agent would otherwise not see: forget the fds, or a later
 * pipe or socket given the same number would be taken for the old file. */
DECLARE_REAL(int, close_range, (unsigned, unsigned, int));
EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	RESOLVE(close_range);
	if (!(flags & CLOSE_RANGE_CLOEXEC) && agent_guard != AGENT_GUARD_VFORKED)
		private_fd_taken(first, last); /* the kernel closes ours too */
	if (!agent_enter_file())
		return REAL(close_range)(first, last, flags);
	int r = REAL(close_range)(first, last, flags);
	if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC)) {
		int saved = errno;
		open_file_forget_range(first, last);
		errno = saved;
	}
	agent_leave();
	return r;
}

DECLARE_REAL(void, closefrom, (int));
EXPORT void closefrom(int lowfd)
{
	RESOLVE(closefrom);
	if (agent_guard != AGENT_GUARD_VFORKED)
		private_fd_taken(lowfd < 0 ? 0 : (unsigned)lowfd, ~0u);
	if (!agent_enter_file()) {
		REAL(closefrom)(lowfd);
		return;
	}
	REAL(closefrom)(lowfd);
	int saved = errno;
	open_file_forget_range(lowfd < 0 ? 0 : (unsigned)lowfd, ~0u);
	errno = saved;
	agent_leave();
}

DECLARE_REAL(int, dup, (int));
EXPORT int dup(int oldfd)
{
	RESOLVE(dup);
	if (!agent_enter_file())
		return REAL(dup)(oldfd);
	int fd = REAL(dup)(oldfd);
	if (fd >= 0)
		io_dup(oldfd, fd);
	agent_leave();
	return fd;
}

DECLARE_REAL(int, dup2, (int, int));
EXPORT int dup2(int oldfd, int newfd)
{
	RESOLVE(dup2);
	/* Ours at newfd is closed by it (not in a vfork child: its
	 * descriptors are its own copies, our bits are the parent's). */
	if (oldfd != newfd && newfd >= 0 && agent_guard != AGENT_GUARD_VFORKED)
		private_fd_taken((unsigned)newfd, (unsigned)newfd);
	if (!agent_enter_file())
		return REAL(dup2)(oldfd, newfd);
	int fd = REAL(dup2)(oldfd, newfd);
	if (fd >= 0 && oldfd != newfd)
		io_dup(oldfd, fd);
	agent_leave();
	return fd;
}

DECLARE_REAL(int, dup3, (int, int, int));
EXPORT int dup3(int oldfd, int newfd, int flags)
{
	RESOLVE(dup3);
	if (oldfd != newfd && newfd >= 0 && agent_guard != AGENT_GUARD_VFORKED)
		private_fd_taken((unsigned)newfd, (unsigned)newfd);
	if (!agent_enter_file())
		return REAL(dup3)(oldfd, newfd, flags);
	int fd = REAL(dup3)(oldfd, newfd, flags);
	if (fd >= 0)
		io_dup(oldfd, fd);
	agent_leave();
	return fd;
}

/* fcntl is variadic; every command's argument fits in a pointer-sized
 * register on the ABIs glibc supports, which is how glibc itself reads it. */
#define WRAP_FCNTL(sym) \
	DECLARE_REAL(int, sym, (int, int, ...)); \
	EXPORT int sym(int fd, int cmd, ...) \
	{ \
		va_list ap; \
		va_start(ap, cmd); \
		void *arg = va_arg(ap, void *); \
		va_end(ap); \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(fd, cmd, arg); \
		int r = REAL(sym)(fd, cmd, arg); \
		if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) \
			io_dup(fd, r); \
		else if (r >= 0 && cmd == F_SETFL) \
			io_flags_set(fd, (int)(intptr_t)arg); \
		agent_leave(); \
		return r; \
	}
WRAP_FCNTL(fcntl)
WRAP_FCNTL(fcntl64)

#define WRAP_LSEEK(sym) \
	DECLARE_REAL(off_t, sym, (int, off_t, int)); \
	EXPORT off_t sym(int fd, off_t offset, int whence) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(fd, offset, whence); \
		off_t r = REAL(sym)(fd, offset, whence); \
		if (r >= 0) { \
			int saved_ = errno; \
			io_seeked(fd, r); \
			errno = saved_; \
		} \
		agent_leave(); \
		return r; \
	}
WRAP_LSEEK(lseek)
WRAP_LSEEK(lseek64)

/* ---- calls that cancel or clean delayed writes ----------------------- */

#define WRAP_FTRUNCATE(sym) \
	DECLARE_REAL(int, sym, (int, off_t)); \
	EXPORT int sym(int fd, off_t length) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(fd, length); \
		struct io_victim file; \
		io_victim_note_fd(fd, length > 0 ? (uint64_t)length : 0, &file); \
		int r = REAL(sym)(fd, length); \
		if (r == 0) \
			io_truncated_fd(fd, &file, (uint64_t)length); \
		agent_leave(); \
		return r; \
	}
WRAP_FTRUNCATE(ftruncate)
WRAP_FTRUNCATE(ftruncate64)

#define WRAP_TRUNCATE(sym) \
	DECLARE_REAL(int, sym, (const char *, off_t)); \
	EXPORT int sym(const char *path, off_t length) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(path, length); \
		struct io_victim file; \
		io_victim_note_path(AT_FDCWD, path, length > 0 ? (uint64_t)length : 0, false, &file); \
		int r = REAL(sym)(path, length); \
		if (r == 0) \
			io_victim_truncated(&file, (uint64_t)length); \
		agent_leave(); \
		return r; \
	}
WRAP_TRUNCATE(truncate)
WRAP_TRUNCATE(truncate64)

DECLARE_REAL(int, unlink, (const char *));
EXPORT int unlink(const char *path)
{
	RESOLVE(unlink);
	if (!agent_enter_file())
		return REAL(unlink)(path);
	struct io_victim victim;
	io_victim_note_path(AT_FDCWD, path, 0, true, &victim);
	int r = REAL(unlink)(path);
	if (r == 0)
		io_victim_gone(&victim);
	agent_leave();
	return r;
}

DECLARE_REAL(int, unlinkat, (int, const char *, int));
EXPORT int unlinkat(int dirfd, const char *path, int flags)
{
	RESOLVE(unlinkat);
	if (!agent_enter_file())
		return REAL(unlinkat)(dirfd, path, flags);
	struct io_victim victim = { 0, 0, 0, 0, 0 };
	if (!(flags & AT_REMOVEDIR))
		io_victim_note_path(dirfd, path, 0, true, &victim);
	int r = REAL(unlinkat)(dirfd, path, flags);
	if (r == 0)
		io_victim_gone(&victim);
	agent_leave();
	return r;
}

DECLARE_REAL(int, remove, (const char *));
EXPORT int remove(const char *path)
{
	RESOLVE(remove);
	if (!agent_enter_file())
		return REAL(remove)(path);
	struct io_victim victim;
	io_victim_note_path(AT_FDCWD, path, 0, true, &victim);
	int r = REAL(remove)(path);
	if (r == 0)
		io_victim_gone(&victim);
	agent_leave();
	return r;
}

/* A rename over an existing file unlinks the old one (§4.4). */
DECLARE_REAL(int, rename, (const char *, const char *));
EXPORT int rename(const char *from, const char *to)
{
	RESOLVE(rename);
	if (!agent_enter_file())
		return REAL(rename)(from, to);
	struct io_victim victim;
	io_victim_note_path(AT_FDCWD, to, 0, true, &victim);
	int r = REAL(rename)(from, to);
	if (r == 0)
		io_victim_gone(&victim);
	agent_leave();
	return r;
}

DECLARE_REAL(int, renameat, (int, const char *, int, const char *));
EXPORT int renameat(int fromfd, const char *from, int tofd, const char *to)
{
	RESOLVE(renameat);
	if (!agent_enter_file())
		return REAL(renameat)(fromfd, from, tofd, to);
	struct io_victim victim;
	io_victim_note_path(tofd, to, 0, true, &victim);
	int r = REAL(renameat)(fromfd, from, tofd, to);
	if (r == 0)
		io_victim_gone(&victim);
	agent_leave();
	return r;
}

DECLARE_REAL(int, renameat2, (int, const char *, int, const char *, unsigned));
EXPORT int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags)
{
	RESOLVE(renameat2);
	if (!agent_enter_file())
		return REAL(renameat2)(fromfd, from, tofd, to, flags);
	struct io_victim victim = { 0, 0, 0, 0, 0 };
	if (!(flags & (RENAME_EXCHANGE | RENAME_NOREPLACE)))
		io_victim_note_path(tofd, to, 0, true, &victim);
	int r = REAL(renameat2)(fromfd, from, tofd, to, flags);
	if (r == 0)
		io_victim_gone(&victim);
	agent_leave();
	return r;
}

#define WRAP_FSYNC(sym) \
	DECLARE_REAL(int, sym, (int)); \
	EXPORT int sym(int fd) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_file()) \
			return REAL(sym)(fd); \
		int r = REAL(sym)(fd); \
		if (r == 0) \
			io_synced_fd(fd); \
		agent_leave(); \
		return r; \
	}
WRAP_FSYNC(fsync)
WRAP_FSYNC(fdatasync)

/* A --exec run ends with its job, which may leave without exit()
 * (agent.c, agent_exit_now). */
#define WRAP_EXIT(sym) \
	DECLARE_REAL(void, sym, (int)); \
	EXPORT __attribute__((noreturn)) void sym(int status) \
	{ \
		RESOLVE(sym); \
		agent_exit_now(); \
		REAL(sym)(status); \
		for (;;) \
			syscall(SYS_exit_group, status); \
	}
WRAP_EXIT(_exit)
WRAP_EXIT(_Exit)

/* The sanitizer build (make integration-asan): ASan's own longjmp, which
 * clears the shadow of the frames a jump leaves, is behind ours, which
 * calls glibc's: so ours clears it, or the next calls' locals where those
 * frames were are reported as overflows. */
#if defined(__SANITIZE_ADDRESS__)
#define AGENT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AGENT_ASAN 1
#endif
#endif
#ifdef AGENT_ASAN
#include <sanitizer/asan_interface.h>
#define LEAVING_FRAMES() __asan_handle_no_return()
#else
#define LEAVING_FRAMES() ((void)0)
#endif

/* A signal handler that leaves by a long jump from the agent's sleep never
 * returns into it: end that call first (agent.h, agent_left_by_jump).  In
 * glibc longjmp and siglongjmp are one function, _longjmp too;
 * __longjmp_chk is the _FORTIFY_SOURCE entry. */
#define WRAP_LONGJMP(sym) \
	DECLARE_REAL(void, sym, (struct __jmp_buf_tag[1], int)); \
	EXPORT __attribute__((noreturn)) void sym(struct __jmp_buf_tag env[1], int val) \
	{ \
		RESOLVE(sym); \
		agent_left_by_jump(); \
		LEAVING_FRAMES(); \
		REAL(sym)(env, val); \
		__builtin_unreachable(); \
	}
WRAP_LONGJMP(longjmp)
WRAP_LONGJMP(_longjmp)
WRAP_LONGJMP(siglongjmp)
WRAP_LONGJMP(__longjmp_chk)

DECLARE_REAL(void, sync, (void));
EXPORT void sync(void)
{
	RESOLVE(sync);
	if (!agent_enter_file()) {
		REAL(sync)();
		return;
	}
	REAL(sync)();
	io_synced_all();
	agent_leave();
}

DECLARE_REAL(int, syncfs, (int));
EXPORT int syncfs(int fd)
{
	RESOLVE(syncfs);
	if (!agent_enter_file())
		return REAL(syncfs)(fd);
	int r = REAL(syncfs)(fd);
	if (r == 0)
		io_synced_all(); /* one filesystem, but a job rarely spans two */
	agent_leave();
	return r;
}

/* ---- advice and explicit readahead ---------------------------------- */

#define WRAP_FADVISE(sym) \
	DECLARE_REAL(int, sym, (int, off_t, off_t, int)); \
	EXPORT int sym(int fd, off_t offset, off_t len, int advice) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_disk_fd(fd)) \
			return REAL(sym)(fd, offset, len, advice); \
		if (advice == POSIX_FADV_WILLNEED) \
			io_before_willneed(fd, offset, len); \
		int r = REAL(sym)(fd, offset, len, advice); \
		if (r == 0) \
			io_advised(fd, offset, len, advice); \
		agent_leave(); \
		return r; \
	}
WRAP_FADVISE(posix_fadvise)
WRAP_FADVISE(posix_fadvise64)

DECLARE_REAL(ssize_t, readahead, (int, off64_t, size_t));
EXPORT ssize_t readahead(int fd, off64_t offset, size_t count)
{
	RESOLVE(readahead);
	if (!agent_enter_disk_fd(fd))
		return REAL(readahead)(fd, offset, count);
	io_before_willneed(fd, offset, (off_t)count);
	ssize_t r = REAL(readahead)(fd, offset, count);
	agent_leave();
	return r;
}

/* ---- directories ---------------------------------------------------- */

#define WRAP_READDIR(sym, type) \
	DECLARE_REAL(type *, sym, (DIR *)); \
	EXPORT type *sym(DIR *dir) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_data()) \
			return REAL(sym)(dir); \
		uint64_t start = clock_now_ns(); \
		type *entry = REAL(sym)(dir); \
		if (entry) { \
			int saved_ = errno; \
			io_dir_read(dirfd(dir), start, 4096, -1); \
			errno = saved_; \
		} \
		agent_leave(); \
		return entry; \
	}
WRAP_READDIR(readdir, struct dirent)
WRAP_READDIR(readdir64, struct dirent64)

DECLARE_REAL(ssize_t, getdents64, (int, void *, size_t));
EXPORT ssize_t getdents64(int fd, void *buf, size_t count)
{
	RESOLVE(getdents64);
	if (!agent_enter_data())
		return REAL(getdents64)(fd, buf, count);
	struct rusage before, after;
	int have = getrusage(RUSAGE_THREAD, &before) == 0;
	uint64_t start = clock_now_ns();
	ssize_t r = REAL(getdents64)(fd, buf, count);
	if (r > 0) {
		int saved = errno;
		int64_t measured = have && getrusage(RUSAGE_THREAD, &after) == 0
					   ? (int64_t)(after.ru_inblock - before.ru_inblock) * 512 : -1;
		io_dir_read(fd, start, (long)r, measured);
		errno = saved;
	}
	agent_leave();
	return r;
}

/* ---- mmap ----------------------------------------------------------- */

#define WRAP_MMAP(sym) \
	DECLARE_REAL(void *, sym, (void *, size_t, int, int, int, off_t)); \
	EXPORT void *sym(void *addr, size_t length, int prot, int flags, int fd, off_t offset) \
	{ \
		RESOLVE(sym); \
		if ((flags & MAP_ANONYMOUS) || fd < 0 || !agent_enter_data()) \
			return REAL(sym)(addr, length, prot, flags, fd, offset); \
		void *p = REAL(sym)(addr, length, prot, flags, fd, offset); \
		if (p != MAP_FAILED) \
			io_mapped(fd, length, prot); \
		agent_leave(); \
		return p; \
	}
WRAP_MMAP(mmap)
WRAP_MMAP(mmap64)

/* ---- new processes -------------------------------------------------- */

/*
 * vfork: the child runs on our stack, in our memory, with our TLS, until it
 * execs or exits - Python's subprocess, posix_spawn-like code and shells
 * do their dup2/close/close_range there - while the kernel holds this
 * thread.  Its fd table is its own, so none of that may reach our tables
 * (issue #8 item 3).  No C wrapper can call vfork and return: the child
 * would return through, and overwrite, the very frame the parent resumes
 * in.  So a few instructions mark this thread's guard word VFORKED and
 * jump to the real vfork, leaving the caller's frame untouched; agent_enter()
 * tells the parent (own pid) from the child afterwards.  Before start-up
 * (no real vfork known yet) it is fork, which POSIX allows vfork to be.
 */
#if defined(__x86_64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork, @function\n"
	".globl __vfork\n"
	".type __vfork, @function\n"
	".p2align 4\n"
	"vfork:\n"
	"__vfork:\n"
	"	endbr64\n"
	"	movq agent_guard@gottpoff(%rip), %rax\n"
	"	movl $2, %fs:(%rax)\n" /* AGENT_GUARD_VFORKED */
	"	movq agent_real_vfork(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	jz 1f\n"
	"	jmp *%rax\n"
	"1:	jmp fork@PLT\n"
	".size vfork, .-vfork\n"
	".size __vfork, .-__vfork\n");
_Static_assert(AGENT_GUARD_VFORKED == 2, "the assembly above stores 2");
#endif

/* clone(2), glibc's wrapper: agent_clone() keeps a CLONE_VM child out of
 * our tables and runs the fork handlers around a fork-like child.  The
 * optional arguments are passed on as they came: the real clone reads only
 * those its flags name. */
DECLARE_REAL(int, clone, (int (*)(void *), void *, int, void *, ...));
EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	pid_t *ptid = va_arg(ap, pid_t *);
	void *tls = va_arg(ap, void *);
	pid_t *ctid = va_arg(ap, pid_t *);
	va_end(ap);
	RESOLVE(clone);
	if ((flags & CLONE_THREAD) || !agent_enter())
		return REAL(clone)(fn, stack, flags, arg, ptid, tls, ctid);
	agent_leave(); /* the fork handlers take the guard themselves */
	return agent_clone(REAL(clone), fn, stack, flags, arg, ptid, tls, ctid);
}

/* ---- stdio ---------------------------------------------------------- */
/* Input: predicted before the call when the buffer must be refilled.
 * Output: booked after the call from how far the buffer drained. */

/* glibc may define these as macros for optimised callers. */
#undef fread_unlocked
#undef fwrite_unlocked
#undef fgets_unlocked
#undef fputs_unlocked
#undef getc
#undef putc

#define STDIO_READ_BEGIN(fp, want) \
	struct io_stdio_state st_; \
	io_stdio_before_read((fp), (want), &st_)
/* After the call: what the kernel read beyond the model's word (the probe
 * backend's check, io_read.c io_unseen_settle()). */
#define STDIO_READ_END() io_stdio_after_read(&st_)

DECLARE_REAL(size_t, fread, (void *, size_t, size_t, FILE *));
EXPORT size_t fread(void *ptr, size_t size, size_t n, FILE *fp)
{
	RESOLVE(fread);
	if (!agent_enter_data())
		return REAL(fread)(ptr, size, n, fp);
	STDIO_READ_BEGIN(fp, size * n);
	size_t r = REAL(fread)(ptr, size, n, fp);
	STDIO_READ_END();
	agent_leave();
	return r;
}

DECLARE_REAL(size_t, fread_unlocked, (void *, size_t, size_t, FILE *));
EXPORT size_t fread_unlocked(void *ptr, size_t size, size_t n, FILE *fp)
{
	RESOLVE(fread_unlocked);
	if (!agent_enter_data())
		return REAL(fread_unlocked)(ptr, size, n, fp);
	STDIO_READ_BEGIN(fp, size * n);
	size_t r = REAL(fread_unlocked)(ptr, size, n, fp);
	STDIO_READ_END();
	agent_leave();
	return r;
}

/* bits/stdio2.h's checking variants: glibc's __fread_chk calls its
 * internal _IO_sgetn, not our fread.  An overflowing size * n, or more than
 * the buffer holds, is glibc's to abort on, untouched. */
#define WRAP_FREAD_CHK(sym) \
	DECLARE_REAL(size_t, sym, (void *, size_t, size_t, size_t, FILE *)); \
	EXPORT size_t sym(void *ptr, size_t ptrlen, size_t size, size_t n, FILE *fp) \
	{ \
		RESOLVE(sym); \
		size_t want; \
		if (__builtin_mul_overflow(size, n, &want) || want > ptrlen || \
		    !agent_enter_data()) \
			return REAL(sym)(ptr, ptrlen, size, n, fp); \
		STDIO_READ_BEGIN(fp, want); \
		size_t r = REAL(sym)(ptr, ptrlen, size, n, fp); \
		STDIO_READ_END(); \
		agent_leave(); \
		return r; \
	}
WRAP_FREAD_CHK(__fread_chk)
WRAP_FREAD_CHK(__fread_unlocked_chk)

#define WRAP_FGETS_CHK(sym) \
	DECLARE_REAL(char *, sym, (char *, size_t, int, FILE *)); \
	EXPORT char *sym(char *s, size_t buflen, int size, FILE *fp) \
	{ \
		RESOLVE(sym); \
		if ((size_t)size > buflen || !agent_enter_data()) \
			return REAL(sym)(s, buflen, size, fp); \
		STDIO_READ_BEGIN(fp, 0); \
		char *r = REAL(sym)(s, buflen, size, fp); \
		STDIO_READ_END(); \
		agent_leave(); \
		return r; \
	}
WRAP_FGETS_CHK(__fgets_chk)
WRAP_FGETS_CHK(__fgets_unlocked_chk)

#define WRAP_FGETS(sym) \
	DECLARE_REAL(char *, sym, (char *, int, FILE *)); \
	EXPORT char *sym(char *s, int size, FILE *fp) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_data()) \
			return REAL(sym)(s, size, fp); \
		STDIO_READ_BEGIN(fp, 0); \
		char *r = REAL(sym)(s, size, fp); \
		STDIO_READ_END(); \
		agent_leave(); \
		return r; \
	}
WRAP_FGETS(fgets)
WRAP_FGETS(fgets_unlocked)

#define WRAP_GETDELIM(sym) \
	DECLARE_REAL(ssize_t, sym, (char **, size_t *, int, FILE *)); \
	EXPORT ssize_t sym(char **line, size_t *n, int delim, FILE *fp) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_data()) \
			return REAL(sym)(line, n, delim, fp); \
		STDIO_READ_BEGIN(fp, 0); \
		ssize_t r = REAL(sym)(line, n, delim, fp); \
		STDIO_READ_END(); \
		agent_leave(); \
		return r; \
	}
WRAP_GETDELIM(getdelim)
WRAP_GETDELIM(__getdelim)

DECLARE_REAL(ssize_t, getline, (char **, size_t *, FILE *));
EXPORT ssize_t getline(char **line, size_t *n, FILE *fp)
{
	RESOLVE(getline);
	if (!agent_enter_data())
		return REAL(getline)(line, n, fp);
	STDIO_READ_BEGIN(fp, 0);
	ssize_t r = REAL(getline)(line, n, fp);
	STDIO_READ_END();
	agent_leave();
	return r;
}

/* One character: fgetc, getc, and the slow paths __uflow/__underflow that
 * the inline getc_unlocked() of programs calls when the buffer is empty. */
#define WRAP_GETCHAR(sym) \
	DECLARE_REAL(int, sym, (FILE *)); \
	EXPORT int sym(FILE *fp) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_data()) \
			return REAL(sym)(fp); \
		STDIO_READ_BEGIN(fp, 1); \
		int r = REAL(sym)(fp); \
		STDIO_READ_END(); \
		agent_leave(); \
		return r; \
	}
WRAP_GETCHAR(fgetc)
WRAP_GETCHAR(getc)
WRAP_GETCHAR(_IO_getc)
WRAP_GETCHAR(__uflow)
WRAP_GETCHAR(__underflow)

#define STDIO_WRITE(fp, call, added_expr) \
	struct io_stdio_state st_; \
	io_stdio_before_write((fp), &st_); \
	__typeof__(call) r = (call); \
	io_stdio_after_write((fp), &st_, (added_expr)); \
	agent_leave(); \
	return r

#define WRAP_FWRITE(sym) \
	DECLARE_REAL(size_t, sym, (const void *, size_t, size_t, FILE *)); \
	EXPORT size_t sym(const void *ptr, size_t size, size_t n, FILE *fp) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_data()) \
			return REAL(sym)(ptr, size, n, fp); \
		STDIO_WRITE(fp, REAL(sym)(ptr, size, n, fp), (long long)(r * size)); \
	}
WRAP_FWRITE(fwrite)
WRAP_FWRITE(fwrite_unlocked)

#define WRAP_FPUTS(sym) \
	DECLARE_REAL(int, sym, (const char *, FILE *)); \
	EXPORT int sym(const char *s, FILE *fp) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_data()) \
			return REAL(sym)(s, fp); \
		STDIO_WRITE(fp, REAL(sym)(s, fp), r >= 0 ? (long long)strlen(s) : 0); \
	}
WRAP_FPUTS(fputs)
WRAP_FPUTS(fputs_unlocked)

#define WRAP_PUTCHAR(sym) \
	DECLARE_REAL(int, sym, (int, FILE *)); \
	EXPORT int sym(int ch, FILE *fp) \
	{ \
		RESOLVE(sym); \
		if (!agent_enter_data()) \
			return REAL(sym)(ch, fp); \
		STDIO_WRITE(fp, REAL(sym)(ch, fp), r != EOF ? 1 : 0); \
	}
WRAP_PUTCHAR(fputc)
WRAP_PUTCHAR(putc)
WRAP_PUTCHAR(_IO_putc)

/* __overflow(fp, ch): the inline putc_unlocked()'s flush path. */
DECLARE_REAL(int, __overflow, (FILE *, int));
EXPORT int __overflow(FILE *fp, int ch)
{
	RESOLVE(__overflow);
	if (!agent_enter_data())
		return REAL(__overflow)(fp, ch);
	STDIO_WRITE(fp, REAL(__overflow)(fp, ch), r != EOF && ch != EOF ? 1 : 0);
}

DECLARE_REAL(int, puts, (const char *));
EXPORT int puts(const char *s)
{
	RESOLVE(puts);
	if (!agent_enter_data())
		return REAL(puts)(s);
	STDIO_WRITE(stdout, REAL(puts)(s), r >= 0 ? (long long)strlen(s) + 1 : 0);
}

DECLARE_REAL(int, putchar, (int));
EXPORT int putchar(int ch)
{
	RESOLVE(putchar);
	if (!agent_enter_data())
		return REAL(putchar)(ch);
	STDIO_WRITE(stdout, REAL(putchar)(ch), r != EOF ? 1 : 0);
}

DECLARE_REAL(int, vfprintf, (FILE *, const char *, va_list));
EXPORT int vfprintf(FILE *fp, const char *fmt, va_list ap)
{
	RESOLVE(vfprintf);
	if (!agent_enter_data())
		return REAL(vfprintf)(fp, fmt, ap);
	STDIO_WRITE(fp, REAL(vfprintf)(fp, fmt, ap), (long long)r);
}

EXPORT int fprintf(FILE *fp, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vfprintf(fp, fmt, ap);
	va_end(ap);
	return r;
}

EXPORT int vprintf(const char *fmt, va_list ap)
{
	return vfprintf(stdout, fmt, ap);
}

EXPORT int printf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vfprintf(stdout, fmt, ap);
	va_end(ap);
	return r;
}

DECLARE_REAL(int, __vfprintf_chk, (FILE *, int, const char *, va_list));
EXPORT int __vfprintf_chk(FILE *fp, int flag, const char *fmt, va_list ap)
{
	RESOLVE(__vfprintf_chk);
	if (!agent_enter_data())
		return REAL(__vfprintf_chk)(fp, flag, fmt, ap);
	STDIO_WRITE(fp, REAL(__vfprintf_chk)(fp, flag, fmt, ap), (long long)r);
}

EXPORT int __fprintf_chk(FILE *fp, int flag, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = __vfprintf_chk(fp, flag, fmt, ap);
	va_end(ap);
	return r;
}

EXPORT int __vprintf_chk(int flag, const char *fmt, va_list ap)
{
	return __vfprintf_chk(stdout, flag, fmt, ap);
}

EXPORT int __printf_chk(int flag, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = __vfprintf_chk(stdout, flag, fmt, ap);
	va_end(ap);
	return r;
}

/* dprintf and vdprintf, and the _chk forms _FORTIFY_SOURCE makes of them.
 * glibc formats into a FILE of its own on the fd and writes with its
 * internal __write (libio/iovdprintf.c), which no write() hook sees.  On
 * a watched fd the text is formatted here (with the same checks: flag >= 0
 * is __vsnprintf_chk's) and written through io_write: the same bytes, in
 * as many write calls as it takes, and the count, or -1 with the failing
 * write's errno, as glibc returns them (_IO_new_file_write stops at the
 * first error, EINTR included).  A format that fails (EOVERFLOW, EILSEQ)
 * or a buffer that cannot be had has written nothing yet, so the real
 * call then runs as it would have: unregulated, never wrong.  (The
 * format is evaluated twice then, so are its arguments' side effects -
 * none: vsnprintf's only one, %n, stores the same count again.) */
static int format_into(char *buf, size_t size, int flag, const char *fmt, va_list ap)
{
	return flag < 0 ? vsnprintf(buf, size, fmt, ap)
			: __vsnprintf_chk(buf, size, flag, size, fmt, ap);
}

static int dprintf_through_io(int fd, int flag, const char *fmt, va_list ap, bool *done)
{
	int saved_on_entry = errno;
	char stack[4096];
	char *buf = stack;
	va_list again;
	va_copy(again, ap);
	int n = format_into(stack, sizeof stack, flag, fmt, again);
	va_end(again);
	*done = false;
	if (n < 0) {
		errno = saved_on_entry;
		return n;
	}
	/* Longer text goes to an mmap'ed buffer: the agent never mallocs
	 * (a hook may run where malloc is unsafe, open_file.c). */
	size_t mapped = 0;
	if ((size_t)n >= sizeof stack) {
		mapped = (size_t)n + 1;
		buf = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (buf == MAP_FAILED) {
			errno = saved_on_entry;
			return -1;
		}
		va_copy(again, ap);
		int m = format_into(buf, mapped, flag, fmt, again);
		va_end(again);
		if (m != n) {
			munmap(buf, mapped);
			errno = saved_on_entry;
			return -1;
		}
	}
	*done = true;
	int saved = errno;
	int result = n;
	for (size_t at = 0; at < (size_t)n;) {
		ssize_t w = io_write(fd, buf + at, (size_t)n - at, NULL);
		if (w < 0) {
			saved = errno;
			result = -1;
			break;
		}
		at += (size_t)w;
	}
	if (mapped)
		munmap(buf, mapped);
	errno = saved;
	return result;
}

DECLARE_REAL(int, vdprintf, (int, const char *, va_list));
EXPORT int vdprintf(int fd, const char *fmt, va_list ap)
{
	RESOLVE(vdprintf);
	if (!agent_enter_fd(fd))
		return REAL(vdprintf)(fd, fmt, ap);
	bool done;
	int r = dprintf_through_io(fd, -1, fmt, ap, &done);
	agent_leave();
	return done ? r : REAL(vdprintf)(fd, fmt, ap);
}

EXPORT int dprintf(int fd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vdprintf(fd, fmt, ap);
	va_end(ap);
	return r;
}

DECLARE_REAL(int, __vdprintf_chk, (int, int, const char *, va_list));
EXPORT int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
	RESOLVE(__vdprintf_chk);
	if (!agent_enter_fd(fd))
		return REAL(__vdprintf_chk)(fd, flag, fmt, ap);
	bool done;
	int r = dprintf_through_io(fd, flag, fmt, ap, &done);
	agent_leave();
	return done ? r : REAL(__vdprintf_chk)(fd, flag, fmt, ap);
}

EXPORT int __dprintf_chk(int fd, int flag, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = __vdprintf_chk(fd, flag, fmt, ap);
	va_end(ap);
	return r;
}

#define WRAP_FFLUSH(sym) \
	DECLARE_REAL(int, sym, (FILE *)); \
	EXPORT int sym(FILE *fp) \
	{ \
		RESOLVE(sym); \
		if (!fp || !agent_enter_data()) \
			return REAL(sym)(fp); \
		STDIO_WRITE(fp, REAL(sym)(fp), 0); \
	}
WRAP_FFLUSH(fflush)
WRAP_FFLUSH(fflush_unlocked)

DECLARE_REAL(int, fclose, (FILE *));
EXPORT int fclose(FILE *fp)
{
	RESOLVE(fclose);
	if (!agent_enter_file())
		return REAL(fclose)(fp);
	struct io_stdio_state st;
	io_stdio_before_close(fp, &st);
	int r = REAL(fclose)(fp);
	io_stdio_after_close(&st);
	agent_leave();
	return r;
}
