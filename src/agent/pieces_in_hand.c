/*
 * pieces_in_hand.c - prefetch pieces in hand, class-wide (see
 * pieces_in_hand.h).
 *
 * Measured before (a cold 256 MiB file at 16MiB/s, the kernel's count):
 * 32 threads reading slices of it through one descriptor were charged
 * 1.13x what the kernel read and ran 14 % under the cap, 64 threads 12 %;
 * two cats of it started together ran 26 % under (charged 1.35x).
 *
 * The slots live in the class segment, under the class lock: a piece is
 * taken every quarter of the window's budget at most, beside a charge
 * that takes the same lock.  A reader that finds no slot in hand
 * (in_hand_used) asks nothing more.  A slot whose thread is gone (killed
 * or cancelled in our sleep, a handler that longjmped out of it) is
 * freed by the next reader that would wait for it.  A piece read in
 * stays a few seconds (done_ns), for --feedback off: another open file of
 * the same pages (a process of its own, a descriptor per thread) planned
 * them as missing too, and its plan's figure, charged piece by piece,
 * would pay them again (64 threads with a descriptor each ran 27-44 %
 * under the cap, two cats 22-42 %).
 */
#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/pieces_in_hand.h"
#include "common/clock.h"
#include "common/segment.h"

/* The wait polls every millisecond; after the first 50 ms it asks whether
 * the piece's thread still exists, and it gives up after 2 s, reading the
 * pages itself as before (a piece's sleep is a quarter of the window's
 * budget, behind the other pieces in hand). */
#define IN_HAND_POLL_NS  (NS_PER_SEC / 1000)
#define IN_HAND_CHECK_NS (50 * NS_PER_SEC / 1000)
#define IN_HAND_WAIT_NS  (2 * NS_PER_SEC)
/* A piece read in is kept this long: another open file's plan of its
 * pages was made at most a window or so before its own piece comes up. */
#define IN_HAND_DONE_NS  (4 * NS_PER_SEC)

static void slot_free(struct dn_segment *seg, struct dn_piece_in_hand *p)
{
	if (!p->since_ns)
		return;
	__atomic_sub_fetch(p->done_ns ? &seg->in_hand_done : &seg->in_hand_used, 1, __ATOMIC_RELAXED);
	p->since_ns = p->done_ns = 0;
}

static bool slot_expired(const struct dn_piece_in_hand *p, uint64_t now)
{
	return p->done_ns && now - p->done_ns > IN_HAND_DONE_NS;
}

/* The thread that took it is gone (tgkill's null signal: ESRCH). */
static bool slot_left(const struct dn_piece_in_hand *p)
{
	int saved = errno;
	bool gone = syscall(SYS_tgkill, p->pid, p->tid, 0) == -1 && errno == ESRCH;
	errno = saved;
	return gone;
}

int in_hand_begin(uint64_t dev, uint64_t ino, uint64_t owner, uint64_t first, uint64_t end)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || first >= end)
		return -1;
	int saved = errno;
	pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
	uint64_t now = clock_now_ns();
	uint64_t token = segment_lock(seg);
	/* A free slot, else the oldest piece read in. */
	int slot = -1;
	for (unsigned i = 0; i < DN_PIECES_IN_HAND; i++) {
		struct dn_piece_in_hand *p = &seg->in_hand[i];
		if (slot_expired(p, now))
			slot_free(seg, p);
		if (!p->since_ns) {
			slot = (int)i;
			break;
		}
		if (p->done_ns && (slot < 0 || p->done_ns < seg->in_hand[slot].done_ns))
			slot = (int)i;
	}
	if (slot >= 0) {
		struct dn_piece_in_hand *p = &seg->in_hand[slot];
		slot_free(seg, p);
		__atomic_add_fetch(&seg->in_hand_used, 1, __ATOMIC_RELAXED);
		p->dev = dev;
		p->ino = ino;
		p->first = first;
		p->end = end;
		p->owner = owner;
		p->pid = pid;
		p->tid = tid;
		p->since_ns = now ? now : 1;
	}
	segment_unlock(seg, token);
	errno = saved;
	return slot;
}

void in_hand_end(int slot, bool read_in)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || slot < 0)
		return;
	int saved = errno;
	pid_t tid = (pid_t)syscall(SYS_gettid);
	uint64_t now = clock_now_ns();
	uint64_t token = segment_lock(seg);
	struct dn_piece_in_hand *p = &seg->in_hand[slot];
	/* (Freed already if a reader took this thread for gone: a fork
	 * child's tid is its own, and its parent's pieces are not its.) */
	if (p->since_ns && !p->done_ns && p->tid == tid && p->pid == getpid()) {
		if (read_in) {
			__atomic_sub_fetch(&seg->in_hand_used, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&seg->in_hand_done, 1, __ATOMIC_RELAXED);
			p->done_ns = now ? now : 1;
		} else {
			slot_free(seg, p);
		}
	}
	segment_unlock(seg, token);
	errno = saved;
}

