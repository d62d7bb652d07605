/* Description: sendfile, copy_file_range and splice with offset pointers the kernel refuses (unmapped, misaligned into nothing, PROT_NONE), between disk files and a pipe. */
/*
 * Usage: bad_offset FILE
 * FILE must hold at least 64 KiB.  Each call is made with a bad in or out
 * offset pointer and prints one line: what it returned and errno's name;
 * then with good offsets, to show the descriptors still work.  The output
 * is compared with a plain run.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <unistd.h>

static void report(const char *call, const char *what, ssize_t r)
{
	printf("%-16s %-10s -> %zd %s\n", call, what, r,
	       r < 0 ? (errno == EFAULT ? "EFAULT" : strerror(errno)) : "");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s FILE\n", argv[0]);
		return 2;
	}
	int in = open(argv[1], O_RDONLY);
	char out_path[4096];
	snprintf(out_path, sizeof out_path, "%s.out", argv[1]);
	int out = open(out_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	int pipefd[2];
	if (in < 0 || out < 0 || pipe(pipefd) != 0) {
		perror("setup");
		return 2;
	}
	off_t *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct { const char *name; off_t *p; } bad[] = {
		{ "low", (off_t *)8 }, { "high", (off_t *)-1 }, { "prot_none", none },
	};
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		report("sendfile", bad[i].name, sendfile(out, in, bad[i].p, 4096));
		report("cfr in", bad[i].name, copy_file_range(in, bad[i].p, out, NULL, 4096, 0));
		report("cfr out", bad[i].name, copy_file_range(in, NULL, out, bad[i].p, 4096, 0));
		report("splice in", bad[i].name, splice(in, bad[i].p, pipefd[1], NULL, 4096, 0));
	}
	off_t a = 0, b = 8192;
	report("sendfile", "good", sendfile(out, in, &a, 4096));
	report("cfr", "good", copy_file_range(in, &a, out, &b, 4096, 0));
	report("splice", "good", splice(in, &a, pipefd[1], NULL, 4096, 0));
	printf("offset now %lld\n", (long long)a);
	unlink(out_path);
	return 0;
}
