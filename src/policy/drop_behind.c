/*
 * drop_behind.c - which pages the job may drop behind itself, and when
 * (see drop_behind.h).
 */
#include <string.h>

#include "policy/drop_behind.h"

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

void drop_behind_init(struct drop_behind *d)
{
	memset(d, 0, sizeof *d);
	for (int i = 0; i < DROP_FILES; i++)
		d->files[i].fd = -1;
}

int drop_behind_find(const struct drop_behind *d, uint64_t dev, uint64_t ino)
{
	for (int i = 0; i < DROP_FILES; i++)
		if (d->files[i].used && d->files[i].dev == dev && d->files[i].ino == ino)
			return i;
	return -1;
}

int drop_behind_file(struct drop_behind *d, uint64_t dev, uint64_t ino, int fd)
{
	int i = drop_behind_find(d, dev, ino);
	if (i < 0) {
		/* A free slot, else the least recently used file, preferring
		 * one with nothing pending (forgetting it only forgets what it
		 * dropped, i.e. one chance to see a re-read). */
		for (int j = 0; j < DROP_FILES; j++) {
			const struct drop_file *f = &d->files[j];
			if (!f->used) {
				i = j;
				break;
			}
			if (i < 0)
				i = j;
			const struct drop_file *v = &d->files[i];
			bool f_idle = !f->pending_count, v_idle = !v->pending_count;
			if ((f_idle && !v_idle) || (f_idle == v_idle && f->last_use < v->last_use))
				i = j;
		}
		struct drop_file *f = &d->files[i];
		memset(f, 0, sizeof *f);
		f->used = true;
		f->dev = dev;
		f->ino = ino;
	}
	d->files[i].fd = fd;
	d->files[i].last_use = ++d->tick;
	return i;
}

static bool overlaps(uint64_t a_first, uint64_t a_end, uint64_t b_first, uint64_t b_end)
{
	return a_first < b_end && b_first < a_end;
}

static void pending_remove(struct drop_file *f, unsigned i)
{
	memmove(&f->pending[i], &f->pending[i + 1], sizeof f->pending[0] * (f->pending_count - i - 1));
	f->pending_count--;
}

/* Add [first, end) to the file's pending ranges of one kind, merging with
 * overlapping or adjacent ones; a full list forgets its oldest range (its
 * pages stay cached: keeping is the safe way to fail). */
static void pending_add(struct drop_file *f, uint64_t first, uint64_t end, bool written)
{
	for (unsigned i = 0; i < f->pending_count; i++) {
		struct drop_pending *p = &f->pending[i];
		if (p->written != written || first > p->end || end < p->first)
			continue;
		p->first = min_u64(p->first, first);
		p->end = max_u64(p->end, end);
		/* The wider range may now reach others of its kind. */
		for (unsigned j = 0; j < f->pending_count;) {
			struct drop_pending *q = &f->pending[j];
			if (j != i && q->written == written && q->first <= p->end && q->end >= p->first) {
				p->first = min_u64(p->first, q->first);
				p->end = max_u64(p->end, q->end);
				pending_remove(f, j);
				if (j < i)
					p = &f->pending[--i];
				continue;
			}
			j++;
		}
		return;
	}
	if (f->pending_count == DROP_PENDING)
		pending_remove(f, 0);
	f->pending[f->pending_count++] = (struct drop_pending){ first, end, written };
}

static void keep(struct drop_file *f)
{
	f->keep = true;
	f->pending_count = 0;
}

void drop_behind_missed(struct drop_behind *d, int file, uint64_t first, uint64_t end)
{
	struct drop_file *f = &d->files[file];
	if (f->keep || end <= first)
		return;
	/* Reading in again what we dropped: the job re-reads this file, and
	 * every drop would cost it another disk read.  Keep it. */
	for (unsigned i = 0; i < f->dropped_count; i++)
		if (overlaps(first, end, f->dropped[i].first, f->dropped[i].end)) {
			keep(f);
			return;
		}
	pending_add(f, first, end, false);
}

void drop_behind_read(struct drop_behind *d, int file, uint64_t pos, uint64_t bytes)
{
	struct drop_file *f = &d->files[file];
	if (f->keep || !bytes)
		return;
	uint64_t end = pos + bytes;
	if (overlaps(pos, end, f->run_first, f->run_end)) {
		keep(f); /* bytes this run has read already: a re-reader */
		return;
	}
	if (pos == f->run_end && f->run_end > f->run_first) {
		f->run_end = end;
	} else {
		f->run_first = pos;
		f->run_end = end;
	}
	/* The page holding byte `end` may be read on: it is not behind. */
	f->read_high = max_u64(f->read_high, end >> DROP_PAGE_SHIFT);
}

void drop_behind_written(struct drop_behind *d, int file, uint64_t first, uint64_t end)
{
	struct drop_file *f = &d->files[file];
	if (f->keep || end <= first)
		return;
	f->written_high = max_u64(f->written_high, end);
	pending_add(f, first, end, true);
}

void drop_behind_keep(struct drop_behind *d, int file)
{
	keep(&d->files[file]);
}

bool drop_behind_pending(const struct drop_behind *d, int file)
{
	return d->files[file].pending_count != 0;
}

/* Remember a dropped range (merged with its neighbours; a full list
 * forgets the oldest). */
static void dropped_add(struct drop_file *f, struct drop_range r)
{
	for (unsigned i = 0; i < f->dropped_count; i++) {
		struct drop_range *q = &f->dropped[i];
		if (r.first <= q->end && r.end >= q->first) {
			q->first = min_u64(q->first, r.first);
			q->end = max_u64(q->end, r.end);
			return;
		}
	}
	if (f->dropped_count == DROP_DROPPED) {
		memmove(&f->dropped[0], &f->dropped[1], sizeof f->dropped[0] * (DROP_DROPPED - 1));
		f->dropped_count--;
	}
	f->dropped[f->dropped_count++] = r;
}

bool drop_behind_next(struct drop_behind *d, int file, uint64_t lag, uint64_t batch,
		      uint64_t align, bool all, struct drop_range *out)
{
	struct drop_file *f = &d->files[file];
	if (f->keep)
		return false;
	for (unsigned i = 0; i < f->pending_count; i++) {
		struct drop_pending *p = &f->pending[i];
		uint64_t high = p->written ? f->written_high : f->read_high;
		uint64_t bound = all ? p->end : high > lag ? min_u64(p->end, high - lag) : 0;
		/* Cut where no large folio straddles: DONTNEED evicts only
		 * folios wholly inside its range (find_lock_entries()). */
		if (bound < p->end && align > 1)
			bound -= bound % align;
		if (bound <= p->first || (!all && bound - p->first < batch))
			continue;
		*out = (struct drop_range){ p->first, bound };
		p->first = bound;
		if (p->first >= p->end)
			pending_remove(f, i);
		dropped_add(f, *out);
		return true;
	}
	return false;
}
