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
 * that takes the same lock; the taker holds it from its look at the
 * others' pieces until its own is in hand (in_hand_hold()).  A reader
 * that finds no slot used (in_hand_used) asks nothing more.  A slot whose
 * thread is gone (killed or cancelled in our sleep) is freed by a reader
 * that waits for its pages, after 50 ms, or by the next taker of a slot
 * once it is 10 s old; one a handler longjmped out of, by
 * agent_left_by_jump(); any, by a reader that waited 2 s for it.
 *
 * A piece read in whole (every page missing after its sleep) is also
 * written to a ring of records (dn_segment.read_in), for --feedback off,
 * where a piece is charged by its plan's count: another open file of the
 * same pages (two processes, a descriptor per thread) counted them too
 * if its plan came before they were read in, and takes them off its
 * count (io_read_prefetch.c, owed_take()).  Two cats of one cold file ran 20-38 %
 * under the cap, each paying what the other read in.
 *
 * The class lock is taken with the open file's spin lock held (owe_plan(),
 * owed_take(), prefetch_until() in io_read_prefetch.c), never the other way round.
 * segment_lock() sleeps only while another holder overstays (stopped,
 * killed: DN_LOCK_BREAK_NS), and then this file's other threads wait
 * for its spin lock as long.
 */
#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/pieces_in_hand.h"
#include "common/clock.h"
#include "common/segment.h"
#include "graybox/readahead.h"

/* The wait polls every millisecond; after the first 50 ms it asks whether
 * the piece's thread still exists, and after 2 s plus the time the pieces
 * in hand take to pay at the cap (in_hand_backlog_ns()) it frees the slot
 * and reads the pages itself, as before. */
#define IN_HAND_POLL_NS  (NS_PER_SEC / 1000)
#define IN_HAND_CHECK_NS (50 * NS_PER_SEC / 1000)
#define IN_HAND_WAIT_NS  (2 * NS_PER_SEC)
/* A slot older than this is looked at when a slot is taken. */
#define IN_HAND_STALE_NS (10 * NS_PER_SEC)

static void slot_free(struct dn_segment *seg, struct dn_piece_in_hand *p)
{
	if (p->since_ns) {
		p->since_ns = 0;
		__atomic_sub_fetch(&seg->in_hand_used, 1, __ATOMIC_RELAXED);
	}
}

/* Did thread tid of process pid take it? */
static bool slot_taken_by(const struct dn_piece_in_hand *p, pid_t pid, pid_t tid)
{
	return p->since_ns && p->pid == pid && p->tid == tid;
}

/* The thread that took it is gone (tgkill's null signal: ESRCH). */
static bool slot_left(const struct dn_piece_in_hand *p)
{
	int saved = errno;
	bool gone = syscall(SYS_tgkill, p->pid, p->tid, 0) == -1 && errno == ESRCH;
	errno = saved;
	return gone;
}

uint64_t in_hand_hold(void)
{
	return agent.seg ? segment_lock(agent.seg) : 0;
}

void in_hand_release(uint64_t held)
{
	if (agent.seg && held)
		segment_unlock(agent.seg, held);
}

int in_hand_begin(uint64_t dev, uint64_t ino, uint64_t owner, uint64_t first, uint64_t end)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || first >= end)
		return -1;
	int saved = errno;
	pid_t pid = getpid(), tid = gettid();
	uint64_t now = clock_now_ns();
	int slot = -1;
	for (unsigned i = 0; i < DN_PIECES_IN_HAND && slot < 0; i++) {
		struct dn_piece_in_hand *p = &seg->in_hand[i];
		/* A slot held long by a thread that is gone (killed or
		 * cancelled in our sleep) is taken back here, or it would
		 * stay until a reader of its pages waited for it. */
		if (p->since_ns && now - p->since_ns > IN_HAND_STALE_NS && slot_left(p))
			slot_free(seg, p);
		if (p->since_ns)
			continue;
		__atomic_add_fetch(&seg->in_hand_used, 1, __ATOMIC_RELAXED);
		p->dev = dev;
		p->ino = ino;
		p->first = first;
		p->end = end;
		p->owner = owner;
		p->pid = pid;
		p->tid = tid;
		p->since_ns = now ? now : 1;
		slot = (int)i;
	}
	errno = saved;
	return slot;
}

