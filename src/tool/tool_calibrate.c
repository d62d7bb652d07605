/*
 * tool_calibrate.c - `discnice calibrate`: run the gray toolbox's
 * microbenchmarks (graybox-icl §5) on the filesystem of a directory and
 * keep the results in the calibration file, where `discnice run`'s cache
 * probe, gbp and gb_alloc find them.
 *
 * Two entries are written: the device's (where DIR lives: sequential and
 * random reads, a page from disk, the probe threshold) and the machine's
 * (page writes in memory and allocate+zero, MAC's page threshold, the
 * timer's cost).  --show prints the file without measuring.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graybox/toolbox/calibration_file.h"
#include "graybox/toolbox/microbench.h"
#include "graybox/toolbox/timer.h"
#include "tool/tool_class.h"
#include "tool/tool_graybox.h"
#include "tool/tool_json.h"
#include "tool/tool_msg.h"

enum { CAL_HELP, CAL_JSON, CAL_QUICK, CAL_SHOW };

static const struct command_option calibrate_options[] = {
	[CAL_HELP] = { "help", 'h', NULL, "show this help and exit" },
	[CAL_JSON] = { "json", 0, NULL, "print the entries as one JSON document" },
	[CAL_QUICK] = { "quick", 0, NULL, "smaller samples: ~0.2 s instead of ~1 s (entries\n"
					  "marked quick=1)" },
	[CAL_SHOW] = { "show", 0, NULL, "print the calibration file (fresh or stale) and\n"
					"measure nothing" },
};
#define N_CAL_OPTIONS (sizeof calibrate_options / sizeof calibrate_options[0])

/* Sample sizes: full, quick. */
struct calibrate_size {
	uint64_t disk_file_bytes;
	uint32_t disk_reads;
	uint32_t memory_pages;
};
static const struct calibrate_size full_size = { UINT64_C(64) << 20, 1024, 16384 };
static const struct calibrate_size quick_size = { UINT64_C(16) << 20, 256, 4096 };

static void calibrate_help(void)
{
	char path[4096];
	if (calibration_file_path(path, sizeof path) < 0)
		snprintf(path, sizeof path, "(no home directory)");
	printf("Usage: discnice calibrate [--quick] [--json] [DIR]\n"
	       "       discnice calibrate --show [--json]\n"
	       "Measure what the gray-box layers need to know about this machine and the disk\n"
	       "under DIR (default: the current directory), and keep it in the calibration\n"
	       "file (graybox-icl section 5):\n"
	       "  the disk   sequential read bandwidth, a random 4 KiB read, a page faulted in\n"
	       "             from disk, and the cache probe's hit/miss threshold\n"
	       "  memory     a write to a page in memory, a fresh page's allocate+zero, and\n"
	       "             MAC's in-memory/out-of-memory page threshold (gb_alloc)\n"
	       "Measured on an unlinked scratch file in DIR (16-64 MiB, written, then\n"
	       "evicted from the page cache with POSIX_FADV_DONTNEED: only that file's pages;\n"
	       "the machine's caches are left alone).  DIR must be writable and on a disk:\n"
	       "on tmpfs nothing can be made cold.  Run it on a quiet machine; other work\n"
	       "makes the times larger.\n\n"
	       "discnice run and gbp (the probe threshold) and gb_alloc (the page threshold)\n"
	       "use an entry while it is fresh: measured less than 30 days ago, under the\n"
	       "running kernel release.  Without one they measure quickly themselves (run and\n"
	       "gbp also store the probe threshold).  gbp asks only when the kernel counted no\n"
	       "read for its probes; otherwise its 2-means clustering needs no threshold.\n\n"
	       "File: %s\n\n", path);
	command_options_help(calibrate_options, N_CAL_OPTIONS);
	printf("\nA file written by a newer discnice (a larger format version) is never\n"
	       "replaced: calibrate with that discnice, or move the file away.\n");
	printf("\nExit status: 0 measured and stored (--show: printed); 1 a measurement failed,\n"
	       "or the file could not be written or read, or a newer discnice wrote it;\n"
	       "2 bad usage; 125 standard output could not be written.\n"
	       "See discnice(1), CALIBRATION and FILES.\n");
}

/* ---- printing ------------------------------------------------------------------ */

