/*
 * rate_window.c - sliding-window rate policing (rate-windows paper §3.2,
 * DiscNice §5.3, Fig. 10).
 *
 * The window.  Bucket k (absolute index, k = t / bucket_ns) holds the bytes
 * released in [k * bucket_ns, (k + 1) * bucket_ns).  The ring keeps buckets
 * head - 127 .. head; charging at a later bucket advances head and zeroes the
 * buckets that rotate out, so nothing is ever swept on a timer.
 * bucket_ns is span_ns / (DN_WINDOW_BUCKETS - 1), rounded up: a window of N
 * seconds whose start falls inside a bucket touches ceil(N / bucket_ns) + 1
 * buckets, so 127 buckets span N and the 128th keeps the oldest, partly
 * covered one, which counts pro rata.
 *
 * The test.  A request of B bytes conforms at time t when
 *     bytes_in(t - Tw, t] + B <= R * Tw,   Tw = min(N, t - origin)
 * (DiscNice §5.3: sleep while B/N > R; the paper's delay is B/R - Tw).
 * Starting Tw at the origin, not N seconds back, is what denies a fresh
 * class a free burst of R * N: until N has passed the test is a plain
 * virtual clock (the k-th byte goes at origin + k / R).
 *
 * Where a byte sits in time.  Taken literally, "bytes_in" counts each release
 * as a point, and then a backlogged job sending chunks of B gets only
 * floor(R*N/B) chunks per window: 7 chunks of 128 KiB per second at
 * 1 MB/s, 8 % under the cap, and 37 % under for chunks of 0.63 R*N.  The
 * rate-windows paper avoids this by letting the window run from the start of
 * its oldest operation to the expected completion of the new one (§3.2).
 * The equivalent here: the X bytes of a bucket are taken to have used the
 * cap over the X / R seconds that end with the bucket, but never before the
 * end of the previous non-empty bucket (nor before the origin).  A bucket
 * of a steady stream (X ~ R * bucket_ns) then covers exactly its own span,
 * which is the pro-rata rule of the header; a lone chunk covers the gap it
 * waited for, so the window drains continuously and the stream gets R.  The
 * price: a burst after an idle gap is spread over the idle time it could
 * have used, so a window that starts just before a burst can carry R * N
 * plus that burst's bucket.  In a steady stream that bucket is one chunk.
 * Lone chunks are placed at the end of their bucket, which errs on the slow
 * side by at most bucket_ns / 2 per window (0.4 % of the cap).
 *
 * Oversize requests.  A request bigger than R * N can never satisfy the test;
 * it waits for an empty window and then B/R - N more (the paper's delay,
 * B/R - Tw, for an empty window), so a stream of them also gets R exactly.
 *
 * Refunds.  A negative charge (cancelled delayed writes, DiscNice §4.4) is
 * taken from the newest buckets first and never drives a bucket below zero;
 * whatever the window no longer holds is dropped.  Those bytes were charged
 * more than N ago and have already aged out: refunding them again would
 * grant a burst the window never paid for.  Buckets therefore never go
 * negative, which keeps the window's sum non-increasing as time passes and
 * makes the delay a single forward scan.
 *
 * Two writers at once.  The class lock keeps writers apart, but a waiter
 * takes over a lock held too long (segment_lock(), DN_LOCK_BREAK_NS), and
 * then the stopped holder may resume inside its critical section beside
 * the new one.  Nothing here may then go wrong beyond a miscounted charge:
 * every function reads head once, loops over at most DN_WINDOW_BUCKETS
 * buckets of that snapshot and indexes the ring modulo its size, and a
 * window with a zero span or bucket (a damaged segment) asks for no delay
 * and takes no charge.
 *
 * Arithmetic.  Rates up to 2^40 B/s, spans up to hours and byte counts up to
 * 2^50 are multiplied in 128 bits ("byte-nanoseconds per second" compare
 * bytes * 10^9 with R * ns); no floating point.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"
#include "policy/rate_window.h"

__extension__ typedef unsigned __int128 wide_t;

#define NS_PER_S UINT64_C(1000000000)
#define RING     ((uint64_t)DN_WINDOW_BUCKETS)

enum traffic { TRAFFIC_READ, TRAFFIC_WRITE, TRAFFIC_TOTAL };

/* A bucket's bytes, seen as released evenly over [start, end). */
struct fluid {
	uint64_t start;
	uint64_t end;
	uint64_t bytes;
};

static uint64_t saturate(wide_t value)
{
	return value > UINT64_MAX ? UINT64_MAX : (uint64_t)value;
}

