/*
 * io_net.c - the path of a socket call: network I/O policing (rate-windows
 * §5) under the class's network caps (segment.h net_caps, net_window),
 * independent of the disk's.  No prediction is needed: "there is no
 * analogue to the file buffer cache or read ahead" (§5) - a socket's
 * bytes are the bytes the call moves.
 *
 * Which sockets: TCP and UDP (any stream or datagram socket) over IPv4 and
 * IPv6; AF_UNIX only under --net-unix (open_file.c classify_socket).  Each
 * fd is classified once, by getsockopt(SO_DOMAIN, SO_TYPE), and the answer
 * kept in the open-file table like a disk file's.
 *
 * Sends are charged before the call (the window decides when they may
 * go), receives after it (only then is the count known).
 *
 *   Stream sends are cut into pieces of an eighth of the window's budget
 *   (throttle_net_piece): the paper's "break the I/O into multiple pieces
 *   and spread the total delay over the pieces ... TCP provides a
 *   byte-oriented stream" (§3.2).  A blocking send returns the full count,
 *   as it would have; only a signal handler that runs while the agent
 *   sleeps between pieces ends it early with the count sent so far, which
 *   is what tcp_sendmsg() returns when a signal interrupts a blocking send
 *   that has copied some bytes (sk_stream_wait_memory -> -EINTR, "copied"
 *   wins).  Pieces after the first go with MSG_NOSIGNAL, and not once
 *   the connection has failed (socket_failed()): a reset met mid-call
 *   gives the count so far and no SIGPIPE, as one kernel call would, and
 *   the program's next send gets ECONNRESET, then EPIPE and SIGPIPE.
 *   MSG_OOB sends are never cut (only the last byte is urgent).
 *
 *   Datagrams (UDP, SEQPACKET) are delayed whole and never split: a
 *   datagram is the unit the program chose ("for UDP this is not a
 *   problem since the max user level request is constrained by the
 *   network's MTU", §3.2 footnote).  sendmsg, sendmmsg and writev are
 *   delayed whole too when they block, on streams as well: their iovecs
 *   are the program's and not rewritten (a burst of at most one call's
 *   bytes).  Non-blocking ones on a stream move at most one piece
 *   (nonblocking_send_cut()).
 *
 *   Stream receives ask the kernel for at most one piece (a stream read
 *   may always return less than asked, and every reader loops), then pay
 *   for what came: the thread sleeps after the call until the window
 *   takes the bytes.  Meanwhile it does not read, the socket's receive
 *   queue fills, and TCP's flow control slows the sender: the cap holds
 *   at the sender's side of the link too.  Capping the length, rather than
 *   only charging after, keeps one call from swallowing megabytes of an
 *   autotuned receive buffer and then sleeping for seconds.  MSG_WAITALL
 *   is honoured piece by piece (the full count, unless the kernel's own
 *   call would have stopped short).  MSG_PEEK takes nothing from the
 *   queue and is not charged.  readv and recvmsg (but with MSG_WAITALL)
 *   are cut to a piece too (iov_cut); recvmmsg to the messages a piece
 *   holds (at least one), each charged after.
 *
 * Non-blocking sockets (O_NONBLOCK, or MSG_DONTWAIT for one call; issue
 * #12 item 4).  The agent never sleeps in a non-blocking call.  When the
 * window has room the call goes (a stream send or receive moves at most
 * one piece: a short count, which non-blocking callers handle by
 * contract), charged at once.  When it has none - no room for a send's
 * first piece, or for what a receive would take (receive_may_go) - the
 * call returns EAGAIN without touching the socket; so do sendfile and
 * splice to a non-blocking socket, and splice from one
 * (io_net_copy_begin).  A debt alone would not do: a loop that sends
 * until EAGAIN never reaches its wait while the kernel's buffer
 * (megabytes, autotuned) takes everything, and would never be held.
 * Where the refused fd could not be kept for re-arming (64 in epoll sets
 * already), the call goes and its charge is owed (may_refuse).
 *
 * That EAGAIN is one the kernel did not give, so the readiness APIs would
 * lie about the socket: a level-triggered loop would be told "writable"
 * at once and spin, and an edge-triggered one (EPOLLET) would wait for an
 * edge that never comes, the socket's state having not changed.  So:
 *   - the next wait of any thread of the process - poll, ppoll, select,
 *     pselect, epoll_wait, epoll_pwait, epoll_pwait2 with a timeout other
 *     than 0 - first
 *     sleeps until the window has room (at most that timeout, and under
 *     the signal mask the call gives its wait: io_net_before_wait), so
 *     the readiness it then reports is true for the window as well: no
 *     spin;
 *   - an fd refused that way is re-armed in the epoll set the program
 *     registered it in (epoll_ctl(EPOLL_CTL_MOD) with the program's own
 *     event, recorded by the epoll_ctl hook: io_net_epoll_ctl), which
 *     makes epoll check its readiness again and report it, edge-triggered
 *     or one-shot alike (ep_modify() re-queues a ready item).
 * The event loop's wait is lengthened by at most the time until one piece
 * fits, which delays the thread's other events by as much.  Not covered:
 * a loop that never waits (busy polling, timeouts of 0) spins on the
 * EAGAINs as it would on a full buffer; an fd in two epoll sets is
 * re-armed only in the last one registered; io_uring.
 *
 * Socket timeouts (SO_SNDTIMEO, SO_RCVTIMEO on a blocking socket).  The
 * program expects its call back within the timeout, so the agent never
 * sleeps past it, counted from the start of the call (socket_timeout_ns
 * asks it when the agent would sleep).  A send at its timeout returns the
 * count so far, or -1/EAGAIN with nothing sent: tcp_sendmsg() when
 * sk_stream_wait_memory() runs out of timeo says -EAGAIN, and "copied"
 * wins.  A handler during that sleep gives EINTR (or the count so far):
 * sock_intr_errno() restarts no socket call that has a timeout.  A
 * receive's sleep after the call is cut at the timeout, the rest charged
 * at once - the bytes are taken and their count is the program's - and
 * that debt is waited off before the socket's next receive, within that
 * call's timeout; when the window still has no room for what the socket
 * holds, -1/EAGAIN, which is tcp_recvmsg()'s answer when timeo runs out
 * with nothing copied (receive_may_go).  So the cap holds at any timeout.
 * Not bounded: the kernel's own wait within one piece of a send (each
 * piece is a call with the full timeout), and the charge after the
 * receive end of splice (its wait for room before is).
 *
 * The scavenger (--net-policy scavenger; issue #12 item 6).  No new path:
 * its rate is one more send cap on the same window (segment.h
 * segment_net_caps_now), so blocking sends sleep and non-blocking ones get
 * the EAGAIN + wait above; after every send settle_send() hands the socket to
 * net_delay.c, which samples its TCP_INFO queueing delay into the
 * controller (src/policy/scavenger.c) that moves the rate.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/io.h"
#include "agent/io_internal.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "agent/spin.h"
#include "common/clock.h"
#include "common/private_fd.h"

/*
 * Non-blocking calls refused (EAGAIN), by any thread of the process: in
 * which directions, paid at the next wait of any thread while the window
 * has no room (io_net_before_wait), and on which fds, re-armed in their
 * epoll sets by a thread that waits on those (io_net_rearm).  Process-
 * wide, not per thread: where one thread sends and another polls, the
 * poller never waited and never re-armed (an edge-triggered one timed out
 * at every wait; a level-triggered one spun, 1.3 s of CPU in 2 s).  A
 * debt is settled by a wait that found room or slept until there was;
 * one owed after that wait looked (the generation moved) stays for the
 * next.  Under net_lock, never held across a system call.
 */
enum { OWED_RECV = 1, OWED_SEND = 2, REFUSED_FDS = 64 };
/* An fd and the thread it is for: the one refused (a one-shot fd is
 * its alone), or the one whose call holds the duplicate. */
struct thread_fd {
	int fd;
	pid_t tid;
};
static uint32_t net_lock;
static unsigned net_owed;
static uint64_t net_owed_generation;
/* When the debt is paid (CLOCK_MONOTONIC ns; 0: not reckoned yet): the
 * first wait to look reckons it from the window then, and every wait
 * sleeps at most until then - once due it is settled, whatever other
 * traffic of the class has taken from the window meanwhile. */