void in_hand_end(int slot, uint64_t read_in_ns, uint64_t first, uint64_t end)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || slot < 0)
		return;
	int saved = errno;
	pid_t pid = getpid(), tid = gettid();
	uint64_t token = segment_lock(seg);
	struct dn_piece_in_hand *p = &seg->in_hand[slot];
	/* (Freed already if a reader took this thread for gone: a fork
	 * child's tid is its own, and its parent's pieces are not its.) */
	if (slot_taken_by(p, pid, tid)) {
		if (read_in_ns && first < end) {
			struct dn_piece_read_in *r = &seg->read_in[seg->read_in_next % DN_PIECES_READ_IN];
			r->dev = p->dev;
			r->ino = p->ino;
			r->first = first > p->first ? first : p->first;
			r->end = end < p->end ? end : p->end;
			r->owner = p->owner;
			r->pid = p->pid;
			r->read_ns = read_in_ns;
			seg->read_in_next = (seg->read_in_next + 1) % DN_PIECES_READ_IN;
			if (__atomic_load_n(&seg->read_in_used, __ATOMIC_RELAXED) < DN_PIECES_READ_IN)
				__atomic_add_fetch(&seg->read_in_used, 1, __ATOMIC_RELAXED);
		}
		slot_free(seg, p);
	}
	segment_unlock(seg, token);
	errno = saved;
}

void read_in_spans(uint64_t held, uint64_t dev, uint64_t ino, uint64_t owner, uint64_t after_ns,
		   uint64_t lo, uint64_t hi, struct page_span *spans, unsigned *n, unsigned max)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || !__atomic_load_n(&seg->read_in_used, __ATOMIC_RELAXED))
		return;
	pid_t pid = getpid();
	uint64_t token = held ? held : segment_lock(seg);
	/* Until the ring is full, the records are [0, used). */
	unsigned used = seg->read_in_used < DN_PIECES_READ_IN ? seg->read_in_used : DN_PIECES_READ_IN;
	for (unsigned i = 0; i < used && *n < max; i++) {
		const struct dn_piece_read_in *r = &seg->read_in[i];
		if (r->read_ns <= after_ns || r->dev != dev || r->ino != ino || r->end <= lo ||
		    r->first >= hi || (r->pid == pid && r->owner == owner))
			continue;
		spans[*n].first = r->first;
		spans[*n].end = r->end;
		spans[*n].theirs = true;
		(*n)++;
	}
	if (!held)
		segment_unlock(seg, token);
}

void in_hand_spans(uint64_t held, uint64_t dev, uint64_t ino, uint64_t owner, bool mine_only,
		   uint64_t lo, uint64_t hi, struct page_span *spans, unsigned *n, unsigned max)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || !__atomic_load_n(&seg->in_hand_used, __ATOMIC_RELAXED))
		return;
	pid_t pid = getpid();
	uint64_t token = held ? held : segment_lock(seg);
	for (unsigned i = 0; i < DN_PIECES_IN_HAND && *n < max; i++) {
		const struct dn_piece_in_hand *p = &seg->in_hand[i];
		if (!p->since_ns || p->dev != dev || p->ino != ino || p->end <= lo || p->first >= hi)
			continue;
		bool theirs = p->pid != pid || p->owner != owner;
		if (theirs && mine_only)
			continue;
		spans[*n].first = p->first;
		spans[*n].end = p->end;
		spans[*n].theirs = theirs;
		(*n)++;
	}
	if (!held)
		segment_unlock(seg, token);
}

