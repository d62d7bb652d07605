/*
 * tool_gbp.c - `discnice gbp`: the gray-box ICL paper's gbp utility
 * (graybox-icl §4.1.2, §4.2.4): files, or one file's chunks, in the order
 * that reads the page cache first (FCCD) or follows the disk layout (FLDC),
 * for unmodified programs:
 *
 *     grep foo $(discnice gbp --mem *)          the paper's `gbp -mem *`
 *     discnice gbp --mem -0 * | xargs -0 grep foo
 *     discnice gbp --out big.log | app -        the paper's `gbp -mem -out`
 *
 * The engine is src/graybox/fccd/fccd_plan.c (the same as libgraybox's
 * gbp_order()); this file parses options, prints, and streams --out.
 *
 * Exit status (as grep: go on with the rest, say so at the end):
 *   0  every operand was ordered (and, with --out, copied whole)
 *   1  some operand could not be examined or read: one line each on
 *      stderr; the others were still ordered and printed; or the --out
 *      file was replaced or changed size since it was examined
 *   2  bad options or values: nothing examined
 *   125 discnice itself failed (out of memory, writing stdout failed)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/rate.h"
#include "discnice/gbp.h"
#include "graybox/fccd/fccd_plan.h"
#include "tool/tool_class.h"
#include "tool/tool_gbp.h"
#include "tool/tool_json.h"
#include "tool/tool_msg.h"
#include "tool/tool_report.h"

#define EXIT_SOME_BAD 1
#define GBP_COPY_BUFFER (UINT64_C(1) << 20)
#define GBP_IN_ORDER_BUFFER_DEFAULT (UINT64_C(64) << 20)

enum gbp_option {
	OPT_ACCESS_UNIT, OPT_BACKEND, OPT_BUFFER, OPT_COMPOSE, OPT_HELP, OPT_IN_ORDER, OPT_INODE,
	OPT_JSON, OPT_MEM, OPT_NULL, OPT_OUT, OPT_PHYSICAL, OPT_RECORD_SIZE, OPT_SEED, OPT_VERBOSE,
};

/* Sorted by long name; indexed by the enum above. */
static const struct command_option gbp_options[] = {
	[OPT_ACCESS_UNIT] = { "access-unit", 0, "SIZE", "--out: the chunk read as one piece (4.1.2); a\n"
							"probe per quarter of it; at least a page\n"
							"[default: 20MiB]" },
	[OPT_BACKEND] = { "backend", 0, "NAME", "how the page cache is asked: auto, nowait,\n"
						"probe, cachestat or mincore (see below)\n"
						"[default: auto]" },
	[OPT_BUFFER] = { "buffer", 0, "SIZE", "--in-order to a pipe: most bytes of cached chunks\n"
					      "held in memory ahead of their turn [default: 64MiB]" },
	[OPT_COMPOSE] = { "compose", 0, NULL, "files in cache first, then the rest, each group\n"
					      "in i-number order (or physical with --physical)" },
	[OPT_HELP] = { "help", 'h', NULL, "show this help and exit" },
	[OPT_IN_ORDER] = { "in-order", 0, NULL, "--out: the file's bytes in their own order, the\n"
						"cached chunks read first (see below)" },
	[OPT_INODE] = { "inode", 0, NULL, "files by i-number (4.2.2); no probing" },
	[OPT_JSON] = { "json", 0, NULL, "print the order with the probe data as JSON; with\n"
					"--out, the chunk plan instead of the bytes" },
	[OPT_MEM] = { "mem", 0, NULL, "files most cached first (4.1.2) [the default]" },
	[OPT_NULL] = { "null", '0', NULL, "end each name with NUL, not newline (xargs -0)" },
	[OPT_OUT] = { "out", 0, "FILE", "copy FILE to stdout by whole chunks, cached\n"
					"chunks first (see below)" },
	[OPT_PHYSICAL] = { "physical", 0, NULL, "files by the disk address of their first extent\n"
						"(FIEMAP), i-number where unknown; no probing" },
	[OPT_RECORD_SIZE] = { "record-size", 0, "N", "--out: chunks start at multiples of N bytes, so\n"
						     "no record of N bytes is split [default: 1]" },
	[OPT_SEED] = { "seed", 0, "N", "where in each prediction unit to probe (a run\n"
				       "can be repeated) [default: random]" },
	[OPT_VERBOSE] = { "verbose", 'v', NULL, "one line on stderr: how the order was found\n"
						"(files asked exactly, probes, hits, the hit/miss\n"
						"threshold, time spent)" },
};
#define N_GBP_OPTIONS (sizeof gbp_options / sizeof gbp_options[0])

struct gbp_config {
	struct gbp_options lib;
	bool mem, inode, physical, compose;
	bool json, null_end, in_order, verbose;
	const char *out_path;
	uint64_t buffer;
	char **operands;
	size_t n_operands;
};

