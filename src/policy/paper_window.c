/*
 * paper_window.c - the rate-windows paper's window, as the paper states it
 * (Ryu et al. §3.2, "Mechanism"), so that it can be compared with the
 * sliding bucket window (rate_window.c) on the same jobs.
 *
 * The queue.  Each class window keeps "a circular queue, implemented via a
 * 100-element array" of its last I/O operations, and "only describes I/O
 * events that occurred during the previous 5 seconds" (§3.2).  An event is
 * the time an operation was let go and its bytes (read and written kept
 * apart, so that read, write and total caps each see their own kind, as
 * the paper's one threshold Rt sees its one window).  The 101st event
 * overwrites the oldest; events older than the span are skipped when the
 * window is read, so nothing is swept on a timer.
 *
 * The rule (§3.2).  For a request of B bytes at time t under a cap Rt:
 *     Bw = S + B,  S = the bytes of the window's events;
 *     Tw = (t - t0) + B / Rt,  t0 = the start of the oldest event,
 *          B / Rt = the new operation's expected duration;
 *     proceed at once if Bw / Tw <= Rt, else sleep Bw / Rt - Tw.
 * The paper does not say how it expects the new operation to last; we take
 * the time it takes at the cap, the one duration the policy knows without
 * measuring a device.  Then Bw / Tw <= Rt is S <= Rt * (t - t0), and the
 * delay is S / Rt - (t - t0): the new request waits until the window's
 * bytes, spread at the cap from t0, have gone, whatever its own size.  A
 * backlogged job therefore gets Rt exactly (each request pays for the one
 * before it), a request larger than any window needs no splitting to be
 * admitted, and the first request of an empty window goes at once.  (With
 * an instantaneous expected duration, Tw = t - t0, the rule is the
 * "point" test that rate_window.c's top comment measures at 8-37 % under
 * the cap.)
 *
 * Its biases, by construction (tests/unit/test_paper_window.c measures
 * them, bench/window_policy.py on real jobs):
 *   - the minimum sleep: a delay below it becomes 0 (§3.2: "durations under
 *     our lower bound are set to zero"), so a job may run up to min_sleep
 *     ahead of its cap.  It does not accumulate: the first delay of a
 *     min_sleep or more is slept whole, after which the window's bytes
 *     exactly fill the time since its oldest event again.  Simulated, a
 *     backlogged job gets its cap within 0.01 % (the unit test's table).
 *   - a lump larger than Rt x 5 s (an uncut request, a datagram under a
 *     tiny cap) is forgotten after 5 s, before it is paid for.
 *   - the memory: after an idle spell the window still holds events up to
 *     5 s old, so a job may "make up losses within the window" (§5) with a
 *     burst of up to Rt * 5 s less the bytes it holds.  The sliding window
 *     restarts its clock after an idle window instead (window_restart).
 *   - the maximum sleep (§3.2: "sleep durations that are too large tend to
 *     make the stream bursty ... we break the I/O into multiple pieces and
 *     spread the total delay over the pieces").  Under the rule above a
 *     backlogged request sleeps the previous request's B / Rt, so pieces
 *     of at most Rt * max_sleep (paper_window_piece) spread the delay over
 *     sleeps of at most max_sleep.  The agent cuts where it already cuts:
 *     disk chunks (throttle_piece_bytes) and stream pieces
 *     (throttle_net_piece); a datagram is delayed whole (the paper's
 *     footnote: its size is bounded by the MTU).  delay() itself never
 *     caps a sleep: a sleep longer than the maximum (the window's bytes
 *     came from several processes at once) is still owed.
 *
 * Two writers at once (see rate_window.c): head and count are read once,
 * clamped, and every index is taken modulo the ring, so a damaged or
 * concurrently changed queue can only miscount.
 *
 * Arithmetic: bytes * 10^9 against rate * ns in 128 bits, no floating
 * point.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/paper_window.h"
#include "policy/policy.h"
#include "policy/rate_window.h"

__extension__ typedef unsigned __int128 wide_t;

#define NS_PER_S UINT64_C(1000000000)
#define QUEUE    DN_PAPER_EVENTS

enum kind { KIND_READ, KIND_WRITE, KIND_TOTAL };

void paper_window_init(struct dn_window *window, uint64_t span_ns, uint64_t min_sleep_ns,
		       uint64_t max_sleep_ns)
{
	window->paper_span_ns = span_ns ? span_ns : PAPER_SPAN_NS;
	window->paper_min_sleep_ns = min_sleep_ns ? min_sleep_ns : PAPER_MIN_SLEEP_NS;
	window->paper_max_sleep_ns = max_sleep_ns ? max_sleep_ns : PAPER_MAX_SLEEP_NS;
	window->paper_head = 0;
	window->paper_count = 0;
	for (unsigned i = 0; i < QUEUE; i++)
		window->paper_events[i] = (struct dn_paper_event){ 0, 0, 0 };
}

static unsigned queue_head(const struct dn_window *window)
{
	return __atomic_load_n(&window->paper_head, __ATOMIC_RELAXED) % QUEUE;
}

static unsigned queue_count(const struct dn_window *window)
{
	unsigned count = __atomic_load_n(&window->paper_count, __ATOMIC_RELAXED);
	return count < QUEUE ? count : QUEUE;
}

/* The event `age` places before the newest (0 = the newest). */
static const struct dn_paper_event *event_at(const struct dn_window *window, unsigned head,
					     unsigned age)
{
	return &window->paper_events[(head + QUEUE - age % QUEUE) % QUEUE];
}

