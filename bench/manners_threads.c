/*
 * manners_threads.c - the low-importance job of MS Manners §9.5 (Fig. 9):
 * one process, two regulated threads on two disks, like the SIS Groveler's
 * thread per partition.  Each thread reads its directory's files in 1 MiB
 * pieces with O_DIRECT (every byte from the disk, none from the cache),
 * computes a checksum of each piece (the Groveler's signature, some CPU
 * per byte), and calls manners_testpoint() with one MiB of progress per
 * piece.  Thread 0 is given a higher priority, as the paper's C-drive
 * thread was (manners_set_priority(); decay-usage sharing, §7.1).
 *
 *   manners_threads SECONDS DIR_C DIR_D [PRIORITY_C]
 *
 * Output, one line per piece (CLOCK_MONOTONIC ns):
 *   piece THREAD START END         the piece's read and checksum
 * and at the end:
 *   stats THREAD testpoints=N suspended_s=S regulating=0|1
 * bench/manners_threads.py turns the pieces into each thread's running
 * time and rate per phase of the dummy loads.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <discnice/manners.h>

#define PIECE (1u << 20)
#define MAX_FILES 256

struct thread_job {
	int id;
	const char *dir;
	int priority;
	int64_t end_ns;
	char *files[MAX_FILES];
	int nfiles;
};

static pthread_mutex_t output_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The Groveler's signature of a piece: a few ns of CPU per byte. */
static uint64_t checksum(const unsigned char *p, size_t n, uint64_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211u;
	return h;
}

static int list_files(struct thread_job *job)
{
	DIR *d = opendir(job->dir);
	if (!d)
		return -errno;
	struct dirent *e;
	while ((e = readdir(d)) && job->nfiles < MAX_FILES) {
		if (e->d_name[0] == '.')
			continue;
		char *path;
		if (asprintf(&path, "%s/%s", job->dir, e->d_name) < 0)
			break;
		job->files[job->nfiles++] = path;
	}
	closedir(d);
	return job->nfiles ? 0 : -ENOENT;
}

static void *worker(void *argument)
{
	struct thread_job *job = argument;
	manners_set_priority(job->priority);
	unsigned char *buf = aligned_alloc(4096, PIECE);
	if (!buf)
		return NULL;
	uint64_t h = 14695981039346656037u;
	double progress = 0.0;
	for (int f = 0; now_ns() < job->end_ns; f = (f + 1) % job->nfiles) {
		int fd = open(job->files[f], O_RDONLY | O_DIRECT);
		if (fd < 0) {
			fprintf(stderr, "manners_threads: %s: %s\n", job->files[f], strerror(errno));
			break;
		}
		for (;;) {
			if (manners_testpoint(0, 1, &progress) != 0)
				break;
			int64_t start = now_ns();
			if (start >= job->end_ns)
				break;
			ssize_t n = read(fd, buf, PIECE);
			if (n <= 0)
				break;
			h = checksum(buf, (size_t)n, h);
			progress = (double)n / PIECE;
			pthread_mutex_lock(&output_lock);
			printf("piece %d %" PRId64 " %" PRId64 "\n", job->id, start, now_ns());
			pthread_mutex_unlock(&output_lock);
		}
		close(fd);
	}
	struct manners_stats s;
	if (manners_stats(&s, sizeof s) == 0) {
		pthread_mutex_lock(&output_lock);
		printf("stats %d testpoints=%" PRIu64 " processed=%" PRIu64 " good=%" PRIu64
		       " poor=%" PRIu64 " suspended_s=%.3f blocked_s=%.3f target_ms=%.3f last_run_ms=%.3f"
		       " regulating=%d checksum=%016" PRIx64 "\n", job->id, s.testpoints, s.processed,
		       s.judged_good, s.judged_poor, (double)s.suspended_ns / 1e9,
		       (double)s.blocked_ns / 1e9, (double)s.target_ns / 1e6, (double)s.last_run_ns / 1e6,
		       (int)s.regulating, h);
		pthread_mutex_unlock(&output_lock);
	}
	manners_leave();
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: manners_threads SECONDS DIR_C DIR_D [PRIORITY_C]\n");
		return 2;
	}
	int64_t end = now_ns() + (int64_t)(atof(argv[1]) * 1e9);
	struct thread_job jobs[2] = {
		{ .id = 0, .dir = argv[2], .priority = argc > 4 ? atoi(argv[4]) : 1, .end_ns = end },
		{ .id = 1, .dir = argv[3], .priority = 0, .end_ns = end },
	};
	pthread_t threads[2];
	for (int i = 0; i < 2; i++) {
		int rc = list_files(&jobs[i]);
		if (rc < 0) {
			fprintf(stderr, "manners_threads: %s: %s\n", jobs[i].dir, strerror(-rc));
			return 1;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < 2; i++)
		if (pthread_create(&threads[i], NULL, worker, &jobs[i]) != 0)
			return 1;
	for (int i = 0; i < 2; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