static void gbp_help(void)
{
	printf("Usage: discnice gbp [--mem | --inode | --physical | --compose] [OPTION]...\n"
	       "                    FILE...\n"
	       "       discnice gbp --out FILE [--in-order] [OPTION]...\n"
	       "Print FILEs in the order that reads them fastest: those in the page cache\n"
	       "first (--mem), or as they lie on the disk (--inode, --physical), or both\n"
	       "(--compose).  The gray-box ICL paper's gbp (Arpaci-Dusseau 2001, 4.1.2,\n"
	       "4.2.4); no root.  For programs that take file names:\n"
	       "  grep foo $(discnice gbp --mem *)\n"
	       "  discnice gbp --mem -0 -- * | xargs -0 grep foo\n\n"
	       "How --mem knows what is cached.  Each file is cut into access units of 20 MiB\n"
	       "(--access-unit, with --out), each unit into four prediction units (a quarter\n"
	       "each, in whole pages).  The kernel is asked (cachestat, mincore) where it\n"
	       "answers for the file - files you own or may write; for any other readable file,\n"
	       "one byte at a random place in each prediction unit is probed (a file smaller\n"
	       "than a prediction unit once): read and timed - or, with --backend nowait, read\n"
	       "with RWF_NOWAIT, which the kernel answers at once, the byte (cached) or \"would\n"
	       "wait\" (not).  Timed probes are split in two by 2-means clustering of their\n"
	       "times, and the fast group is \"in cache\".  Where that split is not clear (every\n"
	       "probe hit, or every probe missed) the kernel's count of the blocks each probe\n"
	       "read decides.  Only where it counts none (every probe hit, or a file system\n"
	       "without block I/O accounting) do the probes meet a threshold, which then also\n"
	       "checks a split: the device's hit/miss probe threshold from the calibration file\n"
	       "(discnice calibrate), else measured now (~0.1 s, an unlinked scratch file in\n"
	       "the files' directory, where writable) and kept in that file, else 8 times the\n"
	       "same bytes read again (known hits).  Files on several devices: the device of\n"
	       "the most probes.  --json and -v say which.  A file's cached share is the share\n"
	       "of its probes that hit; the files' shares are split in two by 2-means too\n"
	       "(\"in_cache\").  Files are printed by cached share, highest first, then by probe\n"
	       "time (files wholly in cache keep their order).\n\n"
	       "Probing costs one page read per cold prediction unit.  A timed probe\n"
	       "waits for it, and the page stays cached; a nowait probe's miss starts\n"
	       "the read without waiting, and gbp waits for it at the end, several files'\n"
	       "together, and drops the page again, so that it leaves no lone page for\n"
	       "reclaim to take first (a hole the next scan reads alone).\n"
	       "A file smaller than a page cannot be probed without reading all of it\n"
	       "in (the Heisenberg effect, 4.1.4): where only probes could tell, such a\n"
	       "file is not probed and comes after the probed ones; --json marks it\n"
	       "\"not_probed\".\n\n");
	command_options_help(gbp_options, N_GBP_OPTIONS);
	printf("\nBackends (--backend):\n"
	       "  auto       cachestat, else mincore, where the kernel answers for the\n"
	       "             file; timing probes for every other readable file\n"
	       "  nowait     RWF_NOWAIT probes (timed where the file system has no nowait\n"
	       "             reads: the file's backend then says probe); hits never\n"
	       "             wait, misses' reads overlap; as good an order (gbp(3))\n"
	       "  probe      timing probes only (the paper's method)\n"
	       "  cachestat  cachestat(2) only (Linux 6.5+); a file it refuses is an error\n"
	       "  mincore    mincore(2) only; a file it would not answer for truly is an error\n\n"
	       "--out FILE copies FILE to stdout as a permutation of whole chunks: the\n"
	       "file is cut at every multiple of the chunk length (--access-unit rounded\n"
	       "down to a multiple of --record-size), each chunk [k*L, min((k+1)*L, size))\n"
	       "is written exactly once, contiguously, most cached chunks first (then by\n"
	       "probe time, then by offset; wholly cached ones in order); in a sparse\n"
	       "file, chunks in a row that are all hole go as one run, in cache (no disk\n"
	       "I/O).  A consumer gets every byte of the file once, reordered by chunks;\n"
	       "records of --record-size bytes stay whole.  With --json the chunk plan is\n"
	       "printed instead (offset, length, in_cache, ...).\n"
	       "--out --in-order gives the file's bytes in their own order, byte for byte\n"
	       "what cat gives; the cached chunks are read first, before reading the others\n"
	       "can evict them: written in place when stdout is a regular file (not\n"
	       "O_APPEND) - the file's bytes land at stdout's offset plus their own -, or\n"
	       "held in memory, up to --buffer bytes, until their turn when stdout is a\n"
	       "pipe or terminal.\n\n"
	       "Bad operands - missing, unreadable, a directory, a FIFO, a device, a\n"
	       "socket, a file of /proc or /sys - get one line each on stderr; the\n"
	       "others are still ordered.\n\n"
	       "Exit status: 0 every operand ordered (and copied); 1 some operand could\n"
	       "not be examined or read, or (--out) FILE was replaced or changed size\n"
	       "since it was examined (the output then holds at most the bytes examined);\n"
	       "2 bad options (nothing examined); 125 discnice itself failed (out of\n"
	       "memory, writing stdout failed).\n\n"
	       "Examples:\n"
	       "  discnice gbp --mem *.log\n"
	       "  discnice gbp --compose --json -- data/*\n"
	       "  discnice gbp --out records.bin --record-size 100 | ./sort-pass -\n\n"
	       "See discnice(1), GBP, and gbp(3) for the library.\n");
}

