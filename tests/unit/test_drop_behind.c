/* Description: --cache drop (issue #9 item 4): only pages the job read in as misses or wrote are dropped, behind the reader by the lag, in batches; re-read and mapped files are kept. */
#include <stdint.h>
#include <string.h>

#include "unit.h"
#include "policy/drop_behind.h"

#define DEV 8
#define LAG 256   /* pages: 1 MiB */
#define BATCH 256
#define ALIGN 512 /* 2 MiB folios */
#define PAGE 4096u

/* Everything next() hands out for a file now, checked against a page map
 * of what may be dropped; returns the number of pages dropped. */
static uint64_t drain(struct drop_behind *d, int f, bool all, uint64_t *calls,
		      const uint8_t *droppable, uint8_t *dropped, uint64_t pages)
{
	struct drop_range r;
	uint64_t n = 0;
	while (drop_behind_next(d, f, LAG, BATCH, ALIGN, all, &r)) {
		CHECK(r.first < r.end && r.end <= pages);
		if (!all) {
			CHECK(r.end - r.first >= BATCH);
			/* ends on a folio boundary, or where the pending range ends */
			CHECK(r.end == pages || r.end % ALIGN == 0 || !droppable[r.end]);
		}
		for (uint64_t p = r.first; p < r.end; p++) {
			CHECK(droppable[p]);
			CHECK(!dropped[p]); /* nothing twice */
			dropped[p] = 1;
		}
		n += r.end - r.first;
		(*calls)++;
	}
	return n;
}

/* A cold file streamed by 128 KiB reads, the kernel's readahead windows
 * (the predictor's misses) running ahead of the reader: pages go out
 * behind the reader by at least the lag, never ahead of it, about one
 * call per batch, and the rest at the close. */
static void cold_stream(void)
{
	enum { PAGES = 25600 }; /* 100 MiB */
	static uint8_t droppable[PAGES], dropped[PAGES];
	memset(droppable, 1, sizeof droppable);
	memset(dropped, 0, sizeof dropped);
	struct drop_behind d;
	drop_behind_init(&d);
	int f = drop_behind_file(&d, DEV, 1, 3);
	uint64_t calls = 0, window_end = 0;
	for (uint64_t pos = 0; pos < (uint64_t)PAGES * PAGE; pos += 128 << 10) {
		uint64_t page = pos / PAGE;
		if (page + 32 >= window_end && window_end < PAGES) {
			uint64_t end = window_end + 512 < PAGES ? window_end + 512 : PAGES;
			drop_behind_missed(&d, f, window_end, end);
			window_end = end;
		}
		drop_behind_read(&d, f, pos, 128 << 10);
		drain(&d, f, false, &calls, droppable, dropped, PAGES);
		uint64_t read_to = (pos + (128 << 10)) / PAGE;
		for (uint64_t p = 0; p < PAGES; p++)
			if (dropped[p])
				CHECK(p + LAG < read_to); /* behind the reader by the lag */
		/* and never far more than lag + batch + a folio behind it */
		uint64_t kept = 0;
		for (uint64_t p = 0; p < read_to; p++)
			kept += !dropped[p];
		CHECK(kept <= LAG + BATCH + ALIGN + 32);
	}
	CHECK(calls <= PAGES / BATCH);
	drain(&d, f, true, &calls, droppable, dropped, PAGES);
	for (uint64_t p = 0; p < PAGES; p++)
		CHECK(dropped[p]);
	CHECK(!drop_behind_pending(&d, f));
}

/* A file that was cached before (no misses) loses nothing; in a file
 * partly cached, only the missed ranges go. */
