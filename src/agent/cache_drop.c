/*
 * cache_drop.c - --cache drop, the agent's side (see cache_drop.h and
 * policy/drop_behind.h).
 *
 * How a range goes: posix_fadvise(fd, range, POSIX_FADV_DONTNEED) -
 * generic_fadvise(): it starts writeback of dirty pages in the range
 * (WB_SYNC_NONE; ours were sent already), then mapping_try_invalidate()
 * evicts the clean, unmapped, unlocked pages.  What it cannot evict -
 * pages mapped by anyone, dirty or still under writeback - stays, and is
 * deactivated (lru_deactivate_file: moved to the inactive list, those
 * under writeback marked PG_reclaim, so reclaim takes them first once they
 * are clean).  So a page another process maps is never dropped, and a
 * written page still on its way to the disk goes first when memory is
 * needed.  The call moves no file offset and no readahead state.
 *
 * Written pages are dropped `lag` pages after they were sent, not after a
 * SYNC_FILE_RANGE_WAIT_*: the wait would run file_check_and_advance_wb_err()
 * on the program's own file description and hide a writeback error from
 * its fsync().
 *
 * The fadvise never fails the program's call: its result is ignored and
 * errno is restored.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/cache_drop.h"
#include "common/private_fd.h"
#include "agent/io_internal.h"
#include "agent/spin.h"
#include "policy/drop_behind.h"

_Static_assert(PAGE_SHIFT == DROP_PAGE_SHIFT, "drop_behind counts 4 KiB pages");

/* One fadvise per 2 MiB at most for a stream, cut at 2 MiB boundaries:
 * the largest page-cache folio on x86-64 (MAX_PAGECACHE_ORDER = PMD
 * order; readahead builds such folios, page_cache_ra_order()), and DONTNEED
 * skips a folio that is not wholly inside its range.  A reader leaves 1 MiB
 * behind it cached (pages it may still read: the rest of a page, another
 * thread). */
#define DROP_BATCH_PAGES 512
#define DROP_ALIGN_PAGES 512
#define DROP_READ_LAG_PAGES 256
/* Ranges handed out under the lock, dropped after it. */
#define DROP_BURST 8

static struct drop_behind table;
static uint32_t table_lock;

void cache_drop_init(void)
{
	drop_behind_init(&table);
	const char *mode = getenv("DISCNICE_CACHE");
	agent.cache_drop = mode && strcmp(mode, "drop") == 0;
	/* Misses are what the predictor says: it must run without a cap. */
	if (agent.cache_drop) {
		agent.predict_uncapped = true;
		agent.count_uncapped = false; /* predicting counts too */
	}
}

void cache_drop_before_fork(void)
{
	if (agent.cache_drop)
		spin_lock(&table_lock);
}

void cache_drop_after_fork(bool child)
{
	if (!agent.cache_drop)
		return;
	if (!child) {
		spin_unlock(&table_lock);
		return;
	}
	/* The parent drops what it brought in; the child starts afresh. */
	drop_behind_init(&table);
	table_lock = 0;
}

static void drop(int fd, const struct drop_range *r, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		posix_fadvise(fd, (off_t)(r[i].first << PAGE_SHIFT),
			      (off_t)((r[i].end - r[i].first) << PAGE_SHIFT), POSIX_FADV_DONTNEED);
}

/* Take up to DROP_BURST ranges of file (table_lock held). */
static unsigned take(int file, uint64_t lag, bool all, struct drop_range *out)
{
	unsigned n = 0;
	while (n < DROP_BURST && drop_behind_next(&table, file, lag, DROP_BATCH_PAGES, DROP_ALIGN_PAGES,
							all, &out[n]))
		n++;
	return n;
}

