/*
 * io.h - the path of one intercepted call (see agent.h for the layers).
 *
 * Each io_* function is called by its wrapper in interpose.c inside the
 * re-entry guard, does prediction -> throttle -> the real call ->
 * bookkeeping, and returns exactly what the real call returned, with the
 * real call's errno.
 */
#ifndef DISCNICE_IO_H
#define DISCNICE_IO_H

#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

int io_init(void);
void io_before_fork(void);
void io_after_fork(bool child);

/* offset NULL: use and advance the file offset (read/readv), else at
 * *offset (pread/preadv; the caller has rejected negative offsets). */
ssize_t io_read(int fd, void *buf, size_t count, const off_t *offset);
ssize_t io_write(int fd, const void *buf, size_t count, const off_t *offset);
ssize_t io_readv(int fd, const struct iovec *iov, int iovcnt, const off_t *offset, int flags);
ssize_t io_writev(int fd, const struct iovec *iov, int iovcnt, const off_t *offset, int flags);

/* Kernel-side copies: either end may be a disk file. */
ssize_t io_sendfile(int out_fd, int in_fd, off_t *offset, size_t count);
ssize_t io_copy_file_range(int in_fd, off_t *off_in, int out_fd, off_t *off_out, size_t len,
			   unsigned flags);
ssize_t io_splice(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len,
		  unsigned flags);

/* Sockets (io_net.c; rate-windows §5): the calls only sockets make.
 * Each takes the fd to libc untouched when it is not a policed socket. */
ssize_t io_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to,
		  socklen_t tolen);
ssize_t io_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
		    socklen_t *fromlen);
ssize_t io_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t io_recvmsg(int fd, struct msghdr *msg, int flags);
int io_sendmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags);
int io_recvmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags, struct timespec *timeout);
/* The waits of event loops (poll, select, epoll_wait): before the real
 * call, wait off what this thread's non-blocking socket calls left owing,
 * for at most *timeout_ns (-1: no limit; 0: never wait), which is reduced
 * by the time waited, under the wait's own signal mask if it has one
 * (ppoll, pselect, epoll_pwait: sigmask; NULL = the thread's).  -1 with
 * errno EINTR if a signal handler ran meanwhile (as the real wait would
 * say), else 0. */
int io_net_before_wait(int64_t *timeout_ns, const sigset_t *sigmask);
/* epoll_ctl succeeded: remember the program's event for fd in epfd.  And
 * before the real epoll_wait on epfd: re-arm the fds this thread's calls
 * refused (EPOLL_CTL_MOD with that event), so epoll reports them again. */
struct epoll_event;
void io_net_epoll_ctl(int epfd, int op, int fd, const struct epoll_event *event);
void io_net_rearm(int epfd);
/* fork: the child's network lock starts free, with nothing owed. */
void io_net_after_fork_child(void);
/* The calling thread left a call by a long jump (agent_left_by_jump):
 * close the socket duplicates its calls held. */
void io_net_thread_left(void);
/* fd is being closed: its epoll registration and refusal go with it (a
 * new socket that takes the number is not the old one). */
void io_net_closed(int fd);

/* Bookkeeping around calls that do not move data themselves. */
void io_opened(int fd, int flags);
int io_close(int fd);
void io_dup(int oldfd, int newfd);
/* fcntl(F_SETFL) succeeded: O_APPEND or O_DIRECT may have changed. */
void io_flags_set(int fd, int flags);
void io_seeked(int fd, off_t result);
void io_advised(int fd, off_t offset, off_t len, int advice);
/* posix_fadvise WILLNEED and readahead(2) read from disk: charge first. */
void io_before_willneed(int fd, off_t offset, off_t len);
/* Calls that cancel delayed writes (truncate, O_TRUNC, unlink, rename
 * over a file): note the victim's dirty pages before the call, book the
 * cancellation after it succeeded. */
struct io_victim {
	int valid;
	unsigned long long dev, ino;
	uint64_t first_page;   /* pages from here on are cancelled       */
	uint64_t dirty_pages;  /* how many of them are dirty right now   */
};
void io_victim_note_fd(int fd, uint64_t new_size, struct io_victim *victim);
/* unlinking: only the last link's removal frees the pages. */
void io_victim_note_path(int dirfd, const char *path, uint64_t new_size, bool unlinking,
			 struct io_victim *victim);
void io_victim_truncated(const struct io_victim *victim, uint64_t new_size);
void io_truncated_fd(int fd, const struct io_victim *victim, uint64_t new_size);
void io_victim_gone(const struct io_victim *victim);
void io_synced_fd(int fd);
void io_synced_all(void);
void io_mapped(int fd, size_t length, int prot);
/* Directory reads: charged after the fact when the kernel went to disk;
 * measured_bytes < 0 when unknown (readdir), else what getrusage saw. */
void io_dir_read(int fd, uint64_t started_ns, long bytes, int64_t measured_bytes);

/* What the kernel read for a call beyond the model's word: the probe
 * backend's check (io_read.c io_unseen_settle()). */
struct io_unseen_check {
	bool on;
	uint64_t inblock;       /* the thread's read blocks before the call */
	uint64_t expected;      /* bytes the call itself was to read        */
};

/* Predict, throttle and book one read/write the caller cannot route
 * through io_read/io_write (stdio's internal buffer traffic). */
void io_charge_read_at(int fd, uint64_t pos, uint64_t count, const char *op,
		       struct io_unseen_check *unseen);
uint64_t io_unseen_settle(int fd, const struct io_unseen_check *unseen); /* ns slept */
void io_charge_write_at(int fd, uint64_t pos, uint64_t count, const char *op);

/* stdio (io_stdio.c): before/after pairs around the real call. */
struct io_stdio_state {
	int fd;
	long long pending;      /* unflushed output bytes before the call */
	long long kernel_pos;   /* kernel offset before, for reads        */
	struct io_unseen_check unseen;
};
int io_stdio_before_read(FILE *fp, size_t want, struct io_stdio_state *st);
void io_stdio_after_read(const struct io_stdio_state *st);
int io_stdio_before_write(FILE *fp, struct io_stdio_state *st);
void io_stdio_after_write(FILE *fp, const struct io_stdio_state *st, long long added);
int io_stdio_before_close(FILE *fp, struct io_stdio_state *st);
void io_stdio_after_close(const struct io_stdio_state *st);

#endif