static void hot_and_mixed(void)
{
	enum { PAGES = 4096 };
	static uint8_t droppable[PAGES], dropped[PAGES];
	memset(droppable, 0, sizeof droppable);
	memset(dropped, 0, sizeof dropped);
	struct drop_behind d;
	drop_behind_init(&d);
	int hot = drop_behind_file(&d, DEV, 2, 3);
	uint64_t calls = 0;
	for (uint64_t pos = 0; pos < (uint64_t)PAGES * PAGE; pos += 65536) {
		drop_behind_read(&d, hot, pos, 65536);
		CHECK_EQ_U64(drain(&d, hot, false, &calls, droppable, dropped, PAGES), 0);
	}
	CHECK_EQ_U64(drain(&d, hot, true, &calls, droppable, dropped, PAGES), 0);

	int mixed = drop_behind_file(&d, DEV, 3, 4);
	CHECK(mixed != hot);
	/* pages 1008..2000 and 3008..3504 (read starts, 16 pages apart) were misses, the rest cached */
	for (uint64_t p = 1008; p < 2000; p++)
		droppable[p] = 1;
	for (uint64_t p = 3008; p < 3504; p++)
		droppable[p] = 1;
	for (uint64_t pos = 0; pos < (uint64_t)PAGES * PAGE; pos += 65536) {
		uint64_t page = pos / PAGE;
		if (page == 1008)
			drop_behind_missed(&d, mixed, 1008, 2000);
		if (page == 3008)
			drop_behind_missed(&d, mixed, 3008, 3504);
		drop_behind_read(&d, mixed, pos, 65536);
		drain(&d, mixed, false, &calls, droppable, dropped, PAGES);
	}
	drain(&d, mixed, true, &calls, droppable, dropped, PAGES);
	for (uint64_t p = 0; p < PAGES; p++)
		CHECK_EQ_U64(dropped[p], droppable[p]);
}

/* Reads of unaligned pieces share pages but no bytes: not a re-read. */
static void unaligned_is_not_reread(void)
{
	struct drop_behind d;
	struct drop_range r;
	drop_behind_init(&d);
	int f = drop_behind_file(&d, DEV, 4, 3);
	drop_behind_missed(&d, f, 0, 2048);
	for (uint64_t pos = 0; pos < 2048 * PAGE; pos += 1000)
		drop_behind_read(&d, f, pos, 1000);
	CHECK(drop_behind_next(&d, f, LAG, BATCH, 1, false, &r));
	CHECK_EQ_U64(r.first, 0);
	CHECK(r.end + LAG <= 2048);
}

/* A region read twice is kept: a read over bytes of the current run, or
 * reading in again pages that were dropped, stops all dropping of the
 * file (what it still had pending stays cached). */
static void rereads_keep(void)
{
	struct drop_behind d;
	struct drop_range r;
	drop_behind_init(&d);
	/* re-read within the run, before anything went */
	int f = drop_behind_file(&d, DEV, 5, 3);
	drop_behind_missed(&d, f, 0, 1024);
	drop_behind_read(&d, f, 0, 300 * PAGE);
	drop_behind_read(&d, f, 0, 300 * PAGE);
	drop_behind_read(&d, f, 300 * PAGE, 700 * PAGE);
	CHECK(!drop_behind_next(&d, f, LAG, BATCH, 1, true, &r));

	/* dropped, then read in again: kept from then on */
	int g = drop_behind_file(&d, DEV, 6, 4);
	drop_behind_missed(&d, g, 0, 2048);
	drop_behind_read(&d, g, 0, 2048 * PAGE);
	CHECK(drop_behind_next(&d, g, LAG, BATCH, 1, false, &r));
	CHECK_EQ_U64(r.first, 0);
	uint64_t dropped_end = r.end;
	drop_behind_read(&d, g, 2048 * PAGE, 0); /* EOF: nothing */
	/* the job seeks back and reads the start again: a new run, misses */
	drop_behind_missed(&d, g, 0, 512);
	drop_behind_read(&d, g, 0, 512 * PAGE);
	CHECK(!drop_behind_next(&d, g, LAG, BATCH, 1, true, &r));
	CHECK(dropped_end > 0);
	/* and a later stream further on is kept too */
	drop_behind_missed(&d, g, 4096, 8192);
	drop_behind_read(&d, g, 4096 * PAGE, 4096 * PAGE);
	CHECK(!drop_behind_next(&d, g, LAG, BATCH, 1, true, &r));
}

