/*
 * mac_sort.c - the sort-like job of the gray-box ICL paper's Fig 7
 * (graybox-icl §4.3.3, its `fastsort` and `gb-fastsort`): an external sort
 * of 64-bit keys that forms sorted runs in passes and merges them.
 *
 *   mac_sort --generate FILE --size SIZE [--seed N]
 *   mac_sort --input FILE --scratch DIR (--fixed SIZE | --gb --min SIZE [--max SIZE])
 *            [--gb-lock FILE] [--no-merge] [--label TEXT]
 *
 * Each pass takes a buffer of P bytes, fills it from the input (read),
 * sorts it in place, writes it as a run to a scratch file (write), and
 * gives the buffer back.  A final merge reads the runs (1 MiB of each at a
 * time, so it needs little memory - the paper does not time it, "its
 * performance is not as sensitive to the amount of available memory") and
 * checks the result: non-decreasing, as many keys as the input, the same
 * sum.
 *   --fixed P     every pass is P bytes (the traditional fastsort, whose
 *                 pass size is given on the command line);
 *   --gb          before each pass, gb_alloc(min, max, 8) sizes the buffer
 *                 to what is available now (gb-fastsort: it frees each
 *                 chunk before asking for the next, so it cannot deadlock,
 *                 §4.3.2); -EAGAIN means wait 100 ms and ask again.  max
 *                 defaults to the whole input, as in the paper.
 *   --gb-lock F   with --gb: hold flock(F) around each gb_alloc call, so
 *                 the jobs sharing F probe one at a time.  Not part of
 *                 gb_alloc (which is thread-safe, not atomic across
 *                 processes); an experiment on the paper's "MAC atomically
 *                 identifies and allocates this memory to avoid race
 *                 conditions" (§4.3): what four concurrent probes do
 *                 without it.
 *
 * Why not qsort(3): glibc 2.36's qsort is a merge sort that mallocs a
 * second buffer the size of the array when it can - it would double the
 * memory a pass uses behind gb_alloc's back.  The sort here is an
 * in-place quicksort.
 *
 * Why the input and the runs are dropped from the page cache once used,
 * 8 MiB at a time (POSIX_FADV_DONTNEED, after fdatasync for the runs),
 * and the merge's output every 64 MiB: a real sort reads
 * its input once and its runs are read back only at the merge, long
 * after.  Left in the cache they would be charged to the memory cgroup the
 * jobs share and leave the pass buffers' share of memory to the kernel's
 * reclaim order; dropped, the memory at stake is the pass buffers, as on
 * the paper's machine where each job had its own disk.
 *
 * Output: one line of JSON (times in seconds; pass sizes in bytes;
 * major_faults from getrusage(RUSAGE_SELF).ru_majflt - a page brought
 * back from swap is one, a read(2) of the input is none).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <discnice/gb_alloc.h>

#define MIB (UINT64_C(1) << 20)
#define IO_CHUNK (8 * MIB)          /* read/write in pieces this big     */
#define MERGE_BUFFER (1 * MIB)      /* per run, during the merge         */
#define MAX_PASSES 4096
#define GB_WAIT_NS (100 * 1000000L) /* -EAGAIN: wait this long, ask again */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "mac_sort: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t parse_size(const char *text)
{
	char *end;
	errno = 0;
	unsigned long long value = strtoull(text, &end, 10);
	uint64_t unit = 1;
	if (*end == 'K' || *end == 'k')
		unit = UINT64_C(1) << 10;
	else if (*end == 'M' || *end == 'm')
		unit = MIB;
	else if (*end == 'G' || *end == 'g')
		unit = UINT64_C(1) << 30;
	if (unit != 1)
		end++;
	if (strcmp(end, "") != 0 && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
		value = 0;
	if (errno || end == text || value == 0) {
		fprintf(stderr, "mac_sort: bad size '%s' (e.g. 384M)\n", text);
		exit(2);
	}
	return (uint64_t)value * unit;
}

/* ---- in-place quicksort of 64-bit keys --------------------------------- */

static void insertion_sort(uint64_t *a, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		uint64_t key = a[i];
		size_t j = i;
		while (j > 0 && a[j - 1] > key) {
			a[j] = a[j - 1];
			j--;
		}
		a[j] = key;
	}
}

