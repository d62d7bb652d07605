/*
 * throttle.c - the throttling module (DiscNice §4.1, Fig. 5): make the
 * calling thread wait until the policy lets its predicted disk I/O go.
 *
 * The lock is held only while the policy computes and the window is
 * charged, never across the sleep (policy.h).  The sleep is an absolute
 * clock_nanosleep resumed after EINTR: a signal handler runs on time, and
 * the call the program made still behaves as it would without us (a read
 * of a regular file is not interrupted by a handled signal) - unless the
 * user asked the job to stop (cut_wanted() below).
 *
 * A charge larger than a quarter of the window's budget is cut into
 * pieces: the rate window cannot accept B > R*N at once (no Tw <= N makes
 * B/Tw <= R), and pieces keep the stream smooth (rate-windows §3.2,
 * "splitting large requests").
 *
 * Under --window-policy paper (policy/paper_window.c) the class's windows
 * police by the paper's rule instead, which admits a request of any size;
 * there the pieces are the paper's split above its maximum sleep, cap x
 * 100 ms: disk charges and chunks (throttle_piece_bytes) and stream pieces
 * (throttle_net_piece) are cut to that, and a datagram is charged as one
 * event.  policy_of() reads the class's choice on every call: one relaxed
 * load.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <time.h>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/segment.h"
#include "common/signal_disposition.h"
#include "policy/paper_window.h"
#include "policy/policy.h"

/* The class's policy (--window-policy, policy.h policy_of): the sliding
 * bucket window, or the rate-windows paper's event queue. */
static bool paper_policy(const struct dn_segment *seg)
{
	return policy_of(seg) == &policy_paper_window;
}

/* Smallest cap that applies to a charge of this kind; 0 = uncapped. */
static uint64_t binding_cap(const struct dn_caps *caps, uint64_t read_bytes, uint64_t write_bytes)
{
	uint64_t cap = 0;
	if (read_bytes && caps->read_bps && (!cap || caps->read_bps < cap))
		cap = caps->read_bps;
	if (write_bytes && caps->write_bps && (!cap || caps->write_bps < cap))
		cap = caps->write_bps;
	if (caps->total_bps && (!cap || caps->total_bps < cap))
		cap = caps->total_bps;
	return cap;
}

uint64_t throttle_read_cap(void)
{
	return agent.seg ? binding_cap(&agent.seg->caps, 1, 0) : 0;
}

uint64_t throttle_piece_bytes(void)
{
	/* Under the paper's window, the chunks are also the pieces of its
	 * maximum sleep (paper_window.c): cap x 100 ms at most. */
	struct dn_segment *seg = agent.seg;
	if (seg && paper_policy(seg)) {
		uint64_t piece = paper_window_piece(&seg->window, caps_smallest(&seg->caps));
		if (piece < agent.chunk_bytes)
			return piece;
	}
	return agent.chunk_bytes;
}

/* When to look at the window again: the delay, or THROTTLE_LOOK_NS (agent.h). */
static uint64_t look_again_at(uint64_t now_ns, uint64_t delay_ns)
{
	return now_ns + (delay_ns < THROTTLE_LOOK_NS ? delay_ns : THROTTLE_LOOK_NS);
}

/*
 * Stopping a call the user interrupted.  Our sleep is resumed after a
 * signal handler ran (the call behaves as the kernel's would), but a read
 * of 16 MiB at 100k is one call of 168 s: Ctrl-C on a Python job, whose
 * handler only sets a flag that is looked at when the call returns, waited
 * for all of it.  So when a handler of the program ran in this thread
 * during our sleep, and the supervisor saw an INT, TERM or QUIT at about
 * the same time (dn_run.interrupted_ns: the user asked the job to
 * stop), and the program handles that signal, the read ends there as an
 * interruptible call does: with the count moved so far, or EINTR if
 * nothing moved and the handler is not SA_RESTART (POSIX read(2);
 * signal(7)).  A handler with SA_RESTART and nothing moved yet: the kernel
 * would restart, so the sleep goes on.  A short count alone did not stop
 * Python: its readall() reads on, looking at its signal flags only after
 * an EINTR; so the thread's next read of a watched file within a second
 * gets the EINTR (not under SA_RESTART), once.  Only io_read() makes its
 * payments cuttable (throttle_call_moved()): writes are never cut, since
 * stdio drops its buffer on a write's EINTR.
 */
static __thread uint64_t handler_ran_ns __attribute__((tls_model("initial-exec")));
static __thread uint64_t eintr_owed_mark __attribute__((tls_model("initial-exec")));
static __thread uint64_t call_moved __attribute__((tls_model("initial-exec")));
static __thread int call_cut __attribute__((tls_model("initial-exec")));
static __thread bool call_cuttable __attribute__((tls_model("initial-exec")));

