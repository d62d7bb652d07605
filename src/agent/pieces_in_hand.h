/*
 * pieces_in_hand.h - prefetch pieces taken and not yet read in, for the
 * whole class (include/discnice/segment.h struct dn_piece_in_hand).
 *
 * Under a read cap the agent reads the model's windows in itself, a piece
 * at a time (io_read.c, prefetch), and sleeps for each piece's charge
 * before it reads the piece in.  During that sleep the piece's pages are
 * owed no more and not cached yet: to another thread's or process's
 * prediction they look missing, a new read, charged a second time.  So
 * the piece is put in the class segment while in hand; a plan that meets
 * it counts its pages once, a prefetch leaves them to their taker, and a
 * read that needs them waits for them.
 */
#ifndef DISCNICE_PIECES_IN_HAND_H
#define DISCNICE_PIECES_IN_HAND_H

#include <stdbool.h>
#include <stdint.h>

struct page_span {
	uint64_t first, end; /* pages [first, end) */
	bool theirs;         /* a piece taken from another open file's owed ranges */
};

/* Taking a piece: the pieces others hold and have read in are looked at
 * (in_hand_spans(), read_in_spans()) and the piece put in hand
 * (in_hand_begin()) under one holding of the class lock.  Looked at apart,
 * two takers that looked at once both took the same pages: two cats of one
 * cold file beside a CPU hog (traced: 21 of 40 runs under 0.975x the cap)
 * took one 1 MiB piece together, both paid for it, and the second found
 * it cached, so unrecorded (in_hand_end()), and the other paid the pages
 * after it again.  Returns what in_hand_release() takes; 0 with no
 * segment. */
uint64_t in_hand_hold(void);
void in_hand_release(uint64_t held);
/* Pages [first, end) of file (dev, ino), taken from the owed ranges of
 * open file `owner` of this process, are in this thread's hand; the caller
 * holds in_hand_hold().  Returns the slot for in_hand_end(); -1: not
 * recorded (no segment, or every slot taken). */
int in_hand_begin(uint64_t dev, uint64_t ino, uint64_t owner, uint64_t first, uint64_t end);
/* ... and are read in, or dropped (read_in_ns 0).  read_in_ns: pages
 * [first, end) of the piece, paid by its taker, were all missing then and
 * read in from then on (CLOCK_MONOTONIC, before the readahead(2) call);
 * recorded for read_in_spans(). */
void in_hand_end(int slot, uint64_t read_in_ns, uint64_t first, uint64_t end);
/* A signal handler took this thread out of our sleep by longjmp: the
 * piece it had in hand will never be read in. */
void in_hand_thread_left(void);
/* Spans one look gathers at most (a caller's array on the program's stack,
 * maybe a signal handler's: 64 of 24 bytes).  A span left out errs below
 * the cap: pages in another's hand read and paid again. */
#define IN_HAND_SPANS_MAX 64u
/* Append to spans[*n...] (at most max in all) the pieces of the file in
 * another thread's hand that meet pages [lo, hi); theirs marks those not
 * taken from owner's owed ranges, and only those from owner's are given
 * when mine_only.  held: in_hand_hold()'s value when the caller holds it,
 * else 0. */
void in_hand_spans(uint64_t held, uint64_t dev, uint64_t ino, uint64_t owner, bool mine_only,
		   uint64_t lo, uint64_t hi, struct page_span *spans, unsigned *n, unsigned max);
/* Append to spans[*n...] (at most max in all) the pieces of the file
 * another open file's taker read in after after_ns (CLOCK_MONOTONIC)
 * that meet pages [lo, hi), all missing when taken: paid there.  held: as
 * for in_hand_spans(). */
void read_in_spans(uint64_t held, uint64_t dev, uint64_t ino, uint64_t owner, uint64_t after_ns,
		   uint64_t lo, uint64_t hi, struct page_span *spans, unsigned *n, unsigned max);
/* Wait (cuttable, polling) while another thread has pages [lo, hi) of the
 * file in hand; returns the ns slept. */
uint64_t in_hand_wait(uint64_t dev, uint64_t ino, uint64_t lo, uint64_t hi);

/* Pages of [lo, hi) inside the union of spans[0..n) (sorted here). */
uint64_t page_spans_cover(uint64_t lo, uint64_t hi, struct page_span *spans, unsigned n,
			  uint64_t (*cached)(void *ctx, uint64_t first, uint64_t count), void *ctx);

#endif