static void swap_keys(uint64_t *a, uint64_t *b)
{
	uint64_t t = *a;
	*a = *b;
	*b = t;
}

/* Hoare partition around a median of three; recurse into the smaller side
 * and loop on the larger, so the stack stays O(log n). */
static void quicksort(uint64_t *a, size_t n)
{
	while (n > 24) {
		size_t mid = n / 2;
		if (a[mid] < a[0])
			swap_keys(&a[mid], &a[0]);
		if (a[n - 1] < a[0])
			swap_keys(&a[n - 1], &a[0]);
		if (a[n - 1] < a[mid])
			swap_keys(&a[n - 1], &a[mid]);
		uint64_t pivot = a[mid];
		size_t i = 0, j = n - 1;
		for (;;) {
			while (a[i] < pivot)
				i++;
			while (a[j] > pivot)
				j--;
			if (i >= j)
				break;
			swap_keys(&a[i], &a[j]);
			i++;
			j--;
		}
		size_t left = j + 1;            /* [0, j] <= pivot <= [j+1, n) */
		if (left < n - left) {
			quicksort(a, left);
			a += left;
			n -= left;
		} else {
			quicksort(a + left, n - left);
			n = left;
		}
	}
	insertion_sort(a, n);
}

/* ---- I/O helpers -------------------------------------------------------- */

static void read_fully(int fd, void *buf, uint64_t bytes, uint64_t offset)
{
	char *p = buf;
	while (bytes) {
		size_t want = bytes < IO_CHUNK ? (size_t)bytes : IO_CHUNK;
		ssize_t got = pread(fd, p, want, (off_t)offset);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			if (got == 0)
				errno = EIO;
			die("read");
		}
		p += got;
		offset += (uint64_t)got;
		bytes -= (uint64_t)got;
	}
}

static void write_fully(int fd, const void *buf, uint64_t bytes)
{
	const char *p = buf;
	while (bytes) {
		size_t want = bytes < IO_CHUNK ? (size_t)bytes : IO_CHUNK;
		ssize_t put = write(fd, p, want);
		if (put < 0 && errno == EINTR)
			continue;
		if (put < 0)
			die("write");
		p += put;
		bytes -= (uint64_t)put;
	}
}

/* A run: written, made durable and dropped from the cache a chunk at a
 * time, so the page cache it occupies stays one chunk, not the pass size
 * (see the top). */
static void write_run(int fd, const void *buf, uint64_t bytes, uint64_t offset)
{
	const char *p = buf;
	while (bytes) {
		uint64_t piece = bytes < IO_CHUNK ? bytes : IO_CHUNK;
		write_fully(fd, p, piece);
		if (fdatasync(fd) < 0)
			die("fdatasync");
		posix_fadvise(fd, (off_t)offset, (off_t)piece, POSIX_FADV_DONTNEED);
		p += piece;
		offset += piece;
		bytes -= piece;
	}
}

/* The input, likewise read and dropped a chunk at a time. */
static void read_input(int fd, void *buf, uint64_t bytes, uint64_t offset)
{
	char *p = buf;
	while (bytes) {
		uint64_t piece = bytes < IO_CHUNK ? bytes : IO_CHUNK;
		read_fully(fd, p, piece, offset);
		posix_fadvise(fd, (off_t)offset, (off_t)piece, POSIX_FADV_DONTNEED);
		p += piece;
		offset += piece;
		bytes -= piece;
	}
}

/* ---- --generate --------------------------------------------------------- */

