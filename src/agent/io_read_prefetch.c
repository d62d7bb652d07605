/*
 * io_read_prefetch.c - how a read is paid under a read cap.  The kernel
 * reads a whole readahead window at once (8-16 MiB): charged at the call
 * that meets it, the disk would see a burst and the job a long sleep.  So
 * the pages the model predicts are owed (owe_plan()), and each call first
 * reads in, in pieces of a quarter of the window's budget paid one by one,
 * readahead(2) of what it owed below the page it needs (prefetch_until(),
 * owed_take()); the kernel then finds them cached.  Pieces read in are
 * recorded in the class (pieces_in_hand.c) so that other open files' plans
 * and watches do not take them for the kernel's (read_piece_in()).
 */
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/io_internal.h"
#include "agent/io_read_internal.h"
#include "agent/pieces_in_hand.h"
#include "agent/spin.h"
#include "common/clock.h"
#include "graybox/cache_detector.h"

/* Pages [lo, hi) are cached now: nothing owed there is read in or
 * charged by the prefetch (owed_take()). */
void owed_forget(struct open_file *of, uint64_t lo, uint64_t hi)
{
	uint64_t gone = 0;
	for (unsigned j = 0; j < of->owed_count;) {
		uint64_t first = of->owed[j].first, end = of->owed[j].end;
		uint64_t a = first > lo ? first : lo, b = end < hi ? end : hi;
		if (a < b) {
			gone += b - a;
			/* Keep the part after hi; a part before lo is behind the
			 * reader, which found it cached. */
			of->owed[j].first = b;
			if (b >= end) {
				of->owed[j] = of->owed[of->owed_count - 1];
				of->owed_count--;
				continue;
			}
		}
		j++;
	}
	uint64_t bytes = gone << PAGE_SHIFT;
	of->owed_bytes = of->owed_bytes > bytes && of->owed_count ? of->owed_bytes - bytes : 0;
}

/* Pages [*first, *end) of file (dev, ino), open as fd: are the missing
 * ones, by an exact detector that answered, one run?  Then *first and
 * *end are that run.  A piece whose start or end another reader's window
 * brought in meanwhile (a descriptor per thread, each reading the slice
 * after its neighbour's) has one such hole; found in about log2(pages)
 * counts, asked only of a piece not all missing. */
static bool still_missing_run(int fd, uint64_t dev, uint64_t ino, uint64_t *first, uint64_t *end)
{
	struct open_file *of = open_file_acquire(fd);
	if (!of)
		return false;
	bool run = false;
	if (of->dev == dev && of->ino == ino && detector_exact(of)) {
		enum dn_cache_backend backend = (enum dn_cache_backend)of->backend;
		uint64_t threshold = agent.seg ? agent.seg->probe_threshold_ns : 0;
#define COUNT(a, n) cache_detector_count(fd, backend, &of->probe, threshold, (a), (n))
		/* (A count below 0 is a detector that did not answer: no run.) */
		int64_t pages = (int64_t)(*end - *first), cached = COUNT(*first, pages);
		if (cached == 0) {
			run = true;
		} else if (cached > 0 && cached < pages) {
			/* The cached head: the longest k with [first, first + k)
			 * all cached (a count at most k, so monotone). */
			int64_t lo = 0, hi = pages - 1;
			while (lo < hi) {
				int64_t k = lo + (hi - lo + 1) / 2, c = COUNT(*first, k);
				if (c < 0)
					break;
				if (c == k)
					lo = k;
				else
					hi = k - 1;
			}
			uint64_t hole = *first + (uint64_t)lo, missing = (uint64_t)(pages - cached);
			if (lo == hi && COUNT(hole, missing) == 0) {
				*first = hole;
				*end = hole + missing;
				run = true;
			}
		}
#undef COUNT
	}
	open_file_release(of);
	return run;
}

