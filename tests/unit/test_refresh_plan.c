/* Description: directory refresh's pure logic (graybox-icl §4.2.1, footnote 4): the plan order, the journal's text round trip and rejections, every cell of the recovery table. */
#include <errno.h>
#include <string.h>

#include "unit.h"
#include "graybox/fldc/refresh_plan.h"

#define F REFRESH_KIND_FILE
#define L REFRESH_KIND_SYMLINK
#define D REFRESH_KIND_DIR

static void check_names(const struct refresh_plan_entry *e, size_t n, const char *const *want)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(e[i].name, want[i]) != 0) {
			fprintf(stderr, "position %zu: %s, want %s\n", i, e[i].name, want[i]);
			exit(1);
		}
}

static void fill(struct refresh_plan_entry *e)
{
	/* name, kind, size, ino, mtime */
	struct refresh_plan_entry in[] = {
		{ "zeta", F, 300, 10, 5, 0 },  { "sub", D, 4096, 3, 1, 0 },
		{ "alpha", F, 8192, 20, 3, 0 }, { "ln", L, 5, 4, 9, 0 },
		{ "beta", F, 300, 30, 1, 0 },  { "a-dir", D, 4096, 2, 2, 0 },
		{ "mid", F, 1000, 5, 7, 0 },
	};
	for (size_t i = 0; i < 7; i++) {
		e[i] = in[i];
		e[i].id = i;
	}
}

static void test_orders(void)
{
	struct refresh_plan_entry e[7];
	/* §4.2.1: smallest first; equal sizes by name; then links, then dirs. */
	fill(e);
	refresh_plan_sort(e, 7, REFRESH_ORDER_SMALLEST);
	check_names(e, 7, (const char *[]){ "beta", "zeta", "mid", "alpha", "ln", "a-dir", "sub" });
	CHECK_EQ_U64(e[0].id, 4); /* the caller's id rides along */
	fill(e);
	refresh_plan_sort(e, 7, REFRESH_ORDER_LARGEST);
	check_names(e, 7, (const char *[]){ "alpha", "mid", "beta", "zeta", "ln", "a-dir", "sub" });
	fill(e);
	refresh_plan_sort(e, 7, REFRESH_ORDER_NAME);
	check_names(e, 7, (const char *[]){ "alpha", "beta", "mid", "zeta", "ln", "a-dir", "sub" });
	fill(e);
	refresh_plan_sort(e, 7, REFRESH_ORDER_INODE);
	check_names(e, 7, (const char *[]){ "mid", "zeta", "alpha", "beta", "ln", "a-dir", "sub" });
	fill(e);
	refresh_plan_sort(e, 7, REFRESH_ORDER_MTIME);
	check_names(e, 7, (const char *[]){ "beta", "alpha", "zeta", "mid", "ln", "a-dir", "sub" });
	/* Zero and one entries. */
	refresh_plan_sort(e, 0, REFRESH_ORDER_SMALLEST);
	refresh_plan_sort(e, 1, REFRESH_ORDER_SMALLEST);
}

/* More than the on-stack scratch (64): the heap path, and the result is
 * sorted and a permutation. */
static void test_many(void)
{
	enum { N = 1000 };
	static struct refresh_plan_entry e[N];
	static char names[N][8];
	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "f%04zu", i);
		e[i] = (struct refresh_plan_entry){ names[i], F, (uint64_t)((i * 7919) % 97), i, 0, i };
	}
	refresh_plan_sort(e, N, REFRESH_ORDER_SMALLEST);
	static unsigned char seen[N];
	for (size_t i = 0; i < N; i++) {
		CHECK(!seen[e[i].id]);
		seen[e[i].id] = 1;
		if (i)
			CHECK(e[i - 1].size < e[i].size ||
			      (e[i - 1].size == e[i].size && strcmp(e[i - 1].name, e[i].name) < 0));
	}
}

static void test_order_names(void)
{
	CHECK(refresh_order_parse("smallest") == REFRESH_ORDER_SMALLEST);
	CHECK(refresh_order_parse("mtime") == REFRESH_ORDER_MTIME);
	CHECK(refresh_order_parse("Smallest") == -1);
	CHECK(refresh_order_parse("") == -1);
	CHECK(strcmp(refresh_order_name(REFRESH_ORDER_INODE), "inode") == 0);
}

static void test_journal_round_trip(void)
{
	struct refresh_journal j = { .phase = REFRESH_PHASE_COPIED, .order = REFRESH_ORDER_LARGEST,
				     .dev = 0xfd01, .old_ino = 1234567, .new_ino = 89, .pid = 4242 };
	strcpy(j.name, "a name\nwith \xff bytes");
	char buf[2048];
	int n = refresh_journal_format(&j, buf, sizeof buf);
	CHECK(n > 0);
	CHECK((size_t)n == strlen(buf));
	CHECK(strstr(buf, "phase copied\n"));
	struct refresh_journal back;
	CHECK(refresh_journal_parse(buf, (size_t)n, &back) == 0);
	CHECK(back.phase == j.phase && back.order == j.order);
	CHECK(strcmp(back.name, j.name) == 0);
	CHECK_EQ_U64(back.dev, 0xfd01);
	CHECK_EQ_U64(back.old_ino, 1234567);
	CHECK_EQ_U64(back.new_ino, 89);
	CHECK_EQ_U64(back.pid, 4242);
	/* A buffer too small. */
	CHECK(refresh_journal_format(&j, buf, 20) == -ENOSPC);
	/* A 255-byte name fits. */
	memset(j.name, 'x', 255);
	j.name[255] = '\0';
	n = refresh_journal_format(&j, buf, sizeof buf);
	CHECK(n > 0 && refresh_journal_parse(buf, (size_t)n, &back) == 0 && strlen(back.name) == 255);
}