static uint64_t net_debt_due_ns;
static struct thread_fd net_refused[REFUSED_FDS];
static unsigned net_refused_count;
/* How much room the last refused receive asked for. */
static uint64_t net_owed_recv_bytes;
/* Duplicates held by calls in progress (pin_socket, below). */
enum { PINS_MAX = 64 };
static struct thread_fd net_pins[PINS_MAX]; /* live duplicates, under net_lock */
static unsigned net_pins_count;
/* Socket errors a later piece took, for the next call (kept_error). */
enum { PENDING_ERRORS = 16 };
struct pending_error {
	dev_t dev;
	ino_t ino;
	int err;
};
static struct pending_error pending_errors[PENDING_ERRORS]; /* under net_lock */
static unsigned pending_error_count;                          /* atomic reads */
static unsigned pending_error_next;                           /* the oldest, when full */

static bool epoll_registered(int fd);

/* Owe a wait in these directions (net_lock held). */
static void owe_locked(unsigned direction, uint64_t recv_bytes)
{
	net_owed |= direction;
	net_owed_generation++;
	net_debt_due_ns = 0; /* a new debt: its time is reckoned at the next wait */
	if (recv_bytes)
		net_owed_recv_bytes = recv_bytes;
}

/*
 * May a non-blocking call on fd be refused (EAGAIN)?  Only if fd needs no
 * re-arm (not in an epoll set: poll, select) or is, or now is made, one of
 * the fds re-armed at the next wait - decided and recorded at once, so
 * that other threads cannot fill the list in between.  One refused and
 * not re-armed never gets its edge (EPOLLET): its connection stalled for
 * good, the ninth of nine sockets an event loop served when eight were
 * kept.  Past that the call goes, and its charge is a debt, owed here.
 * An fd recorded for a call that then found room costs at most one
 * extra report of readiness.
 */
static bool may_refuse(int fd, unsigned direction)
{
	if (!epoll_registered(fd))
		return true;
	pid_t tid = gettid();
	spin_lock(&net_lock);
	bool may = false;
	for (unsigned i = 0; i < net_refused_count && !may; i++)
		if (net_refused[i].fd == fd) {
			net_refused[i].tid = tid;
			may = true;
		}
	if (!may && net_refused_count < REFUSED_FDS) {
		net_refused[net_refused_count++] = (struct thread_fd){ fd, tid };
		may = true;
	}
	if (!may)
		owe_locked(direction, 0);
	spin_unlock(&net_lock);
	return may;
}

/* A call on fd found no room and did not wait: EAGAIN; the next wait
 * pays, and fd (recorded by may_refuse) is re-armed.  recv_bytes: the
 * room a refused receive asked for (0: a send). */
static ssize_t refuse_asking(unsigned direction, uint64_t recv_bytes)
{
	spin_lock(&net_lock);
	owe_locked(direction, recv_bytes);
	spin_unlock(&net_lock);
	errno = EAGAIN;
	return -1;
}

static ssize_t refuse(unsigned direction)
{
	return refuse_asking(direction, 0);
}

/* A child of fork starts afresh: the lock free (a thread of the parent
 * may have held it), no debt or fd of the parent's to pay or re-arm (its
 * epoll sets are the parent's too). */
void io_net_after_fork_child(void)
{
	/* The duplicates calls of the parent's held, copied into the child:
	 * its calls are not running here, and a copy kept would hold their
	 * connections open after the parent closed them. */
	for (unsigned i = 0; i < net_pins_count; i++)
		private_fd_close(net_pins[i].fd);
	net_pins_count = 0;
	net_lock = 0;
	net_owed = 0;
	net_owed_recv_bytes = 0;
	net_debt_due_ns = 0;
	net_refused_count = 0;
	/* A kept socket error is the parent's to give: the kernel's would
	 * be taken by whichever process asked first. */
	pending_error_count = 0;
}

/* The room receive_may_go() found missing, for receive_stopped(). */
static __thread uint64_t receive_room_asked __attribute__((tls_model("initial-exec")));

/* Set by may_wait() when it answered "non-blocking" during this call. */
static __thread bool net_did_not_wait __attribute__((tls_model("initial-exec")));

/*
 * Would this call block in the kernel?  MSG_DONTWAIT for this call, or
 * O_NONBLOCK on the description (fcntl or ioctl(FIONBIO) may change it at
 * any time, through any fd that shares it: so asked, not cached, and only
 * when the window says wait).  A failing F_GETFL (the fd is not open)
 * counts as non-blocking: the real call is about to fail anyway.
 */
static bool may_wait(int fd, int flags)
{
	int fl = (flags & MSG_DONTWAIT) ? -1 : fcntl(fd, F_GETFL); /* our wrapper: plain */
	bool blocking = fl >= 0 && !(fl & O_NONBLOCK);
	if (!blocking)
		net_did_not_wait = true;
	return blocking;
}

/*
 * A blocking call's socket timeout in this direction (SO_SNDTIMEO or
 * SO_RCVTIMEO, socket(7)), in ns; 0 = none, as {0, 0} means to the
 * kernel.  Asked, not cached, and only when the agent is about to sleep
 * in a blocking call: like O_NONBLOCK it belongs to the socket, which
 * every dup'd fd and forked child shares and may change at any time, so a
 * per-fd cache kept fresh by a setsockopt hook would still miss changes
 * made through another fd or process; one getsockopt beside the sleep it
 * bounds costs nothing.
 */
static uint64_t socket_timeout_ns(int fd, bool sending)
{
	int saved = errno;
	struct timeval tv;
	socklen_t len = sizeof tv;
	bool known = getsockopt(fd, SOL_SOCKET, sending ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, &len) == 0 &&
		     len == sizeof tv && tv.tv_sec >= 0 && tv.tv_sec < INT32_MAX && tv.tv_usec >= 0;
	errno = saved;
	return known ? (uint64_t)tv.tv_sec * NS_PER_SEC + (uint64_t)tv.tv_usec * 1000 : 0;
}

/* throttle_net_wait's may_wait: blocking, and then until when (the
 * socket's timeout, counted from the start of the program's call;
 * since_ns 0: the timeout is not followed - a splice's receive end). */
static bool may_wait_until(const struct throttle_net_wait *how, bool sending, uint64_t *deadline_ns)
{
	if (!may_wait(how->fd, how->flags))
		return false;
	uint64_t timeout = how->since_ns ? socket_timeout_ns(how->fd, sending) : 0;
	*deadline_ns = timeout ? how->since_ns + timeout : 0;
	return true;
}

/* A charge that never waits: all of it at once, a debt. */
static bool never_wait(const struct throttle_net_wait *how, uint64_t *deadline_ns)
{
	(void)how;
	(void)deadline_ns;
	return false;
}

static bool send_may_wait(const struct throttle_net_wait *how, uint64_t *deadline_ns)
{
	return may_wait_until(how, true, deadline_ns);
}

static bool recv_may_wait(const struct throttle_net_wait *how, uint64_t *deadline_ns)
{
	return may_wait_until(how, false, deadline_ns);
}

enum open_file_net io_net_kind(int fd)
{
	if (!agent_net_capped())
		return OPEN_FILE_NET_NONE;
	return open_file_net_kind(fd);
}

/*
 * The run's counters net_sent_bytes and net_received_bytes are what the
 * supervisor's network feedback compares with the kernel's per-socket
 * counts (src/tool/tool_net_feedback.c): whatever the kernel counted
 * beyond them it charges again.  So they must never trail the kernel's: a
 * send is counted when it is charged, before the call (a blocked send has
 * copied part of its bytes into the socket long before it returns), and
 * what did not go is taken off after; a receive is counted as soon as the
 * call returns, before the charge that may sleep.
 */
static void uncount_send(uint64_t bytes)
{
	AGENT_COUNT(net_sent_bytes, (uint64_t)0 - bytes); /* a relaxed add, modulo 2^64 */
}

/* A send on fd charged (and counted) `charged` bytes before the call,
 * which moved `sent`: give the window back what did not go, and uncount
 * it. */