void in_hand_thread_left(void)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || !__atomic_load_n(&seg->in_hand_used, __ATOMIC_RELAXED))
		return;
	int saved = errno;
	pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
	uint64_t token = segment_lock(seg);
	for (unsigned i = 0; i < DN_PIECES_IN_HAND; i++) {
		struct dn_piece_in_hand *p = &seg->in_hand[i];
		if (p->since_ns && !p->done_ns && p->pid == pid && p->tid == tid)
			slot_free(seg, p);
	}
	segment_unlock(seg, token);
	errno = saved;
}

/* Append the file's pieces, in hand (done false) or read in lately (done
 * true, only other open files'), to spans[*n...]; see the header. */
static void spans_of(uint64_t dev, uint64_t ino, uint64_t owner, bool mine_only, bool done,
		     struct page_span *spans, unsigned *n, unsigned max)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || !__atomic_load_n(done ? &seg->in_hand_done : &seg->in_hand_used, __ATOMIC_RELAXED))
		return;
	pid_t pid = getpid();
	uint64_t now = clock_now_ns();
	uint64_t token = segment_lock(seg);
	for (unsigned i = 0; i < DN_PIECES_IN_HAND && *n < max; i++) {
		const struct dn_piece_in_hand *p = &seg->in_hand[i];
		if (!p->since_ns || !p->done_ns != !done || p->dev != dev || p->ino != ino ||
		    slot_expired(p, now))
			continue;
		bool theirs = p->pid != pid || p->owner != owner;
		if ((theirs && mine_only) || (!theirs && done))
			continue;
		spans[*n].first = p->first;
		spans[*n].end = p->end;
		spans[*n].theirs = theirs;
		(*n)++;
	}
	segment_unlock(seg, token);
}

void in_hand_spans(uint64_t dev, uint64_t ino, uint64_t owner, bool mine_only,
		   struct page_span *spans, unsigned *n, unsigned max)
{
	spans_of(dev, ino, owner, mine_only, false, spans, n, max);
}

void in_hand_done_spans(uint64_t dev, uint64_t ino, uint64_t owner, struct page_span *spans,
			unsigned *n, unsigned max)
{
	spans_of(dev, ino, owner, false, true, spans, n, max);
}

/* Is [lo, hi) of the file in another thread's hand?  A piece in the
 * waiter's own hand was left (its thread never waits while it holds one):
 * freed.  check: so are the slots of threads gone. */
static bool in_hand_busy(struct dn_segment *seg, uint64_t dev, uint64_t ino, uint64_t lo, uint64_t hi,
			 bool check)
{
	bool busy = false;
	pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
	uint64_t token = segment_lock(seg);
	for (unsigned i = 0; i < DN_PIECES_IN_HAND; i++) {
		struct dn_piece_in_hand *p = &seg->in_hand[i];
		if (!p->since_ns || p->done_ns || p->dev != dev || p->ino != ino || p->end <= lo ||
		    p->first >= hi)
			continue;
		if ((p->pid == pid && p->tid == tid) || (check && slot_left(p)))
			slot_free(seg, p);
		else
			busy = true;
	}
	segment_unlock(seg, token);
	return busy;
}

uint64_t in_hand_wait(uint64_t dev, uint64_t ino, uint64_t lo, uint64_t hi)
{
	struct dn_segment *seg = agent.seg;
	uint64_t slept = 0;
	while (seg && __atomic_load_n(&seg->in_hand_used, __ATOMIC_RELAXED) && slept < IN_HAND_WAIT_NS) {
		if (!in_hand_busy(seg, dev, ino, lo, hi, slept >= IN_HAND_CHECK_NS))
			break;
		if (!throttle_pause(IN_HAND_POLL_NS, &slept))
			break;
	}
	return slept;
}

uint64_t page_spans_cover(uint64_t lo, uint64_t hi, struct page_span *spans, unsigned n,
			  uint64_t (*cached)(void *ctx, uint64_t first, uint64_t count), void *ctx)
{
	for (unsigned i = 1; i < n; i++) /* insertion sort by first: n is small */
		for (unsigned j = i; j && spans[j].first < spans[j - 1].first; j--) {
			struct page_span t = spans[j];
			spans[j] = spans[j - 1];
			spans[j - 1] = t;
		}
	uint64_t pages = 0, done = lo; /* [lo, done) is counted */
	for (unsigned i = 0; i < n; i++) {
		uint64_t a = spans[i].first > done ? spans[i].first : done;
		uint64_t b = spans[i].end < hi ? spans[i].end : hi;
		if (a < b) {
			pages += (b - a) - (cached ? cached(ctx, a, b - a) : 0);
			done = b;
		}
	}
	return pages;
}