static int parse_text(const char *text)
{
	struct refresh_journal j;
	return refresh_journal_parse(text, strlen(text), &j);
}

#define GOOD "discnice-refresh 1\nphase exchanged\norder smallest\nname 6162\ndev 1\nold_ino 2\nnew_ino 3\npid 7\n"

static void test_journal_rejects(void)
{
	CHECK(parse_text(GOOD) == 0);
	CHECK(parse_text("") == -EINVAL);
	CHECK(parse_text("discnice-refresh 2\n") == -EINVAL);
	/* cut short: the last line without its '\n', or a key missing */
	CHECK(parse_text("discnice-refresh 1\nphase exchanged\norder smallest\nname 6162\ndev 1\n"
			 "old_ino 2\nnew_ino 3\npid 7") == -EINVAL);
	CHECK(parse_text("discnice-refresh 1\nphase exchanged\norder smallest\nname 6162\ndev 1\n"
			 "old_ino 2\nnew_ino 3\n") == -EINVAL);
	/* a key twice, an unknown key, a bad value */
	CHECK(parse_text(GOOD "pid 8\n") == -EINVAL);
	CHECK(parse_text(GOOD "colour red\n") == -EINVAL);
	CHECK(parse_text("discnice-refresh 1\nphase swapped\norder smallest\nname 6162\ndev 1\n"
			 "old_ino 2\nnew_ino 3\npid 7\n") == -EINVAL);
	CHECK(parse_text("discnice-refresh 1\nphase copied\norder smallest\nname 6162\ndev 1x\n"
			 "old_ino 2\nnew_ino 3\npid 7\n") == -EINVAL);
	CHECK(parse_text("discnice-refresh 1\nphase copied\norder smallest\nname 6162\ndev 1\n"
			 "old_ino 99999999999999999999\nnew_ino 3\npid 7\n") == -EINVAL);
	/* names: odd hex, a '/', NUL, "." and ".." */
	CHECK(parse_text("discnice-refresh 1\nphase copied\norder smallest\nname 616\ndev 1\n"
			 "old_ino 2\nnew_ino 3\npid 7\n") == -EINVAL);
	CHECK(parse_text("discnice-refresh 1\nphase copied\norder smallest\nname 612f\ndev 1\n"
			 "old_ino 2\nnew_ino 3\npid 7\n") == -EINVAL);
	CHECK(parse_text("discnice-refresh 1\nphase copied\norder smallest\nname 6100\ndev 1\n"
			 "old_ino 2\nnew_ino 3\npid 7\n") == -EINVAL);
	CHECK(parse_text("discnice-refresh 1\nphase copied\norder smallest\nname 2e2e\ndev 1\n"
			 "old_ino 2\nnew_ino 3\npid 7\n") == -EINVAL);
	/* copied and exchanged need the copy's i-number; copying does not */
	CHECK(parse_text("discnice-refresh 1\nphase copied\norder smallest\nname 61\ndev 1\n"
			 "old_ino 2\nnew_ino 0\npid 7\n") == -EINVAL);
	CHECK(parse_text("discnice-refresh 1\nphase copying\norder smallest\nname 61\ndev 1\n"
			 "old_ino 2\nnew_ino 0\npid 7\n") == 0);
}

/* Every cell of the table in refresh_plan.h. */
static void test_recovery_table(void)
{
	enum refresh_found all[] = { REFRESH_FOUND_NOTHING, REFRESH_FOUND_OLD, REFRESH_FOUND_NEW,
				     REFRESH_FOUND_OTHER, REFRESH_FOUND_NOT_DIR };
	enum refresh_phase phases[] = { REFRESH_PHASE_COPYING, REFRESH_PHASE_COPIED,
					REFRESH_PHASE_EXCHANGED };
	const enum refresh_recovery U = REFRESH_RECOVER_UNDO, F_ = REFRESH_RECOVER_FINISH,
				    R = REFRESH_RECOVER_REFUSE;
	/* want[phase][at_name][at_copy], in the order of `all` */
	const enum refresh_recovery want[3][5][5] = {
		[REFRESH_PHASE_COPYING] = {
			{ R, R, R, R, R },     /* NAME missing: someone moved it */
			{ U, R, U, U, R },     /* NAME old: undo, unless the copy is the old */
			{ R, R, R, R, R }, { R, R, R, R, R }, { R, R, R, R, R },
		},
		[REFRESH_PHASE_COPIED] = {
			{ R, R, R, R, R },
			{ U, R, U, R, R },     /* not yet exchanged */
			{ F_, F_, R, R, R },   /* exchanged before the journal said so */
			{ R, R, R, R, R }, { R, R, R, R, R },
		},
		[REFRESH_PHASE_EXCHANGED] = {
			{ R, R, R, R, R },
			{ R, R, R, R, R },     /* the old back at NAME: not ours to judge */
			{ F_, F_, R, R, R },
			{ R, R, R, R, R }, { R, R, R, R, R },
		},
	};
	for (int p = 0; p < 3; p++)
		for (int a = 0; a < 5; a++)
			for (int c = 0; c < 5; c++) {
				enum refresh_recovery got =
					refresh_recovery_decide(phases[p], all[a], all[c]);
				if (got != want[p][a][c]) {
					fprintf(stderr, "phase %d name %d copy %d: %d, want %d\n", p, a,
						c, got, want[p][a][c]);
					exit(1);
				}
			}
}

int main(void)
{
	test_orders();
	test_many();
	test_order_names();
	test_journal_round_trip();
	test_journal_rejects();
	test_recovery_table();
	return 0;
}
