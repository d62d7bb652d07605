/*
 * tool_memprobe.c - `discnice memprobe`: how much memory this process
 * could take now without paging, found as gb_alloc() finds it (gray-box
 * MAC, graybox-icl §4.3): by writing pages and timing the writes.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "common/proc_io.h"  /* proc_read_small() */
#include "common/rate.h"
#include "graybox/mac/mac.h"
#include "graybox/toolbox/microbench.h"
#include "graybox/toolbox/timer.h"
#include "tool/tool_class.h"  /* command_options_help() */
#include "tool/tool_graybox.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"  /* decimal_number(), whole_number() */

enum { MP_HELP, MP_HOLD, MP_JSON, MP_MAX, MP_MIN, MP_THRESHOLD, MP_TIMING_ONLY };

static const struct command_option memprobe_options[] = {
	[MP_HELP] = { "help", 'h', NULL, "show this help and exit" },
	[MP_HOLD] = { "hold", 0, "SECONDS", "keep the memory found and write every page of it\n"
					    "again and again for this long, then report how many\n"
					    "of those writes were slow (default 0)" },
	[MP_JSON] = { "json", 0, NULL, "print one JSON object" },
	[MP_MAX] = { "max", 0, "SIZE", "probe at most this much (default: the machine's\n"
				       "physical memory; without swap, what is left, as\n"
				       "above); e.g. 512MiB, 2G" },
	[MP_MIN] = { "min", 0, "SIZE", "the least worth having (default 1MiB): less\n"
				       "available is exit status 1" },
	[MP_THRESHOLD] = { "threshold", 0, "NS", "a page write at least this slow (ns) is\n"
						 "slow (default: the calibration file's page\n"
						 "threshold, else a quick measurement)" },
	[MP_TIMING_ONLY] = { "timing-only", 0, NULL, "decide by write timing alone, as the paper\n"
						     "did; by default a probe during which the\n"
						     "machine wrote pages to swap (/proc/vmstat\n"
						     "pswpout) does not fit either, and a streak\n"
						     "of slow writes with no page fault of ours\n"
						     "is not paging" },
};
#define N_MP_OPTIONS (sizeof memprobe_options / sizeof memprobe_options[0])

static void memprobe_help(void)
{
	printf("Usage: discnice memprobe [--json] [--max SIZE] [--min SIZE] [--hold SECONDS]\n"
	       "                        [--threshold NS] [--timing-only]\n"
	       "How much memory could this process use now without paging?  Found the way\n"
	       "gb_alloc(3) finds it (gray-box memory-based admission control, graybox-icl\n"
	       "section 4.3): write a page at a time, time each write, and grow the size\n"
	       "probed - the increment doubling while it fits, backing off to 1 MiB when\n"
	       "several slow pages in near succession say the kernel is paging, or when the\n"
	       "machine wrote pages to swap meanwhile.  The answer counts memory the kernel\n"
	       "can give without paging anyone: free memory and clean page cache, inside\n"
	       "your memory cgroup's limit if you are in one.\n"
	       "It takes the memory while it probes (resident, then given back), and pages\n"
	       "a little itself - at most one step's worth - when it reaches the edge.\n"
	       "Without swap, there is no paging to see, only the OOM killer: where this\n"
	       "process's memory cannot be swapped (no swap on, or a memory cgroup that may\n"
	       "not swap), it probes at most what is left before that - the kernel's\n"
	       "MemAvailable, or the cgroup's room, less a sixteenth - whatever --max says.\n\n");
	command_options_help(memprobe_options, N_MP_OPTIONS);
	printf("\nExit status: 0 found (printed); 1 not even --min is available now; 2 bad\n"
	       "usage; 125 the address space for --max could not be reserved, or standard\n"
	       "output could not be written.\n"
	       "See discnice(1), MEMORY ADMISSION CONTROL, and gb_alloc(3).\n");
}

static uint64_t parse_size_option(const char *name, const char *text)
{
	uint64_t bytes;
	int rc = size_parse(text, &bytes);
	if (rc == -ERANGE)
		command_usage_error("memprobe", "--%s '%s': too large for a size (at most 16 EiB "
				    "less a byte)", name, text);
	if (rc < 0 || bytes == 0)
		command_usage_error("memprobe", "--%s '%s': expected a size such as 512MiB", name,
				    text);
	return bytes;
}