bool cache_drop_read(int fd, uint64_t dev, uint64_t ino, uint64_t pos, uint64_t bytes,
		     const struct drop_range *missed, unsigned n_missed, struct drop_range *dropped)
{
	int saved = errno;
	struct drop_range out[DROP_BURST];
	unsigned n;
	spin_lock(&table_lock);
	int file = n_missed ? drop_behind_file(&table, dev, ino, fd)
			    : drop_behind_find(&table, dev, ino);
	if (file < 0) {
		spin_unlock(&table_lock);
		return false;
	}
	for (unsigned i = 0; i < n_missed; i++)
		drop_behind_missed(&table, file, missed[i].first, missed[i].end);
	drop_behind_read(&table, file, pos, bytes);
	n = take(file, DROP_READ_LAG_PAGES, false, out);
	spin_unlock(&table_lock);
	drop(fd, out, n);
	for (unsigned i = 0; i < n; i++) {
		if (!i || out[i].first < dropped->first)
			dropped->first = out[i].first;
		if (!i || out[i].end > dropped->end)
			dropped->end = out[i].end;
	}
	errno = saved;
	return n != 0;
}

void cache_drop_written(int fd, uint64_t dev, uint64_t ino, uint64_t first, uint64_t end,
			uint64_t lag)
{
	int saved = errno;
	struct drop_range out[DROP_BURST];
	spin_lock(&table_lock);
	int file = drop_behind_file(&table, dev, ino, fd);
	drop_behind_written(&table, file, first, end);
	unsigned n = take(file, lag, false, out);
	spin_unlock(&table_lock);
	drop(fd, out, n);
	errno = saved;
}

void cache_drop_mapped(uint64_t dev, uint64_t ino)
{
	spin_lock(&table_lock);
	int file = drop_behind_file(&table, dev, ino, -1);
	drop_behind_keep(&table, file);
	spin_unlock(&table_lock);
}

void cache_drop_closing(int fd, uint64_t dev, uint64_t ino)
{
	int saved = errno;
	struct drop_range out[DROP_BURST];
	unsigned n;
	do {
		spin_lock(&table_lock);
		int file = drop_behind_find(&table, dev, ino);
		n = file < 0 ? 0 : take(file, 0, true, out);
		if (file >= 0 && table.files[file].fd == fd)
			table.files[file].fd = -1; /* not ours to use at exit */
		spin_unlock(&table_lock);
		drop(fd, out, n);
	} while (n == DROP_BURST);
	errno = saved;
}

/*
 * At exit, what paced writeback sent last (writeback_exit() sends the
 * lag the writer led by) is still on its way to the disk, and DONTNEED
 * would only deactivate it.  So wait for it first - on a file description
 * of our own (private_fd_reopen()): SYNC_FILE_RANGE_WAIT_BEFORE
 * runs file_check_and_advance_wb_err() on the description it is given,
 * and on the program's own that would hide a writeback error from an
 * fsync() by a process that shares it.  The job's exit waits for at most
 * the lag of writes (a quarter second of the cap) at the disk's speed.
 */
void cache_drop_exit(void)
{
	int saved = errno;
	for (int i = 0; i < DROP_FILES; i++) {
		struct stat st;
		spin_lock(&table_lock);
		const struct drop_file *f = &table.files[i];
		int fd = f->fd;
		uint64_t dev = f->dev, ino = f->ino;
		bool any = f->used && fd >= 0 && drop_behind_pending(&table, i);
		spin_unlock(&table_lock);
		/* The descriptor may have been closed and its number reused
		 * for another file. */
		if (!any || fstat(fd, &st) != 0 || (uint64_t)st.st_dev != dev ||
		    (uint64_t)st.st_ino != ino)
			continue;
		int own = private_fd_reopen(fd);
		struct drop_range out[DROP_BURST];
		unsigned n;
		do {
			spin_lock(&table_lock);
			n = take(i, 0, true, out);
			spin_unlock(&table_lock);
			for (unsigned k = 0; own >= 0 && k < n; k++)
				sync_file_range(own, (off64_t)(out[k].first << PAGE_SHIFT),
						(off64_t)((out[k].end - out[k].first) << PAGE_SHIFT),
						SYNC_FILE_RANGE_WAIT_BEFORE);
			drop(own >= 0 ? own : fd, out, n);
		} while (n == DROP_BURST);
		if (own >= 0)
			close(own);
	}
	errno = saved;
}