static uint64_t size_arg(const char *name, const char *value)
{
	uint64_t bytes;
	int rc = size_parse(value, &bytes);
	if (rc == -ERANGE)
		command_usage_error("gbp", "--%s '%s': too large for a size (at most 16 EiB less "
				    "a byte)", name, value);
	if (rc < 0 || bytes == 0)
		command_usage_error("gbp", "--%s '%s': a whole number of bytes above 0, e.g. "
				    "4096, 20MiB, 1G", name, value);
	return bytes;
}

static void gbp_options_parse(struct gbp_config *c, int argc, char **argv)
{
	memset(c, 0, sizeof *c);
	c->lib.size = sizeof c->lib;
	c->lib.backend = GBP_BACKEND_AUTO;
	c->buffer = GBP_IN_ORDER_BUFFER_DEFAULT;
	bool record_given = false, unit_given = false, buffer_given = false;

	optind = 1;
	int i;
	while ((i = command_option_next("gbp", gbp_options, N_GBP_OPTIONS, false, argc, argv)) >= 0) {
		const char *name = gbp_options[i].name, *v = optarg;
		switch ((enum gbp_option)i) {
		case OPT_ACCESS_UNIT:
			c->lib.access_unit = size_arg(name, v);
			/* A quarter of it is probed once: less than a page
			 * would probe one page several times (gbp_order()
			 * refuses it too). */
			if (c->lib.access_unit < (uint64_t)sysconf(_SC_PAGESIZE))
				command_usage_error("gbp", "--access-unit '%s': at least a page (%ld "
						    "bytes)", v, sysconf(_SC_PAGESIZE));
			unit_given = true;
			break;
		case OPT_BACKEND:
			if (strcmp(v, "auto") == 0)
				c->lib.backend = GBP_BACKEND_AUTO;
			else if (strcmp(v, "probe") == 0)
				c->lib.backend = GBP_BACKEND_PROBE;
			else if (strcmp(v, "cachestat") == 0)
				c->lib.backend = GBP_BACKEND_CACHESTAT;
			else if (strcmp(v, "mincore") == 0)
				c->lib.backend = GBP_BACKEND_MINCORE;
			else if (strcmp(v, "nowait") == 0)
				c->lib.backend = GBP_BACKEND_NOWAIT;
			else
				command_usage_error("gbp", "--backend '%s': expected auto, nowait, "
					    "probe, cachestat or mincore", v);
			break;
		case OPT_BUFFER:
			c->buffer = size_arg(name, v);
			buffer_given = true;
			break;
		case OPT_COMPOSE:
			c->compose = true;
			break;
		case OPT_HELP:
			gbp_help();
			exit(0);
		case OPT_IN_ORDER:
			c->in_order = true;
			break;
		case OPT_INODE:
			c->inode = true;
			break;
		case OPT_JSON:
			c->json = true;
			break;
		case OPT_MEM:
			c->mem = true;
			break;
		case OPT_NULL:
			c->null_end = true;
			break;
		case OPT_OUT:
			if (!*v)
				command_usage_error("gbp", "--out: empty file name");
			if (c->out_path)
				command_usage_error("gbp", "--out takes one file ('%s', then '%s')",
						    c->out_path, v);
			c->out_path = v;
			break;
		case OPT_PHYSICAL:
			c->physical = true;
			break;
		case OPT_RECORD_SIZE:
			c->lib.record_size = size_arg(name, v);
			record_given = true;
			break;
		case OPT_SEED: {
			char *end;
			errno = 0;
			unsigned long long seed = strtoull(v, &end, 10);
			if (errno || end == v || *end || v[0] == '-')
				command_usage_error("gbp", "--seed '%s': a whole number", v);
			c->lib.seed = seed;
			break;
		}
		case OPT_VERBOSE:
			c->verbose = true;
			break;
		}
	}
	c->operands = argv + optind;
	c->n_operands = (size_t)(argc - optind);

	int modes = c->mem + c->inode + (c->physical && !c->compose) + c->compose;
	if (modes > 1)
		command_usage_error("gbp", "--mem, --inode, --physical and --compose choose the "
			    "order: give one (--compose --physical is the one pair allowed)");
	if (c->inode && c->compose)
		command_usage_error("gbp", "--compose already orders by i-number; --compose "
			    "--physical orders by disk address");
	if (c->out_path) {
		if (c->inode || c->physical || c->compose)
			command_usage_error("gbp", "--out orders one file's chunks by cache state "
				    "(--mem); --inode, --physical and --compose order files");
		if (c->n_operands > 0)
			command_usage_error("gbp", "--out FILE takes no other operands ('%s')",
					    c->operands[0]);
		if (c->null_end)
			command_usage_error("gbp", "-0 is for lists of names; --out writes the "
				    "file's bytes");
		if (c->in_order && c->json)
			command_usage_error("gbp", "--json with --out prints the chunk plan; "
				    "--in-order has no plan to show");
	} else {
		if (c->in_order)
			command_usage_error("gbp", "--in-order goes with --out FILE");
		if (record_given || unit_given)
			command_usage_error("gbp", "--%s goes with --out FILE (files are ordered "
				    "whole)", record_given ? "record-size" : "access-unit");
		if (c->n_operands == 0)
			command_usage_error("gbp", "no FILE given");
	}
	if (buffer_given && !c->in_order)
		command_usage_error("gbp", "--buffer goes with --out FILE --in-order");
	if (c->json && c->null_end)
		command_usage_error("gbp", "-0 and --json are two output formats: give one");
	if (c->lib.record_size && c->lib.access_unit && c->lib.record_size > c->lib.access_unit)
		warnf("--record-size %" PRIu64 " is larger than --access-unit %" PRIu64
		      ": each chunk is one record", c->lib.record_size, c->lib.access_unit);

	if (c->out_path)
		c->lib.order = GBP_ORDER_MEMORY;
	else if (c->compose)
		c->lib.order = c->physical ? GBP_ORDER_COMPOSE_PHYSICAL : GBP_ORDER_COMPOSE;
	else if (c->inode)
		c->lib.order = GBP_ORDER_INODE;
	else if (c->physical)
		c->lib.order = GBP_ORDER_PHYSICAL;
	else
		c->lib.order = GBP_ORDER_MEMORY;
	if (!c->out_path)
		c->lib.flags |= GBP_WHOLE_FILES;
}

