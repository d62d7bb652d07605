/*
 * tool_msg.c - diagnostics and option parsing (see tool_msg.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "tool/tool_json.h"
#include "tool/tool_msg.h"

/* A C1 control (U+0080..U+009F: C2 80..C2 9F) or the Unicode line and
 * paragraph separators (U+2028, U+2029: E2 80 A8/A9), from the len bytes
 * of one valid UTF-8 sequence: a terminal may act on them. */
static bool unicode_control(const unsigned char *s, size_t len)
{
	return (len == 2 && s[0] == 0xc2 && s[1] <= 0x9f) ||
	       (len == 3 && s[0] == 0xe2 && s[1] == 0x80 && (s[2] == 0xa8 || s[2] == 0xa9));
}

void put_escaped(FILE *out, const char *text, bool backslash)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t n = strlen(text);
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		size_t len = json_utf8_length(s + i, n - i), step = len ? len : 1;
		if (c == '\\' && backslash)
			fputs("\\\\", out);
		else if (c == '\n')
			fputs("\\n", out);
		else if (c == '\t')
			fputs("\\t", out);
		else if (c < 0x20 || c == 0x7f || len == 0 || unicode_control(s + i, len))
			/* A control character, or a byte that is no UTF-8:
			 * each byte as \ooo, as ls -b shows it. */
			for (size_t k = 0; k < step; k++)
				fprintf(out, "\\%03o", s[i + k]);
		else
			fwrite(s + i, 1, step, out);
		i += step;
	}
}

const char *escaped(char *buf, size_t size, const char *text)
{
	FILE *f = size ? fmemopen(buf, size, "w") : NULL;
	if (!f) {
		if (size)
			buf[0] = '\0';
		return buf;
	}
	setbuf(f, NULL);
	put_escaped(f, text, true);
	fclose(f);          /* writes the NUL; a text cut to fit stays cut */
	buf[size - 1] = '\0';
	return buf;
}

const char *name_cell(char *buf, size_t size, const char *name, size_t width)
{
	escaped(buf, size, name);
	if (strlen(buf) > width) {
		printf("%s\n", buf);
		buf[0] = '\0';
	}
	return buf;
}

static void vmessage(const char *kind, const char *fmt, va_list ap)
{
	/* Formatted whole first, then escaped: a file name with a newline
	 * or a terminal control sequence in it stays on one line, and
	 * inert. */
	char small[512], *text = small;
	va_list copy;
	va_copy(copy, ap);
	int len = vsnprintf(small, sizeof small, fmt, ap);
	if (len >= (int)sizeof small && (text = malloc((size_t)len + 1)) != NULL)
		vsnprintf(text, (size_t)len + 1, fmt, copy);
	va_end(copy);
	fprintf(stderr, "discnice: %s", kind);
	if (len < 0)
		fputs(fmt, stderr);
	else
		put_escaped(stderr, text ? text : small, false);
	fputc('\n', stderr);
	if (text != small)
		free(text);
}

void warnf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmessage("warning: ", fmt, ap);
	va_end(ap);
}

void errorf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmessage("", fmt, ap);
	va_end(ap);
}

bool stdout_flush_checked(void)
{
	errno = 0;
	bool flushed = fflush(stdout) == 0;
	if (flushed && !ferror(stdout))
		return true;
	errorf("writing standard output: %s", !flushed && errno ? strerror(errno) : "write error");
	return false;
}

static void __attribute__((noreturn)) vusage_error(const char *command, const char *fmt, va_list ap)
{
	vmessage("", fmt, ap);
	fprintf(stderr, "Try 'discnice %s --help' for more information.\n", command);
	exit(EXIT_USAGE);
}

/* The command usage_error() names: run's option table also parses attach's
 * options (tool_options.c). */
static const char *usage_command = "run";

void set_usage_command(const char *command)
{
	usage_command = command;
}

void usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vusage_error(usage_command, fmt, ap);
}

bool on_off_arg(const char *source, const char *value)
{
	if (strcmp(value, "on") && strcmp(value, "off"))
		usage_error("%s '%s': expected on or off", source, value);
	return strcmp(value, "on") == 0;
}

void command_usage_error(const char *command, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vusage_error(command, fmt, ap);
}

/* getopt_long's tables for `options`: option i comes back as 1000 + i
 * (long) or its short name.  Returns n_options, clamped. */
static size_t getopt_tables(const struct command_option *options, size_t n_options, bool in_order,
			    struct option longopts[COMMAND_OPTIONS_MAX + 1],
			    char shortopts[2 * COMMAND_OPTIONS_MAX + 3])
{
	size_t s = 0;
	if (n_options > COMMAND_OPTIONS_MAX)
		n_options = COMMAND_OPTIONS_MAX;
	if (in_order)
		shortopts[s++] = '+';
	shortopts[s++] = ':';
	for (size_t i = 0; i < n_options; i++) {
		longopts[i] = (struct option){ options[i].name,
					       options[i].arg ? required_argument : no_argument,
					       NULL, (int)(1000 + i) };
		if (options[i].short_name) {
			shortopts[s++] = (char)options[i].short_name;
			if (options[i].arg)
				shortopts[s++] = ':';
		}
	}
	shortopts[s] = '\0';
	longopts[n_options] = (struct option){ 0, 0, 0, 0 };
	return n_options;
}