static int generate(const char *path, uint64_t bytes, uint64_t seed)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die(path);
	uint64_t *chunk = malloc(IO_CHUNK);
	if (!chunk)
		die("malloc");
	uint64_t state = seed * UINT64_C(0x9e3779b97f4a7c15) + 1;
	bytes -= bytes % sizeof(uint64_t);
	for (uint64_t done = 0; done < bytes;) {
		uint64_t piece = bytes - done < IO_CHUNK ? bytes - done : IO_CHUNK;
		for (uint64_t i = 0; i < piece / sizeof(uint64_t); i++) {
			/* splitmix64 */
			uint64_t z = (state += UINT64_C(0x9e3779b97f4a7c15));
			z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
			z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
			chunk[i] = z ^ (z >> 31);
		}
		write_fully(fd, chunk, piece);
		done += piece;
	}
	if (fdatasync(fd) < 0)
		die("fdatasync");
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	free(chunk);
	return 0;
}

/* ---- the sort ----------------------------------------------------------- */

struct run {
	uint64_t offset, keys;
};

struct merge_source {
	int fd;
	uint64_t *buf;
	uint64_t next_offset, left;    /* in the run file: bytes not yet read */
	size_t at, have;               /* keys in buf                         */
};

static bool source_refill(struct merge_source *s)
{
	if (s->left == 0)
		return false;
	uint64_t bytes = s->left < MERGE_BUFFER ? s->left : MERGE_BUFFER;
	read_fully(s->fd, s->buf, bytes, s->next_offset);
	posix_fadvise(s->fd, (off_t)s->next_offset, (off_t)bytes, POSIX_FADV_DONTNEED);
	s->next_offset += bytes;
	s->left -= bytes;
	s->at = 0;
	s->have = (size_t)(bytes / sizeof(uint64_t));
	return true;
}

/* A binary min-heap of source indices, by their current key. */
static void heap_down(size_t *heap, size_t n, size_t i, struct merge_source *src)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && src[heap[l]].buf[src[heap[l]].at] < src[heap[m]].buf[src[heap[m]].at])
			m = l;
		if (r < n && src[heap[r]].buf[src[heap[r]].at] < src[heap[m]].buf[src[heap[m]].at])
			m = r;
		if (m == i)
			return;
		size_t t = heap[i];
		heap[i] = heap[m];
		heap[m] = t;
		i = m;
	}
}

/* Merge the runs into `out_path`, checking order, count and sum. */
static bool merge(int run_fd, const struct run *runs, size_t n_runs, const char *out_path,
		  uint64_t keys, uint64_t sum)
{
	struct merge_source *src = calloc(n_runs, sizeof *src);
	size_t *heap = calloc(n_runs, sizeof *heap);
	uint64_t *out = malloc(IO_CHUNK);
	if (!src || !heap || !out)
		die("malloc");
	int out_fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out_fd < 0)
		die(out_path);
	size_t n = 0;
	for (size_t i = 0; i < n_runs; i++) {
		src[i].fd = run_fd;
		src[i].buf = malloc(MERGE_BUFFER);
		if (!src[i].buf)
			die("malloc");
		src[i].next_offset = runs[i].offset;
		src[i].left = runs[i].keys * sizeof(uint64_t);
		if (source_refill(&src[i]))
			heap[n++] = i;
	}
	for (size_t i = n; i-- > 0;)
		heap_down(heap, n, i, src);
	uint64_t merged = 0, merged_sum = 0, previous = 0, out_keys = 0, flushed = 0;
	bool ordered = true;
	while (n) {
		struct merge_source *s = &src[heap[0]];
		uint64_t key = s->buf[s->at++];
		if (merged && key < previous)
			ordered = false;
		previous = key;
		merged++;
		merged_sum += key;
		out[out_keys++] = key;
		if (out_keys == IO_CHUNK / sizeof(uint64_t)) {
			write_fully(out_fd, out, IO_CHUNK);
			out_keys = 0;
			/* Keep the output's dirty pages few (see the top). */
			if ((merged * sizeof(uint64_t)) - flushed >= 64 * MIB) {
				if (fdatasync(out_fd) < 0)
					die("fdatasync");
				posix_fadvise(out_fd, 0, 0, POSIX_FADV_DONTNEED);
				flushed = merged * sizeof(uint64_t);
			}
		}
		if (s->at == s->have && !source_refill(s))
			heap[0] = heap[--n];
		heap_down(heap, n, 0, src);
	}
	write_fully(out_fd, out, out_keys * sizeof(uint64_t));
	if (fdatasync(out_fd) < 0)
		die("fdatasync");
	posix_fadvise(out_fd, 0, 0, POSIX_FADV_DONTNEED);
	close(out_fd);
	for (size_t i = 0; i < n_runs; i++)
		free(src[i].buf);
	free(src);
	free(heap);
	free(out);
	return ordered && merged == keys && merged_sum == sum;
}