static const char *backend_name(uint32_t backend)
{
	/* gbp_backend_name() is libgraybox's; the tool links the engine. */
	static const char *const names[] = { "auto", "probe", "cachestat", "mincore", "nowait" };
	return backend < sizeof names / sizeof names[0] ? names[backend] : "?";
}

static const char *order_name(uint32_t order)
{
	static const char *const names[] = { "memory", "inode", "physical", "compose",
					     "compose-physical" };
	return order < 5 ? names[order] : "?";
}

/* One line for an operand that could not be examined. */
static void operand_error(const char *path, int error, uint32_t backend)
{
	struct stat st;
	switch (-error) {
	case EISDIR:
		errorf("%s: is a directory (gbp orders files: give its files, e.g. '%s'/*; "
		       "--out copies one file)", path, path);
		return;
	case EINVAL:
		if (stat(path, &st) == 0) {
			const char *what = S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
					   : S_ISCHR(st.st_mode) ? "a character device"
					   : S_ISBLK(st.st_mode) ? "a block device"
					   : S_ISSOCK(st.st_mode) ? "a socket"
					   : "not a regular file";
			if (S_ISREG(st.st_mode)) {
				errorf("%s: is a file of /proc, /sys or another pseudo file system, "
				       "whose size says nothing of its content: gbp orders files "
				       "that hold data", path);
				return;
			}
			errorf("%s: is %s: gbp orders regular files only", path, what);
			return;
		}
		break;
	case EOPNOTSUPP:
		errorf("%s: the kernel's %s does not answer for this file (it does for files "
		       "you own or may write%s); try --backend auto or probe", path,
		       backend_name(backend),
		       backend == GBP_BACKEND_CACHESTAT ? ", and cachestat never on overlayfs" : "");
		return;
	case ESTALE:
		errorf("%s: replaced while being opened; try again", path);
		return;
	default:
		break;
	}
	errorf("%s: %s", path, strerror(-error));
}

