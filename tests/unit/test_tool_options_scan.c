/* Description: command_options_scan() (tool_msg.h) reads a command line as getopt_long would - which options were given, where the operands start, with abbreviations, clusters, "--" and permutation - silently, and leaves getopt's state so that a later parse of another argv starts afresh (glibc's hidden pointer into the scanned argv, freed here, is what ASan would catch). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "tool/tool_msg.h"

static const struct command_option opts[] = {
	{ "class", 'c', "NAME", "" },
	{ "pid", 0, NULL, "" },
	{ "quiet", 'q', NULL, "" },
	{ "rate", 'r', "RATE", "" },
};
#define N_OPTS (sizeof opts / sizeof opts[0])
#define BIT(i) (UINT64_C(1) << (i))

/* The line in a heap copy, scanned, then freed: the scan must keep no
 * pointer into it.  Returns the first operand's index; *first_operand
 * gets a copy of that word ("" for none). */
static int scan(bool in_order, const char *const *words, uint64_t *seen, char *first_operand,
		size_t size)
{
	int argc = 0;
	while (words[argc])
		argc++;
	char **argv = calloc((size_t)argc + 1, sizeof *argv);
	CHECK(argv);
	for (int i = 0; i < argc; i++)
		CHECK((argv[i] = strdup(words[i])) != NULL);
	int first = command_options_scan(opts, N_OPTS, in_order, argc, argv, seen);
	snprintf(first_operand, size, "%s", first >= 0 && first < argc ? argv[first] : "");
	for (int i = 0; i < argc; i++)
		free(argv[i]);
	free(argv);
	return first;
}

int main(void)
{
	uint64_t seen;
	char op[64];

	/* benice's way (in order): options, then the operands. */
	const char *const b1[] = { "benice", "-q", "--pid", "12", "34", NULL };
	CHECK(scan(true, b1, &seen, op, sizeof op) == 3 && strcmp(op, "12") == 0);
	CHECK(seen == (BIT(1) | BIT(2)));
	/* In order, an option after the first operand is the command's. */
	const char *const b2[] = { "benice", "--", "sleep", "--pid", NULL };
	CHECK(scan(true, b2, &seen, op, sizeof op) == 2 && strcmp(op, "sleep") == 0);
	CHECK(seen == 0);
	/* Abbreviations and NAME=VALUE, as getopt_long takes them. */
	const char *const b3[] = { "benice", "--pi", "--ra=5M", "7", NULL };
	CHECK(scan(true, b3, &seen, op, sizeof op) == 3 && strcmp(op, "7") == 0);
	CHECK(seen == (BIT(1) | BIT(3)));

	/* attach's way (permuted): options after the operands, a cluster
	 * whose last option takes the next word, and a value that looks like
	 * a PID but is the class's name. */
	const char *const a1[] = { "attach", "12", "-qc", "99", "34", "--rate", "1M", NULL };
	int first = scan(false, a1, &seen, op, sizeof op);
	CHECK(first == 5 && strcmp(op, "12") == 0); /* argv now: attach -qc 99 --rate 1M 12 34 */
	CHECK(seen == (BIT(0) | BIT(2) | BIT(3)));
	/* "--" ends the options; what follows is an operand even if it looks like one. */
	const char *const a2[] = { "attach", "-r", "1M", "--", "-5", NULL };
	CHECK(scan(false, a2, &seen, op, sizeof op) == 4 && strcmp(op, "-5") == 0);

	/* A line that does not parse: an unknown option, a missing value. */
	const char *const bad1[] = { "attach", "--bogus", "12", NULL };
	CHECK(scan(false, bad1, &seen, op, sizeof op) == -1);
	const char *const bad2[] = { "attach", "12", "--rate", NULL };
	CHECK(scan(false, bad2, &seen, op, sizeof op) == -1);

	/* getopt's state afterwards: a scan that stopped inside a cluster
	 * ("-qZr": Z unknown, r not yet read) once left glibc's next-character
	 * pointer in the scanned argv - a buffer its caller frees or reuses,
	 * played here by one overwritten with "xxxx" - and a parse of another
	 * argv from optind 1 went on from there ("unknown option '-x'", exit
	 * 2).  libc is not instrumented: ASan cannot see that read. */
	static char cut0[] = "attach", cut1[] = "-qZr";
	char *cut[] = { cut0, cut1, NULL };
	CHECK(command_options_scan(opts, N_OPTS, false, 2, cut, &seen) == -1);
	memcpy(cut1, "xxxx", sizeof cut1);
	char w0[] = "attach", w1[] = "-q", w2[] = "12";
	char *argv[] = { w0, w1, w2, NULL };
	optind = 1;
	CHECK(command_option_next("attach", opts, N_OPTS, false, 3, argv) == 2);
	CHECK(command_option_next("attach", opts, N_OPTS, false, 3, argv) == -1);
	CHECK(optind == 2 && strcmp(argv[optind], "12") == 0);
	return 0;
}
