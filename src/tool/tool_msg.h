/*
 * tool_msg.h - every diagnostic of the discnice command goes through here:
 * one line, prefixed "discnice: ", format-checked.
 */
#ifndef DISCNICE_TOOL_MSG_H
#define DISCNICE_TOOL_MSG_H

/* Exit codes (documented in discnice(1), EXIT STATUS). */
enum {
	EXIT_USAGE = 2,          /* bad option or value; the job never started  */
	EXIT_INTERNAL = 125,     /* discnice itself failed; the job never started */
	EXIT_CANNOT_EXEC = 126,  /* command found but not executable             */
	EXIT_NOT_FOUND = 127,    /* command not found (as env(1))                */
};

/* One option of a --help listing: the flag in a column of `width`, then
 * the help text, continuation lines ('\n' in help) indented under it. */
void help_option_print(int short_name, const char *name, const char *arg, const char *help,
		       int width);

void warnf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* errorf, a hint to try --help, and exit(EXIT_USAGE). */
void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