static void json_split(FILE *f, const char *name, const struct cluster_split *s, bool log_ns)
{
	fprintf(f, "\"%s\":{\"significant\":%s,\"explained\":%.4f,\"low_count\":%zu", name,
		s->significant ? "true" : "false", s->explained, s->low_count);
	if (isfinite(s->separation))
		fprintf(f, ",\"separation\":%.2f", s->separation);
	/* The probe split is on ln(ns): shown back in ns. */
	if (log_ns && s->low_count > 0) {
		fprintf(f, ",\"low_mean_ns\":%.0f,\"high_mean_ns\":%.0f", exp(s->low_mean),
			exp(s->high_mean));
		if (s->significant)
			fprintf(f, ",\"boundary_ns\":%.0f", exp(s->boundary));
	} else if (!log_ns && s->significant) {
		fprintf(f, ",\"boundary\":%.4f", s->boundary);
	}
	fputc('}', f);
}

static void json_piece(FILE *f, const struct gbp_extent *e, const char *path, size_t rank)
{
	fputc('{', f);
	if (path) {
		fputs("\"path\":", f);
		json_print_string(f, path);
		fputc(',', f);
	}
	fprintf(f, "\"rank\":%zu,\"offset\":%" PRIu64 ",\"length\":%" PRIu64, rank, e->offset,
		e->length);
	fprintf(f, ",\"in_cache\":%s", e->flags & GBP_IN_CACHE ? "true" : "false");
	if (e->cached_fraction >= 0)
		fprintf(f, ",\"cached_fraction\":%.4f", e->cached_fraction);
	else
		fputs(",\"cached_fraction\":null", f);
	if (e->backend != GBP_BACKEND_AUTO)
		fprintf(f, ",\"backend\":\"%s\"", backend_name(e->backend));
	fprintf(f, ",\"exact\":%s,\"not_probed\":%s", e->flags & GBP_EXACT ? "true" : "false",
		e->flags & GBP_NOT_PROBED ? "true" : "false");
	fprintf(f, ",\"probes\":%" PRIu32 ",\"probe_ns\":%" PRIu64, e->probes, e->probe_ns);
	fprintf(f, ",\"device\":%" PRIu64 ",\"inode\":%" PRIu64, e->device, e->inode);
	if (e->physical != UINT64_MAX)
		fprintf(f, ",\"physical\":%" PRIu64, e->physical);
	else
		fputs(",\"physical\":null", f);
	fputc('}', f);
}

static void json_print(const struct gbp_config *c, const char *const *paths,
		       const struct gbp_extent *pieces, size_t n, const struct fccd_plan_stats *st)
{
	FILE *f = stdout;
	fprintf(f, "{\"order\":\"%s\",\"backend\":\"%s\"", order_name(c->lib.order),
		backend_name(c->lib.backend));
	if (c->out_path) {
		fputs(",\"file\":", f);
		json_print_string(f, c->out_path);
		fprintf(f, ",\"chunk_length\":%" PRIu64, st->chunk_length);
	}
	fprintf(f, ",\"prediction_unit\":%" PRIu64 ",\"seed\":%" PRIu64, st->prediction_unit,
		st->seed);
	fprintf(f, ",\"probes\":%" PRIu64 ",\"nowait_probes\":%" PRIu64 ",\"probe_hits\":%" PRIu64
		",\"probe_read_pages\":%" PRIu64 ",\"examine_s\":%.6f",
		st->probes, st->nowait_probes, st->probe_hits, st->probe_read_pages,
		(double)st->examine_ns / 1e9);
	fprintf(f, ",\"files_exact\":%" PRIu64 ",\"files_nowait\":%" PRIu64
		",\"files_probed\":%" PRIu64 ",\"nowait_fallbacks\":%" PRIu64
		",\"nowait_settled\":%" PRIu64 ",\"files_not_probed\":%" PRIu64 ",",
		st->files_exact, st->files_nowait, st->files_probed, st->nowait_fallbacks,
		st->nowait_settled, st->files_not_probed);
	json_split(f, "probe_split", &st->probe_verdict.split, true);
	static const char *const rules[] = { "two-groups", "kernel-read-count", "known-hits",
					     "none" };
	fprintf(f, ",\"probe_verdict\":{\"rule\":\"%s\"", rules[st->probe_verdict.rule]);
	if (st->probe_verdict.rule == FCCD_RULE_KNOWN_HITS)
		fprintf(f, ",\"all\":\"%s\"", st->probe_verdict.one_group_hits ? "hit" : "miss");
	fprintf(f, ",\"known_hit_median_ns\":%.0f", st->probe_verdict.known_hit_median_ns);
	/* The hit/miss threshold, where one decided (the kernel counted no
	 * read): its value and where it came from. */
	if (st->probe_verdict.threshold_needed) {
		fprintf(f, ",\"threshold_ns\":%.0f,\"threshold_source\":\"%s\"",
			st->probe_verdict.miss_ns, parameter_source_name(st->probe_threshold_source));
		if (st->probe_threshold_source != PARAMETER_DEFAULT)
			fprintf(f, ",\"threshold_device\":\"%u:%u\"",
				major((dev_t)st->probe_threshold_device),
				minor((dev_t)st->probe_threshold_device));
	} else {
		fputs(",\"threshold_ns\":null,\"threshold_source\":\"none\"", f);
	}
	fputs("},", f);
	json_split(f, "cache_split", &st->cache_split, false);
	fprintf(f, ",\"%s\":[", c->out_path ? "chunks" : "files");
	size_t rank = 0;
	for (size_t i = 0; i < n; i++) {
		if (pieces[i].flags & GBP_ERROR)
			continue;
		if (rank)
			fputc(',', f);
		json_piece(f, &pieces[i], c->out_path ? NULL : paths[pieces[i].file], rank);
		rank++;
	}
	fputc(']', f);
	if (c->out_path) {
		/* The probes themselves, for accuracy studies (bench/graybox.py
		 * Fig 4): byte probed, its time, the known hit's (0 for a
		 * nowait probe), the pages the kernel says it read, and the
		 * verdict. */
		fputs(",\"probe_points\":[", f);
		for (size_t i = 0; i < st->n_samples; i++) {
			const struct fccd_probe_sample *p = &st->samples[i];
			fprintf(f, "%s[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%s]", i ? "," : "",
				p->offset, p->ns, p->again_ns, p->read_pages, p->hit ? "true" : "false");
		}
		fputc(']', f);
	}
	fputs(",\"errors\":[", f);
	bool first = true;
	for (size_t i = 0; i < n; i++) {
		if (!(pieces[i].flags & GBP_ERROR))
			continue;
		if (!first)
			fputc(',', f);
		first = false;
		fputs("{\"path\":", f);
		json_print_string(f, paths[pieces[i].file]);
		fprintf(f, ",\"errno\":%d,\"error\":", -pieces[i].error);
		json_print_string(f, strerror(-pieces[i].error));
		fputc('}', f);
	}
	fputs("]}\n", f);
}

