/*
 * warn.c - the testpoint library's one diagnostics function.  The library
 * runs inside someone else's program: a line on stderr is all it may say,
 * and callers make sure each condition says it once.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "manners/library/library.h"

void library_warn(const char *format, ...)
{
	int saved = errno;
	char line[768];
	int prefix = snprintf(line, sizeof line, "manners: ");
	va_list args;
	va_start(args, format);
	int n = vsnprintf(line + prefix, sizeof line - (size_t)prefix - 1, format, args);
	va_end(args);
	size_t length = (size_t)prefix + (n < 0 ? 0 : (size_t)n);
	if (length > sizeof line - 2)
		length = sizeof line - 2;
	line[length++] = '\n';
	/* One write(2): lines of several threads do not interleave. */
	ssize_t unused = write(STDERR_FILENO, line, length);
	(void)unused;
	errno = saved;
}