void throttle_call_moved(uint64_t moved)
{
	call_moved = moved;
	call_cuttable = true;
	call_cut = THROTTLE_NOT_CUT;
	if (!moved) {
		handler_ran_ns = 0; /* a call's first piece: an older handler is not this one's */
		if (eintr_owed_mark) {
			/* The EINTR owed after a short count: this call's (its
			 * first piece may not wait: the piece cut was never
			 * charged), unless the keypress is older than a second or
			 * another came. */
			uint64_t mark = agent.run ? __atomic_load_n(&agent.run->interrupted_ns,
								    __ATOMIC_ACQUIRE) : 0;
			if (mark == eintr_owed_mark && clock_now_ns() - mark <= NS_PER_SEC)
				call_cut = THROTTLE_CUT_EINTR; /* charge() waits for nothing */
			eintr_owed_mark = 0;
		}
	}
}

int throttle_take_cut(void)
{
	int cut = call_cut;
	call_cut = THROTTLE_NOT_CUT;
	call_cuttable = false;
	return cut;
}

bool throttle_cut_pending(void)
{
	return call_cut != THROTTLE_NOT_CUT;
}

void throttle_call_abandoned(void)
{
	call_cut = THROTTLE_NOT_CUT;
	call_cuttable = false;
	handler_ran_ns = 0;
}

static int cut_wanted(void)
{
	if (!handler_ran_ns || !agent.run)
		return THROTTLE_NOT_CUT;
	uint64_t mark = __atomic_load_n(&agent.run->interrupted_ns, __ATOMIC_ACQUIRE);
	uint64_t gap = mark > handler_ran_ns ? mark - handler_ran_ns : handler_ran_ns - mark;
	if (!mark || gap > NS_PER_SEC)
		return THROTTLE_NOT_CUT; /* not the same keypress (a SIGCHLD's handler) */
	int sig = (int)__atomic_load_n(&agent.run->interrupted_sig, __ATOMIC_RELAXED);
	void *handler;
	unsigned long flags;
	if (sig <= 0 || signal_disposition(sig, &handler, &flags) != 0 ||
	    handler == (void *)SIG_DFL || handler == (void *)SIG_IGN)
		return THROTTLE_NOT_CUT;
	if (flags & SA_RESTART)
		return call_moved ? THROTTLE_CUT_SHORT : THROTTLE_NOT_CUT;
	if (!call_moved)
		return THROTTLE_CUT_EINTR;
	eintr_owed_mark = mark;
	return THROTTLE_CUT_SHORT;
}

/* Sleep until the deadline; false if the call is to be cut (call_cut set). */
static bool sleep_until(uint64_t deadline_ns, bool cuttable)
{
	struct timespec ts = {
		.tv_sec = (time_t)(deadline_ns / NS_PER_SEC),
		.tv_nsec = (long)(deadline_ns % NS_PER_SEC),
	};
	while (agent_sleep(TIMER_ABSTIME, &ts) == EINTR) {
		if (!cuttable)
			continue;
		handler_ran_ns = clock_now_ns();
		if ((call_cut = cut_wanted()) != THROTTLE_NOT_CUT)
			return false;
	}
	/* The supervisor may see the keypress a moment after the handler ran
	 * here: looked at again at each wake-up (THROTTLE_LOOK_NS at most). */
	return !cuttable || (call_cut = cut_wanted()) == THROTTLE_NOT_CUT;
}

bool throttle_pause(uint64_t ns, uint64_t *slept)
{
	int saved = errno;
	uint64_t now = clock_now_ns();
	bool go_on = sleep_until(now + ns, call_cuttable);
	*slept += clock_now_ns() - now;
	errno = saved;
	return go_on;
}

/* Wait, then charge one piece no larger than the window can take; false,
 * with nothing charged, if the call is cut while waiting. */
static bool charge_piece(struct dn_segment *seg, uint64_t read_bytes, uint64_t write_bytes,
			 bool cuttable, uint64_t *slept)
{
	const struct policy *policy = policy_of(seg);
	if (cuttable && call_cut != THROTTLE_NOT_CUT)
		return false; /* cut already (an EINTR owed): neither wait nor charge */
	for (;;) {
		uint64_t now = clock_now_ns();
		uint64_t token = segment_lock(seg);
		uint64_t delay = policy->delay(&seg->window, &seg->caps, now, read_bytes, write_bytes);
		if (delay == 0) {
			policy->charge(&seg->window, &seg->caps, now, (int64_t)read_bytes,
				       (int64_t)write_bytes);
			segment_unlock(seg, token);
			return true;
		}
		segment_unlock(seg, token);
		bool go_on = sleep_until(look_again_at(now, delay), cuttable);
		*slept += clock_now_ns() - now;
		if (!go_on)
			return false;
	}
}

