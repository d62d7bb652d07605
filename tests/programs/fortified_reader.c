/* Description: reads FILE to the end through one _FORTIFY_SOURCE entry point (MODE: read -> __read_chk, pread -> __pread_chk, fread -> __fread_chk, fread_unlocked -> __fread_unlocked_chk, fgets -> __fgets_chk, fgets_unlocked -> __fgets_unlocked_chk) and writes what it read to stdout; built with -D_FORTIFY_SOURCE=2, as Debian builds its packages, so the calls go to glibc's checking variants and not to read/fread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A buffer whose size the compiler knows (__builtin_object_size) and a
 * count it does not (argv): bits/unistd.h and bits/stdio2.h then call the
 * _chk variant. */
static char buf[65536];

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s MODE FILE CHUNK\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	size_t chunk = strtoul(argv[3], NULL, 0);
	if (chunk == 0 || chunk > sizeof buf) {
		fprintf(stderr, "bad CHUNK\n");
		return 2;
	}
	FILE *fp = fopen(argv[2], "r");
	if (!fp) {
		perror(argv[2]);
		return 1;
	}
	/* Laundered, or the compiler knows chunk <= sizeof buf from the test
	 * above and calls the unchecked variant. */
	volatile size_t opaque = chunk;
	chunk = opaque;
	int fd = fileno(fp);
	off_t at = 0;
	for (;;) {
		size_t got;
		if (!strcmp(mode, "read")) {
			ssize_t r = read(fd, buf, chunk);
			if (r < 0)
				return perror("read"), 1;
			got = (size_t)r;
		} else if (!strcmp(mode, "pread")) {
			ssize_t r = pread(fd, buf, chunk, at);
			if (r < 0)
				return perror("pread"), 1;
			got = (size_t)r;
			at += r;
		} else if (!strcmp(mode, "fread")) {
			got = fread(buf, 1, chunk, fp);
		} else if (!strcmp(mode, "fread_unlocked")) {
			got = fread_unlocked(buf, 1, chunk, fp);
		} else if (!strcmp(mode, "fgets")) {
			got = fgets(buf, (int)chunk, fp) ? strlen(buf) : 0;
		} else if (!strcmp(mode, "fgets_unlocked")) {
			got = fgets_unlocked(buf, (int)chunk, fp) ? strlen(buf) : 0;
		} else {
			fprintf(stderr, "unknown MODE %s\n", mode);
			return 2;
		}
		if (got == 0)
			break;
		if (fwrite(buf, 1, got, stdout) != got)
			return perror("fwrite"), 1;
	}
	return ferror(fp) ? 1 : 0;
}