/* Read in pages [first, first + pages) of fd, a piece in this thread's
 * hand at slot (-1: none), and let it go.  Recorded as read in from now on
 * (for other open files' plans and watches, read_in_spans()) if paid
 * whole when taken (all_missing: every page it found missing), and only
 * its pages missing still, after the sleep that paid for it, by a
 * detector that answered, if they are one run (a third reader may have
 * read some in since): a plan made after this may have seen the pages
 * cached already (page_cache_ra_unbounded() inserts them before the I/O),
 * so a record that said later would take them off a plan that never
 * counted them.  Before 2026-11-29 a piece not all missing still was not
 * recorded at all: 64 threads with a descriptor each, reading 4 MiB slices
 * of a cold file without feedback, had their neighbours' pieces charged
 * again as the kernel's window (watch_look()), 3-21 MiB for the 2-3 MiB
 * those pieces read in. */
static void read_piece_in(int fd, int slot, uint64_t dev, uint64_t ino, uint64_t first,
			  uint64_t pages, bool all_missing)
{
	uint64_t rec_first = first, rec_end = first + pages;
	uint64_t from_ns = slot >= 0 && all_missing &&
					   still_missing_run(fd, dev, ino, &rec_first, &rec_end)
				   ? clock_now_ns()
				   : 0;
	if (syscall(SYS_readahead, fd, (off_t)(first << PAGE_SHIFT), (size_t)(pages << PAGE_SHIFT)))
		from_ns = 0;
	in_hand_end(slot, from_ns, rec_first, rec_end);
}

/*
 * After the pre-read, before the reader may cross the marker: are its
 * pages all still there?  At a low cap it takes seconds, and pages read
 * in and not yet used can be reclaimed meanwhile (on this project's VM a
 * DAMON pageout scheme takes pages idle for about a second: measured 3-20
 * of 4,096 gone by the pre-read's end, in 5 of 8 runs).  One hole within
 * max_pages of the marker and page_cache_async_ra() reads from it, a whole
 * window (10-15 MiB in one call, measured).  So each hole is read in
 * again, charged, up to a few rounds.  Exact detectors only: the probe
 * backend does not pre-read.
 *
 * A hole may also be another thread's piece, in its hand: the run's end
 * is where that reader is (a descriptor per thread, each reading a slice
 * after its neighbour's), and it takes its next pieces there, charged
 * before they are read in.  Counted as holes, they were charged and read
 * in twice: 128 threads reading 2 MiB slices of one file at 16MiB/s ran
 * 0.95x the cap, 6-19 MiB paid twice here.  So the holes are counted
 * under the class lock beside the pieces in hand, and those in a hand
 * waited for (in_hand_wait()), a few times at most; and the holes to read
 * are put in our hand under the same lock, for that reader to wait for in
 * its turn while we sleep for them.  Returns the ns slept.
 */
uint64_t preread_repair(int fd, uint64_t *charged)
{
	uint64_t slept = 0;
	unsigned waits = 0;
	for (int round = 0; round < 4; round++) {
		struct open_file *of = open_file_acquire(fd);
		if (!of)
			break;
		uint64_t first = of->watch.preread_first, end = of->watch.preread_end, missing = 0;
		uint64_t in_hand = 0, dev = of->dev, ino = of->ino;
		int slot = -1;
		bool checked = end > first && round < 3, wait = false;
		if (checked) {
			struct view_ctx v = { .fd = fd, .of = of, .use_cache = true };
			struct page_span spans[IN_HAND_SPANS_MAX];
			unsigned n = 0;
			uint64_t held = in_hand_hold();
			in_hand_spans(held, dev, ino, (uintptr_t)of, false, first, end, spans, &n,
				      IN_HAND_SPANS_MAX);
			missing = (end - first) - detector_count(&v, first, end - first);
			if (missing && n)
				in_hand = page_spans_cover(first, end, spans, n, detector_cached, &v);
			wait = in_hand && waits < 4;
			if (!wait && missing > in_hand)
				slot = in_hand_begin(dev, ino, (uintptr_t)of, first, end);
			in_hand_release(held);
		}
		if (wait) {
			open_file_release(of);
			waits++;
			slept += in_hand_wait(dev, ino, first, end);
			if (throttle_cut_pending())
				break;
			round--; /* a wait is no round */
			continue;
		}
		missing -= in_hand < missing ? in_hand : missing;
		if (!missing) {
			of->watch.preread_first = of->watch.preread_end = 0;
			/* All in, as checked: only then may the watch look less often. */
			of->watch.preread_done = checked;
		}
		open_file_release(of);
		if (!missing)
			break;
		slept += throttle_charge(missing << PAGE_SHIFT, 0);
		if (throttle_cut_pending()) {
			in_hand_end(slot, 0, 0, 0);
			break;
		}
		*charged += missing << PAGE_SHIFT;
		agent_trace("preread-repair", 0, missing << PAGE_SHIFT, slept);
		read_piece_in(fd, slot, dev, ino, first, end - first, missing == end - first);
	}
	return slept;
}