/* --hold: write every page again and again; the slow writes are what a
 * program using the memory would have suffered. */
static void hold(char *mem, uint64_t bytes, double seconds, uint64_t threshold_ns,
		 uint64_t *writes, uint64_t *slow, unsigned *passes)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t end = timer_now_ns() + (uint64_t)(seconds * 1e9);
	*writes = *slow = 0;
	*passes = 0;
	do {
		for (uint64_t off = 0; off < bytes; off += page) {
			uint64_t ns = microbench_page_write_ns(mem + off);
			(*writes)++;
			if (ns >= threshold_ns)
				(*slow)++;
		}
		(*passes)++;
	} while (timer_now_ns() < end);
}

/* The default --max.  With swap on, the machine's physical memory: the
 * probe stops where the kernel starts paging (gb_alloc.c).  With none,
 * there is no paging to see, and past what the kernel can give by
 * reclaiming clean pages (its MemAvailable estimate, mm/show_mem.c
 * si_mem_available()) comes the OOM killer, which picks the biggest
 * process - this one, or someone's browser.  `source` says which. */
static uint64_t default_max(const char **source)
{
	struct sysinfo si;
	uint64_t ram = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : UINT64_C(1) << 30;
	uint64_t ceiling = mac_no_swap_ceiling();
	if (ceiling >= ram) {
		*source = "physical memory";
		return ram;
	}
	*source = "left without swap: MemAvailable or the cgroup's room, less 1/16";
	return ceiling;
}