static uint64_t add_saturated(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static wide_t div_up(wide_t a, wide_t b)
{
	return a / b + (a % b != 0);
}

/* floor(part * length / whole) for part < whole, without overflowing 128
 * bits: shift part and whole down together until whole fits 64 bits,
 * rounding whole up, so the result can only shrink (the safe direction). */
static uint64_t scale_below(wide_t part, uint64_t length, wide_t whole)
{
	while (whole > UINT64_MAX) {
		part >>= 1;
		whole = (whole >> 1) + 1;
	}
	return (uint64_t)(part * length / whole);
}

/* head, read once: another writer may move it (see "Two writers"). */
static uint64_t window_head(const struct dn_window *window)
{
	return __atomic_load_n(&window->head, __ATOMIC_RELAXED);
}

static uint64_t oldest_bucket(uint64_t head)
{
	return head >= RING - 1 ? head - (RING - 1) : 0;
}

static bool window_usable(const struct dn_window *window)
{
	return window->span_ns && window->bucket_ns;
}

/* A bucket's bytes of one kind; negative values (a damaged segment) count as
 * none. */
static uint64_t bucket_bytes(const struct dn_window *window, uint64_t index,
			     enum traffic traffic)
{
	int64_t read = window->read_bytes[index % RING];
	int64_t write = window->write_bytes[index % RING];
	uint64_t r = read > 0 ? (uint64_t)read : 0;
	uint64_t w = write > 0 ? (uint64_t)write : 0;
	switch (traffic) {
	case TRAFFIC_READ:
		return r;
	case TRAFFIC_WRITE:
		return w;
	case TRAFFIC_TOTAL:
		break;
	}
	return add_saturated(r, w);
}

void rate_window_init(struct dn_window *window, uint64_t span_ns, uint64_t origin_ns)
{
	if (span_ns == 0)
		span_ns = 1;
	window->span_ns = span_ns;
	window->bucket_ns = span_ns / (RING - 1) + (span_ns % (RING - 1) != 0);
	window->origin_ns = origin_ns;
	window->head = origin_ns / window->bucket_ns;
	for (uint64_t i = 0; i < RING; i++) {
		window->read_bytes[i] = 0;
		window->write_bytes[i] = 0;
	}
}

/*
 * The earliest time at which `bytes` conform to one cap, for a window that
 * gets no further charges.  It is computed from `since`, the time the window
 * took its present contents (the newest bucket's start), not from the
 * caller's clock: asking again after sleeping gives the same answer, which
 * matters for an oversize request that pays part of its way in advance.
 */
static uint64_t cap_ready(const struct dn_window *window, uint64_t head, enum traffic traffic,
			  uint64_t rate, uint64_t since, uint64_t bytes)
{
	const uint64_t span = window->span_ns;
	const uint64_t width = window->bucket_ns;
	const uint64_t origin = window->origin_ns;
	const wide_t budget = (wide_t)rate * span; /* R * N, in bytes * 10^9 */

	/* An oversize request is tested as R * N bytes, then pays the rest
	 * at the cap (see the top of the file). */
	wide_t window_bytes = budget / NS_PER_S;
	uint64_t admitted = bytes < window_bytes ? bytes : (uint64_t)window_bytes;
	uint64_t excess_ns = saturate(div_up((wide_t)(bytes - admitted) * NS_PER_S, rate));
	wide_t limit = budget - (wide_t)admitted * NS_PER_S;

	struct fluid fluids[DN_WINDOW_BUCKETS];
	size_t count = 0;
	wide_t total = 0;
	uint64_t previous_end = origin;
	for (uint64_t index = oldest_bucket(head); index <= head; index++) {
		uint64_t x = bucket_bytes(window, index, traffic);
		if (x == 0)
			continue;
		/* A bucket followed by a non-empty one is part of a run and
		 * ends where it ends; a lone bucket holds a lone release whose
		 * place in the bucket is unknown: take the middle, so that
		 * the error has no sign and is at most half a bucket. */
		uint64_t end = (index + 1) * width;
		if (index == head || bucket_bytes(window, index + 1, traffic) == 0)
			end = index * width + width / 2 + 1;
		uint64_t cost = saturate(div_up((wide_t)x * NS_PER_S, rate));
		uint64_t start = cost < end ? end - cost : 0;
		if (start < previous_end)
			start = previous_end;
		if (start >= end) /* charged before the origin: own bucket */
			start = index * width;
		fluids[count++] = (struct fluid){ start, end, x };
		previous_end = end;
		total += x;
	}

	/* Young window: nothing has aged out and Tw = t - origin grows, so
	 * the test is a virtual clock: ready once (total + B) / R has passed. */
	if (since - origin < span) {
		wide_t need = (total + admitted) * NS_PER_S;
		if (need <= budget) {
			uint64_t at = origin + saturate(div_up(need, rate));
			return add_saturated(at > since ? at : since, excess_ns);
		}
	}

	/* Full window, Tw = N: find the least cut c (= t - N) at which the
	 * bytes after c fit.  They only decrease as c moves on. */
	uint64_t from = since > add_saturated(origin, span) ? since : add_saturated(origin, span);
	uint64_t cut = from - span;
	wide_t after = total;
	for (size_t i = 0; i < count; i++) {
		const struct fluid *fluid = &fluids[i];
		after -= fluid->bytes; /* bytes of the fluids after this one */
		if (fluid->end <= cut)
			continue;
		if (after * NS_PER_S > limit)
			continue; /* still too full once this one has gone */
		wide_t room = limit - after * NS_PER_S;
		wide_t mass = (wide_t)fluid->bytes * NS_PER_S;
		if (room < mass) {
			/* Keep at most `keep` ns of this fluid inside the window. */
			uint64_t keep = scale_below(room, fluid->end - fluid->start, mass);
			if (fluid->end - keep > cut)
				cut = fluid->end - keep;
		}
		break;
	}
	return add_saturated(add_saturated(cut, span), excess_ns);
}

uint64_t rate_window_delay(const struct dn_window *window, const struct dn_caps *caps,
			   uint64_t now_ns, uint64_t read_bytes, uint64_t write_bytes)
{
	/* The window's contents date from the newest bucket (or the origin).
	 * A caller whose clock is behind that (it read the clock, then lost
	 * the race to the lock) waits at least the lag. */
	if (!window_usable(window))
		return 0;
	const uint64_t head = window_head(window);
	uint64_t since = window->origin_ns;
	if (head <= UINT64_MAX / window->bucket_ns && since < head * window->bucket_ns)
		since = head * window->bucket_ns;

	uint64_t ready = 0, r;
	if (caps->read_bps && read_bytes) {
		r = cap_ready(window, head, TRAFFIC_READ, caps->read_bps, since, read_bytes);
		ready = r > ready ? r : ready;
	}
	if (caps->write_bps && write_bytes) {
		r = cap_ready(window, head, TRAFFIC_WRITE, caps->write_bps, since, write_bytes);
		ready = r > ready ? r : ready;
	}
	if (caps->total_bps && (read_bytes || write_bytes)) {
		r = cap_ready(window, head, TRAFFIC_TOTAL, caps->total_bps, since,
			      add_saturated(read_bytes, write_bytes));
		ready = r > ready ? r : ready;
	}
	return ready > now_ns ? ready - now_ns : 0;
}

/* Move head to the bucket of now_ns, zeroing the buckets rotated past. */
static uint64_t window_advance(struct dn_window *window, uint64_t now_ns)
{
	uint64_t head = window_head(window);
	uint64_t index = now_ns / window->bucket_ns;
	if (index <= head)
		return head;
	uint64_t steps = index - head < RING ? index - head : RING;
	for (uint64_t i = 1; i <= steps; i++) {
		window->read_bytes[(head + i) % RING] = 0;
		window->write_bytes[(head + i) % RING] = 0;
	}
	__atomic_store_n(&window->head, index, __ATOMIC_RELAXED);
	return index;
}

static void ring_charge(int64_t *ring, uint64_t head, int64_t bytes)
{
	int64_t *newest = &ring[head % RING];
	if (bytes >= 0) {
		*newest = *newest > INT64_MAX - bytes ? INT64_MAX : *newest + bytes;
		return;
	}
	/* Refund newest first, never below zero (see the top of the file). */
	uint64_t owed = bytes == INT64_MIN ? (uint64_t)INT64_MAX + 1 : (uint64_t)-bytes;
	for (uint64_t age = 0; age < RING && age <= head && owed; age++) {
		int64_t *bucket = &ring[(head - age) % RING];
		if (*bucket <= 0)
			continue;
		uint64_t take = (uint64_t)*bucket < owed ? (uint64_t)*bucket : owed;
		*bucket -= (int64_t)take;
		owed -= take;
	}
}

/* Nothing in the ring of a kind a cap counts (a total cap counts both):
 * bytes no cap binds - a request read under a send cap - leave the
 * window as idle as it was.  The newest bucket first: in a steady stream
 * it holds bytes, and the scan ends there. */
static bool window_empty(const struct dn_window *window, const struct dn_caps *caps)
{
	bool reads = caps->read_bps || caps->total_bps, writes = caps->write_bps || caps->total_bps;
	uint64_t head = window_head(window) % RING;
	if ((reads && window->read_bytes[head] > 0) || (writes && window->write_bytes[head] > 0))
		return false;
	for (uint64_t i = 0; i < RING; i++)
		if ((reads && window->read_bytes[i] > 0) || (writes && window->write_bytes[i] > 0))
			return false;
	return true;
}

/* The time `bytes` take at `rate` (0 when there is no such cap). */
static uint64_t cost_ns(uint64_t rate, int64_t bytes)
{
	return rate && bytes > 0 ? saturate(div_up((wide_t)bytes * NS_PER_S, rate)) : 0;
}

/*
 * A charge into a window that holds nothing - a class that has not moved a
 * byte yet, or one idle for N - restarts its clock: origin moves up to
 * now less the time these bytes take at the cap, so they have used no more
 * credit than their own, and the bytes after them go by the young window's
 * virtual clock.  Without this the first bytes after a quiet spell may go
 * as a burst of everything the quiet could have carried (R * (now - origin),
 * up to R * N), and under a sliding window a burst does not stay one: a
 * backlogged job sends again whatever ages out, so it echoes once per N for
 * as long as the job is backlogged.  Measured on a socket at 64 MB/s: a
 * sender that connected 0.1 s after its class began sent 1.5x the cap in
 * the first half of every second and 0.5x in the second; at 64 MiB/s, 2x
 * and 0x, and +10 % over 10 s.  A job that waited for its credit (the
 * young window's delay) keeps it: origin only ever moves to where the
 * charged bytes would have begun at the cap.
 */
static void window_restart(struct dn_window *window, const struct dn_caps *caps,
			   uint64_t now_ns, int64_t read_bytes, int64_t write_bytes)
{
	uint64_t used = cost_ns(caps->read_bps, read_bytes);
	uint64_t w = cost_ns(caps->write_bps, write_bytes);
	uint64_t t = cost_ns(caps->total_bps, (read_bytes > 0 ? read_bytes : 0) +
						  (write_bytes > 0 ? write_bytes : 0));
	used = w > used ? w : used;
	used = t > used ? t : used;
	if (!used || now_ns <= used)
		return; /* no cap binds these bytes: nothing to pace */
	uint64_t start = now_ns - used;
	if (start > window->origin_ns && window_empty(window, caps))
		window->origin_ns = start;
}

void rate_window_charge(struct dn_window *window, const struct dn_caps *caps, uint64_t now_ns,
			int64_t read_bytes, int64_t write_bytes)
{
	/* A time older than head (a process whose clock read lost the race to
	 * the lock) is charged into head: the ring never runs backwards. */
	if (!window_usable(window))
		return;
	uint64_t head = window_advance(window, now_ns);
	if (caps && (read_bytes > 0 || write_bytes > 0))
		window_restart(window, caps, now_ns, read_bytes, write_bytes);
	if (read_bytes)
		ring_charge(window->read_bytes, head, read_bytes);
	if (write_bytes)
		ring_charge(window->write_bytes, head, write_bytes);
}

/* Bytes of one kind in (now - Tw, now], each bucket's bytes spread evenly
 * over its own span (the oldest counts pro rata), rounded to the nearest. */
static int64_t window_sum(const struct dn_window *window, uint64_t head, uint64_t now,
			  enum traffic traffic)
{
	const uint64_t width = window->bucket_ns;
	uint64_t waited = now > window->origin_ns ? now - window->origin_ns : 0;
	uint64_t cut = now - (waited < window->span_ns ? waited : window->span_ns);
	uint64_t newest = now / width > head ? now / width : head;
	wide_t sum = 0;
	for (uint64_t index = oldest_bucket(head); index <= head; index++) {
		if (newest - index >= RING)
			continue; /* rotated out, though not yet overwritten */
		uint64_t x = bucket_bytes(window, index, traffic);
		uint64_t start = index * width, end = start + width;
		if (start < window->origin_ns)
			start = window->origin_ns;
		if (x == 0 || end <= cut)
			continue;
		if (start >= cut)
			sum += x;
		else
			sum += ((wide_t)x * (end - cut) + (end - start) / 2) / (end - start);
	}
	return sum > INT64_MAX ? INT64_MAX : (int64_t)sum;
}

void rate_window_sums(const struct dn_window *window, uint64_t now_ns,
		      int64_t *read_bytes, int64_t *write_bytes)
{
	if (!window_usable(window)) {
		if (read_bytes)
			*read_bytes = 0;
		if (write_bytes)
			*write_bytes = 0;
		return;
	}
	uint64_t head = window_head(window);
	uint64_t now = now_ns;
	if (head <= UINT64_MAX / window->bucket_ns && now < head * window->bucket_ns)
		now = head * window->bucket_ns;
	if (read_bytes)
		*read_bytes = window_sum(window, head, now, TRAFFIC_READ);
	if (write_bytes)
		*write_bytes = window_sum(window, head, now, TRAFFIC_WRITE);
}

const struct policy policy_rate_window = {
	.name = "rate-window",
	.delay = rate_window_delay,
	.charge = rate_window_charge,
};