/*
 * Prefetch under a read cap.
 *
 * A readahead window is read by the kernel in one burst: 8 MiB at once is
 * 1.6 s of a 5 MB/s budget, so a job read at "5 MB/s" would hit the disk in
 * 8 MiB spikes.  Under a cap the agent reads the model's windows in itself,
 * with readahead(2) (force_page_cache_ra(): exactly the missing pages, no
 * marker), one chunk at a time and only just ahead of the program, the
 * throttle between chunks; the program's reads then find their pages
 * cached.  The model keeps predicting the kernel's windows, so the total
 * stays what the kernel would have read, and pages do not sit in the cache
 * for seconds waiting to be read (where reclaim could take them).
 */
/* Widen [*first, *end) over owed range j, which leaves the owed ranges;
 * of is locked. */
static void owed_absorb(struct open_file *of, unsigned j, uint64_t *first, uint64_t *end)
{
	if (of->owed[j].first < *first)
		*first = of->owed[j].first;
	if (of->owed[j].end > *end)
		*end = of->owed[j].end;
	of->owed[j] = of->owed[--of->owed_count];
}

/* Add the plan's ranges to what the file still owes; of is locked. */
void owe_plan(int fd, struct open_file *of, const struct read_plan *plan, uint64_t predicted)
{
	/* A page owed already and predicted again (the model lost sight of
	 * the pages its plan had not yet read in - its resident range moved
	 * to a new stream position - and found them missing) is one read,
	 * not two: owed twice, the surplus was charged at once when the
	 * ranges ran out (owed_take()), 1.7-2.6 s of sleep at the end of a
	 * 7.5MiB/s cat without feedback, 20 MB the kernel never read. */
	uint64_t again = 0;
	/* So is a page another thread took from these owed ranges and has
	 * not read in yet (pieces_in_hand.h): missing to
	 * the detector, owed no more.  Each page once (a plan merged into
	 * the owed ranges may span a piece in hand), and with an exact
	 * detector only a page the prediction counted: missing now (owed
	 * ranges merged so may hold pages read in since). */
	struct page_span spans[sizeof of->owed / sizeof of->owed[0] + IN_HAND_SPANS_MAX];
	unsigned n = 0;
	for (unsigned j = 0; j < of->owed_count; j++) {
		spans[n].first = of->owed[j].first;
		spans[n].end = of->owed[j].end;
		n++;
	}
	uint64_t lo = UINT64_MAX, hi = 0;
	for (unsigned i = 0; i < plan->ranges; i++) {
		lo = plan->range[i].first < lo ? plan->range[i].first : lo;
		hi = plan->range[i].end > hi ? plan->range[i].end : hi;
	}
	/* (Pieces from other open files' owed ranges are left to
	 * owed_take(), which takes their pages off the plan's figure.) */
	in_hand_spans(0, of->dev, of->ino, (uintptr_t)of, true, lo, hi, spans, &n,
		      sizeof spans / sizeof spans[0]);
	struct view_ctx v = { .fd = fd, .of = of, .use_cache = true };
	for (unsigned i = 0; i < plan->ranges && n; i++)
		again += page_spans_cover(plan->range[i].first, plan->range[i].end, spans, n,
					  detector_exact(of) ? detector_cached : NULL, &v);
	again <<= PAGE_SHIFT;
	predicted = predicted > again ? predicted - again : 0;
	/* Each range keeps when it was planned: with --feedback off, pages
	 * another open file's piece read in after that were counted here
	 * too (missing then), and are taken off (owed_take()).  So a window
	 * next to an owed one is a range of its own while there is room (one
	 * merged would move the older pages' time on, and leave them
	 * charged); an overlapping one is merged, the later time kept (the
	 * pages planned again were counted once, owe_plan's `again`). */
	uint64_t now = clock_now_ns();
	const unsigned room = sizeof of->owed / sizeof of->owed[0];
	for (unsigned i = 0; i < plan->ranges; i++) {
		uint64_t first = plan->range[i].first, end = plan->range[i].end;
		/* Every owed range it overlaps becomes part of it (one left
		 * beside the merged one would owe its pages twice, and take
		 * them off twice). */
		for (unsigned j = 0; j < of->owed_count;) {
			if (first < of->owed[j].end && end > of->owed[j].first)
				owed_absorb(of, j, &first, &end);
			else
				j++;
		}
		if (of->owed_count == room) {
			/* Full: into a range it touches, else in place of the
			 * oldest (a stream long abandoned). */
			unsigned j, oldest = 0;
			for (j = 0; j < room; j++) {
				if (first == of->owed[j].end || end == of->owed[j].first)
					break;
				if (of->owed[j].plan_ns < of->owed[oldest].plan_ns)
					oldest = j;
			}
			if (j < room)
				owed_absorb(of, j, &first, &end);
			else
				of->owed[oldest] = of->owed[--of->owed_count];
		}
		of->owed[of->owed_count].first = first;
		of->owed[of->owed_count].end = end;
		of->owed[of->owed_count].plan_ns = now;
		of->owed_count++;
	}
	of->owed_bytes += predicted;
}