static void settle_send(int fd, uint64_t charged, uint64_t sent)
{
	throttle_net_refund(0, charged > sent ? charged - sent : 0);
	uncount_send(charged > sent ? charged - sent : 0);
	net_delay_after_send(fd, sent); /* the scavenger's sample, if on */
}

/* How a charge before a send ended (charge_send). */
enum send_charge {
	SEND_GOES,        /* charged: the call may go */
	SEND_REFUSED,     /* non-blocking, no room: nothing charged */
	SEND_INTERRUPTED, /* a signal handler ended the wait: nothing charged */
	SEND_TIMED_OUT,   /* the socket's SO_SNDTIMEO passed first: nothing charged */
};

/* Charge (and count: see uncount_send) before a send of the program's
 * call that began at since_ns.  A handler ends the wait when
 * stop_at_signal (bytes were already sent) or the socket has a timeout
 * (then the kernel would not restart either). */
static enum send_charge charge_send(int fd, int via, int flags, uint64_t bytes, uint64_t since_ns,
				   bool stop_at_signal)
{
	/* via: the descriptor to ask (O_NONBLOCK, SO_SNDTIMEO) - a pinned
	 * call's duplicate; fd the program's, whose epoll registration
	 * decides a refusal. */
	bool interrupted = false, refused = false, timed_out = false;
	struct throttle_net_wait how = { send_may_wait, via, flags, stop_at_signal, &interrupted,
					 &refused, since_ns, &timed_out };
	net_did_not_wait = false;
	throttle_net_charge(0, bytes, &how);
	if (refused && !may_refuse(fd, OWED_SEND)) {
		/* Non-blocking, no room, and no room left to re-arm fd:
		 * it goes, charged now as a debt (owed by may_refuse). */
		struct throttle_net_wait debt = { never_wait, via, flags, false, NULL, NULL, 0, NULL };
		refused = false;
		throttle_net_charge(0, bytes, &debt);
		net_did_not_wait = true;
	}
	if (!refused && !interrupted && !timed_out)
		AGENT_COUNT(net_sent_bytes, bytes);
	return refused ? SEND_REFUSED : interrupted ? SEND_INTERRUPTED
		       : timed_out ? SEND_TIMED_OUT : SEND_GOES;
}

/* A send ended before its first byte (charge_send): -1 with the errno the
 * kernel's would give - EAGAIN for no room (refused, or at the socket's
 * timeout: sk_stream_wait_memory's -EAGAIN), EINTR for a handler. */
static ssize_t send_stopped(enum send_charge how)
{
	if (how == SEND_INTERRUPTED) {
		errno = EINTR;
		return -1;
	}
	return refuse(OWED_SEND);
}

/* Charge after a receive of the call that began at since_ns (a
 * non-blocking one is charged at once; a blocking one waits, within the
 * socket's SO_RCVTIMEO if it has one, and leaves the rest as a debt). */
static void charge_recv(int fd, int flags, uint64_t bytes, uint64_t since_ns)
{
	struct throttle_net_wait how = { recv_may_wait, fd, flags, false, NULL, NULL, since_ns, NULL };
	AGENT_COUNT(net_received_bytes, bytes); /* first: see uncount_send */
	net_did_not_wait = false;
	throttle_net_charge(bytes, 0, &how);
}

/* The same for a piece of a MSG_WAITALL receive that has more to come:
 * a signal handler that runs while it waits ends the call there, with
 * what it has, as the kernel's would (tcp_recvmsg: "copied" wins over
 * sock_intr_errno) - an alarm() timeout around it waited for the peer.
 * The rest of the charge is a debt.  True if a handler ran. */
static bool charge_recv_piece(int fd, int flags, uint64_t bytes, uint64_t since_ns)
{
	bool interrupted = false;
	struct throttle_net_wait how = { recv_may_wait, fd, flags, true, &interrupted, NULL,
					 since_ns, NULL };
	AGENT_COUNT(net_received_bytes, bytes);
	net_did_not_wait = false;
	throttle_net_charge(bytes, 0, &how);
	return interrupted;
}

/*
 * A blocking receive on a socket with a receive timeout, when the window
 * has no room for what it would take: wait for room until the deadline.
 * 0 when there is room; EAGAIN at the deadline, which is what the kernel's
 * receive says when its timeout passes with nothing received
 * (tcp_recvmsg: "if (!timeo) copied = -EAGAIN"); EINTR when a handler ran
 * (sock_intr_errno: with a timeout set the call is never restarted).
 */
static int wait_for_room(uint64_t bytes, uint64_t deadline_ns)
{
	uint64_t start = clock_now_ns(), now = start;
	int result = 0;
	for (;;) {
		uint64_t delay = throttle_net_delay(bytes, 0);
		if (!delay)
			break;
		if (now >= deadline_ns) {
			result = EAGAIN;
			break;
		}
		if (delay > THROTTLE_LOOK_NS)  /* the cap may be raised meanwhile */
			delay = THROTTLE_LOOK_NS;
		uint64_t until = delay < deadline_ns - now ? now + delay : deadline_ns;
		struct timespec ts = { (time_t)(until / NS_PER_SEC), (long)(until % NS_PER_SEC) };
		int rc;
		while ((rc = agent_sleep(TIMER_ABSTIME, &ts)) != 0 && rc != EINTR)
			;
		now = clock_now_ns();
		if (rc == EINTR) {
			result = EINTR;
			break;
		}
	}
	if (now > start) {
		AGENT_COUNT(net_slept_ns, now - start);
		AGENT_COUNT(net_throttled_calls, 1);
	}
	return result;
}

/*
 * Before a receive of at most `want` bytes, of the call that began at
 * since_ns: 0 when it may go; EAGAIN when it is non-blocking and the
 * window has no room for what it would take (the caller refuses), or
 * blocking with a receive timeout that passed before the window had room;
 * EINTR when a handler ran during that wait.  What it would take is what
 * the socket holds (FIONREAD: the stream's queued bytes, or the next
 * datagram's size), up to `want`.
 * Room for one byte is not enough: a non-blocking receive is charged at
 * once and never waits, so letting a piece in whenever one byte fits
 * left every window a piece over the cap (+12 % at an eighth of the
 * budget per piece, measured: bench/net_repro/recv_nonblock.py).  A
 * blocking receive always goes: it is charged after, and waits then -
 * unless the socket has a receive timeout: the wait after is cut at the
 * timeout (charge_recv), so the debt left is waited off here, before the
 * next receive, within that call's timeout.
 */
static int receive_may_go(int fd, int flags, size_t want, uint64_t since_ns)
{
	int saved = errno, queued = 0;
	bool known = ioctl(fd, FIONREAD, &queued) == 0 && queued > 1;
	errno = saved;
	/* Nothing (or a byte) queued: room for one byte, and the kernel
	 * answers the rest. */
	uint64_t bytes = !known ? 1 : (size_t)queued < want ? (uint64_t)queued : (uint64_t)want;
	if (throttle_net_delay(bytes, 0) == 0)
		return 0;
	if (!may_wait(fd, flags)) {
		if (!may_refuse(fd, OWED_RECV))
			return 0;       /* it goes; charged after, a debt */
		receive_room_asked = bytes;
		return EAGAIN;
	}
	uint64_t timeout = socket_timeout_ns(fd, false);
	int result = timeout ? wait_for_room(bytes, since_ns + timeout) : 0;
	if (result == EAGAIN)
		receive_room_asked = bytes;
	return result;
}

/* A receive that receive_may_go() stopped: -1 with its errno. */
static ssize_t receive_stopped(int why)
{
	if (why == EINTR) {
		errno = EINTR;
		return -1;
	}
	return refuse_asking(OWED_RECV, receive_room_asked ? receive_room_asked : 1);
}

/* A send of `len` bytes at buf: write() when as_write (a socket's write is
 * its send with no flags), else sendto. */
static ssize_t send_piece(int fd, const char *buf, size_t len, int flags, const struct sockaddr *to,
			  socklen_t tolen, bool as_write)
{
	if (as_write && !flags)
		return libc_real.write(fd, buf, len);
	return libc_real.sendto(fd, buf, len, flags, to, tolen);
}

