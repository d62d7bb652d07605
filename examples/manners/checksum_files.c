/*
 * checksum_files.c - an example background job regulated by libmanners:
 * prints an FNV-1a 64 checksum of every regular file under a directory,
 * reporting two progress metrics at each testpoint - bytes read and files
 * finished (concurrent metrics, MS Manners §4.4) - so it backs off when the
 * disk or CPU is wanted by something more important.
 *
 *   cc -o checksum_files checksum_files.c $(pkg-config --cflags --libs manners)
 *   ./checksum_files DIR
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw */
#endif
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <discnice/manners.h>

enum { METRIC_BYTES, METRIC_FILES, METRICS };

static int checksum_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (type != FTW_F)
		return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		perror(path);
		return 0;
	}
	uint64_t hash = UINT64_C(0xcbf29ce484222325);
	char buffer[65536];
	ssize_t n;
	while ((n = read(fd, buffer, sizeof buffer)) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			hash ^= (unsigned char)buffer[i];
			hash *= UINT64_C(0x100000001b3);
		}
		double progress[METRICS] = { [METRIC_BYTES] = (double)n, [METRIC_FILES] = 0 };
		manners_testpoint(0, METRICS, progress); /* may block: that is the point */
	}
	close(fd);
	double progress[METRICS] = { [METRIC_BYTES] = 0, [METRIC_FILES] = 1 };
	manners_testpoint(0, METRICS, progress);
	printf("%016" PRIx64 "  %s\n", hash, path);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: checksum_files DIR\n");
		return 2;
	}
	if (nftw(argv[1], checksum_file, 16, FTW_PHYS) != 0) {
		perror(argv[1]);
		return 1;
	}
	return 0;
}