static void time_text(char *buf, size_t size, uint64_t ns)
{
	if (ns >= 1000000)
		snprintf(buf, size, "%.2f ms", (double)ns / 1e6);
	else if (ns >= 1000)
		snprintf(buf, size, "%.2f us", (double)ns / 1e3);
	else
		snprintf(buf, size, "%" PRIu64 " ns", ns);
}

static const char *const value_labels[CALIBRATION_N_VALUES] = {
	[CALIBRATION_SEQUENTIAL_READ_BPS] = "sequential read (cold)",
	[CALIBRATION_RANDOM_READ_NS] = "random 4 KiB read (cold)",
	[CALIBRATION_PROBE_HIT_NS] = "probe hit (cached 1-byte read)",
	[CALIBRATION_PROBE_MISS_NS] = "probe miss (uncached)",
	[CALIBRATION_PROBE_THRESHOLD_NS] = "probe threshold (hit < t)",
	[CALIBRATION_PAGE_DISK_NS] = "page from disk (major fault)",
	[CALIBRATION_PAGE_MEMORY_NS] = "page write in memory",
	[CALIBRATION_PAGE_ALLOC_ZERO_NS] = "page allocate+zero",
	[CALIBRATION_PAGE_THRESHOLD_NS] = "page threshold (MAC)",
	[CALIBRATION_TIMER_OVERHEAD_NS] = "timer overhead",
};

static void print_entry(const struct calibration_entry *e, const char *kernel, time_t now)
{
	char when[64];
	time_t measured = (time_t)e->measured;
	struct tm tm;
	if (localtime_r(&measured, &tm))
		strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
	else
		snprintf(when, sizeof when, "%lld", (long long)e->measured);
	if (e->scope == CALIBRATION_MACHINE)
		printf("machine");
	else
		printf("device %u:%u (%s)", e->dev_major, e->dev_minor, e->device_name);
	printf(": measured %s, kernel %s%s, %s\n", when, e->kernel, e->quick ? ", quick" : "",
	       calibration_entry_fresh(e, (int64_t)now, kernel) ? "fresh" : "stale");
	for (unsigned v = 0; v < CALIBRATION_N_VALUES; v++) {
		char text[32];
		if (!e->value[v])
			continue;
		if (v == CALIBRATION_SEQUENTIAL_READ_BPS)
			snprintf(text, sizeof text, "%.1f MiB/s", (double)e->value[v] / (1 << 20));
		else
			time_text(text, sizeof text, e->value[v]);
		printf("  %-32s %12s\n", value_labels[v], text);
	}
}

static void print_entry_json(const struct calibration_entry *e, const char *kernel, time_t now)
{
	printf("{\"scope\": \"%s\"", e->scope == CALIBRATION_MACHINE ? "machine" : "device");
	if (e->scope == CALIBRATION_DEVICE) {
		printf(", \"device\": \"%u:%u\", \"device_name\": ", e->dev_major, e->dev_minor);
		json_print_string(stdout, e->device_name);
	}
	printf(", \"measured\": %lld, \"kernel\": ", (long long)e->measured);
	json_print_string(stdout, e->kernel);
	printf(", \"boot_id\": ");
	json_print_string(stdout, e->boot_id);
	printf(", \"quick\": %s, \"fresh\": %s", e->quick ? "true" : "false",
	       calibration_entry_fresh(e, (int64_t)now, kernel) ? "true" : "false");
	for (unsigned v = 0; v < CALIBRATION_N_VALUES; v++)
		if (e->value[v])
			printf(", \"%s\": %" PRIu64, calibration_value_name(v), e->value[v]);
	printf("}");
}

static void print_entries(const struct calibration_entry *const *entries, unsigned n, bool json,
			  const char *path, const char *dir)
{
	char kernel[65];
	time_t now = time(NULL);
	calibration_file_kernel(kernel, sizeof kernel);
	if (json) {
		printf("{\"file\": ");
		json_print_string(stdout, path);
		if (dir) {
			printf(", \"dir\": ");
			json_print_string(stdout, dir);
		}
		printf(", \"entries\": [");
		for (unsigned i = 0; i < n; i++) {
			printf("%s\n  ", i ? "," : "");
			print_entry_json(entries[i], kernel, now);
		}
		printf("%s]}\n", n ? "\n" : "");
		return;
	}
	for (unsigned i = 0; i < n; i++) {
		if (i)
			putchar('\n');
		print_entry(entries[i], kernel, now);
	}
}

/* The calibration file's place holds a directory (load says -EINVAL, as
 * for any file that is not regular): a directory is never replaced. */