/* write(2) all of buf, or -errno. */
static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int pwrite_all(int fd, const char *buf, size_t len, uint64_t at)
{
	while (len > 0) {
		ssize_t n = pwrite(fd, buf, len, (off_t)at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
		at += (uint64_t)n;
	}
	return 0;
}

/* pread exactly len bytes at off, or -errno; -ENODATA when the file ended
 * early (it shrank since it was examined). */
static int pread_exact(int fd, char *buf, size_t len, uint64_t off)
{
	while (len > 0) {
		ssize_t n = pread(fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

enum copy_failure { COPY_OK, COPY_READ, COPY_WRITE };

/* Copy one chunk from fd to stdout (at stdout offset `out_at` when
 * positioned, else appended to the stream). */
static enum copy_failure copy_chunk(int fd, const struct gbp_extent *e, char *buf,
				    bool positioned, uint64_t out_base, int *error)
{
	for (uint64_t done = 0; done < e->length;) {
		size_t n = (size_t)(e->length - done < GBP_COPY_BUFFER ? e->length - done
									 : GBP_COPY_BUFFER);
		int rc = pread_exact(fd, buf, n, e->offset + done);
		if (rc < 0) {
			*error = rc;
			return COPY_READ;
		}
		rc = positioned ? pwrite_all(STDOUT_FILENO, buf, n, out_base + e->offset + done)
				: write_all(STDOUT_FILENO, buf, n);
		if (rc < 0) {
			*error = rc;
			return COPY_WRITE;
		}
		done += n;
	}
	return COPY_OK;
}

static int compare_offset(const void *pa, const void *pb)
{
	const struct gbp_extent *a = *(const struct gbp_extent *const *)pa;
	const struct gbp_extent *b = *(const struct gbp_extent *const *)pb;
	return (a->offset > b->offset) - (a->offset < b->offset);
}

/* How far from FILE's start the chunks marked written run unbroken (0
 * when memory is short: nothing is claimed). */
static uint64_t written_prefix(const struct gbp_extent *pieces, size_t n,
			       const unsigned char *written)
{
	const struct gbp_extent **by_offset = malloc(n * sizeof *by_offset);
	if (!by_offset)
		return 0;
	for (size_t i = 0; i < n; i++)
		by_offset[i] = &pieces[i];
	qsort(by_offset, n, sizeof *by_offset, compare_offset);
	uint64_t end = 0;
	for (size_t k = 0; k < n; k++) {
		if (!written[by_offset[k] - pieces] || by_offset[k]->offset != end)
			break;
		end += by_offset[k]->length;
	}
	free(by_offset);
	return end;
}

/* --out: stream the chunks.  Returns the exit status. */
static int gbp_stream(const struct gbp_config *c, struct gbp_extent *pieces, size_t n)
{
	const char *path = c->out_path;
	int status = 0, error = 0;
	char *buf = NULL;
	/* O_NONBLOCK, as the examination opens it: a FIFO put at the name
	 * since then would block a plain open until a writer came (fs/fifo.c:
	 * fifo_open).  The inode check sees it; then reads block as usual. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		errorf("%s: %s", path, strerror(errno));
		return EXIT_SOME_BAD;
	}
	struct stat st, out_st;
	const char *wrong = NULL;
	int flags;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_dev != pieces[0].device ||
	    (uint64_t)st.st_ino != pieces[0].inode)
		wrong = "replaced since it was examined";
	else if (fstat(STDOUT_FILENO, &out_st) == 0 && out_st.st_dev == st.st_dev &&
		 out_st.st_ino == st.st_ino)
		/* (1<>FILE: chunks written over others not read yet; >>FILE:
		 * a file that doubles as it is read.  cat(1) refuses alike.) */
		wrong = "input file is output file";
	else if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
		wrong = strerror(errno);
	if (wrong) {
		errorf("%s: %s", path, wrong);
		close(fd);
		return EXIT_SOME_BAD;
	}
	/* Whole chunks are read sequentially: tell the kernel, so each
	 * chunk's readahead window grows as for any sequential reader. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	buf = malloc(GBP_COPY_BUFFER);
	if (!buf) {
		close(fd);
		errorf("out of memory");
		return EXIT_INTERNAL;
	}

	/* The size examined: the chunks cover [0, planned) exactly once. */
	uint64_t planned = 0;
	for (size_t i = 0; i < n; i++)
		if (pieces[i].offset + pieces[i].length > planned)
			planned = pieces[i].offset + pieces[i].length;

	enum copy_failure failed = COPY_OK;
	if (!c->in_order) {
		for (size_t i = 0; i < n && failed == COPY_OK; i++)
			failed = copy_chunk(fd, &pieces[i], buf, false, 0, &error);
		goto done;
	}

	/* --in-order into a regular file we may write anywhere in: every
	 * chunk in the best order, each at its own place. */
	struct stat out;
	int out_flags = fcntl(STDOUT_FILENO, F_GETFL);
	off_t base = lseek(STDOUT_FILENO, 0, SEEK_CUR);
	if (fstat(STDOUT_FILENO, &out) == 0 && S_ISREG(out.st_mode) && out_flags >= 0 &&
	    !(out_flags & O_APPEND) && base >= 0) {
		unsigned char *written = calloc(n, 1);
		if (!written) {
			failed = COPY_WRITE;
			error = -ENOMEM;
			goto done;
		}
		for (size_t i = 0; i < n && failed == COPY_OK; i++)
			if ((failed = copy_chunk(fd, &pieces[i], buf, true, (uint64_t)base,
						 &error)) == COPY_OK)
				written[i] = 1;
		/* Past what was written - the size examined, not the size now
		 * (a file that grew meanwhile is reported below). */
		uint64_t end = planned;
		if (failed != COPY_OK)
			end = written_prefix(pieces, n, written);
		free(written);
		if (lseek(STDOUT_FILENO, base + (off_t)end, SEEK_SET) < 0 && failed == COPY_OK) {
			failed = COPY_WRITE;
			error = -errno;
		}
		/* A copy that failed leaves what a pipe would have got: the
		 * chunks written in one run from FILE's start, the offset after
		 * them, and nothing of the later chunks already in place past
		 * the output's old end (they would be read with zeros between
		 * them). */
		uint64_t keep = (uint64_t)base + end;
		if (failed != COPY_OK) {
			if ((uint64_t)out.st_size > keep)
				keep = (uint64_t)out.st_size;
			struct stat now;
			if (fstat(STDOUT_FILENO, &now) == 0 && (uint64_t)now.st_size > keep)
				(void)!ftruncate(STDOUT_FILENO, (off_t)keep);
		}
		goto done;
	}

	/* --in-order into a pipe: the cached chunks (best first) are read
	 * into memory, up to --buffer bytes, before anything else is read;
	 * then the file goes out in its own order. */
	char **held = calloc(n, sizeof *held);
	const struct gbp_extent **by_offset = calloc(n, sizeof *by_offset);
	if (!held || !by_offset) {
		free(held);
		free(by_offset);
		failed = COPY_WRITE;
		error = -ENOMEM;
		goto done;
	}
	uint64_t budget = c->buffer;
	for (size_t i = 0; i < n; i++) {
		const struct gbp_extent *e = &pieces[i];
		if (!(e->flags & GBP_IN_CACHE) || e->length == 0 || e->length > budget)
			continue;
		held[i] = malloc(e->length);
		if (!held[i])
			break;  /* memory is short: stream the rest */
		int rc = pread_exact(fd, held[i], (size_t)e->length, e->offset);
		if (rc < 0) {
			failed = COPY_READ;
			error = rc;
			break;
		}
		budget -= e->length;
	}
	for (size_t i = 0; i < n; i++)
		by_offset[i] = &pieces[i];
	/* Pointers sort by offset; held[] follows pieces[] by index. */
	qsort(by_offset, n, sizeof *by_offset, compare_offset);
	for (size_t k = 0; k < n && failed == COPY_OK; k++) {
		size_t i = (size_t)(by_offset[k] - pieces);
		if (held[i]) {
			int rc = write_all(STDOUT_FILENO, held[i], (size_t)pieces[i].length);
			if (rc < 0) {
				failed = COPY_WRITE;
				error = rc;
			}
		} else {
			failed = copy_chunk(fd, &pieces[i], buf, false, 0, &error);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(held[i]);
	free(held);
	free(by_offset);
done:
	/* Every chunk was copied, but only as far as the file reached when it
	 * was examined: one that grew since (or shrank after its last chunk
	 * was read) was not copied whole. */
	if (failed == COPY_OK && fstat(fd, &st) == 0 && (uint64_t)st.st_size != planned) {
		errorf("%s: changed size since it was examined (%" PRIu64 " bytes then, %" PRIu64
		       " now); the output holds the %" PRIu64 " bytes examined", path, planned,
		       (uint64_t)st.st_size, planned);
		status = EXIT_SOME_BAD;
	}
	if (failed == COPY_READ) {
		errorf("%s: %s", path, error == -ENODATA ? "shorter than when it was examined "
			       "(changed while being read); the output is incomplete"
			       : strerror(-error));
		status = EXIT_SOME_BAD;
	} else if (failed == COPY_WRITE) {
		errorf("writing standard output: %s", strerror(-error));
		status = EXIT_INTERNAL;
	}
	free(buf);
	close(fd);
	return status;
}

int tool_gbp(int argc, char **argv)
{
	struct gbp_config c;
	gbp_options_parse(&c, argc, argv);

	const char *one[1];
	const char *const *paths;
	size_t n_paths;
	if (c.out_path) {
		one[0] = c.out_path;
		paths = one;
		n_paths = 1;
	} else {
		paths = (const char *const *)c.operands;
		n_paths = c.n_operands;
	}

	struct gbp_extent *pieces = NULL;
	size_t n = 0;
	struct fccd_plan_stats stats;
	int rc = fccd_plan(paths, n_paths, &c.lib, &pieces, &n, &stats);
	if (rc < 0) {
		errorf("ordering the files: %s", strerror(-rc));
		return EXIT_INTERNAL;
	}

	if (c.verbose) {
		size_t in_cache = 0, failed = 0;
		for (size_t i = 0; i < n; i++) {
			in_cache += !!(pieces[i].flags & GBP_IN_CACHE);
			failed += !!(pieces[i].flags & GBP_ERROR);
		}
		char unread[48] = "";
		if (failed)
			snprintf(unread, sizeof unread, " (%zu could not be examined)", failed);
		char threshold[64] = "none needed";
		if (stats.probe_verdict.threshold_needed)
			snprintf(threshold, sizeof threshold, "%.0f ns (%s)",
				 stats.probe_verdict.miss_ns,
				 parameter_source_name(stats.probe_threshold_source));
		fprintf(stderr, "discnice: gbp: %zu %s%s, %zu in cache; files: %" PRIu64 " asked the "
			"kernel, %" PRIu64 " probed without waiting, %" PRIu64 " by timing (%" PRIu64
			" probes, %" PRIu64 " nowait, %" PRIu64 " hits; hit/miss threshold %s), %"
			PRIu64 " not probed; examined in %.6f s\n", n - failed,
			c.out_path ? (n - failed == 1 ? "chunk" : "chunks")
				   : (n - failed == 1 ? "file" : "files"), unread, in_cache,
			stats.files_exact, stats.files_nowait, stats.files_probed, stats.probes,
			stats.nowait_probes, stats.probe_hits, threshold, stats.files_not_probed,
			(double)stats.examine_ns / 1e9);
	}
	int status = 0;
	for (size_t i = 0; i < n; i++)
		if (pieces[i].flags & GBP_ERROR) {
			operand_error(paths[pieces[i].file], pieces[i].error, c.lib.backend);
			status = EXIT_SOME_BAD;
		}

	if (c.json) {
		json_print(&c, paths, pieces, n, &stats);
	} else if (c.out_path) {
		if (status == 0)
			status = gbp_stream(&c, pieces, n);
	} else {
		for (size_t i = 0; i < n; i++) {
			if (pieces[i].flags & GBP_ERROR)
				continue;
			fputs(paths[pieces[i].file], stdout);
			fputc(c.null_end ? '\0' : '\n', stdout);
		}
	}
	free(pieces);
	free(stats.samples);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		errorf("writing standard output: %s", strerror(errno));
		return EXIT_INTERNAL;
	}
	return status;
}