static int option_index(const struct command_option *options, size_t n_options, int ch)
{
	if (ch >= 1000)
		return ch - 1000;
	for (size_t i = 0; i < n_options; i++)
		if (options[i].short_name == ch)
			return (int)i;
	return -1;
}

int command_options_scan(const struct command_option *options, size_t n_options, bool in_order,
			 int argc, char **argv, uint64_t *seen)
{
	struct option longopts[COMMAND_OPTIONS_MAX + 1];
	char shortopts[2 * COMMAND_OPTIONS_MAX + 3];
	n_options = getopt_tables(options, n_options, in_order, longopts, shortopts);
	/* getopt's state is the caller's: kept and given back. */
	int saved_optind = optind, saved_opterr = opterr, saved_optopt = optopt;
	char *saved_optarg = optarg;
	optind = 0; /* GNU: start afresh on this argv */
	opterr = 0;
	*seen = 0;
	int ch, first = -1;
	while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		int i = option_index(options, n_options, ch);
		if (ch == '?' || ch == ':' || i < 0)
			break;
		*seen |= UINT64_C(1) << i;
	}
	if (ch == -1)
		first = optind;
	/* glibc keeps hidden state (the next character of a cluster, the
	 * permutation's bounds) pointing into this argv, which the caller
	 * may free: one empty parse from optind 0 resets it. */
	char *none[] = { argv[0], NULL };
	optind = 0;
	(void)getopt_long(1, none, shortopts, longopts, NULL);
	optind = saved_optind;
	opterr = saved_opterr;
	optopt = saved_optopt;
	optarg = saved_optarg;
	return first;
}

int command_option_next(const char *command, const struct command_option *options,
			size_t n_options, bool in_order, int argc, char **argv)
{
	struct option longopts[COMMAND_OPTIONS_MAX + 1];
	char shortopts[2 * COMMAND_OPTIONS_MAX + 3];
	n_options = getopt_tables(options, n_options, in_order, longopts, shortopts);

	opterr = 0;
	int ch = getopt_long(argc, argv, shortopts, longopts, NULL);
	if (ch == -1)
		return -1;
	const char *bad = argv[optind - 1];
	/* getopt_long's optopt after '?': a known long option given a value
	 * it does not take ("--json=1") leaves that option's val (1000 + i),
	 * an unknown short one its character, an unknown long one 0. */
	if (ch == '?' && optopt >= 1000 && (size_t)(optopt - 1000) < n_options)
		command_usage_error(command, "option '--%s' takes no value",
				    options[optopt - 1000].name);
	if (ch == '?')
		command_usage_error(command, "unknown option '%s'",
				    optopt > 0 && optopt < 256 ? (char[]){ '-', (char)optopt, 0 }
							       : bad);
	if (ch == ':')
		command_usage_error(command, "option '%s' needs a value", bad);
	return option_index(options, n_options, ch);
}

/* Where --help text wraps: an 80-column terminal's last usable column. */
#define HELP_COLUMNS 79

void help_wrap(const char *text, int indent, int column)
{
	bool first = true, sentence_end = false;
	for (const char *p = text; *p;) {
		/* The authored line breaks are soft; two spaces after a
		 * sentence's end are kept, as the text has them. */
		int spaces = 0;
		bool newline = false;
		for (; *p == ' ' || *p == '\n'; p++) {
			spaces += *p == ' ';
			newline |= *p == '\n';
		}
		if (!*p)
			break;
		const char *end = p;
		while (*end && *end != ' ' && *end != '\n')
			end++;
		/* A short "[default: X]" is one word, and a long one keeps
		 * its first word with "[default:": never "[default:" alone at
		 * a line's end. */
		if (*p == '[' && !memchr(p, ']', (size_t)(end - p))) {
			const char *second = NULL;
			for (const char *q = end; *q == ' ';) {
				const char *w = q + 1;
				while (*w && *w != ' ' && *w != '\n' && *w != ']')
					w++;
				if (*w == ']')
					w++;
				if (!second)
					second = w;
				if (w[-1] == ']' || w - p > 32) {
					end = w[-1] == ']' && w - p <= 32 ? w : second;
					break;
				}
				q = w;
			}
		}
		int len = (int)(end - p);
		int gap = first ? 0 : spaces >= 2 || (newline && sentence_end) ? 2 : 1;
		if (!first && column + gap + len > HELP_COLUMNS) {
			printf("\n%*s", indent, "");
			column = indent;
		} else {
			printf("%*s", gap, "");
			column += gap;
		}
		fwrite(p, 1, (size_t)len, stdout);
		column += len;
		/* "cap." ends a sentence; "e.g." and "etc." do not. */
		sentence_end = end[-1] == '.' && !memchr(p, '.', (size_t)len - 1) &&
			       !(len == 4 && memcmp(p, "etc.", 4) == 0);
		first = false;
		p = end;
	}
}

void help_option_print(int short_name, const char *name, const char *arg, const char *help,
		       int width)
{
	char flag[64];
	if (short_name)
		snprintf(flag, sizeof flag, "-%c, --%s%s%s", short_name, name, arg ? " " : "",
			 arg ? arg : "");
	else
		snprintf(flag, sizeof flag, "    --%s%s%s", name, arg ? " " : "", arg ? arg : "");
	/* A flag too wide for its column gets a line of its own (as GNU
	 * tools' --help does). */
	if ((int)strlen(flag) >= width)
		printf("  %s\n  %-*s", flag, width, "");
	else
		printf("  %-*s", width, flag);
	help_wrap(help, 2 + width, 2 + width);
}