int tool_memprobe(int argc, char **argv)
{
	const char *max_source = NULL; /* NULL: --max was given */
	bool json = false;
	unsigned flags = 0;
	uint64_t max = 0, min = UINT64_C(1) << 20, threshold = 0;
	bool min_given = false;
	double hold_s = 0;
	int opt;
	while ((opt = command_option_next("memprobe", memprobe_options, N_MP_OPTIONS, false, argc,
					  argv)) >= 0) {
		switch (opt) {
		case MP_HELP:
			memprobe_help();
			return 0;
		case MP_JSON:
			json = true;
			break;
		case MP_TIMING_ONLY:
			flags |= MAC_TIMING_ONLY;
			break;
		case MP_MAX:
			max = parse_size_option("max", optarg);
			break;
		case MP_MIN:
			min = parse_size_option("min", optarg);
			min_given = true;
			break;
		case MP_HOLD:
			if (!decimal_number(optarg, &hold_s) || hold_s > 86400)
				command_usage_error("memprobe", "--hold '%s': expected seconds, 0 to "
						    "86400", optarg);
			break;
		case MP_THRESHOLD: {
			unsigned long long ns;
			if (!whole_number(optarg, &ns) || ns == 0)
				command_usage_error("memprobe", "--threshold '%s': expected a positive "
						    "number of ns", optarg);
			threshold = ns;
			break;
		}
		}
	}
	if (optind < argc)
		command_usage_error("memprobe", "unexpected argument '%s'", argv[optind]);
	if (max == 0)
		max = default_max(&max_source);
	/* Above the default --max, --min is simply not available now (exit
	 * 1, as when probing finds less; nothing is probed, which with swap
	 * on would page the machine); above a --max given, a mistake. */
	bool above_default = min > max && max_source;
	if (min > max && !max_source)
		command_usage_error("memprobe", "--min (%" PRIu64 " bytes) is larger than --max (%"
				    PRIu64 " bytes)%s", min, max,
				    min_given ? "" : "; --min is 1MiB unless given");

	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	struct mac_report r;
	void *mem;
	size_t got;
	int rc = -EAGAIN;
	if (above_default)
		memset(&r, 0, sizeof r);
	else
		rc = mac_allocate((size_t)min, (size_t)max, (size_t)page, threshold, flags, &mem,
				  &got, &r);
	if (rc == -EINVAL)
		command_usage_error("memprobe", "--min and --max leave no whole page between them");
	if (rc == -ENOMEM) {
		errorf("cannot reserve %" PRIu64 " bytes of address space (--max)", max);
		return EXIT_INTERNAL;
	}
	uint64_t writes = 0, slow = 0;
	unsigned passes = 0;
	if (rc == 0 && hold_s > 0)
		hold(mem, got, hold_s, r.threshold_ns, &writes, &slow, &passes);
	if (rc == 0)
		mac_free(mem);

	if (json) {
		printf("{\"available_bytes\": %" PRIu64 ", \"min_bytes\": %" PRIu64
		       ", \"max_bytes\": %" PRIu64 ", \"max_source\": \"%s\", \"threshold_ns\": %" PRIu64
		       ", \"threshold_source\": \"%s\", \"probes\": %u, \"paging_probes\": %u"
		       ", \"largest_paging_bytes\": %" PRIu64 ", \"pages_written\": %" PRIu64
		       ", \"slow_pages\": %" PRIu64 ", \"faultless_streaks\": %" PRIu64
		       ", \"swapping_probes\": %u, \"swapped_out_pages\": %" PRIu64
		       ", \"own_evicted_bytes\": %" PRIu64 ", \"max_cut_to_bytes\": %" PRIu64
		       ", \"swap_scope\": \"%s\", \"timing_only\": %s, \"elapsed_s\": %.6f",
		       r.got, min, max, max_source ? max_source : "given", r.threshold_ns, parameter_source_name(r.threshold_source),
		       r.probes, r.paging_probes, r.largest_failed, r.pages_written, r.slow_pages,
		       r.faultless_streaks, r.swapping_probes, r.swapped_out_pages,
		       r.own_evicted_bytes, r.ceiling, r.swap_scope ? r.swap_scope : "none", flags & MAC_TIMING_ONLY ? "true" : "false", (double)r.elapsed_ns / 1e9);
		if (hold_s > 0)
			printf(", \"hold_s\": %.3f, \"hold_passes\": %u, \"hold_writes\": %" PRIu64
			       ", \"hold_slow_writes\": %" PRIu64, hold_s, passes, writes, slow);
		printf("}\n");
	} else {
		char size[32], largest[32];
		size_format(size, sizeof size, (double)r.got);
		size_format(largest, sizeof largest, (double)r.largest_failed);
		/* All of --max found: there may be more than it let us probe. */
		char whole[80] = "";
		if (r.ceiling && !max_source && r.got + page > r.ceiling)
			snprintf(whole, sizeof whole, ", all that is left without swap (--max was "
				 "cut to it)");
		else if (r.got + page > max && max_source)
			snprintf(whole, sizeof whole, ", all of the default --max (%s)", max_source);
		else if (r.got + page > max)
			snprintf(whole, sizeof whole, ", all of --max: there may be more");
		if (rc == 0)
			printf("available without paging: %s (%" PRIu64 " bytes)%s\n", size, r.got, whole);
		else if (above_default)
			printf("available without paging: less than --min (more than the default "
			       "--max, %s: %" PRIu64 " bytes)\n", max_source, max);
		else
			printf("available without paging: less than --min\n");
		/* In ns below a microsecond: --threshold 1 is not "0.00 us". */
		bool in_ns = r.threshold_ns < 1000;
		if (!above_default)
			printf("%u probes, %u found paging%s%s%s; page threshold %.*f %s (%s); "
			       "%.2f s\n", r.probes, r.paging_probes,
			       r.largest_failed ? " (largest " : "", r.largest_failed ? largest : "",
			       r.largest_failed ? ")" : "", in_ns ? 0 : 2,
			       in_ns ? (double)r.threshold_ns : (double)r.threshold_ns / 1e3,
			       in_ns ? "ns" : "us", parameter_source_name(r.threshold_source),
			       (double)r.elapsed_ns / 1e9);
		if (hold_s > 0)
			printf("held %.1f s: %u passes, %" PRIu64 " of %" PRIu64 " page writes slow\n",
			       hold_s, passes, slow, writes);
	}
	return rc == 0 ? 0 : EXIT_MEASURE_FAILED;
}
