/*
 * tool_msg.h - every diagnostic of the discnice command goes through here:
 * one line, prefixed "discnice: ", format-checked; and the option parsing
 * every subcommand shares, whose errors are such diagnostics.
 */
#ifndef DISCNICE_TOOL_MSG_H
#define DISCNICE_TOOL_MSG_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

/* Exit codes (documented in discnice(1), EXIT STATUS). */
enum {
	EXIT_USAGE = 2,          /* bad option or value; the job never started  */
	EXIT_INTERNAL = 125,     /* discnice itself failed; the job never started */
	EXIT_CANNOT_EXEC = 126,  /* command found but not executable             */
	EXIT_NOT_FOUND = 127,    /* command not found (as env(1))                */
};

/* One option of a --help listing: the flag in a column of `width`, then
 * the help text, wrapped to 79 columns (help_wrap()). */
void help_option_print(int short_name, const char *name, const char *arg, const char *help,
		       int width);

/* text on stdout, the cursor at column (0-based), wrapped to 79 columns
 * with every line after the first indented by indent; its own '\n' are
 * soft line breaks. */
void help_wrap(const char *text, int indent, int column);

/* text with its control characters as C escapes, as ls -b shows them
 * (\n, \t, else \ooo; C1 controls, U+2028 and U+2029, and bytes that
 * are no UTF-8 too), and backslashes as \\ when asked: so that a name
 * is one line and sends the terminal nothing. */
void put_escaped(FILE *out, const char *text, bool backslash);

/* text escaped as put_escaped() does (backslashes too), into buf, cut to
 * fit; returns buf. */
const char *escaped(char *buf, size_t size, const char *text);

/* A table's first cell: name escaped into buf; when it is wider than
 * `width`, it is printed on a line of its own first and the cell is ""
 * (as df(1) does with long device names), so the columns stay aligned. */
const char *name_cell(char *buf, size_t size, const char *name, size_t width);

/* One line on stderr, "discnice: " first, the message escaped as by
 * put_escaped() (backslashes kept). */
void warnf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Flush stdout: false, after one line saying why ("writing standard
 * output: No space left on device"), if what a command printed was lost.
 * errno is read from this flush, so a failed one before it leaves only
 * "write error" to say. */
bool stdout_flush_checked(void);
/* errorf, a hint to try 'discnice run --help' (or the command named by
 * set_usage_command()), and exit(EXIT_USAGE). */
void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void set_usage_command(const char *command);
/* An on|off option's value: true for on, false for off; anything else is
 * usage_error("SOURCE 'VALUE': expected on or off"). */
bool on_off_arg(const char *source, const char *value);
/* The same for 'discnice COMMAND --help'. */
void command_usage_error(const char *command, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

/* An option of a subcommand: one table per subcommand, sorted by name. */
struct command_option {
	const char *name;      /* long flag, without "--"       */
	int short_name;        /* 0 = none                       */
	const char *arg;       /* NULL = takes no value          */
	const char *help;
};
#define COMMAND_OPTIONS_MAX 40

/* getopt_long over `options` (at most COMMAND_OPTIONS_MAX): returns the
 * index of the option seen, -1 at the end (optind then points at the first
 * operand).  Exits 2 with one line and a hint to try
 * 'discnice COMMAND --help' on an unknown option or a missing value.
 * in_order: stop at the first operand (run: what follows is the job's);
 * else permute, so operands and options may be mixed. */
int command_option_next(const char *command, const struct command_option *options,
			size_t n_options, bool in_order, int argc, char **argv);

/* The same parse of a whole command line, silently: argv (argv[0] the
 * command's name) is permuted as getopt_long permutes it, *seen gets bit i
 * for each options[i] given, and the index of the first operand is
 * returned (argc: none), or -1 for a line that does not parse.  optind,
 * optarg, opterr and optopt are given back as they were, and glibc's
 * hidden state is reset (a later parse starts afresh at optind 1); not for
 * use in the middle of another parse.  For reading another discnice's
 * /proc/PID/cmdline (tool_regulators.c). */
int command_options_scan(const struct command_option *options, size_t n_options, bool in_order,
			 int argc, char **argv, uint64_t *seen);

#endif