/* Pages another open file's taker reads in and pays were counted in the
 * plan's figure too (another process's plan, or a description of its own,
 * could not see them owed): not ours to pay.  of is locked. */
static void owed_skip(struct open_file *of, uint64_t pages)
{
	uint64_t bytes = pages << PAGE_SHIFT;
	of->owed_bytes -= of->owed_bytes < bytes ? of->owed_bytes : bytes;
}

/* Take the next piece to read in before the program reads up to page
 * need_end: the owed range nearest below need_end.  of is locked.
 *
 * What the piece is charged.  The plan was predicted when the program's
 * read met the model's window, up to a second before the piece is read
 * in; meanwhile the kernel may have read some of its pages itself.
 * Measured on this VM (a cold 256 MiB cat at 7.5 MiB/s; /proc/PID/io of
 * the job against the run's predicted counter, tick by tick): reclaim
 * (kdamond; 40-150 MiB of workingset refaults per 35 s run) takes a page
 * we read in before the program reads it, the program's read misses,
 * page_cache_sync_ra() starts the kernel's own windows and reads 2-3 MiB
 * ahead of us at once - after the whole file is evicted, 8-16 MiB windows.
 * With --feedback on the supervisor sees the kernel ahead of every
 * prediction and charges those bytes when the kernel submits them
 * (tool_regulate.c); charging them again here when the piece comes up made
 * the window carry them twice - one run charged 5.5 MB of feedback for
 * 1.4 MB of I/O beyond the prediction and ended 1.5 % under its cap (2-5 %
 * in issue #9's runs).  So under feedback, with an exact detector
 * (cachestat, mincore), the piece is charged for its pages still missing
 * now, and the plan's bytes whose pages someone else brought in are
 * dropped.  Without feedback nobody else charges them: the plan's figure
 * stands, paid as the program consumes the pages (late, but paid; charged
 * by missing pages, a cat through the kernel's windows ran at 5 x its
 * cap).  The probe backend (probing reads pages in) and predictors without
 * the cache keep the plan's figure too.
 *
 * held: in_hand_hold(), kept by the caller until the piece is in hand
 * (in_hand_begin()), so that no other taker takes the same pages meanwhile
 * (pieces_in_hand.h). */