/*
 * The socket a call began on, for its later pieces.  The kernel keeps the
 * file a call began with however long it takes, though another thread
 * close()s the fd; a call cut into pieces makes a system call per piece,
 * by number, and once the number was taken by a new socket the rest of a
 * send went to that one (524,288 bytes of 1,000,000 to an unrelated
 * peer), and a MSG_WAITALL receive could take its bytes.  A check of the
 * fd before each piece narrows that and no more (32,768 bytes still went
 * astray).  So a call that may take more than one piece holds a duplicate
 * of the fd, in the private reserve (private_fd.h), and makes its pieces
 * on that, as the kernel would.  Where there is none to be had (the
 * reserve full, a scarce RLIMIT_NOFILE), the fd itself, checked before
 * each piece (device and i-number: a new socket never has an old one's).
 *
 * A duplicate must never outlive its call, or a connection stays open for
 * good: it is closed at the end of the call, at the thread's cancellation
 * (pthread_cleanup_push), in a fork child (whose copies the table below
 * lists), and - for a call a signal handler left by siglongjmp() from the
 * agent's sleep - at the jump (io_net_thread_left(), agent.h
 * agent_left_by_jump), else at that thread's next call that pins.
 */
struct pinned_socket {
	int fd;          /* where the pieces go: the duplicate, or the fd  */
	bool held;       /* fd is our duplicate                            */
	bool checked;    /* fd is the program's: compare before each piece */
	dev_t dev;
	ino_t ino;
};

/* Close what this thread's earlier calls left (they never finished). */
static void pins_close_stale(pid_t tid)
{
	int stale[PINS_MAX];
	unsigned n = 0, kept = 0;
	spin_lock(&net_lock);
	for (unsigned i = 0; i < net_pins_count; i++)
		if (net_pins[i].tid == tid)
			stale[n++] = net_pins[i].fd;
		else
			net_pins[kept++] = net_pins[i];
	net_pins_count = kept;
	spin_unlock(&net_lock);
	for (unsigned i = 0; i < n; i++)
		private_fd_close(stale[i]);
}

void io_net_thread_left(void)
{
	pins_close_stale(gettid());
}

static void pin_socket(struct pinned_socket *pin, int fd, bool pieces)
{
	*pin = (struct pinned_socket){ .fd = fd };
	if (!pieces)
		return;
	int saved = errno;
	pid_t tid = gettid();
	pins_close_stale(tid);
	int dup = private_fd_scarce() ? -EMFILE : private_fd_dup(fd);
	if (dup >= 0) {
		bool listed = false;
		spin_lock(&net_lock);
		if (net_pins_count < PINS_MAX) {
			net_pins[net_pins_count++] = (struct thread_fd){ dup, tid };
			listed = true;
		}
		spin_unlock(&net_lock);
		if (listed) {
			pin->fd = dup;
			pin->held = true;
			errno = saved;
			return;
		}
		private_fd_close(dup);
	}
	struct stat st;
	if (fstat(fd, &st) == 0) {
		pin->checked = true;
		pin->dev = st.st_dev;
		pin->ino = st.st_ino;
	}
	errno = saved;
}

/* May the next piece go to pin->fd: it is still the socket of the start? */
static bool pin_still(const struct pinned_socket *pin)
{
	if (!pin->checked)
		return true;
	int saved = errno;
	struct stat st;
	bool same = fstat(pin->fd, &st) == 0 && st.st_dev == pin->dev && st.st_ino == pin->ino;
	errno = saved;
	return same;
}

/* The end of the call, or its thread's cancellation. */
static void unpin_socket(void *arg)
{
	struct pinned_socket *pin = arg;
	if (!pin->held)
		return;
	int saved = errno;
	spin_lock(&net_lock);
	for (unsigned i = 0; i < net_pins_count; i++)
		if (net_pins[i].fd == pin->fd) {
			net_pins[i] = net_pins[--net_pins_count];
			break;
		}
	spin_unlock(&net_lock);
	private_fd_close(pin->fd);
	pin->held = false;
	errno = saved;
}

/* The largest piece of one stream call in this direction, as a size;
 * SIZE_MAX when no cap binds it (throttle_net_piece). */
static size_t stream_piece(bool receiving)
{
	uint64_t p = throttle_net_piece(receiving);
	return p < SIZE_MAX ? (size_t)p : SIZE_MAX;
}

/* One program's call cut into pieces: its arguments and its state, in
 * memory (the loop runs between pthread_cleanup_push and _pop, whose
 * setjmp would otherwise clobber them). */
struct net_call {
	int fd, flags;
	bool as_io;              /* read()/write(): the first piece as such */
	char *buf;
	size_t len, piece, done;
	uint64_t since;
	int saved, err;
	bool failed;
	const struct sockaddr *to;
	socklen_t tolen;
	struct sockaddr *from;
	socklen_t *fromlen;
	bool waitall;
};

/*
 * Has the connection failed since the call's first piece - a reset or a
 * timeout, or both directions shut?  tcp_reset() and a retransmission
 * timeout end in TCP_CLOSE, which tcp_poll() shows as EPOLLHUP, and leave
 * sk_err for the next call; a send takes it (sock_error()), and then the
 * program's next send sees EPIPE and SIGPIPE where the kernel's one call
 * would have returned the count so far and left the error for the next
 * one (a reset: ECONNRESET, no signal).  So the call ends at the count so
 * far, as the kernel's does.  Not EPOLLERR: it also means only that the
 * error queue holds something (SO_TIMESTAMPING, MSG_ZEROCOPY completions,
 * IP_RECVERR), and such a socket has not failed.  A reset that comes
 * while a piece is in the kernel is taken by it: pending_error_keep().
 */
static bool socket_failed(int fd)
{
	int saved = errno;
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	struct timespec now = { 0, 0 };
	long n = syscall(SYS_ppoll, &p, 1, &now, NULL, (size_t)0);
	errno = saved;
	return n == 1 && (p.revents & POLLHUP);
}

/*
 * An error a later piece took from the socket (sk_err: a reset, a timeout)
 * belongs to the program's next call: the kernel's one call would have
 * returned the count so far and left it there (tcp_sendmsg_locked(),
 * tcp_recvmsg_locked(): "copied" wins, sock_error() only when nothing
 * was).  Kept here by socket (its inode: any fd of it, a dup too, sees
 * it), and given back by the next send, or the next receive once nothing
 * is queued (tcp_recvmsg() hands queued data over before the error).
 * Errors that are states, not events (EPIPE: the socket stays shut) need
 * no keeping: the next call meets them again.  Not given back: poll()'s
 * EPOLLERR and getsockopt(SO_ERROR) for it (LIMITS AND BUGS).  The
 * table, pending_errors[], is with the other state under net_lock.
 */

static bool is_socket_error(int err)
{
	switch (err) {
	case ECONNRESET: case ETIMEDOUT: case ECONNREFUSED: case ECONNABORTED:
	case EHOSTUNREACH: case ENETUNREACH: case EHOSTDOWN: case ENETDOWN: case EPROTO:
		return true;
	default:
		return false;
	}
}

/* fd: the socket the piece went to (the call's pinned one). */
static void pending_error_keep(int fd, int err)
{
	struct stat st;
	if (!is_socket_error(err) || fstat(fd, &st) != 0)
		return;
	spin_lock(&net_lock);
	unsigned slot = 0;
	while (slot < pending_error_count &&
	       !(pending_errors[slot].dev == st.st_dev && pending_errors[slot].ino == st.st_ino))
		slot++;
	if (slot == PENDING_ERRORS) /* full: the oldest gives way */
		slot = pending_error_next++ % PENDING_ERRORS;
	pending_errors[slot] = (struct pending_error){ st.st_dev, st.st_ino, err };
	if (slot == pending_error_count)
		__atomic_store_n(&pending_error_count, slot + 1, __ATOMIC_RELEASE);
	spin_unlock(&net_lock);
}

/* Is an error kept for fd's socket?  Then it is taken, into errno, and
 * the call returns -1 with it; for a receive, only once nothing is
 * queued.  One load when none is kept. */