static uint64_t event_bytes(const struct dn_paper_event *event, enum kind kind)
{
	uint64_t r = event->read_bytes > 0 ? (uint64_t)event->read_bytes : 0;
	uint64_t w = event->write_bytes > 0 ? (uint64_t)event->write_bytes : 0;
	switch (kind) {
	case KIND_READ:
		return r;
	case KIND_WRITE:
		return w;
	case KIND_TOTAL:
		break;
	}
	return r + w; /* each below 2^63 */
}

/* Whether an event started at `start` is still in the window at `now`. */
static bool in_window(uint64_t start, uint64_t now, uint64_t span)
{
	return start >= now || now - start <= span;
}

/* S / Rt - (t - t0) for one cap, 0 when it is not positive. */
static uint64_t cap_delay(const struct dn_window *window, enum kind kind, uint64_t rate,
			  uint64_t now)
{
	const unsigned head = queue_head(window), count = queue_count(window);
	const uint64_t span = window->paper_span_ns;
	wide_t sum = 0;
	uint64_t oldest = now;
	for (unsigned age = 0; age < count; age++) {
		const struct dn_paper_event *event = event_at(window, head, age);
		if (!in_window(event->start_ns, now, span))
			break; /* and every older one with it */
		uint64_t bytes = event_bytes(event, kind);
		if (!bytes)
			continue;
		sum += bytes;
		oldest = event->start_ns;
	}
	if (!sum)
		return 0; /* Bw / Tw = B / (B / Rt) = Rt: go */
	wide_t need = (sum * NS_PER_S + rate - 1) / rate;
	uint64_t elapsed = now > oldest ? now - oldest : 0;
	if (need <= elapsed)
		return 0;
	wide_t delay = need - elapsed;
	return delay > UINT64_MAX ? UINT64_MAX : (uint64_t)delay;
}