static bool owed_take(int fd, struct open_file *of, uint64_t held, uint64_t need_end,
		      uint64_t piece_pages, uint64_t *first, uint64_t *pages, uint64_t *charge,
		      bool *whole)
{
	if (!of->owed_count)
		return false;
	/* Pages in another thread's piece (a plan merged into the owed
	 * ranges over it, another process's plan) are that thread's to read
	 * in and pay: read here too, the kernel counted them before that
	 * thread's prediction was counted, and the supervisor's feedback
	 * held the job for them. */
	struct page_span theirs[IN_HAND_SPANS_MAX];
	unsigned n = 0;
	uint64_t lo = UINT64_MAX, hi = 0;
	for (unsigned j = 0; j < of->owed_count; j++) {
		lo = of->owed[j].first < lo ? of->owed[j].first : lo;
		hi = of->owed[j].end > hi ? of->owed[j].end : hi;
	}
	in_hand_spans(held, of->dev, of->ino, (uintptr_t)of, false, lo, hi, theirs, &n,
		      IN_HAND_SPANS_MAX);
	uint64_t skipped = 0; /* pages in the hand of another open file's taker */
	uint64_t plan_ns = 0;
	for (;;) {
		unsigned best = of->owed_count;
		for (unsigned j = 0; j < of->owed_count; j++)
			if (of->owed[j].first < need_end &&
			    (best == of->owed_count || of->owed[j].first < of->owed[best].first))
				best = j;
		if (best == of->owed_count) {
			owed_skip(of, skipped);
			return false;
		}
		uint64_t end = of->owed[best].end;
		plan_ns = of->owed[best].plan_ns;
		*first = of->owed[best].first;
		for (unsigned i = 0; i < n; i++) /* skip theirs at the start */
			if (theirs[i].first <= *first && *first < theirs[i].end) {
				if (theirs[i].theirs)
					skipped += (theirs[i].end < end ? theirs[i].end : end) - *first;
				*first = theirs[i].end;
				i = UINT_MAX; /* again from the first: i++ wraps to 0 */
				if (*first >= end)
					break;
			}
		*pages = end > *first ? end - *first : 0;
		if (*pages > piece_pages)
			*pages = piece_pages;
		for (unsigned i = 0; i < n; i++) /* ... and stop at theirs after it */
			if (theirs[i].first > *first && theirs[i].first < *first + *pages)
				*pages = theirs[i].first - *first;
		of->owed[best].first = *first + *pages;
		if (of->owed[best].first >= of->owed[best].end) {
			of->owed[best] = of->owed[of->owed_count - 1];
			of->owed_count--;
		}
		if (*pages)
			break;
	}
	owed_skip(of, skipped);
	bool by_missing = feedback_charges() && detector_exact(of);
	uint64_t missing = *pages;
	struct view_ctx v = { .fd = fd, .of = of, .use_cache = true };
	/* Maybe all missing: asked again after the piece's sleep
	 * (prefetch_until()). */
	*whole = false;
	if (by_missing) {
		missing -= detector_count(&v, *first, *pages);
		*whole = missing == *pages;
	} else if (detector_exact(of)) {
		/* Pages another open file's taker read in since this range was
		 * planned (a process of its own, a descriptor per thread,
		 * reading the same pages) were missing to both plans and paid
		 * there: taken off the plan's figure - those still cached (a
		 * page reclaimed since is read again, by this piece).  Two cats
		 * of one file ran 20-31 % under the cap, each paying the pages
		 * the other read in.  (theirs serves again: the stack is the
		 * program's, maybe a signal handler's.) */
		n = 0;
		read_in_spans(held, of->dev, of->ino, (uintptr_t)of, plan_ns, *first, *first + *pages,
			      theirs, &n, IN_HAND_SPANS_MAX);
		if (n) {
			uint64_t covered = page_spans_cover(*first, *first + *pages, theirs, n, NULL, NULL);
			uint64_t paid = covered - page_spans_cover(*first, *first + *pages, theirs, n,
								   detector_cached, &v);
			missing -= paid;
			owed_skip(of, paid);
			/* Their pages at the piece's start are not ours to read
			 * in: the piece begins after them, and so can be all
			 * missing, and recorded in its turn for their next
			 * piece (two readers of one file leapfrog: a piece of
			 * each overlaps the other's last one). */
			uint64_t a = *first; /* theirs is sorted now */
			for (unsigned i = 0; i < n; i++)
				if (theirs[i].first <= a && a < theirs[i].end)
					a = theirs[i].end;
			if (a > *first && a < *first + *pages &&
			    detector_count(&v, *first, a - *first) == a - *first) {
				*pages -= a - *first;
				*first = a;
			}
		}
		*whole = true;
	}
	uint64_t bytes = missing << PAGE_SHIFT;
	/* By missing pages, exactly what the piece makes the kernel read
	 * (even past the plan's figure: a page reclaimed since is read
	 * again); else the plan's figure, piece by piece. */
	*charge = by_missing || of->owed_bytes > bytes ? bytes : of->owed_bytes;
	of->owed_bytes -= of->owed_bytes < *charge ? of->owed_bytes : *charge;
	if (!of->owed_count) {
		/* Nothing left to read in: what remains was predicted outside
		 * the plan's ranges - the kernel's own window watch_look()
		 * found, charged with the plan (the probes' reads are charged
		 * apart, plan_read()) - or, by_missing, pages someone else
		 * brought in, which feedback charges. */
		if (!by_missing)
			*charge += of->owed_bytes;
		of->owed_bytes = 0;
	}
	return true;
}