static bool is_directory(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int calibrate_show(bool json)
{
	char path[4096];
	static struct calibration cal;
	unsigned bad_line;
	int rc = calibration_file_path(path, sizeof path);
	if (rc < 0) {
		errorf("no place for the calibration file: set XDG_STATE_HOME or HOME");
		return EXIT_MEASURE_FAILED;
	}
	rc = calibration_file_load(&cal, &bad_line);
	if (rc == -ENOENT) {
		cal.count = 0;
		if (!json) {
			printf("%s: no calibration yet; run 'discnice calibrate'\n", path);
			return 0;
		}
	} else if (rc == -EBADMSG) {
		/* The parser also stops here at a missing header: an empty
		 * file, or one of comments only, ends on its last line. */
		errorf("%s:%u: malformed (a calibration file is 'discnice-calibration %d', then "
		       "its entries, discnice(1) FILES); 'discnice calibrate' writes a new file",
		       path, bad_line, CALIBRATION_VERSION);
		return EXIT_MEASURE_FAILED;
	} else if (rc == -EPROTONOSUPPORT) {
		errorf("%s: written by a newer discnice (format version > %d)", path,
		       CALIBRATION_VERSION);
		return EXIT_MEASURE_FAILED;
	} else if (rc == -EINVAL) {
		if (is_directory(path))
			errorf("%s: a directory, not a calibration file; move it away, then "
			       "'discnice calibrate' writes one", path);
		else
			errorf("%s: not a regular file; 'discnice calibrate' writes a new one", path);
		return EXIT_MEASURE_FAILED;
	} else if (rc == -EFBIG) {
		errorf("%s: larger than a calibration file can be (64 KiB); not one of ours?", path);
		return EXIT_MEASURE_FAILED;
	} else if (rc < 0) {
		errorf("%s: %s", path, strerror(-rc));
		return EXIT_MEASURE_FAILED;
	}
	if (!json && cal.count == 0) {
		printf("%s: no entries yet; run 'discnice calibrate'\n", path);
		return 0;
	}
	const struct calibration_entry *entries[CALIBRATION_MAX_ENTRIES];
	for (unsigned i = 0; i < cal.count; i++)
		entries[i] = &cal.entries[i];
	if (!json && cal.count)
		printf("%s:\n\n", path);
	print_entries(entries, cal.count, json, path, NULL);
	return 0;
}

/* ---- measuring ---------------------------------------------------------------- */

int tool_calibrate(int argc, char **argv)
{
	bool json = false, quick = false, show = false;
	int opt;
	while ((opt = command_option_next("calibrate", calibrate_options, N_CAL_OPTIONS, false,
					  argc, argv)) >= 0) {
		switch (opt) {
		case CAL_HELP:
			calibrate_help();
			return 0;
		case CAL_JSON:
			json = true;
			break;
		case CAL_QUICK:
			quick = true;
			break;
		case CAL_SHOW:
			show = true;
			break;
		}
	}
	if (show) {
		if (optind < argc || quick)
			command_usage_error("calibrate", "--show takes no DIR and no --quick");
		return calibrate_show(json);
	}
	if (argc - optind > 1)
		command_usage_error("calibrate", "one DIR at most, got '%s' and '%s'", argv[optind],
				    argv[optind + 1]);
	const char *dir = optind < argc ? argv[optind] : ".";
	const struct calibrate_size *size = quick ? &quick_size : &full_size;
	char path[4096];
	if (calibration_file_path(path, sizeof path) < 0) {
		errorf("no place for the calibration file: set XDG_STATE_HOME or HOME");
		return EXIT_MEASURE_FAILED;
	}

	/* A file a newer discnice wrote is left alone (calibration_file_store
	 * would refuse it too): say so before a second of measuring. */
	static struct calibration existing;
	int loaded = calibration_file_load(&existing, NULL);
	if (loaded == -EPROTONOSUPPORT) {
		errorf("%s: written by a newer discnice (format version > %d); not replaced: "
		       "calibrate with that discnice, or move the file away first", path,
		       CALIBRATION_VERSION);
		return EXIT_MEASURE_FAILED;
	}
	/* Nor one that cannot be read: it may hold anything. */
	if (!calibration_file_replaceable(loaded)) {
		errorf("%s: cannot read it: %s; not replaced: move it away first", path,
		       loaded == -EFBIG ? "larger than a calibration file can be (64 KiB)"
					: strerror(-loaded));
		return EXIT_MEASURE_FAILED;
	}
	if (loaded == -EINVAL && is_directory(path)) {
		errorf("%s: a directory, not a calibration file; not replaced: move it away first",
		       path);
		return EXIT_MEASURE_FAILED;
	}

	struct calibration_entry device, machine;
	uint32_t major, minor;
	char name[32];
	int rc = calibration_file_device(dir, &major, &minor, name, sizeof name);
	if (rc < 0) {
		errorf("%s: %s", dir, strerror(-rc));
		return rc == -ENOENT || rc == -ENOTDIR ? EXIT_USAGE : EXIT_MEASURE_FAILED;
	}
	struct stat dir_st;
	if (stat(dir, &dir_st) == 0 && !S_ISDIR(dir_st.st_mode)) {
		errorf("%s: not a directory (calibrate measures on a scratch file it makes in DIR)",
		       dir);
		return EXIT_USAGE;
	}
	calibration_entry_init(&device, CALIBRATION_DEVICE, major, minor, name);
	calibration_entry_init(&machine, CALIBRATION_MACHINE, 0, 0, NULL);

	/* The disk first: its scratch file is the only thing written. */
	struct microbench_disk disk;
	rc = microbench_disk(dir, size->disk_file_bytes, size->disk_reads, &disk);
	if (rc < 0) {
		if (rc == -EOPNOTSUPP)
			errorf("%s: its pages cannot be evicted (tmpfs?): no disk to measure; "
			       "name a directory on a disk", dir);
		else if (strcmp(name, "-") == 0)
			errorf("%s: cannot measure the disk: no block device is behind its file "
			       "system; name a directory on a disk", dir);
		else
			errorf("%s: cannot measure the disk: %s", dir, strerror(-rc));
		return EXIT_MEASURE_FAILED;
	}
	struct microbench_probe_threshold probe;
	int64_t threshold = microbench_probe_threshold(dir, &probe);
	if (threshold < 0) {
		errorf("%s: cannot measure the probe threshold: %s", dir,
		       threshold == -EOPNOTSUPP ? "a cache miss is no slower than a hit here"
						: strerror((int)-threshold));
		return EXIT_MEASURE_FAILED;
	}
	struct microbench_memory memory;
	rc = microbench_memory(size->memory_pages, &memory);
	if (rc < 0) {
		errorf("cannot measure memory: %s", strerror(-rc));
		return EXIT_MEASURE_FAILED;
	}

	calibration_file_stamp(&device);
	device.quick = quick;
	device.value[CALIBRATION_SEQUENTIAL_READ_BPS] = disk.sequential_read_bps;
	device.value[CALIBRATION_RANDOM_READ_NS] = disk.random_read.median_ns;
	device.value[CALIBRATION_PAGE_DISK_NS] = disk.page_from_disk.median_ns;
	device.value[CALIBRATION_PROBE_HIT_NS] = probe.hit_median_ns;
	device.value[CALIBRATION_PROBE_MISS_NS] = probe.miss_median_ns;
	device.value[CALIBRATION_PROBE_THRESHOLD_NS] = (uint64_t)threshold;

	calibration_file_stamp(&machine);
	machine.quick = quick;
	machine.value[CALIBRATION_PAGE_MEMORY_NS] = memory.in_memory.median_ns;
	machine.value[CALIBRATION_PAGE_ALLOC_ZERO_NS] = memory.alloc_zero.median_ns;
	machine.value[CALIBRATION_PAGE_DISK_NS] = disk.page_from_disk.median_ns;
	machine.value[CALIBRATION_PAGE_THRESHOLD_NS] = microbench_page_threshold(&memory, &disk);
	machine.value[CALIBRATION_TIMER_OVERHEAD_NS] = timer_overhead_ns();

	if ((rc = calibration_file_store(&device)) < 0 ||
	    (rc = calibration_file_store(&machine)) < 0) {
		errorf("%s: cannot write: %s", path, rc == -EPROTONOSUPPORT
		       ? "a newer discnice wrote it meanwhile; move it away first" : strerror(-rc));
		return EXIT_MEASURE_FAILED;
	}
	const struct calibration_entry *entries[] = { &device, &machine };
	if (!json)
		printf("Measured on %s; stored in %s\n\n", dir, path);
	print_entries(entries, 2, json, path, dir);
	return 0;
}