/*
 * The supervisor compares these counters with the kernel's
 * (tool_regulate.c): what the kernel counted beyond them is I/O nobody
 * predicted, and what they count beyond the kernel's plus its own charges
 * it gives back.  So a prediction is counted before the caller's I/O -
 * counted after, it would look like I/O nobody predicted - but after the
 * sleep that pays for it: counted before, it led the kernel's count for
 * the whole sleep, and a tick in between gave back what the supervisor
 * had charged for I/O the agent never saw (a window the kernel read from
 * another reader's marker), to charge it again when the kernel's count
 * caught up - every chunk, and each time as a debt the window could not
 * take yet, which stopped the job: md5sum at 7.5MiB/s with the probe
 * detector ran 2.5-6.5 % under its cap (issue #9 item 2).  But I/O paid
 * after it was made (throttle_charge_done()) is counted at once: the
 * kernel has counted it, and counted only after the sleep it looked
 * unpredicted for the whole sleep - the supervisor charged it too, and
 * that charge had left the window when the count caught up, so nothing
 * was given back (cp at 4MB/s: its first copy's 3.2 MB window paid twice,
 * 0.6 s, 2.5 % of a 96 MiB job).
 */
static void count_prediction(uint64_t read_bytes, uint64_t write_bytes)
{
	AGENT_COUNT(predicted_read_bytes, read_bytes);
	AGENT_COUNT(predicted_write_bytes, write_bytes);
}

/* done: the I/O was made already, and the kernel has counted it. */
static uint64_t charge(uint64_t read_bytes, uint64_t write_bytes, bool done)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || (!read_bytes && !write_bytes))
		return 0;
	int saved = errno;
	/* A prediction is counted after the sleeps and before the caller's
	 * I/O; I/O made already at once (see count_prediction()). */
	uint64_t counted_read = read_bytes, counted_write = write_bytes;
	if (done)
		count_prediction(counted_read, counted_write);
	uint64_t cap = binding_cap(&seg->caps, read_bytes, write_bytes);
	const struct policy *policy = policy_of(seg);
	uint64_t slept = 0;
	if (!cap) {
		/* No cap on this kind of I/O: record it (the window feeds the
		 * status display) but never wait. */
		uint64_t now = clock_now_ns();
		uint64_t token = segment_lock(seg);
		policy->charge(&seg->window, &seg->caps, now, (int64_t)read_bytes,
			       (int64_t)write_bytes);
		segment_unlock(seg, token);
	} else {
		/* Pieces of at most a quarter of the budget of one window. */
		unsigned __int128 budget = (unsigned __int128)cap * seg->window.span_ns / NS_PER_SEC / 4;
		uint64_t piece = budget < 4096 ? 4096 : budget > UINT64_MAX ? UINT64_MAX : (uint64_t)budget;
		/* The paper's window admits any size, and splits where a sleep
		 * would pass its maximum: pieces of cap x max_sleep (§3.2). */
		if (policy == &policy_paper_window)
			piece = paper_window_piece(&seg->window, cap);
		while (read_bytes || write_bytes) {
			uint64_t r = read_bytes < piece ? read_bytes : piece;
			uint64_t w = write_bytes < piece - r ? write_bytes : piece - r;
			if (!charge_piece(seg, r, w, call_cuttable, &slept)) {
				if (done) {
					/* Cut, the I/O made: the rest is charged
					 * at once, a debt the next call pays. */
					uint64_t now = clock_now_ns();
					uint64_t token = segment_lock(seg);
					policy->charge(&seg->window, &seg->caps, now,
						       (int64_t)read_bytes, (int64_t)write_bytes);
					segment_unlock(seg, token);
				} else {
					/* Cut before the I/O: the rest is neither
					 * charged nor made (pieces charged before
					 * the cut stay paid: a quarter budget or
					 * so, on a job being stopped). */
					counted_read -= read_bytes;
					counted_write -= write_bytes;
				}
				break;
			}
			read_bytes -= r;
			write_bytes -= w;
		}
		if (slept) {
			AGENT_COUNT(slept_ns, slept);
			AGENT_COUNT(throttled_calls, 1);
		}
	}
	if (!done)
		count_prediction(counted_read, counted_write);
	errno = saved;
	return slept;
}

uint64_t throttle_charge(uint64_t read_bytes, uint64_t write_bytes)
{
	return charge(read_bytes, write_bytes, false);
}