/*
 * The probe backend's prefetch, made good by the kernel's count.  The
 * model's windows are judged cached or not by timing probes of a few
 * pages each (cache_detector.c), and a window partly cached - the end of
 * a run another reader left, pages the kernel read ahead by itself since
 * (io_unseen_settle()) - is predicted whole: the plan overstates, and the
 * job ran up to 11 % under its cap (rate_peeked.py --backend probe).  But
 * readahead(2) reads exactly the missing pages, submitted by this thread
 * (force_page_cache_ra(), counted at submit_bio()), so its read blocks
 * before and after say what the piece really cost.  What the piece was
 * charged for its pages and the kernel did not read is taken back at once,
 * while the window still holds it; what it read beyond the charge (owed
 * bytes run short) is charged.  A last piece's charge may carry bytes
 * predicted outside the ranges (owed_take()): only the piece's own pages
 * are compared.  The same for an exact backend's file whose calls are
 * checked so (io_unseen_wanted()): a window a checked call charged as the
 * kernel's own holds pages of the plan, which the piece must not charge
 * again.
 */
static uint64_t prefetch_settle(uint64_t before, uint64_t piece_bytes, uint64_t charge,
				uint64_t *charged)
{
	uint64_t now = io_thread_blocks(false);
	if (now == UINT64_MAX || now < before)
		return 0;
	uint64_t read = (now - before) * 512, paid = charge < piece_bytes ? charge : piece_bytes;
	if (read < paid) {
		throttle_unpredict_read(paid - read);
		*charged -= paid - read;
		return 0;
	}
	if (read > charge) {
		*charged += read - charge;
		return throttle_charge_done(read - charge, 0);
	}
	return 0;
}