/* A mapped file is kept. */
static void mapped_keeps(void)
{
	struct drop_behind d;
	struct drop_range r;
	drop_behind_init(&d);
	int f = drop_behind_file(&d, DEV, 7, 3);
	drop_behind_missed(&d, f, 0, 4096);
	drop_behind_read(&d, f, 0, 2048 * PAGE);
	drop_behind_keep(&d, f);
	drop_behind_read(&d, f, 2048 * PAGE, 2048 * PAGE);
	CHECK(!drop_behind_next(&d, f, LAG, BATCH, 1, true, &r));
	drop_behind_written(&d, f, 0, 4096);
	CHECK(!drop_behind_next(&d, f, LAG, BATCH, 1, true, &r));
}

/* Paced writeback's chunks: dropped the lag behind the newest chunk sent,
 * in batches, the rest at the close; a reader's position plays no part. */
static void written(void)
{
	enum { PAGES = 16384 };
	static uint8_t droppable[PAGES], dropped[PAGES];
	memset(droppable, 1, sizeof droppable);
	memset(dropped, 0, sizeof dropped);
	struct drop_behind d;
	drop_behind_init(&d);
	int f = drop_behind_file(&d, DEV, 8, 5);
	uint64_t calls = 0;
	for (uint64_t p = 0; p < PAGES; p += 64) {
		drop_behind_written(&d, f, p, p + 64);
		drain(&d, f, false, &calls, droppable, dropped, PAGES);
		for (uint64_t q = 0; q < PAGES; q++)
			if (dropped[q])
				CHECK(q + LAG < p + 64);
	}
	CHECK(calls <= PAGES / BATCH);
	drain(&d, f, true, &calls, droppable, dropped, PAGES);
	for (uint64_t p = 0; p < PAGES; p++)
		CHECK(dropped[p]);
}

/* Random misses: each range is its own call, none beyond what was read in,
 * the list bounded (the oldest forgotten, i.e. left cached). */
static void scattered(void)
{
	struct drop_behind d;
	struct drop_range r;
	drop_behind_init(&d);
	int f = drop_behind_file(&d, DEV, 9, 3);
	for (uint64_t i = 0; i < 20; i++) {
		drop_behind_missed(&d, f, i * 100, i * 100 + 4);
		drop_behind_read(&d, f, i * 100 * PAGE, 4 * PAGE);
	}
	/* read_high is at page 1904: ranges below 1648 are behind, but each
	 * is smaller than a batch */
	CHECK(!drop_behind_next(&d, f, LAG, BATCH, 1, false, &r));
	unsigned n = 0;
	while (drop_behind_next(&d, f, LAG, BATCH, 1, true, &r)) {
		CHECK_EQ_U64(r.end - r.first, 4);
		CHECK_EQ_U64(r.first % 100, 0);
		CHECK(r.first >= (20 - DROP_PENDING) * 100);
		n++;
	}
	CHECK_EQ_U64(n, DROP_PENDING);
}

/* More files than slots: the least recently used idle one is recycled,
 * a file with pending pages only when all have some. */
static void recycling(void)
{
	struct drop_behind d;
	drop_behind_init(&d);
	int busy = drop_behind_file(&d, DEV, 100, 3);
	drop_behind_missed(&d, busy, 0, 10);
	for (uint64_t ino = 101; ino < 101 + 3 * DROP_FILES; ino++) {
		int f = drop_behind_file(&d, DEV, ino, 4);
		CHECK(f >= 0 && f != busy);
	}
	CHECK_EQ_U64(drop_behind_find(&d, DEV, 100), busy);
	CHECK(drop_behind_pending(&d, busy));
}

int main(void)
{
	cold_stream();
	hot_and_mixed();
	unaligned_is_not_reread();
	rereads_keep();
	mapped_keeps();
	written();
	scattered();
	recycling();
	return 0;
}
