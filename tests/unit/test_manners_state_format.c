/* Description: the testpoint library's state file text (src/manners/state_format.c): format/parse round trip exactly, capture/restore of a phase, every corrupt or foreign input refused whole (-EBADMSG, -EPROTONOSUPPORT, -ENOSPC), and the metric line: a file loaded only by a reader of its own metric (-EMEDIUMTYPE). */
#include <errno.h>
#include <string.h>

#include "unit.h"
#include "manners/state_format.h"

static void sample_phases(struct manners_saved_phase *p)
{
	memset(p, 0, 2 * sizeof *p);
	p[0].index = 3;
	p[0].count = 1;
	p[0].samples = 12345;
	p[0].rate = 1.0 / 3.0 * 1e7;
	p[1].index = -7;
	p[1].count = 2;
	p[1].samples = 99;
	p[1].regress_samples = 98;
	p[1].x[0][0] = 1e12;
	p[1].x[0][1] = p[1].x[1][0] = 3.25e7;
	p[1].x[1][1] = 17.0;
	p[1].y[0] = 2.5e15;
	p[1].y[1] = 0.1;
}

static void test_round_trip(void)
{
	struct manners_saved_phase in[2], out[4];
	sample_phases(in);
	char text[4096];
	int n = manners_state_format(in, 2, text, sizeof text);
	CHECK(n > 0 && (size_t)n == strlen(text));
	CHECK(strncmp(text, "discnice-manners-targets 1\n", 27) == 0);
	size_t count = 99;
	CHECK(manners_state_parse(text, (size_t)n, out, 4, &count) == 0);
	CHECK_EQ_U64(count, 2);
	CHECK(memcmp(in, out, sizeof in) == 0); /* %.17g: doubles exactly */
	/* No phases is a valid file too. */
	n = manners_state_format(in, 0, text, sizeof text);
	CHECK(n > 0 && manners_state_parse(text, (size_t)n, out, 4, &count) == 0 && count == 0);
	/* Too small a buffer. */
	CHECK(manners_state_format(in, 2, text, 40) == -ENOSPC && text[0] == '\0');
	/* An invalid phase is not written. */
	in[0].rate = -1.0;
	CHECK(manners_state_format(in, 2, text, sizeof text) == -EINVAL);
}

static void test_capture_restore(void)
{
	struct manners_phase_table table;
	struct manners_phase slots[4], *a, *b;
	CHECK(manners_phase_table_init(&table, slots, 4, NULL, MANNERS_REGRESS_NU_DEFAULT) == 0);
	CHECK(manners_phase_lookup(&table, 1, 2, &a) == 0);
	double progress[2] = { 1000, 3 };
	for (int i = 0; i < 20; i++)
		CHECK(manners_phase_update(a, progress, 5000000 + i, 1000000000LL * (i + 1)) == 1);
	struct manners_saved_phase saved;
	manners_state_capture(&saved, a);
	CHECK(saved.index == 1 && saved.count == 2 && saved.samples == 20 && saved.regress_samples == 20);

	struct manners_phase_table fresh;
	struct manners_phase fresh_slots[4];
	CHECK(manners_phase_table_init(&fresh, fresh_slots, 4, NULL, MANNERS_REGRESS_NU_DEFAULT) == 0);
	CHECK(manners_phase_lookup(&fresh, 1, 2, &b) == 0);
	CHECK(manners_state_restore(b, &saved) == 0);
	CHECK(manners_calib_regulating(&b->calib) == 0); /* 20 < bootstrap 50 */
	double ta, tb;
	CHECK(manners_regress_target_ns(&a->regress, progress, &ta) == 0);
	CHECK(manners_regress_target_ns(&b->regress, progress, &tb) == 0);
	CHECK(ta == tb);
	saved.count = 1;
	CHECK(manners_state_restore(b, &saved) == -EINVAL);
}

static int parse(const char *text)
{
	struct manners_saved_phase out[2];
	size_t count = 77;
	int rc = manners_state_parse(text, strlen(text), out, 2, &count);
	if (rc != 0)
		CHECK(count == 0);
	return rc;
}

