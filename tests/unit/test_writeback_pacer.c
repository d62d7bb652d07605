/* Description: paced writeback (issue #9 §1): pages go out in order a lag behind the writer, rewrites and deletes stay free, closed files are held or flushed. */
#include <stdint.h>
#include <string.h>

#include "unit.h"
#include "policy/writeback_pacer.h"

#define DEV 8
#define LAG 64
#define CHUNK 16

/* A sequential writer of `pages`, a page at a time: everything it wrote
 * more than LAG pages ago has gone out, in order, in CHUNK-page pieces,
 * and nothing twice. */
static void sequential(void)
{
	struct wb_pacer p;
	struct wb_flush fl;
	wb_pacer_init(&p);
	uint64_t sent = 0;
	for (uint64_t pg = 0; pg < 1000; pg++) {
		CHECK(wb_pacer_note(&p, DEV, 1, 3, pg, pg + 1, 1));
		while (wb_pacer_next(&p, LAG, CHUNK, &fl)) {
			CHECK_EQ_U64(fl.first, sent);
			CHECK(fl.end - fl.first <= CHUNK);
			CHECK_EQ_U64(fl.fd, 3);
			CHECK_EQ_U64(fl.ino, 1);
			sent = fl.end;
		}
		/* The writer leads the disk by the lag, never by more. */
		CHECK(pg + 1 - sent <= LAG);
		CHECK(pg + 1 - sent >= LAG - CHUNK || pg < LAG);
	}
	CHECK(1000 - sent <= LAG && 1000 - sent >= LAG - CHUNK);
}

/* Pages rewritten while still queued are one range, counted once
 * (Region-Write keeps what the delay saves). */
static void rewrite_in_place(void)
{
	struct wb_pacer p;
	struct wb_flush fl;
	wb_pacer_init(&p);
	CHECK(wb_pacer_note(&p, DEV, 2, 4, 0, 32, 32));
	for (int k = 0; k < 100; k++)
		CHECK(!wb_pacer_note(&p, DEV, 2, 4, 0, 32, 0)); /* nothing new */
	CHECK_EQ_U64(p.queued, 32);
	CHECK(!wb_pacer_next(&p, LAG, CHUNK, &fl)); /* under the lag: stays */
}

/* A file that keeps dirtying pages already sent out becomes a rewriter
 * and is left to the kernel's delay. */
static void rewriter(void)
{
	struct wb_pacer p;
	struct wb_flush fl;
	wb_pacer_init(&p);
	CHECK(wb_pacer_note(&p, DEV, 3, 5, 0, 128, 128));
	while (wb_pacer_next(&p, 0, CHUNK, &fl))
		;
	CHECK_EQ_U64(p.files[wb_pacer_find(&p, DEV, 3)].sent_end, 128);
	/* A header patched at the front: still paced. */
	CHECK(wb_pacer_note(&p, DEV, 3, 5, 0, 1, 1));
	int k = 0;
	while (wb_pacer_note(&p, DEV, 3, 5, 1 + (uint64_t)k, 2 + (uint64_t)k, 1))
		k++;
	CHECK(k >= WB_REWRITER_PAGES - 2 && k <= WB_REWRITER_PAGES);
	CHECK(p.files[wb_pacer_find(&p, DEV, 3)].rewriter);
	CHECK(!wb_pacer_note(&p, DEV, 3, 5, 200, 300, 100)); /* even new pages */
}

/* Unlink or truncate: the file's queued pages are dropped, the others'
 * keep their order (Create-Delete keeps what the delay saves). */
static void forget(void)
{
	struct wb_pacer p;
	struct wb_flush fl;
	wb_pacer_init(&p);
	CHECK(wb_pacer_note(&p, DEV, 10, 6, 0, 20, 20));
	CHECK(wb_pacer_note(&p, DEV, 11, 7, 0, 20, 20));
	CHECK(wb_pacer_note(&p, DEV, 10, 6, 40, 60, 20));
	CHECK(wb_pacer_note(&p, DEV, 12, 8, 0, 20, 20));
	CHECK_EQ_U64(p.queued, 80);
	int i = wb_pacer_forget(&p, DEV, 10);
	CHECK(i >= 0);
	CHECK_EQ_U64(p.queued, 40);
	CHECK(wb_pacer_next(&p, 0, 100, &fl));
	CHECK_EQ_U64(fl.ino, 11);
	CHECK(fl.last);
	CHECK(wb_pacer_next(&p, 0, 100, &fl));
	CHECK_EQ_U64(fl.ino, 12);
	CHECK(!wb_pacer_next(&p, 0, 100, &fl));
	CHECK_EQ_U64(wb_pacer_forget(&p, DEV, 99), (uint64_t)-1);
}

