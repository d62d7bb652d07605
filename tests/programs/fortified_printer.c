/* Description: writes COUNT lines of 64 bytes to FILE through one dprintf entry point (MODE: dprintf, vdprintf - the plain symbols, called through pointers; dprintf_chk, vdprintf_chk - what -D_FORTIFY_SOURCE=2 makes of a direct call), then fsyncs it; glibc formats these into a FILE of its own and writes with its internal __write, which no write() hook sees. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int (*volatile plain_dprintf)(int, const char *, ...) = dprintf;
static int (*volatile plain_vdprintf)(int, const char *, va_list) = vdprintf;

static int checked_vdprintf(int fd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vdprintf(fd, fmt, ap);   /* __vdprintf_chk under fortify */
	va_end(ap);
	return r;
}

static int plain_v(int fd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = plain_vdprintf(fd, fmt, ap);
	va_end(ap);
	return r;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s MODE FILE COUNT\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	long count = strtol(argv[3], NULL, 0);
	int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return perror(argv[2]), 1;
	for (long i = 0; i < count; i++) {
		/* 64 bytes a line; every 1000th line a long one (%s of 5000
		 * bytes) to pass glibc's and the agent's buffers. */
		static char pad[5001];
		if (!pad[0])
			memset(pad, 'x', 5000);
		const char *s = i % 1000 == 999 ? pad : "0123456789abcdef0123456789abcdef0123456789abc";
		int r;
		if (!strcmp(mode, "dprintf"))
			r = plain_dprintf(fd, "line %012ld %s\n", i, s);
		else if (!strcmp(mode, "vdprintf"))
			r = plain_v(fd, "line %012ld %s\n", i, s);
		else if (!strcmp(mode, "dprintf_chk"))
			r = dprintf(fd, "line %012ld %s\n", i, s);
		else if (!strcmp(mode, "vdprintf_chk"))
			r = checked_vdprintf(fd, "line %012ld %s\n", i, s);
		else
			return fprintf(stderr, "unknown MODE %s\n", mode), 2;
		if (r != (int)(19 + strlen(s)))
			return fprintf(stderr, "%s returned %d\n", mode, r), 1;
	}
	if (fsync(fd) != 0 || close(fd) != 0)
		return perror("fsync"), 1;
	return 0;
}
