/*
 * tool_msg.c - diagnostics (see tool_msg.h).
 */
#include <stdarg.h>
#include <stdio.h>
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

void usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmessage("", fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try 'discnice run --help' for more information.\n");
	exit(EXIT_USAGE);
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
	printf("  %-*s", width, flag);
	for (const char *p = help; *p; p++) {
		putchar(*p);
		if (*p == '\n')
			printf("  %-*s", width, "");
	}
}