/* Closing: a file with queued pages is reported so the agent can hold a
 * descriptor of its own; with nothing queued it is forgotten; after its
 * last pages go out an own descriptor is idle and released. */
static void closing(void)
{
	struct wb_pacer p;
	struct wb_flush fl;
	int idle;
	wb_pacer_init(&p);
	CHECK(wb_pacer_note(&p, DEV, 20, 9, 0, 10, 10));
	int need = wb_pacer_closing(&p, 9, DEV, 20, &idle);
	CHECK(need >= 0);
	CHECK_EQ_U64(idle, (uint64_t)-1);
	wb_pacer_hold(&p, need, 1009);
	CHECK(!wb_pacer_idle_own(&p, need));
	/* The program reopens it as fd 9 and writes more: our fd stays. */
	CHECK(wb_pacer_note(&p, DEV, 20, 9, 10, 20, 10));
	CHECK(wb_pacer_next(&p, 0, 100, &fl));
	CHECK_EQ_U64(fl.fd, 1009);
	CHECK_EQ_U64(fl.end, 20);
	CHECK(fl.last);
	CHECK(wb_pacer_idle_own(&p, need));
	/* Its next close hands back our idle descriptor. */
	CHECK_EQ_U64(wb_pacer_closing(&p, 9, DEV, 20, &idle), (uint64_t)-1);
	CHECK_EQ_U64(idle, need);
	wb_pacer_release(&p, idle);
	CHECK_EQ_U64(wb_pacer_find(&p, DEV, 20), (uint64_t)-1);

	/* Nothing queued at close: forgotten. */
	CHECK(wb_pacer_note(&p, DEV, 21, 11, 0, 200, 200));
	while (wb_pacer_next(&p, 0, 100, &fl))
		;
	CHECK_EQ_U64(wb_pacer_closing(&p, 11, DEV, 21, &idle), (uint64_t)-1);
	CHECK_EQ_U64(wb_pacer_find(&p, DEV, 21), (uint64_t)-1);

	/* No descriptor to spare: the whole file in one piece. */
	CHECK(wb_pacer_note(&p, DEV, 22, 12, 5, 8, 3));
	CHECK(wb_pacer_note(&p, DEV, 23, 13, 0, 4, 4));
	CHECK(wb_pacer_note(&p, DEV, 22, 12, 30, 40, 10));
	need = wb_pacer_closing(&p, 12, DEV, 22, &idle);
	CHECK(need >= 0);
	CHECK(wb_pacer_take_file(&p, need, &fl));
	CHECK_EQ_U64(fl.first, 5);
	CHECK_EQ_U64(fl.end, 40);
	CHECK_EQ_U64(p.queued, 4);
	wb_pacer_release(&p, need);
	CHECK(!wb_pacer_take_file(&p, need, &fl));
}

/* More files than slots, more ranges than the ring: never an overflow;
 * a full ring goes out oldest first even under the lag. */
static void full_tables(void)
{
	struct wb_pacer p;
	struct wb_flush fl;
	wb_pacer_init(&p);
	int noted = 0;
	for (uint64_t ino = 100; ino < 100 + 2 * WB_FILES; ino++)
		noted += wb_pacer_note(&p, DEV, ino, (int)ino, 0, 1, 1);
	CHECK_EQ_U64(noted, WB_FILES);
	wb_pacer_init(&p);
	for (uint64_t k = 0; k < 3 * WB_EXTENTS; k++) {
		/* Every other page: no two ranges merge. */
		wb_pacer_note(&p, DEV, 1, 3, 2 * k, 2 * k + 1, 1);
		CHECK(p.count <= WB_EXTENTS);
		if (p.count == WB_EXTENTS) {
			CHECK(wb_pacer_next(&p, 1u << 30, CHUNK, &fl));
			CHECK_EQ_U64(fl.end - fl.first, 1);
		}
	}
}

int main(void)
{
	sequential();
	rewrite_in_place();
	rewriter();
	forget();
	closing();
	full_tables();
	return 0;
}
