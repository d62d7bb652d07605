/* Description: a shared position given back by calls that took their ranges - the kernel's position in every order they finish. */
#include "common/shared_position.h"
#include "unit.h"

#define MiB ((int64_t)1 << 20)
#define MAX_CALLS 5

/* One read(2) of `count` bytes on a shared description, by another
 * process: cut into pieces (it takes its range, reads, gives back) or
 * whole (the kernel's, one step). */
struct call {
	int64_t count;
	bool cut;
	int stage; /* 0 not begun, 1 range taken (cut), 2 done */
	int64_t base;
};

static int64_t file_size;
static long orders;

static int64_t clamp_read(int64_t at, int64_t count)
{
	int64_t left = file_size - at;
	return left <= 0 ? 0 : left < count ? left : count;
}

/* Every order the calls' steps can come in; the position each ends at
 * must be the kernel's, had the calls come whole in their take order. */
static void every_order(struct call *calls, int n, int64_t pos, int64_t want)
{
	bool any = false;
	for (int i = 0; i < n; i++) {
		struct call *c = &calls[i];
		if (c->stage == 2)
			continue;
		any = true;
		struct call saved = *c;
		int64_t next = pos;
		if (!c->cut) {
			next = pos + clamp_read(pos, c->count);
			c->stage = 2;
		} else if (c->stage == 0) {
			c->base = pos;
			next = pos + c->count; /* lseek(fd, count, SEEK_CUR) */
			c->stage = 1;
		} else {
			int64_t done = clamp_read(c->base, c->count);
			struct shared_range_end r = { c->base, c->base + c->count, (uint64_t)done,
						      done < c->count };
			int64_t arg = -1;
			switch (shared_position_give_back(&r, pos, &arg)) {
			case SHARED_KEEP:
				break;
			case SHARED_SET:
				next = arg;
				break;
			case SHARED_BACK:
				next = pos - arg;
				break;
			}
			c->stage = 2;
		}
		every_order(calls, n, next, want);
		*c = saved;
	}
	if (!any) {
		orders++;
		if (pos != want) {
			fprintf(stderr, "size %" PRId64 ": position %" PRId64 ", want %" PRId64 "\n",
				file_size, pos, want);
			exit(1);
		}
	}
}

static void readers(int64_t size, int64_t start, int n, const int64_t *counts, const bool *cut)
{
	struct call calls[MAX_CALLS] = { { 0 } };
	int64_t total = 0;
	for (int i = 0; i < n; i++) {
		calls[i].count = counts[i];
		calls[i].cut = cut[i];
		total += counts[i];
	}
	file_size = size;
	/* Whole calls move min(count, what is left) each: together, to the
	 * end of the file or of what they asked for. */
	int64_t want = start + total < size ? start + total : start > size ? start : size;
	every_order(calls, n, start, want);
}

int main(void)
{
	/* The test's case (test_reliability_io.py): 8.5 MiB read in 1 MiB
	 * records by two processes, the last records taken at once.  The
	 * one at 8 MiB reads half; the one at 9 MiB nothing. */
	const int64_t one[] = { MiB, MiB, MiB, MiB, MiB };
	const bool all_cut[] = { true, true, true, true, true };
	const bool mixed[] = { true, false, true, false, true };
	for (int64_t size = 7 * MiB; size <= 12 * MiB; size += MiB / 2)
		for (int n = 1; n <= 4; n++) {
			readers(size, 8 * MiB, n, one, all_cut);
			readers(size, 8 * MiB, n, one, mixed);
		}
	readers(8 * MiB + 1, 8 * MiB, 5, one, all_cut);
	readers(8 * MiB + 4095, 8 * MiB, 5, one, mixed);
	readers(0, 0, 3, one, all_cut); /* an empty file */
	const int64_t uneven[] = { 3 * MiB, 4096, MiB / 2, 1, 2 * MiB };
	for (int64_t size = 0; size <= 8 * MiB; size += 1234567)
		readers(size, 0, 5, uneven, all_cut);
	CHECK(orders > 10000);

	/* The case that went wrong: the range at 8 MiB met the end while
	 * the one at 9 MiB was taken and not given back.  Set absolute, the
	 * second, finishing last, left the position at its base, 9 MiB. */
	int64_t arg = 0;
	struct shared_range_end first = { 8 * MiB, 9 * MiB, MiB / 2, true };
	struct shared_range_end second = { 9 * MiB, 10 * MiB, 0, true };
	CHECK(shared_position_give_back(&first, 10 * MiB, &arg) == SHARED_BACK);
	CHECK_EQ_U64(arg, MiB / 2);
	CHECK(shared_position_give_back(&second, 10 * MiB - MiB / 2, &arg) == SHARED_BACK);
	CHECK_EQ_U64(arg, MiB);
	/* A program that moved the position below what we would give back
	 * keeps it. */
	CHECK(shared_position_give_back(&second, 4096, &arg) == SHARED_KEEP);

	/* A call that moved its whole range gives nothing back. */
	struct shared_range_end whole = { 0, MiB, MiB, false };
	CHECK(shared_position_give_back(&whole, MiB, &arg) == SHARED_KEEP);
	/* One cut short (a signal, an error) gives back only while nobody
	 * took a range after it: theirs are in flight, not to be read again. */
	struct shared_range_end cut = { 0, MiB, 4096, false };
	CHECK(shared_position_give_back(&cut, MiB, &arg) == SHARED_SET);
	CHECK_EQ_U64(arg, 4096);
	CHECK(shared_position_give_back(&cut, 2 * MiB, &arg) == SHARED_KEEP);
	return 0;
}
