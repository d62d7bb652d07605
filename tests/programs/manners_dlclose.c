/*
 * Description: a plug-in host that loads libmanners with dlopen(), makes a
 * testpoint in a thread, unloads the library, then lets the thread exit.
 *
 * manners_dlclose LIBRARY - the thread's pthread key destructor is the
 * library's: unloaded, a thread that had made a testpoint crashed at its
 * exit (SIGSEGV).  Prints "dlclose 0, thread ended" and exits 0.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static int (*testpoint)(int, int, const double *);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t moved = PTHREAD_COND_INITIALIZER;
static int phase;

static void *worker(void *arg)
{
	(void)arg;
	double progress = 1;
	testpoint(0, 1, &progress);
	pthread_mutex_lock(&lock);
	phase = 1;
	pthread_cond_signal(&moved);
	while (phase != 2)
		pthread_cond_wait(&moved, &lock);
	pthread_mutex_unlock(&lock);
	return NULL; /* the thread's keys' destructors run here */
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!library) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	*(void **)&testpoint = dlsym(library, "manners_testpoint");
	if (!testpoint)
		return 1;
	pthread_t t;
	if (pthread_create(&t, NULL, worker, NULL) != 0)
		return 1;
	pthread_mutex_lock(&lock);
	while (phase != 1)
		pthread_cond_wait(&moved, &lock);
	pthread_mutex_unlock(&lock);
	int rc = dlclose(library);
	pthread_mutex_lock(&lock);
	phase = 2;
	pthread_cond_signal(&moved);
	pthread_mutex_unlock(&lock);
	pthread_join(t, NULL);
	printf("dlclose %d, thread ended\n", rc);
	return 0;
}