/* Read in, paced, everything owed below page need_end (plus one piece of
 * lookahead), then wait for the call's pages [need_first, need_end) in
 * other threads' hands.  Returns ns slept; adds the bytes charged to
 * *charged. */
/*
 * What prefetch_settle() would take back, taken off before the sleep.  A
 * piece of a checked file (io_unseen_wanted()) whose pages are cached
 * already - its plan's pages another reader's window or piece brought in
 * since - was charged whole, slept for, and refunded when its
 * readahead(2) read nothing.  The refund gives the window its room back,
 * but the other threads that looked at the window while the charge was
 * in it slept for it all the same: 8 threads with a descriptor each,
 * reading slices of a cold 34 MiB file at 9M without feedback, charged
 * 256-416 such pages a run in 3 of 16 runs and those ran 0.969-0.972x
 * the cap, their charges exact once refunded (2026-11-29, traced).  An
 * exact detector counts the pages missing now; the piece's own pages are
 * charged for those (a last piece's bytes predicted outside the ranges
 * stay, as in prefetch_settle()), and the settle still corrects what
 * changes between this count and the readahead(2).  of is locked.
 */
static uint64_t settled_before(int fd, struct open_file *of, uint64_t first, uint64_t pages,
			       uint64_t charge)
{
	if (!detector_exact(of) || feedback_charges())
		return charge; /* by_missing already (owed_take()), or no count to trust */
	struct view_ctx v = { .fd = fd, .of = of, .use_cache = true };
	uint64_t cached = detector_count(&v, first, pages) << PAGE_SHIFT;
	uint64_t own = pages << PAGE_SHIFT;
	uint64_t paid = charge < own ? charge : own; /* the piece's own, as the settle compares */
	uint64_t missing = own - (cached < own ? cached : own);
	return missing < paid ? charge - (paid - missing) : charge;
}

uint64_t prefetch_until(int fd, uint64_t need_first, uint64_t need_end, uint64_t *charged)
{
	uint64_t piece_pages = pages_of(throttle_piece_bytes()), slept = 0, dev = 0, ino = 0;
	if (!piece_pages)
		piece_pages = 1;
	for (;;) {
		uint64_t first, pages, charge;
		bool whole;
		struct open_file *of = open_file_acquire(fd);
		if (!of)
			return slept;
		/* (Nothing owed, as for most calls: no lock.) */
		uint64_t held = of->owed_count ? in_hand_hold() : 0;
		bool more = owed_take(fd, of, held, need_end + piece_pages, piece_pages, &first, &pages,
				      &charge, &whole);
		bool measured = more && io_unseen_wanted(of);
		if (measured)
			charge = settled_before(fd, of, first, pages, charge);
		int slot = more ? in_hand_begin(of->dev, of->ino, (uintptr_t)of, first, first + pages) : -1;
		in_hand_release(held);
		dev = of->dev;
		ino = of->ino;
		open_file_release(of);
		if (!more)
			break;
		slept += throttle_charge(charge, 0);
		if (throttle_cut_pending()) {
			in_hand_end(slot, 0, 0, 0);
			return slept; /* the call ends: io_read() takes the cut */
		}
		*charged += charge;
		uint64_t before = measured ? io_thread_blocks(false) : UINT64_MAX;
		read_piece_in(fd, slot, dev, ino, first, pages, whole);
		if (before != UINT64_MAX)
			slept += prefetch_settle(before, pages << PAGE_SHIFT, charge, charged);
	}
	/* What the call needs may be in another thread's hand: read now,
	 * the kernel reads those pages itself, and counts them before that
	 * thread's prediction is counted - the supervisor's feedback took
	 * them for I/O nobody predicted and held the job (32-64 threads on
	 * one description ran 2-7 % under the cap).  Wait for them. */
	return slept + in_hand_wait(dev, ino, need_first, need_end);
}
