/*
 * tool_msg.c - diagnostics and option parsing (see tool_msg.h).
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "tool/tool_msg.h"

static void vmessage(const char *kind, const char *fmt, va_list ap)
{
	fprintf(stderr, "discnice: %s", kind);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
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

int command_option_next(const char *command, const struct command_option *options,
			size_t n_options, bool in_order, int argc, char **argv)
{
	struct option longopts[COMMAND_OPTIONS_MAX + 1];
	char shortopts[2 * COMMAND_OPTIONS_MAX + 3];
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
	if (ch >= 1000)
		return ch - 1000;
	for (size_t i = 0; i < n_options; i++)
		if (options[i].short_name == ch)
			return (int)i;
	return -1;
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
	for (const char *p = help; *p; p++) {
		putchar(*p);
		if (*p == '\n')
			printf("  %-*s", width, "");
	}
}