static bool kept_error(int fd, bool receiving)
{
	if (!__atomic_load_n(&pending_error_count, __ATOMIC_ACQUIRE))
		return false;
	int saved = errno, queued = 0;
	struct stat st;
	bool known = fstat(fd, &st) == 0;
	if (known && receiving && ioctl(fd, FIONREAD, &queued) == 0 && queued > 0)
		known = false; /* data first */
	errno = saved;
	if (!known)
		return false;
	int err = 0;
	spin_lock(&net_lock);
	for (unsigned i = 0; i < pending_error_count; i++) {
		if (pending_errors[i].dev != st.st_dev || pending_errors[i].ino != st.st_ino)
			continue;
		err = pending_errors[i].err;
		pending_errors[i] = pending_errors[pending_error_count - 1];
		__atomic_store_n(&pending_error_count, pending_error_count - 1, __ATOMIC_RELEASE);
		break;
	}
	spin_unlock(&net_lock);
	if (err)
		errno = err;
	return err != 0;
}

static void send_pieces(struct net_call *c, const struct pinned_socket *pin)
{
	do {
		size_t n = c->len - c->done < c->piece ? c->len - c->done : c->piece;
		if (c->done && (!pin_still(pin) || socket_failed(pin->fd)))
			break;
		enum send_charge charge = charge_send(c->fd, pin->fd, c->flags, n, c->since,
						      c->done > 0);
		if (charge != SEND_GOES) {
			/* A handler, no room, or the socket's timeout: the
			 * count so far, as the kernel's ("copied" wins). */
			if (!c->done) {
				send_stopped(charge);
				c->failed = true;
				c->err = errno;
			}
			break;
		}
		bool nonblocking = net_did_not_wait;
		errno = c->saved;
		ssize_t r = send_piece(pin->fd, c->buf + c->done, n,
				       c->done ? c->flags | MSG_NOSIGNAL : c->flags, c->to, c->tolen,
				       c->as_io && !c->done);
		if (r < 0) {
			c->err = errno;
			throttle_net_refund(0, n);
			uncount_send(n);
			c->failed = !c->done;
			if (c->done)
				pending_error_keep(pin->fd, c->err);
			break;
		}
		settle_send(pin->fd, n, (uint64_t)r);
		c->done += (size_t)r;
		/* Short: the kernel's buffer is full (non-blocking) or a
		 * signal came; a non-blocking call that went into debt moves
		 * one piece and no more. */
		if ((size_t)r < n || nonblocking)
			break;
	} while (c->done < c->len);
}

static ssize_t net_send(int fd, enum open_file_net kind, const void *buf, size_t len, int flags,
			const struct sockaddr *to, socklen_t tolen, bool as_write)
{
	if (kept_error(fd, false))
		return -1;
	struct net_call c = { .fd = fd, .flags = flags, .as_io = as_write, .buf = (char *)buf,
			      .len = len, .piece = SIZE_MAX, .since = clock_now_ns(),
			      .saved = errno, .to = to, .tolen = tolen };
	if (kind == OPEN_FILE_NET_IS_STREAM && !(flags & MSG_OOB))
		c.piece = stream_piece(false);
	struct pinned_socket pin;
	pin_socket(&pin, fd, len > c.piece);
	pthread_cleanup_push(unpin_socket, &pin);
	send_pieces(&c, &pin);
	pthread_cleanup_pop(1);
	errno = c.failed ? c.err : c.saved;
	return c.failed ? -1 : (ssize_t)c.done;
}

static ssize_t receive_piece(int fd, char *buf, size_t len, int flags, struct sockaddr *from,
			     socklen_t *fromlen, bool as_read)
{
	if (as_read && !flags)
		return libc_real.read(fd, buf, len);
	return libc_real.recvfrom(fd, buf, len, flags, from, fromlen);
}

/* The supervisor's holds of this run so far, as it publishes them: the
 * time held, and whether it holds now (segment.h dn_run). */
static uint64_t holds_seen(void)
{
	if (!agent.run)
		return 0;
	uint64_t held = __atomic_load_n(&agent.run->stopped_ns, __ATOMIC_ACQUIRE);
	uint32_t state = __atomic_load_n(&agent.run->state, __ATOMIC_ACQUIRE);
	return held ^ (state & DN_RUN_STOPPED ? UINT64_C(1) << 63 : 0);
}

static void receive_pieces(struct net_call *c, const struct pinned_socket *pin)
{
	do {
		size_t n = c->len - c->done < c->piece ? c->len - c->done : c->piece;
		if (c->done && !pin_still(pin))
			break;
		errno = c->saved;
		uint64_t holds = c->waitall ? holds_seen() : 0;
		ssize_t r = receive_piece(pin->fd, c->buf + c->done, n, c->flags,
					  c->done ? NULL : c->from, c->done ? NULL : c->fromlen,
					  c->as_io);
		if (r < 0) {
			c->err = errno; /* the kernel's */
			c->failed = !c->done;
			if (c->done)
				pending_error_keep(pin->fd, c->err);
			break;
		}
		c->done += (size_t)r;
		bool more = c->waitall && c->done < c->len;
		if (r > 0) {
			if (!more)
				charge_recv(pin->fd, c->flags, (uint64_t)r, c->since);
			else if (charge_recv_piece(pin->fd, c->flags, (uint64_t)r, c->since))
				break; /* a handler ran while it waited: what it has */
		}
		/* Only MSG_WAITALL asks for the whole length; otherwise one
		 * piece is this call's answer, as a short stream read is. */
		if (!more)
			break;
		/* A short piece: the kernel's MSG_WAITALL came back early - at
		 * end of file, a signal, its timeout; or because the
		 * supervisor held this thread meanwhile (a ptrace stop ends a
		 * receive that has copied something), which the program must
		 * never see: a record protocol reads the rest of its record as
		 * the next one.  Only then does it go on. */
		if ((size_t)r < n && (r == 0 || holds_seen() == holds))
			break;
		/* ... within the socket's receive timeout: past it the
		 * kernel's MSG_WAITALL returns what it has (tcp_recvmsg). */
		uint64_t timeout = socket_timeout_ns(pin->fd, false);
		if (timeout && clock_now_ns() >= c->since + timeout)
			break;
	} while (c->done < c->len);
}

static ssize_t net_receive(int fd, enum open_file_net kind, void *buf, size_t len, int flags,
			   struct sockaddr *from, socklen_t *fromlen, bool as_read)
{
	if (flags & MSG_PEEK) /* nothing leaves the queue */
		return receive_piece(fd, buf, len, flags, from, fromlen, as_read);
	if (kept_error(fd, true))
		return -1;
	struct net_call c = { .fd = fd, .flags = flags, .as_io = as_read, .buf = buf, .len = len,
			      .piece = SIZE_MAX, .saved = errno, .from = from, .fromlen = fromlen };
	if (kind == OPEN_FILE_NET_IS_STREAM)
		c.piece = stream_piece(true);
	c.since = clock_now_ns();
	int go = receive_may_go(fd, flags, len < c.piece ? len : c.piece, c.since);
	if (go)
		return receive_stopped(go);
	c.waitall = (flags & MSG_WAITALL) && kind == OPEN_FILE_NET_IS_STREAM;
	struct pinned_socket pin;
	pin_socket(&pin, fd, c.waitall && len > c.piece);
	pthread_cleanup_push(unpin_socket, &pin);
	receive_pieces(&c, &pin);
	pthread_cleanup_pop(1);
	errno = c.failed ? c.err : c.saved;
	return c.failed ? -1 : (ssize_t)c.done;
}

/* ---- read/write/readv/writev on a socket (from io_read.c, io_write.c) - */

ssize_t io_net_read(int fd, enum open_file_net kind, void *buf, size_t count)
{
	return net_receive(fd, kind, buf, count, 0, NULL, NULL, true);
}

ssize_t io_net_write(int fd, enum open_file_net kind, const void *buf, size_t count)
{
	return net_send(fd, kind, buf, count, 0, NULL, 0, true);
}