static void test_corrupt(void)
{
	const char *h = "discnice-manners-targets 1\n";
	CHECK(parse("discnice-manners-targets 1\nphase 1 1 5 2.5 0 0 0\n") == 0);
	CHECK(parse("discnice-manners-targets 1\n\n# note\nphase 1 1 5 2.5 0 0 0\n") == 0);
	CHECK(parse("") == -EBADMSG);
	CHECK(parse("discnice-manners-targets 2\n") == -EPROTONOSUPPORT);
	CHECK(parse("discnice-manners-targets 1") == -EBADMSG); /* unterminated */
	CHECK(parse("something else 1\n") == -EBADMSG);
	CHECK(parse("discnice-manners-targets 1 x\n") == -EBADMSG);
	CHECK(parse("\x7f" "ELF\x02\x01\x01\n") == -EBADMSG);
	const char *bad_lines[] = {
		"phase 1 1 5 2.5 0 0\n",          /* a number short */
		"phase 1 1 5 2.5 0 0 0 0\n",      /* one too many */
		"phase 1 0 5 2.5 0\n",            /* count 0 */
		"phase 1 9 5 2.5 0\n",            /* count > 8 */
		"phase 1 1 -5 2.5 0 0 0\n",       /* negative samples */
		"phase 1 1 5 -2.5 0 0 0\n",       /* negative rate */
		"phase 1 1 5 nan 0 0 0\n",
		"phase 1 1 5 inf 0 0 0\n",
		"phase 1 1 5 1e999 0 0 0\n",
		"phase 1 1 5 2.5x 0 0 0\n",
		"phase 1  1 5 2.5 0 0 0\n",       /* two spaces */
		"phase 1 1 5 2.5 0 0 0 \n",       /* trailing space */
		"phase 99999999999 1 5 2.5 0 0 0\n",
		"phase 1 1 5 2.5 0 -1 0\n",       /* negative x diagonal */
		"phase 1 1 5 2.5 0 0 0\nphase 1 1 5 2.5 0 0 0\n", /* duplicate index */
		"phases 1 1 5 2.5 0 0 0\n",
		"rate 1 2.5\n",
	};
	for (size_t i = 0; i < sizeof bad_lines / sizeof *bad_lines; i++) {
		char text[256];
		snprintf(text, sizeof text, "%s%s", h, bad_lines[i]);
		if (parse(text) != -EBADMSG) {
			fprintf(stderr, "accepted: %s", bad_lines[i]);
			CHECK(0);
		}
	}
	/* An embedded NUL is corrupt, not the end of the file. */
	const char nul[] = "discnice-manners-targets 1\nphase 1 1 5 2.5 0 0 0\0junk\n";
	struct manners_saved_phase out[2];
	size_t count;
	CHECK(manners_state_parse(nul, sizeof nul - 1, out, 2, &count) == -EBADMSG);
	/* More phases than room. */
	CHECK(parse("discnice-manners-targets 1\nphase 1 1 5 2.5 0 0 0\nphase 2 1 5 2.5 0 0 0\n"
		    "phase 3 1 5 2.5 0 0 0\n") == -ENOSPC);
}

static int parse_as(const char *text, const char *metric)
{
	struct manners_saved_phase out[2];
	size_t count = 77;
	int rc = manners_state_parse_metric(text, strlen(text), metric, out, 2, &count);
	if (rc != 0)
		CHECK(count == 0);
	return rc;
}

/* The metric line (benice's and run's files, src/tool/tool_targets.h): a
 * file is loaded only by a reader of its own metric. */