uint64_t throttle_charge_done(uint64_t read_bytes, uint64_t write_bytes)
{
	return charge(read_bytes, write_bytes, true);
}

void throttle_refund(uint64_t write_bytes)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || !write_bytes)
		return;
	uint64_t now = clock_now_ns();
	uint64_t token = segment_lock(seg);
	policy_of(seg)->charge(&seg->window, &seg->caps, now, 0, -(int64_t)write_bytes);
	segment_unlock(seg, token);
}

void throttle_unpredict_read(uint64_t read_bytes)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || !read_bytes)
		return;
	/* The count was raised by throttle_charge() a moment ago, so it
	 * stays >= 0: a fetch-add of the two's complement subtracts.  The
	 * supervisor's feedback compares it with the kernel's read_bytes
	 * (tool_regulate.c predicted()), which a prediction never made
	 * good must not overtake. */
	AGENT_COUNT(predicted_read_bytes, (uint64_t)0 - read_bytes);
	uint64_t now = clock_now_ns();
	uint64_t token = segment_lock(seg);
	policy_of(seg)->charge(&seg->window, &seg->caps, now, -(int64_t)read_bytes, 0);
	segment_unlock(seg, token);
}

/* ---- the network's window (rate-windows §3.2, §5) --------------------
 *
 * The class's second window (segment.h net_caps, net_window), with the
 * same policy as the disk's: receive bytes go in its read column, sent
 * bytes in its write column, and a total cap sees both.  The caller cuts
 * streams into pieces of throttle_net_piece() and delays a datagram whole
 * (io_net.c); a charge larger than a piece is still paid piece by piece,
 * as above, but the caller's data goes at once after the last one. */

static uint64_t net_cap(const struct dn_segment *seg, uint64_t recv_bytes, uint64_t send_bytes)
{
	struct dn_caps caps = segment_net_caps_now(seg);
	return binding_cap(&caps, recv_bytes, send_bytes);
}

bool throttle_net_capped(void)
{
	struct dn_segment *seg = agent.seg;
	if (!seg)
		return false;
	struct dn_caps caps = segment_net_caps_now(seg);
	return (caps.read_bps | caps.write_bps | caps.total_bps) != 0;
}

/* An eighth of the window's budget at the cap that binds this direction
 * (as the disk's default chunk, tool_run.c default_chunk), 4 KiB..1 MiB:
 * small enough that the stream stays smooth within the window, large
 * enough that the per-piece cost (one lock, one policy pass) vanishes. */
uint64_t throttle_net_piece(bool receiving)
{
	struct dn_segment *seg = agent.seg;
	uint64_t cap = seg ? net_cap(seg, receiving, !receiving) : 0;
	if (!cap)
		return UINT64_MAX;
	unsigned __int128 piece = (unsigned __int128)cap * seg->net_window.span_ns / NS_PER_SEC / 8;
	/* Under the scavenger a send's piece lands in the bottleneck's queue
	 * as one burst (the kernel sends it at once, cwnd allowing): an
	 * eighth of the target's worth at the rate, so that bursts add
	 * little to the delay the controller holds at its target. */
	uint64_t target = __atomic_load_n(&seg->scavenger.target_ns, __ATOMIC_RELAXED);
	if (!receiving && target) {
		unsigned __int128 burst = (unsigned __int128)cap * target / NS_PER_SEC / 8;
		if (burst < piece)
			piece = burst;
	}
	/* The paper's window: pieces within its maximum sleep (§3.2). */
	if (paper_policy(seg)) {
		uint64_t paper = paper_window_piece(&seg->net_window, cap);
		if (paper < piece)
			piece = paper;
	}
	if (piece < 4096)
		piece = 4096;
	if (piece > (1u << 20))
		piece = 1u << 20;
	return (uint64_t)piece;
}

/* Sleep until the deadline; false if a signal handler ran first. */
static bool sleep_until_signal(uint64_t deadline_ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(deadline_ns / NS_PER_SEC),
		.tv_nsec = (long)(deadline_ns % NS_PER_SEC),
	};
	int rc;
	while ((rc = agent_sleep(TIMER_ABSTIME, &ts)) != 0)
		if (rc == EINTR)
			return false;
	return true;
}