void in_hand_thread_left(void)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || !__atomic_load_n(&seg->in_hand_used, __ATOMIC_RELAXED))
		return;
	int saved = errno;
	pid_t pid = getpid(), tid = gettid();
	uint64_t token = segment_lock(seg);
	for (unsigned i = 0; i < DN_PIECES_IN_HAND; i++)
		if (slot_taken_by(&seg->in_hand[i], pid, tid))
			slot_free(seg, &seg->in_hand[i]);
	segment_unlock(seg, token);
	errno = saved;
}

/* Is [lo, hi) of the file in another thread's hand?  A piece in the
 * waiter's own hand was left (its thread never waits while it holds one):
 * freed.  check: so are the slots of threads gone.  give_up: so is every
 * slot in the way (waited for long enough: a holder stopped by a debugger,
 * or one whose tid lives on in another thread after an exec, would hold
 * every later read of its pages for the whole wait). */
static bool in_hand_busy(struct dn_segment *seg, uint64_t dev, uint64_t ino, uint64_t lo, uint64_t hi,
			 pid_t pid, pid_t tid, bool check, bool give_up)
{
	bool busy = false;
	uint64_t token = segment_lock(seg);
	for (unsigned i = 0; i < DN_PIECES_IN_HAND; i++) {
		struct dn_piece_in_hand *p = &seg->in_hand[i];
		if (!p->since_ns || p->dev != dev || p->ino != ino || p->end <= lo || p->first >= hi)
			continue;
		if (slot_taken_by(p, pid, tid) || give_up || (check && slot_left(p)))
			slot_free(seg, p);
		else
			busy = true;
	}
	segment_unlock(seg, token);
	return busy;
}

/*
 * How long a piece now in hand may rightly stay there: a piece's holder
 * sleeps for its charge behind the charges of the others in hand (a
 * quarter of the window's budget each, throttle_piece_bytes()), so the
 * last one waits for all of them to pay at the cap.  128 threads with a
 * descriptor each, reading 2 MiB slices of one file at 16MiB/s, queued
 * 8 s of pieces: a waiter that gave up after 2 s freed its neighbour's
 * slot and read the pages in itself, and their pre-read was read in and
 * charged again (preread_repair()): 0.94-0.98x the cap; with this wait
 * and preread_repair()'s own, 0.97-0.99x.
 */
static uint64_t in_hand_backlog_ns(struct dn_segment *seg)
{
	uint64_t cap = throttle_read_cap(), pages = 0;
	if (!cap)
		return 0;
	uint64_t token = segment_lock(seg);
	for (unsigned i = 0; i < DN_PIECES_IN_HAND; i++)
		if (seg->in_hand[i].since_ns)
			pages += seg->in_hand[i].end - seg->in_hand[i].first;
	segment_unlock(seg, token);
	unsigned __int128 ns = ((unsigned __int128)pages << READAHEAD_PAGE_SHIFT) * NS_PER_SEC / cap;
	return ns < UINT64_MAX - IN_HAND_WAIT_NS ? (uint64_t)ns : UINT64_MAX - IN_HAND_WAIT_NS;
}

uint64_t in_hand_wait(uint64_t dev, uint64_t ino, uint64_t lo, uint64_t hi)
{
	struct dn_segment *seg = agent.seg;
	uint64_t slept = 0, give_up_ns = UINT64_MAX;
	pid_t pid = 0, tid = 0; /* asked at the first look */
	while (seg && __atomic_load_n(&seg->in_hand_used, __ATOMIC_RELAXED)) {
		if (!tid) {
			pid = getpid();
			tid = gettid();
		}
		if (give_up_ns == UINT64_MAX && slept >= IN_HAND_WAIT_NS)
			give_up_ns = IN_HAND_WAIT_NS + in_hand_backlog_ns(seg);
		if (!in_hand_busy(seg, dev, ino, lo, hi, pid, tid, slept >= IN_HAND_CHECK_NS,
				  slept >= give_up_ns))
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
