/*
 * gb_alloc_churn - gb_alloc() while another thread of the process
 * allocates, touches and frees 64 MiB in a loop (test_graybox_mac.py).
 * gb_alloc takes off its answer the caller's own pages the probing
 * evicted; it once counted them from the process's resident set, which
 * the other thread's munmap() shrinks too.  Prints "ok N eagain M" for
 * CALLS calls of gb_alloc(16 MiB, 16 MiB, 4096); exit 0.
 */
#include <discnice/gb_alloc.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static volatile int stop;

static void *churn(void *arg)
{
	(void)arg;
	while (!stop) {
		size_t n = (size_t)64 << 20;
		char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			continue;
		memset(p, 1, n);
		munmap(p, n);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int calls = argc > 1 ? atoi(argv[1]) : 30, ok = 0, eagain = 0, other = 0;
	pthread_t t;
	if (pthread_create(&t, NULL, churn, NULL) != 0)
		return 1;
	for (int i = 0; i < calls; i++) {
		void *mem;
		size_t got;
		int rc = gb_alloc((size_t)16 << 20, (size_t)16 << 20, 4096, &mem, &got);
		if (rc == 0) {
			ok++;
			gb_free(mem);
		} else if (rc == -EAGAIN) {
			eagain++;
		} else {
			other++;
		}
	}
	stop = 1;
	pthread_join(t, NULL);
	printf("ok %d eagain %d other %d\n", ok, eagain, other);
	return 0;
}