static void test_metric(void)
{
	struct manners_saved_phase in[2], out[4];
	sample_phases(in);
	char text[4096];
	int n = manners_state_format_metric("benice-io", in, 2, text, sizeof text);
	CHECK(n > 0 && (size_t)n == strlen(text));
	CHECK(strstr(text, "\nmetric benice-io\n") != NULL);
	size_t count = 0;
	CHECK(manners_state_parse_metric(text, (size_t)n, "benice-io", out, 4, &count) == 0);
	CHECK_EQ_U64(count, 2);
	CHECK(memcmp(in, out, sizeof in) == 0);
	/* Another metric's file, or the library's reading it: refused whole. */
	CHECK(manners_state_parse_metric(text, (size_t)n, "benice-file", out, 4, &count) ==
	      -EMEDIUMTYPE && count == 0);
	CHECK(manners_state_parse(text, (size_t)n, out, 4, &count) == -EMEDIUMTYPE && count == 0);
	/* The library's file (no metric line) for a reader of a metric. */
	n = manners_state_format(in, 2, text, sizeof text);
	CHECK(strstr(text, "metric") == NULL);
	CHECK(manners_state_parse_metric(text, (size_t)n, "run-manners", out, 4, &count) ==
	      -EMEDIUMTYPE);
	CHECK(manners_state_parse_metric(text, (size_t)n, "", out, 4, &count) == 0 && count == 2);
	/* NULL or "" writes no line. */
	char again[4096];
	CHECK(manners_state_format_metric("", in, 2, again, sizeof again) == n &&
	      strcmp(again, text) == 0);
	/* Names: 1..63 of [A-Za-z0-9._-]. */
	CHECK(manners_state_metric_valid("benice-cmd-0123456789abcdef") == 1);
	CHECK(manners_state_metric_valid("a.B_9-") == 1);
	CHECK(manners_state_metric_valid("") == 0);
	CHECK(manners_state_metric_valid(NULL) == 0);
	CHECK(manners_state_metric_valid("a b") == 0);
	CHECK(manners_state_metric_valid("a/b") == 0);
	char longest[MANNERS_STATE_METRIC_MAX + 1];
	memset(longest, 'x', sizeof longest);
	longest[MANNERS_STATE_METRIC_MAX - 1] = '\0';
	CHECK(manners_state_metric_valid(longest) == 1);
	longest[MANNERS_STATE_METRIC_MAX - 1] = 'x';
	longest[MANNERS_STATE_METRIC_MAX] = '\0';
	CHECK(manners_state_metric_valid(longest) == 0);
	CHECK(manners_state_format_metric("a b", in, 2, text, sizeof text) == -EINVAL &&
	      text[0] == '\0');
	/* Where the line may be, and what is corrupt about it. */
	const char *h = "discnice-manners-targets 1\n";
	char file[512];
	snprintf(file, sizeof file, "%sphase 0 1 5 2.5 0 0 0\nmetric m1\n", h);
	CHECK(parse_as(file, "m1") == 0); /* after the phases too */
	snprintf(file, sizeof file, "%smetric m1\nmetric m1\n", h);
	CHECK(parse_as(file, "m1") == -EBADMSG); /* twice */
	snprintf(file, sizeof file, "%smetric\n", h);
	CHECK(parse_as(file, "m1") == -EBADMSG); /* no name */
	snprintf(file, sizeof file, "%smetric m1 m2\n", h);
	CHECK(parse_as(file, "m1") == -EBADMSG);
	snprintf(file, sizeof file, "%smetric a/b\n", h);
	CHECK(parse_as(file, "m1") == -EBADMSG);
	snprintf(file, sizeof file, "%smetrics m1\n", h);
	CHECK(parse_as(file, "m1") == -EBADMSG); /* another word: a bad line */
	/* Corruption is said before the metric: a broken file is -EBADMSG
	 * whoever reads it. */
	snprintf(file, sizeof file, "%smetric m1\nphase 1 1 5 2.5 0 0\n", h);
	CHECK(parse_as(file, "m2") == -EBADMSG);
	snprintf(file, sizeof file, "discnice-manners-targets 2\nmetric m1\n");
	CHECK(parse_as(file, "m1") == -EPROTONOSUPPORT);
}

int main(void)
{
	test_round_trip();
	test_capture_restore();
	test_corrupt();
	test_metric();
	return 0;
}