uint64_t paper_window_delay(const struct dn_window *window, const struct dn_caps *caps,
			    uint64_t now_ns, uint64_t read_bytes, uint64_t write_bytes)
{
	if (!window->paper_span_ns)
		return 0; /* never initialised: a damaged segment polices nothing */
	uint64_t delay = 0, d;
	if (caps->read_bps && read_bytes) {
		d = cap_delay(window, KIND_READ, caps->read_bps, now_ns);
		delay = d > delay ? d : delay;
	}
	if (caps->write_bps && write_bytes) {
		d = cap_delay(window, KIND_WRITE, caps->write_bps, now_ns);
		delay = d > delay ? d : delay;
	}
	if (caps->total_bps && (read_bytes || write_bytes)) {
		d = cap_delay(window, KIND_TOTAL, caps->total_bps, now_ns);
		delay = d > delay ? d : delay;
	}
	/* §3.2: "Sleep durations that are too small degrade overall
	 * efficiency, so durations under our lower bound are set to zero." */
	return delay < window->paper_min_sleep_ns ? 0 : delay;
}

/* Take a refund from the newest events' column, never below zero: the
 * bytes of events gone from the queue were forgotten already. */
static void refund(struct dn_window *window, unsigned head, unsigned count, bool reading,
		   uint64_t owed)
{
	for (unsigned age = 0; age < count && owed; age++) {
		struct dn_paper_event *event = &window->paper_events[(head + QUEUE - age) % QUEUE];
		int64_t *column = reading ? &event->read_bytes : &event->write_bytes;
		if (*column <= 0)
			continue;
		uint64_t take = (uint64_t)*column < owed ? (uint64_t)*column : owed;
		*column -= (int64_t)take;
		owed -= take;
	}
}

static uint64_t magnitude(int64_t bytes)
{
	return bytes == INT64_MIN ? (uint64_t)INT64_MAX + 1 : (uint64_t)-bytes;
}

void paper_window_charge(struct dn_window *window, const struct dn_caps *caps, uint64_t now_ns,
			 int64_t read_bytes, int64_t write_bytes)
{
	(void)caps; /* the queue has no clock to restart: it forgets by itself */
	/* The buckets too: ls, top, the feedback's slack read them, and they
	 * never steer a delay under this policy. */
	rate_window_charge(window, NULL, now_ns, read_bytes, write_bytes);
	if (!window->paper_span_ns)
		return;
	unsigned head = queue_head(window), count = queue_count(window);
	if (read_bytes < 0)
		refund(window, head, count, true, magnitude(read_bytes));
	if (write_bytes < 0)
		refund(window, head, count, false, magnitude(write_bytes));
	if (read_bytes <= 0 && write_bytes <= 0)
		return;
	/* A process whose clock read lost the race to the lock is recorded at
	 * the newest event's time: the queue stays in time order, which lets
	 * delay() stop at the first event too old. */
	uint64_t start = now_ns;
	if (count && window->paper_events[head].start_ns > start)
		start = window->paper_events[head].start_ns;
	unsigned next = count ? (head + 1) % QUEUE : head;
	window->paper_events[next] = (struct dn_paper_event){
		start, read_bytes > 0 ? read_bytes : 0, write_bytes > 0 ? write_bytes : 0
	};
	__atomic_store_n(&window->paper_head, next, __ATOMIC_RELAXED);
	__atomic_store_n(&window->paper_count, count < QUEUE ? count + 1 : QUEUE,
			 __ATOMIC_RELAXED);
}

uint64_t paper_window_piece(const struct dn_window *window, uint64_t cap)
{
	if (!cap)
		return UINT64_MAX;
	uint64_t max_sleep = window->paper_max_sleep_ns ? window->paper_max_sleep_ns
							: PAPER_MAX_SLEEP_NS;
	wide_t piece = (wide_t)cap * max_sleep / NS_PER_S;
	if (piece < 4096)
		piece = 4096;
	return piece > UINT64_MAX ? UINT64_MAX : (uint64_t)piece;
}

unsigned paper_window_events(const struct dn_window *window, uint64_t now_ns)
{
	const unsigned head = queue_head(window), count = queue_count(window);
	unsigned live = 0;
	while (live < count &&
	       in_window(event_at(window, head, live)->start_ns, now_ns, window->paper_span_ns))
		live++;
	return live;
}

const struct policy policy_paper_window = {
	.name = "paper",
	.delay = paper_window_delay,
	.charge = paper_window_charge,
};