/*
 * A stream's vector receive cut to one piece, as a plain one is: the
 * first entries of iov, read without trusting the program's memory,
 * into out[IOV_PIECE_MAX], the last one shortened so that they carry at
 * most `piece` bytes.  A stream read may always return less than asked.
 * Uncut, one readv or recvmsg of a large buffer copied up to a megabyte
 * before the agent counted any of it, and the supervisor's feedback, seeing
 * the kernel's count run that far ahead, charged receives again and held
 * a receiver that owed nothing (48 % under the cap, one run in five).
 * The count of entries, or -1 to leave the call as it is (unreadable,
 * or nothing to cut).
 */
enum { IOV_PIECE_MAX = 64 };

static int iov_cut(const struct iovec *iov, size_t iovcnt, size_t piece, struct iovec *out)
{
	if (piece == SIZE_MAX || iovcnt == 0 || iovcnt > IOV_MAX)
		return -1;
	size_t n = iovcnt < IOV_PIECE_MAX ? iovcnt : IOV_PIECE_MAX;
	int saved = errno;
	struct iovec local = { out, n * sizeof *out };
	struct iovec remote = { (void *)iov, n * sizeof *out };
	ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
	errno = saved;
	if (got != (ssize_t)(n * sizeof *out))
		return -1;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (out[i].iov_len >= piece - total) {
			out[i].iov_len = piece - total;
			return (int)i + 1;
		}
		total += out[i].iov_len;
	}
	return n < iovcnt ? (int)n : -1; /* all of it fits: nothing to cut */
}

/*
 * A non-blocking writev or sendmsg on a stream moves at most one piece,
 * as a non-blocking send does (a short count, which such callers handle
 * by contract).  Whole, its charge could be many windows' budget at once:
 * the first chunk fits and the rest goes with it, more than the window
 * remembers, and the window forgets it after N (a 4 MB writev at 1 MiB/s
 * ran at 4 MiB/s); and the next wait sleeps only until one piece fits, so
 * the call after it was refused again and the event loop spun.  Blocking
 * ones are still delayed whole (their iovecs are the program's).  Returns
 * the number of elements of cut (0: not cut), their total in *total.
 */
static int nonblocking_send_cut(int fd, int flags, const struct iovec *iov, size_t iovcnt,
				struct iovec *cut, size_t *total)
{
	size_t piece = stream_piece(false);
	if (*total <= piece || (flags & MSG_OOB) || open_file_net_kind(fd) != OPEN_FILE_NET_IS_STREAM ||
	    may_wait(fd, flags))
		return 0;
	int n = iov_cut(iov, iovcnt, piece, cut);
	if (n <= 0)
		return 0;
	size_t sum = 0;
	for (int i = 0; i < n; i++)
		sum += cut[i].iov_len;
	*total = sum;
	return n;
}

ssize_t io_net_readv(int fd, const struct iovec *iov, int iovcnt)
{
	int saved = errno;
	if (kept_error(fd, true))
		return -1;
	uint64_t since = clock_now_ns();
	struct iovec cut[IOV_PIECE_MAX];
	int n = -1;
	size_t piece = SIZE_MAX, total;
	/* An iovec the kernel refuses whole (a bad segment past the first
	 * piece) is not cut: the call goes as it is, and fails as it would. */
	if (!iov_total_checked(iov, iovcnt, &total))
		return libc_real.readv(fd, iov, iovcnt);
	if (open_file_net_kind(fd) == OPEN_FILE_NET_IS_STREAM) {
		piece = stream_piece(true);
		n = iov_cut(iov, (size_t)iovcnt, piece, cut);
	}
	int go = receive_may_go(fd, 0, piece, since);
	if (go)
		return receive_stopped(go);
	ssize_t r = n > 0 ? libc_real.readv(fd, cut, n) : libc_real.readv(fd, iov, iovcnt);
	if (r > 0) {
		charge_recv(fd, 0, (uint64_t)r, since);
		errno = saved;
	}
	return r;
}

ssize_t io_net_writev(int fd, const struct iovec *iov, int iovcnt)
{
	int saved = errno;
	if (kept_error(fd, false))
		return -1;
	size_t total = 0;
	if (!iov_total_checked(iov, iovcnt, &total))
		return libc_real.writev(fd, iov, iovcnt); /* the kernel's EINVAL/EFAULT */
	struct iovec cut[IOV_PIECE_MAX];
	int n = nonblocking_send_cut(fd, 0, iov, (size_t)iovcnt, cut, &total);
	if (n) {
		iov = cut;
		iovcnt = n;
	}
	enum send_charge charge = charge_send(fd, fd, 0, total, clock_now_ns(), false);
	if (charge != SEND_GOES)
		return send_stopped(charge);
	errno = saved;
	ssize_t r = libc_real.writev(fd, iov, iovcnt);
	int err = errno;
	uint64_t sent = r > 0 ? (uint64_t)r : 0;
	settle_send(fd, total, sent);
	errno = r < 0 ? err : saved;
	return r;
}

/* ---- the calls only sockets make (interpose.c) --------------------------- */

ssize_t io_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to,
		  socklen_t tolen)
{
	enum open_file_net kind = open_file_net_kind(fd);
	if (!kind)
		return libc_real.sendto(fd, buf, len, flags, to, tolen);
	return net_send(fd, kind, buf, len, flags, to, tolen, false);
}

ssize_t io_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
		    socklen_t *fromlen)
{
	enum open_file_net kind = open_file_net_kind(fd);
	if (!kind)
		return libc_real.recvfrom(fd, buf, len, flags, from, fromlen);
	return net_receive(fd, kind, buf, len, flags, from, fromlen, false);
}

/* The bytes a msghdr's iovec carries, read without trusting the program's
 * memory (as iov_total_checked, io.c): false = leave it to the kernel.
 * The header read is left in *copy. */
static bool msg_total_checked(const struct msghdr *msg, struct msghdr *copy, size_t *total)
{
	struct iovec local = { copy, sizeof *copy };
	struct iovec remote = { (void *)msg, sizeof *copy };
	*total = 0;
	if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof *copy)
		return false;
	if (copy->msg_iovlen == 0)
		return true;
	if (copy->msg_iovlen > IOV_MAX)
		return false;
	return iov_total_checked(copy->msg_iov, (int)copy->msg_iovlen, total);
}

ssize_t io_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	int saved = errno;
	if (kept_error(fd, false))
		return -1;
	size_t total;
	struct msghdr copy;
	if (!open_file_net_kind(fd) || !msg_total_checked(msg, &copy, &total))
		return libc_real.sendmsg(fd, msg, flags);
	/* Cut as writev is (nonblocking_send_cut()), in the copy of the
	 * header: control data goes with the first bytes, as the kernel
	 * sends it. */
	struct iovec cut[IOV_PIECE_MAX];
	int n = nonblocking_send_cut(fd, flags, copy.msg_iov, copy.msg_iovlen, cut, &total);
	if (n) {
		copy.msg_iov = cut;
		copy.msg_iovlen = (size_t)n;
		msg = &copy;
	}
	enum send_charge charge = charge_send(fd, fd, flags, total, clock_now_ns(), false);
	if (charge != SEND_GOES)
		return send_stopped(charge);
	errno = saved;
	ssize_t r = libc_real.sendmsg(fd, msg, flags);
	int err = errno;
	uint64_t sent = r > 0 ? (uint64_t)r : 0;
	settle_send(fd, total, sent);
	errno = r < 0 ? err : saved;
	return r;
}

