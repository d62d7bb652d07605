/*
 * writeback_pacer.c - which dirty pages to send to the disk, and when
 * (see writeback_pacer.h).
 */
#include <string.h>

#include "policy/writeback_pacer.h"

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

void wb_pacer_init(struct wb_pacer *p)
{
	memset(p, 0, sizeof *p);
	for (int i = 0; i < WB_FILES; i++)
		p->files[i].fd = -1;
}

int wb_pacer_find(const struct wb_pacer *p, uint64_t dev, uint64_t ino)
{
	for (int i = 0; i < WB_FILES; i++)
		if (p->files[i].used && p->files[i].dev == dev && p->files[i].ino == ino)
			return i;
	return -1;
}

/* A slot for a new file: a free one, else the least recently used file
 * that has nothing queued and no descriptor of ours (forgetting it only
 * forgets whether it was a rewriter). */
static int file_slot(struct wb_pacer *p)
{
	int victim = -1;
	for (int i = 0; i < WB_FILES; i++) {
		const struct wb_file *f = &p->files[i];
		if (!f->used)
			return i;
		if (!f->extents && !f->held &&
		    (victim < 0 || f->last_use < p->files[victim].last_use))
			victim = i;
	}
	return victim;
}

static struct wb_extent *tail(struct wb_pacer *p)
{
	return p->count ? &p->ring[(p->head + p->count - 1) % WB_EXTENTS] : NULL;
}

bool wb_pacer_note(struct wb_pacer *p, uint64_t dev, uint64_t ino, int fd, uint64_t first,
		   uint64_t end, uint64_t fresh)
{
	if (!fresh || end <= first)
		return false;
	fresh = min_u64(fresh, end - first);
	int i = wb_pacer_find(p, dev, ino);
	if (i < 0) {
		if ((i = file_slot(p)) < 0)
			return false;
		memset(&p->files[i], 0, sizeof p->files[i]);
		p->files[i] = (struct wb_file){ .used = true, .fd = fd, .dev = dev, .ino = ino };
	}
	struct wb_file *f = &p->files[i];
	f->last_use = ++p->tick;
	if (!f->held)
		f->fd = fd;
	/* Dirtied again after the pacer sent it out: without pacing these
	 * pages would have gone out once, at the flusher's next visit. */
	if (first < f->sent_end) {
		f->resent += min_u64(fresh, f->sent_end - first);
		if (f->resent > WB_REWRITER_PAGES)
			f->rewriter = true;
	}
	if (f->rewriter)
		return false;
	struct wb_extent *t = tail(p);
	if (t && t->file == (uint32_t)i && first <= t->end && end >= t->first) {
		/* Continues (or overlaps) the newest range: one range. */
		t->first = min_u64(t->first, first);
		t->end = end > t->end ? end : t->end;
		t->fresh += fresh;
	} else {
		if (p->count == WB_EXTENTS)
			return false; /* wb_pacer_next() sends the oldest out first */
		p->ring[(p->head + p->count) % WB_EXTENTS] =
			(struct wb_extent){ .file = (uint32_t)i, .first = first, .end = end, .fresh = fresh };
		p->count++;
		f->extents++;
	}
	f->queued += fresh;
	p->queued += fresh;
	return true;
}

/* Take up to chunk pages from the front of the oldest range. */
static void take(struct wb_pacer *p, uint64_t chunk, struct wb_flush *out)
{
	struct wb_extent *e = &p->ring[p->head];
	struct wb_file *f = &p->files[e->file];
	uint64_t n = min_u64(chunk ? chunk : 1, e->end - e->first);
	/* Newly dirtied pages are spread over the range as written: the
	 * front's share, at least one page per page taken until none left. */
	uint64_t fresh = e->end - e->first == n ? e->fresh : min_u64(e->fresh, n);
	*out = (struct wb_flush){ .fd = f->fd, .dev = f->dev, .ino = f->ino,
				  .first = e->first, .end = e->first + n, .file = (int)e->file };
	e->first += n;
	e->fresh -= fresh;
	f->queued -= min_u64(f->queued, fresh);
	p->queued -= min_u64(p->queued, fresh);
	if (out->end > f->sent_end)
		f->sent_end = out->end;
	if (e->first == e->end) {
		p->head = (p->head + 1) % WB_EXTENTS;
		p->count--;
		f->extents--;
		out->last = f->extents == 0;
	}
}

bool wb_pacer_next(struct wb_pacer *p, uint64_t lag, uint64_t chunk, struct wb_flush *out)
{
	if (!p->count || (p->queued <= lag && p->count < WB_EXTENTS))
		return false;
	take(p, chunk, out);
	return true;
}

/* Remove every range of file i from the queue, keeping the others' order. */
static void drop_file(struct wb_pacer *p, int i)
{
	uint32_t kept = 0;
	for (uint32_t k = 0; k < p->count; k++) {
		struct wb_extent e = p->ring[(p->head + k) % WB_EXTENTS];
		if (e.file == (uint32_t)i) {
			p->queued -= min_u64(p->queued, e.fresh);
			continue;
		}
		p->ring[(p->head + kept++) % WB_EXTENTS] = e;
	}
	p->count = kept;
	p->files[i].extents = 0;
	p->files[i].queued = 0;
}

bool wb_pacer_take_file(struct wb_pacer *p, int file, struct wb_flush *out)
{
	struct wb_file *f = &p->files[file];
	if (!f->used || !f->extents)
		return false;
	uint64_t first = UINT64_MAX, end = 0;
	for (uint32_t k = 0; k < p->count; k++) {
		const struct wb_extent *e = &p->ring[(p->head + k) % WB_EXTENTS];
		if (e->file != (uint32_t)file)
			continue;
		first = min_u64(first, e->first);
		end = e->end > end ? e->end : end;
	}
	drop_file(p, file);
	if (end > f->sent_end)
		f->sent_end = end;
	*out = (struct wb_flush){ .fd = f->fd, .dev = f->dev, .ino = f->ino, .first = first,
				  .end = end, .file = file, .last = true };
	return true;
}

int wb_pacer_closing(struct wb_pacer *p, int fd, uint64_t dev, uint64_t ino, int *idle_own)
{
	int need = -1;
	*idle_own = -1;
	for (int i = 0; i < WB_FILES; i++) {
		struct wb_file *f = &p->files[i];
		if (!f->used)
			continue;
		if (!f->held && f->fd == fd) {
			if (f->extents)
				need = i;
			else
				f->used = false;
		} else if (f->held && !f->extents && f->dev == dev && f->ino == ino) {
			*idle_own = i;
		}
	}
	return need;
}

void wb_pacer_hold(struct wb_pacer *p, int file, int own_fd)
{
	p->files[file].held = true;
	p->files[file].fd = own_fd;
}

void wb_pacer_release(struct wb_pacer *p, int file)
{
	p->files[file].used = false;
	p->files[file].held = false;
	p->files[file].fd = -1;
}

bool wb_pacer_idle_own(const struct wb_pacer *p, int file)
{
	const struct wb_file *f = &p->files[file];
	return f->used && f->held && !f->extents;
}

int wb_pacer_forget(struct wb_pacer *p, uint64_t dev, uint64_t ino)
{
	int i = wb_pacer_find(p, dev, ino);
	if (i >= 0)
		drop_file(p, i);
	return i;
}