uint64_t throttle_net_charge(uint64_t recv_bytes, uint64_t send_bytes,
			     const struct throttle_net_wait *how)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || (!recv_bytes && !send_bytes))
		return 0;
	int saved = errno;
	struct dn_caps caps = segment_net_caps_now(seg);
	uint64_t cap = binding_cap(&caps, recv_bytes, send_bytes);
	const struct policy *policy = policy_of(seg);
	uint64_t slept = 0, piece = UINT64_MAX, deadline = 0, charged_r = 0, charged_w = 0;
	bool may_wait = cap != 0, asked = false, charged = false;
	/* The paper's window takes any size as one event: a datagram is
	 * delayed whole, and streams come here already in pieces of its
	 * maximum sleep (throttle_net_piece). */
	if (cap && policy != &policy_paper_window) {
		unsigned __int128 budget =
			(unsigned __int128)cap * seg->net_window.span_ns / NS_PER_SEC / 4;
		piece = budget < 4096 ? 4096 : budget > UINT64_MAX ? UINT64_MAX : (uint64_t)budget;
	}
	while (recv_bytes || send_bytes) {
		uint64_t r = recv_bytes < piece ? recv_bytes : piece;
		uint64_t w = send_bytes < piece - r ? send_bytes : piece - r;
		for (;;) {
			uint64_t now = clock_now_ns();
			uint64_t token = segment_lock(seg);
			caps = segment_net_caps_now(seg); /* the scavenger's rate moves */
			uint64_t delay = may_wait ? policy->delay(&seg->net_window, &caps,
								  now, r, w) : 0;
			if (delay && !asked) {
				/* Whether the caller may wait is asked only now
				 * that it would: fcntl(F_GETFL) costs a system
				 * call, and O_NONBLOCK can change at any time. */
				segment_unlock(seg, token);
				asked = true;
				may_wait = how && how->may_wait ? how->may_wait(how, &deadline) : true;
				if (!may_wait && how->refused && !charged) {
					/* Non-blocking, and the window has no room
					 * even for the first piece: nothing charged,
					 * the caller says EAGAIN (io_net.c). */
					*how->refused = true;
					errno = saved;
					return slept;
				}
				continue;
			}
			if (delay == 0) {
				policy->charge(&seg->net_window, &caps, now, (int64_t)r, (int64_t)w);
				segment_unlock(seg, token);
				charged = true;
				charged_r += r;
				charged_w += w;
				break;
			}
			segment_unlock(seg, token);
			/* The socket's timeout: sleep no further than it; and
			 * look at the caps again at least every THROTTLE_LOOK_NS. */
			uint64_t until = look_again_at(now, delay);
			bool timeout = deadline && until >= deadline;
			if (timeout)
				until = deadline;
			bool whole = how && (how->stop_at_signal || deadline)
					     ? sleep_until_signal(until)
					     : (sleep_until(until, false), true);
			slept += clock_now_ns() - now;
			if (whole && !timeout)
				continue;
			if (!how || !how->timed_out) {
				/* A receive (its bytes are already taken) cut
				 * short by a handler or its timeout: the rest is
				 * charged at once, a debt its next call pays;
				 * the caller is told of a handler if it asks. */
				if (!whole && how && how->interrupted)
					*how->interrupted = true;
				may_wait = false;
				continue;
			}
			/* A send ends here, by a signal handler or at its
			 * timeout: nothing of this charge goes, and the caller
			 * returns the count so far, else EINTR or EAGAIN, as
			 * tcp_sendmsg() does when sk_stream_wait_memory() says
			 * sock_intr_errno() or -EAGAIN ("copied" wins). */
			throttle_net_refund(charged_r, charged_w);
			*(whole ? how->timed_out : how->interrupted) = true;
			recv_bytes = send_bytes = 0;
			r = w = 0;
			break;
		}
		recv_bytes -= r;
		send_bytes -= w;
	}
	if (slept) {
		AGENT_COUNT(net_slept_ns, slept);
		AGENT_COUNT(net_throttled_calls, 1);
	}
	errno = saved;
	return slept;
}

void throttle_net_refund(uint64_t recv_bytes, uint64_t send_bytes)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || (!recv_bytes && !send_bytes))
		return;
	uint64_t now = clock_now_ns();
	uint64_t token = segment_lock(seg);
	policy_of(seg)->charge(&seg->net_window, &seg->net_caps, now, -(int64_t)recv_bytes,
		       -(int64_t)send_bytes);
	segment_unlock(seg, token);
}

uint64_t throttle_net_delay(uint64_t recv_bytes, uint64_t send_bytes)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || (!recv_bytes && !send_bytes))
		return 0;
	uint64_t now = clock_now_ns();
	struct dn_caps caps = segment_net_caps_now(seg);
	uint64_t token = segment_lock(seg);
	uint64_t delay = policy_of(seg)->delay(&seg->net_window, &caps, now, recv_bytes, send_bytes);
	segment_unlock(seg, token);
	return delay;
}