ssize_t io_recvmsg(int fd, struct msghdr *msg, int flags)
{
	int saved = errno;
	if (kept_error(fd, true))
		return -1;
	if (!open_file_net_kind(fd) || (flags & MSG_PEEK))
		return libc_real.recvmsg(fd, msg, flags);
	uint64_t since = clock_now_ns();
	/* A stream's recvmsg cut to a piece (iov_cut), but for MSG_WAITALL,
	 * which asks for the whole. */
	struct msghdr copy;
	struct iovec cut[IOV_PIECE_MAX];
	int n = -1;
	size_t piece = SIZE_MAX;
	if (!(flags & MSG_WAITALL) && open_file_net_kind(fd) == OPEN_FILE_NET_IS_STREAM) {
		piece = stream_piece(true);
		struct iovec local = { &copy, sizeof copy };
		struct iovec remote = { msg, sizeof copy };
		size_t total;
		/* Cut only an iovec the kernel takes (iov_total_checked()):
		 * one it refuses goes as it is, and fails as it would. */
		if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof copy &&
		    copy.msg_iovlen <= IOV_MAX &&
		    iov_total_checked(copy.msg_iov, (int)copy.msg_iovlen, &total))
			n = iov_cut(copy.msg_iov, copy.msg_iovlen, piece, cut);
		errno = saved;
	}
	int go = receive_may_go(fd, flags, piece, since);
	if (go)
		return receive_stopped(go);
	ssize_t r;
	if (n > 0) {
		/* The kernel writes the name and the control data into the
		 * program's buffers itself; their lengths and msg_flags come
		 * back in our copy, and go where the kernel would put them. */
		copy.msg_iov = cut;
		copy.msg_iovlen = (size_t)n;
		r = libc_real.recvmsg(fd, &copy, flags);
		if (r >= 0) {
			int err = errno;
			struct iovec from[3] = { { &copy.msg_namelen, sizeof copy.msg_namelen },
						 { &copy.msg_controllen, sizeof copy.msg_controllen },
						 { &copy.msg_flags, sizeof copy.msg_flags } };
			struct iovec to[3] = { { &msg->msg_namelen, sizeof msg->msg_namelen },
					       { &msg->msg_controllen, sizeof msg->msg_controllen },
					       { &msg->msg_flags, sizeof msg->msg_flags } };
			/* As the kernel's copy_to_user: never a fault of ours. */
			process_vm_writev(getpid(), from, 3, to, 3, 0);
			errno = err;
		}
	} else {
		r = libc_real.recvmsg(fd, msg, flags);
	}
	if (r > 0) {
		charge_recv(fd, flags, (uint64_t)r, since);
		errno = saved;
	}
	return r;
}

int io_sendmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
	int saved = errno;
	size_t total = 0;
	bool known = open_file_net_kind(fd) && vlen <= UIO_MAXIOV;
	for (unsigned i = 0; known && i < vlen; i++) {
		size_t one;
		struct msghdr header;
		known = msg_total_checked(&vec[i].msg_hdr, &header, &one) && one <= SIZE_MAX - total;
		total += known ? one : 0;
	}
	if (!known)
		return libc_real.sendmmsg(fd, vec, vlen, flags);
	enum send_charge charge = charge_send(fd, fd, flags, total, clock_now_ns(), false);
	if (charge != SEND_GOES)
		return (int)send_stopped(charge);
	errno = saved;
	int r = libc_real.sendmmsg(fd, vec, vlen, flags);
	int err = errno;
	uint64_t sent = 0;
	for (int i = 0; i < r; i++)
		sent += vec[i].msg_len; /* the kernel just wrote these */
	settle_send(fd, total, sent);
	errno = r < 0 ? err : saved;
	return r;
}

int io_recvmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags, struct timespec *timeout)
{
	int saved = errno;
	if (!open_file_net_kind(fd) || (flags & MSG_PEEK))
		return libc_real.recvmmsg(fd, vec, vlen, flags, timeout);
	uint64_t since = clock_now_ns();
	int go = receive_may_go(fd, flags, SIZE_MAX, since);
	if (go)
		return (int)receive_stopped(go);
	/* Under a cap, no more messages than a piece holds, as recv is cut
	 * to a piece (at least one): a queue of 50 datagrams came in one
	 * call, before the agent could count any of it.  Fewer than vlen is
	 * what the kernel returns too, at a timeout or with MSG_WAITFORONE. */
	size_t piece = stream_piece(true);
	unsigned n = vlen;
	if (piece != SIZE_MAX && vlen > 1 && vlen <= UIO_MAXIOV) {
		size_t room = 0, one;
		struct msghdr header;
		for (n = 0; n < vlen && msg_total_checked(&vec[n].msg_hdr, &header, &one); n++) {
			if (n && one > piece - room)
				break;
			room += one < piece ? one : piece;   /* room <= piece */
		}
		if (n == 0)
			n = vlen;       /* an iovec the kernel will refuse: its EINVAL */
	}
	int r = libc_real.recvmmsg(fd, vec, n, flags, timeout);
	if (r > 0) {
		uint64_t got = 0;
		for (int i = 0; i < r; i++)
			got += vec[i].msg_len;
		charge_recv(fd, flags, got, since);
		errno = saved;
	}
	return r;
}

/* ---- kernel-side copies with a socket at one end (io_copy.c) ----------- */

size_t io_net_copy_begin(int in_fd, int out_fd, size_t len, bool nonblocking,
			 struct io_net_copy *copy)
{
	copy->in_kind = io_net_kind(in_fd);
	copy->out_kind = io_net_kind(out_fd);
	copy->charged = 0;
	copy->refused = false;
	copy->out_fd = out_fd;
	copy->in_fd = in_fd;
	copy->flags = nonblocking ? MSG_DONTWAIT : 0;
	if (copy->out_kind) {
		/* sendfile and splice may always copy less than asked, and
		 * every caller loops: one piece per call. */
		uint64_t piece = throttle_net_piece(false);
		if (len > piece)
			len = (size_t)piece;
		enum send_charge charge = charge_send(out_fd, out_fd, copy->flags, len, clock_now_ns(), false);
		/* A non-blocking socket with no room in the window: EAGAIN,
		 * as a refused send gets, which sendfile and splice give
		 * themselves when that socket's buffer is full; the thread's
		 * next wait sleeps until a piece fits.  (Letting the copy go
		 * as a debt nobody paid let nginx, sendfile on non-blocking
		 * sockets, serve at loopback speed under a cap:
		 * bench/net_repro/sendfile_nonblock.py.)  A blocking one at
		 * its SO_SNDTIMEO: EAGAIN too; after a handler: EINTR. */
		if (charge != SEND_GOES) {
			copy->refused = true;
			send_stopped(charge);
			return 0;
		}
		copy->charged = len;
	} else if (copy->in_kind) {
		uint64_t piece = throttle_net_piece(true);
		if (len > piece)
			len = (size_t)piece;
		/* The receive end, as net_receive's: a non-blocking socket
		 * needs room for what it holds first, or EAGAIN (refused).
		 * Without it, splice from a non-blocking socket was charged
		 * after, a debt never waited for: 681 MB/s under a 512 KiB/s
		 * cap. */
		int go = receive_may_go(in_fd, copy->flags, len, clock_now_ns());
		if (go) {
			copy->refused = true;
			receive_stopped(go);
			return 0;
		}
	}
	return len;
}

void io_net_copy_done(const struct io_net_copy *copy, ssize_t copied)
{
	int saved = errno;
	uint64_t moved = copied > 0 ? (uint64_t)copied : 0;
	if (copy->out_kind) {
		settle_send(copy->out_fd, copy->charged, moved);
	} else if (copy->in_kind && moved) {
		charge_recv(copy->in_fd, copy->flags, moved, 0);
	}
	errno = saved;
}

/* ---- the waits of event loops -------------------------------------------- */

/*
 * The signal mask a ppoll, pselect or epoll_pwait(2) gives its wait, read
 * as the kernel reads it (_NSIG / 8 bytes: the kernel's sigset_t) without
 * trusting the program's memory: false when it cannot be read (the real
 * call's EFAULT to give).
 */
static bool wait_mask_read(const sigset_t *sigmask, sigset_t *copy)
{
	enum { KERNEL_SIGSET_BYTES = 8 };
	sigemptyset(copy);
	struct iovec local = { copy, KERNEL_SIGSET_BYTES };
	struct iovec remote = { (void *)sigmask, KERNEL_SIGSET_BYTES };
	return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == KERNEL_SIGSET_BYTES;
}

/* The debt read at `generation` is paid: cleared, unless more was owed
 * since. */
static void settle_debt(uint64_t generation)
{
	spin_lock(&net_lock);
	if (net_owed_generation == generation) {
		net_owed = 0;
		net_owed_recv_bytes = 0;
		net_debt_due_ns = 0;
	}
	spin_unlock(&net_lock);
}

