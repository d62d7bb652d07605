/*
 * Description: regulated worker threads for tests/integration/test_manners_lib.py:
 * each thread loops "work, testpoint" and logs the intervals it ran, so the
 * test can check time-multiplex isolation (MS Manners §4.5) by its own clock.
 *
 *   manners_worker [--threads N] [--seconds S] [--work-ms M] [--cpu]
 *                  [--hang THREAD:SECONDS] [--priority THREAD:P]
 *
 * Output, one line each (CLOCK_MONOTONIC ns):
 *   interval PID THREAD START END   from return of a testpoint to the next call
 *   progress NOW UNITS              --cpu: total work done so far, every 100 ms
 *   regulating NOW                  the first time thread 0's bootstrap is over
 *   stats THREAD key=value ...      at the end, from manners_stats()
 * --cpu: work is a busy loop of fixed units (testpoint every unit), not a sleep.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <discnice/manners.h>

static int threads = 2, work_ms = 10, cpu_mode = 0;
static double seconds = 2.0;
static int hang_thread = -1;
static double hang_seconds = 0.0;
static int priority_thread = -1, priority_value = 0;
static pthread_mutex_t output_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t total_units;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = { ns / 1000000000, ns % 1000000000 };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* One unit of CPU work, about 1 ms on this class of machine. */
static uint64_t cpu_unit(uint64_t seed)
{
	for (int i = 0; i < 300000; i++)
		seed = seed * 6364136223846793005u + 1442695040888963407u;
	return seed;
}

static void *worker(void *argument)
{
	int id = (int)(intptr_t)argument;
	if (id == priority_thread)
		manners_set_priority(priority_value);
	int64_t end = now_ns() + (int64_t)(seconds * 1e9);
	double progress = 0.0;
	int hung = 0, said_regulating = 0;
	uint64_t seed = (uint64_t)id + 1, tests = 0;
	for (;;) {
		int rc = manners_testpoint(id, 1, &progress);
		if (rc != 0) {
			fprintf(stderr, "manners_testpoint: %s\n", strerror(-rc));
			exit(1);
		}
		int64_t start = now_ns();
		if (start >= end)
			break;
		tests++;
		if (id == 0 && !said_regulating) {
			struct manners_stats s;
			if (manners_stats(&s, sizeof s) == 0 && s.regulating) {
				said_regulating = 1;
				pthread_mutex_lock(&output_lock);
				printf("regulating %" PRId64 "\n", start);
				fflush(stdout);
				pthread_mutex_unlock(&output_lock);
			}
		}
		if (id == hang_thread && !hung && tests == 5) {
			hung = 1;
			sleep_ns((int64_t)(hang_seconds * 1e9));
		} else if (cpu_mode) {
			seed = cpu_unit(seed);
			__atomic_add_fetch(&total_units, 1, __ATOMIC_RELAXED);
		} else {
			sleep_ns((int64_t)work_ms * 1000000);
		}
		progress = 1.0;
		int64_t stop = now_ns();
		if (!cpu_mode) {
			pthread_mutex_lock(&output_lock);
			printf("interval %d %d %" PRId64 " %" PRId64 "\n", (int)getpid(), id, start, stop);
			pthread_mutex_unlock(&output_lock);
		}
	}
	struct manners_stats s;
	manners_stats(&s, sizeof s);
	pthread_mutex_lock(&output_lock);
	printf("stats %d testpoints=%" PRIu64 " processed=%" PRIu64 " good=%" PRIu64 " poor=%" PRIu64
	       " discarded=%" PRIu64 " suspended_ns=%" PRId64 " blocked_ns=%" PRId64
	       " loaded_phases=%u shared=%d busy_processed=%" PRIu64 " pressure_rises=%" PRIu64
	       " shortened=%" PRIu64 " seed=%" PRIu64 "\n",
	       id, s.testpoints, s.processed, s.judged_good, s.judged_poor, s.discarded,
	       s.suspended_ns, s.blocked_ns, (unsigned)s.loaded_phases, (int)s.shared,
	       s.busy_processed, s.pressure_rises, s.shortened, seed & 1);
	pthread_mutex_unlock(&output_lock);
	manners_leave();
	return NULL;
}

static void *reporter(void *unused)
{
	(void)unused;
	for (;;) {
		sleep_ns(100000000);
		pthread_mutex_lock(&output_lock);
		printf("progress %" PRId64 " %" PRIu64 "\n", now_ns(),
		       __atomic_load_n(&total_units, __ATOMIC_RELAXED));
		fflush(stdout);
		pthread_mutex_unlock(&output_lock);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *next = i + 1 < argc ? argv[i + 1] : "0";
		if (strcmp(argv[i], "--threads") == 0)
			threads = atoi(next), i++;
		else if (strcmp(argv[i], "--seconds") == 0)
			seconds = atof(next), i++;
		else if (strcmp(argv[i], "--work-ms") == 0)
			work_ms = atoi(next), i++;
		else if (strcmp(argv[i], "--cpu") == 0)
			cpu_mode = 1;
		else if (strcmp(argv[i], "--hang") == 0)
			sscanf(next, "%d:%lf", &hang_thread, &hang_seconds), i++;
		else if (strcmp(argv[i], "--priority") == 0)
			sscanf(next, "%d:%d", &priority_thread, &priority_value), i++;
		else {
			fprintf(stderr, "usage: manners_worker [--threads N] [--seconds S] [--work-ms M] "
					"[--cpu] [--hang T:S] [--priority T:P]\n");
			return 2;
		}
	}
	if (threads < 1 || threads > 64)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0); /* a test may read lines as they come */
	pthread_t reporter_thread, ids[64];
	if (cpu_mode)
		pthread_create(&reporter_thread, NULL, reporter, NULL);
	for (int i = 0; i < threads; i++)
		pthread_create(&ids[i], NULL, worker, (void *)(intptr_t)i);
	for (int i = 0; i < threads; i++)
		pthread_join(ids[i], NULL);
	pthread_mutex_lock(&output_lock);
	fflush(stdout);
	pthread_mutex_unlock(&output_lock);
	return 0;
}