static void *fixed_buffer(uint64_t bytes)
{
	void *mem = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		die("mmap");
	/* As gb_alloc's memory: 4 KiB pages, so both page alike. */
	madvise(mem, (size_t)bytes, MADV_NOHUGEPAGE);
	return mem;
}

static void usage(void)
{
	fprintf(stderr, "usage: mac_sort --generate FILE --size SIZE [--seed N]\n"
			"       mac_sort --input FILE --scratch DIR (--fixed SIZE | --gb --min SIZE "
			"[--max SIZE] [--gb-lock FILE]) [--no-merge] [--label TEXT]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *generate_path = NULL, *input = NULL, *scratch = NULL, *label = "";
	const char *lock_path = NULL;
	uint64_t size = 0, seed = 1, fixed = 0, gb_min = 0, gb_max = 0;
	bool gb = false, do_merge = true;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--no-merge")) {
			do_merge = false;
			continue;
		}
		if (!strcmp(a, "--gb")) {
			gb = true;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--generate"))
			generate_path = v;
		else if (!strcmp(a, "--size"))
			size = parse_size(v);
		else if (!strcmp(a, "--seed"))
			seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--input"))
			input = v;
		else if (!strcmp(a, "--scratch"))
			scratch = v;
		else if (!strcmp(a, "--fixed"))
			fixed = parse_size(v);
		else if (!strcmp(a, "--min"))
			gb_min = parse_size(v);
		else if (!strcmp(a, "--max"))
			gb_max = parse_size(v);
		else if (!strcmp(a, "--gb-lock"))
			lock_path = v;
		else if (!strcmp(a, "--label"))
			label = v;
		else
			usage();
	}
	if (generate_path) {
		if (!size)
			usage();
		return generate(generate_path, size, seed);
	}
	if (!input || !scratch || (gb == (fixed != 0)) || (gb && !gb_min) || (lock_path && !gb))
		usage();
	int lock_fd = -1;
	if (lock_path && (lock_fd = open(lock_path, O_RDWR | O_CREAT, 0644)) < 0)
		die(lock_path);

	double t_start = now_s();
	int in_fd = open(input, O_RDONLY);
	if (in_fd < 0)
		die(input);
	struct stat st;
	if (fstat(in_fd, &st) < 0)
		die("fstat");
	uint64_t total = (uint64_t)st.st_size - (uint64_t)st.st_size % sizeof(uint64_t);
	posix_fadvise(in_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	if (gb && !gb_max)
		gb_max = total;
	fixed -= fixed % sizeof(uint64_t);

	char run_path[4096], out_path[4096];
	snprintf(run_path, sizeof run_path, "%s/runs", scratch);
	snprintf(out_path, sizeof out_path, "%s/sorted", scratch);
	int run_fd = open(run_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (run_fd < 0)
		die(run_path);

	static struct run runs[MAX_PASSES];
	size_t n_runs = 0;
	double t_read = 0, t_sort = 0, t_write = 0, t_alloc = 0, t_wait = 0;
	unsigned eagain = 0;
	uint64_t sum = 0, done = 0, run_offset = 0;
	while (done < total) {
		uint64_t remaining = total - done;
		void *mem;
		uint64_t pass;
		double t0 = now_s();
		if (gb) {
			uint64_t hi = gb_max < remaining ? gb_max : remaining;
			uint64_t lo = gb_min < hi ? gb_min : hi;
			size_t got;
			if (lock_fd >= 0 && flock(lock_fd, LOCK_EX) < 0)
				die("flock");
			int rc = gb_alloc((size_t)lo, (size_t)hi, sizeof(uint64_t), &mem, &got);
			if (lock_fd >= 0)
				flock(lock_fd, LOCK_UN);
			t_alloc += now_s() - t0;
			if (rc == -EAGAIN) {
				/* Not even min now: hold nothing, wait, ask again. */
				eagain++;
				double w0 = now_s();
				nanosleep(&(struct timespec){ 0, GB_WAIT_NS }, NULL);
				t_wait += now_s() - w0;
				continue;
			}
			if (rc < 0) {
				errno = -rc;
				die("gb_alloc");
			}
			pass = got;
		} else {
			pass = fixed < remaining ? fixed : remaining;
			mem = fixed_buffer(pass);
			t_alloc += now_s() - t0;
		}
		if (n_runs == MAX_PASSES) {
			errno = E2BIG;
			die("too many passes");
		}
		uint64_t *keys = mem;
		size_t n = (size_t)(pass / sizeof(uint64_t));

		t0 = now_s();
		read_input(in_fd, keys, pass, done);
		double t1 = now_s();
		for (size_t i = 0; i < n; i++)
			sum += keys[i];
		quicksort(keys, n);
		double t2 = now_s();
		write_run(run_fd, keys, pass, run_offset);
		double t3 = now_s();
		t_read += t1 - t0;
		t_sort += t2 - t1;
		t_write += t3 - t2;

		if (gb)
			gb_free(mem);
		else
			munmap(mem, (size_t)pass);
		runs[n_runs].offset = run_offset;
		runs[n_runs].keys = n;
		n_runs++;
		run_offset += pass;
		done += pass;
	}
	double t_runs = now_s();
	struct rusage ru_runs;
	getrusage(RUSAGE_SELF, &ru_runs);

	bool ok = true;
	if (do_merge)
		ok = merge(run_fd, runs, n_runs, out_path, total / sizeof(uint64_t), sum);
	double t_end = now_s();
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	close(run_fd);
	close(in_fd);
	unlink(run_path);
	unlink(out_path);

	printf("{\"label\": \"%s\", \"mode\": \"%s\", \"input_bytes\": %" PRIu64
	       ", \"gb_lock\": %s, \"fixed_bytes\": %" PRIu64 ", \"gb_min_bytes\": %" PRIu64
	       ", \"gb_max_bytes\": %" PRIu64 ", \"total_s\": %.3f, \"runs_s\": %.3f"
	       ", \"merge_s\": %.3f, \"read_s\": %.3f, \"sort_s\": %.3f, \"write_s\": %.3f"
	       ", \"alloc_s\": %.3f, \"wait_s\": %.3f, \"eagain\": %u"
	       ", \"major_faults_runs\": %ld, \"major_faults\": %ld, \"merged\": %s"
	       ", \"sorted_ok\": %s, \"passes\": [",
	       label, gb ? "gb" : "fixed", total, lock_path ? "true" : "false", fixed, gb_min, gb_max, t_end - t_start,
	       t_runs - t_start, do_merge ? t_end - t_runs : 0.0, t_read, t_sort, t_write,
	       t_alloc, t_wait, eagain, ru_runs.ru_majflt, ru.ru_majflt,
	       do_merge ? "true" : "false", ok ? "true" : "false");
	for (size_t i = 0; i < n_runs; i++)
		printf("%s%" PRIu64, i ? ", " : "", runs[i].keys * (uint64_t)sizeof(uint64_t));
	printf("]}\n");
	return ok ? 0 : 3;
}