int io_net_before_wait(int64_t *timeout_ns, const sigset_t *sigmask)
{
	spin_lock(&net_lock);
	unsigned owed = net_owed;
	uint64_t recv_bytes = net_owed_recv_bytes ? net_owed_recv_bytes : 1;
	uint64_t generation = net_owed_generation, due = net_debt_due_ns;
	spin_unlock(&net_lock);
	if (!owed || *timeout_ns == 0)
		return 0; /* a poll with no timeout never waits: the debt stays */
	/* Until a send's piece fits, or what a refused receive would take:
	 * what the refused calls asked for (net_send, receive_may_go),
	 * reckoned once, at the first wait after the debt.  Settled when it
	 * is due - not before, so that threads waiting meanwhile wait too,
	 * and not later: the window is the class's, and other traffic taking
	 * the room the moment it comes kept a debt reckoned afresh at each
	 * wait owed for ever, every wait of every thread a sleep. */
	uint64_t now = clock_now_ns();
	if (!due) {
		due = now + throttle_net_delay(owed & OWED_RECV ? recv_bytes : 0,
					       owed & OWED_SEND ? throttle_net_piece(false) : 0);
		spin_lock(&net_lock);
		if (net_owed_generation == generation && !net_debt_due_ns)
			net_debt_due_ns = due;
		spin_unlock(&net_lock);
	}
	uint64_t delay = due > now ? due - now : 0;
	bool whole = true;
	if (*timeout_ns > 0 && delay > (uint64_t)*timeout_ns) {
		delay = (uint64_t)*timeout_ns;
		whole = false; /* cut by the caller's timeout: still owed */
	}
	if (!delay) {
		settle_debt(generation);
		return 0;
	}
	/* The sleep is part of the wait: under the mask the program gave
	 * the wait (ppoll, pselect, epoll_pwait, epoll_pwait2), so that a
	 * signal it lets in only there ends the sleep with EINTR, and one it
	 * keeps out stays pending - as in the real wait.  Under the thread's
	 * own mask, a handler the program had blocked for the wait ran
	 * during it and made it return an EINTR it could never get. */
	sigset_t during, before;
	if (sigmask) {
		int saved = errno;
		bool readable = wait_mask_read(sigmask, &during);
		errno = saved;
		if (!readable)
			return 0; /* the real call fails (EFAULT): the debt stays */
		pthread_sigmask(SIG_SETMASK, &during, &before);
	}
	uint64_t start = clock_now_ns(), deadline = start + delay;
	struct timespec ts = { (time_t)(deadline / NS_PER_SEC), (long)(deadline % NS_PER_SEC) };
	int rc;
	while ((rc = agent_sleep(TIMER_ABSTIME, &ts)) != 0 && rc != EINTR)
		;
	if (sigmask)
		pthread_sigmask(SIG_SETMASK, &before, NULL);
	uint64_t slept = clock_now_ns() - start;
	AGENT_COUNT(net_slept_ns, slept);
	AGENT_COUNT(net_throttled_calls, 1);
	if (*timeout_ns > 0)
		*timeout_ns -= slept < (uint64_t)*timeout_ns ? (int64_t)slept : *timeout_ns;
	if (rc == EINTR) {
		/* A handler ran: the real wait would have returned EINTR
		 * (poll, select and epoll_wait are never restarted, signal(7)). */
		errno = EINTR;
		return -1;
	}
	if (whole)
		settle_debt(generation);
	return 0;
}

/*
 * The epoll registrations of the process, by fd: the set and the event the
 * program gave, so that an fd refused with EAGAIN can be re-armed with the
 * program's own event (see the top of the file).  One slot per fd (the
 * last registration wins), in memory from mmap (hooks may run where
 * malloc is unsafe), fds below EPOLL_FDS only.
 */
#define EPOLL_FDS 65536u
struct epoll_registration {
	int epfd;                 /* -1 / 0 = none (0 is never an epoll fd we saw: stdin) */
	uint32_t events;
	uint64_t data;
};
static struct epoll_registration *epoll_registrations;

static bool epoll_registered(int fd)
{
	struct epoll_registration *table = __atomic_load_n(&epoll_registrations, __ATOMIC_ACQUIRE);
	return table && fd >= 0 && (unsigned)fd < EPOLL_FDS &&
	       __atomic_load_n(&table[fd].epfd, __ATOMIC_RELAXED) > 0;
}

void io_net_epoll_ctl(int epfd, int op, int fd, const struct epoll_event *event)
{
	if (fd < 0 || (unsigned)fd >= EPOLL_FDS)
		return;
	struct epoll_registration *table = __atomic_load_n(&epoll_registrations, __ATOMIC_ACQUIRE);
	if (!table) {
		void *p = mmap(NULL, EPOLL_FDS * sizeof *table, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			return;
		struct epoll_registration *none = NULL;
		if (!__atomic_compare_exchange_n(&epoll_registrations, &none, p, false,
						 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			munmap(p, EPOLL_FDS * sizeof *table);
			p = none;
		}
		table = p;
	}
	struct epoll_registration *slot = &table[fd];
	/* A slot is written and read whole under net_lock: a re-arm racing
	 * another thread's EPOLL_CTL_MOD must not pair one registration's
	 * events with the other's data (often the program's pointer). */
	if (op == EPOLL_CTL_DEL) {
		spin_lock(&net_lock);
		if (slot->epfd == epfd)
			__atomic_store_n(&slot->epfd, 0, __ATOMIC_RELAXED);
		spin_unlock(&net_lock);
		return;
	}
	struct epoll_event copy;
	struct iovec local = { &copy, sizeof copy };
	struct iovec remote = { (void *)event, sizeof copy };
	if (!event || process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof copy)
		return;
	spin_lock(&net_lock);
	slot->events = copy.events;
	slot->data = copy.data.u64;
	__atomic_store_n(&slot->epfd, epfd, __ATOMIC_RELAXED);
	spin_unlock(&net_lock);
}

void io_net_closed(int fd)
{
	struct epoll_registration *table = __atomic_load_n(&epoll_registrations, __ATOMIC_ACQUIRE);
	if (!epoll_registered(fd))
		return;
	spin_lock(&net_lock);
	__atomic_store_n(&table[fd].epfd, 0, __ATOMIC_RELAXED);
	unsigned kept = 0;
	for (unsigned i = 0; i < net_refused_count; i++)
		if (net_refused[i].fd != fd)
			net_refused[kept++] = net_refused[i];
	net_refused_count = kept;
	spin_unlock(&net_lock);
}

void io_net_rearm(int epfd)
{
	struct epoll_registration *table = __atomic_load_n(&epoll_registrations, __ATOMIC_ACQUIRE);
	if (!table)
		return;
	/* The refused fds registered in this set leave the list, to be
	 * re-armed outside the lock; the others wait for their own set's. */
	struct {
		int fd;
		struct epoll_event ev;
	} mine[REFUSED_FDS];
	unsigned n = 0, kept = 0;
	pid_t tid = gettid();
	spin_lock(&net_lock);
	for (unsigned i = 0; i < net_refused_count; i++) {
		struct thread_fd r = net_refused[i];
		bool registered = r.fd >= 0 && (unsigned)r.fd < EPOLL_FDS && table[r.fd].epfd > 0;
		/* A one-shot fd is re-armed only by the thread it was refused
		 * to: another thread's re-arm would hand the connection to a
		 * second worker while the first still has it (EPOLLONESHOT's
		 * whole point). */
		bool ours = registered && table[r.fd].epfd == epfd &&
			    (!(table[r.fd].events & EPOLLONESHOT) || r.tid == tid);
		if (ours) {
			mine[n].fd = r.fd;
			mine[n].ev.events = table[r.fd].events;
			mine[n++].ev.data.u64 = table[r.fd].data;
		} else if (registered)
			net_refused[kept++] = r;
	}
	net_refused_count = kept;
	spin_unlock(&net_lock);
	for (unsigned i = 0; i < n; i++) {
		int saved = errno;
		/* our wrapper, guard up: plain */
		epoll_ctl(epfd, EPOLL_CTL_MOD, mine[i].fd, &mine[i].ev);
		errno = saved;
	}
}
