/*
 * fccd_order.h - the pure logic of the file-cache content detector's order
 * (graybox-icl §4.1.2): how a file is cut into access units (chunks) and
 * prediction units, where a probe goes, which probes were hits, and the
 * order of the pieces.  No I/O, no globals; the probing itself is in
 * fccd_plan.c, which feeds these functions numbers.
 *
 * Terms (§4.1.2):
 *   access unit      what the application reads sequentially: one chunk.
 *                    Rounded down to a multiple of the record size so no
 *                    record spans two chunks.  Default 20 MiB (the paper's).
 *   prediction unit  the part of a chunk one probe speaks for: a quarter of
 *                    the access unit ("four points within each default
 *                    access unit"), rounded up to a page.  A chunk shorter
 *                    than that (a small file, the last chunk) is probed
 *                    once ("files smaller than 5 MB in size are probed
 *                    exactly once").
 *   probe            a one-byte read at a *random* byte of its prediction
 *                    unit (so two gbp runs, or a run after one that died
 *                    between probing and reading, do not see each other's
 *                    probes as cached data), timed.
 *
 * Hit or miss, by clustering first (§4.1.2, §4.2.4): the probe times, on
 * a log scale, are split in two by 2-means (toolbox/cluster.h); the fast
 * group hit.  Where the split is not clear (every probe hit, every probe
 * missed, or misses spread too wide) the kernel's count of the blocks each
 * probe read decides.  Only where it counts nothing does a hit/miss
 * threshold decide: the device's calibrated probe threshold (graybox-icl
 * §5, "the cache hit/miss probe threshold", given by the caller), else a
 * comparison with known hits: the same bytes read again right after their
 * probes.  (Known hits cannot simply join the clustering: a repeated read
 * is 1.5-3x faster than a first-touch hit - warm CPU caches - and in an
 * all-hit sample 2-means then splits repeats from first touches.)
 *
 * A nowait probe (preadv2 RWF_NOWAIT, cache_probe_nowait()) needs none of
 * this: the kernel says for its page whether it could be read without
 * waiting.  Its sample comes already decided and takes no part in the
 * clustering of the timed ones (its time is not a read's time).
 */
#ifndef DISCNICE_FCCD_ORDER_H
#define DISCNICE_FCCD_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "discnice/gbp.h"
#include "graybox/toolbox/cluster.h"

#define FCCD_PROBES_PER_CHUNK 4u

/* The scale knowledge 2-means lacks (toolbox/cluster.h).  A page read from
 * any storage costs at least twice a page-cache copy of one byte (~1 us
 * here; NVMe ~10 us, this VM's host-cached disk 20-300 us): two groups of
 * probe times closer than that factor are one.  Two groups of cached
 * shares less than half a file apart are one. */
#define FCCD_MISS_MIN_RATIO 2.0
#define FCCD_FRACTION_MIN_GAP 0.5
/* The kernel counting no reads and no calibrated threshold given: slower
 * than this many known hits (the same byte read again) is a miss.
 * Measured here: a first-touch hit costs 1.5-3x the repeated read (colder
 * CPU caches), a miss 20-400x. */
#define FCCD_ONE_GROUP_MISS_RATIO 8.0

/* The chunk length: access_unit (0 = GBP_ACCESS_UNIT_DEFAULT) rounded
 * down to a multiple of record_size (0 = 1), at least one record. */
uint64_t fccd_chunk_length(uint64_t access_unit, uint64_t record_size);

/* Chunks of a file of `size` bytes: ceil(size / chunk_length); 1 for an
 * empty file (one empty piece, so every file given appears). */
uint64_t fccd_chunk_count(uint64_t size, uint64_t chunk_length);

/* The prediction unit for chunks of chunk_length: a quarter, rounded up to
 * a multiple of page, at least one page. */
uint64_t fccd_prediction_unit(uint64_t chunk_length, uint64_t page);

/* Probes for a chunk of `length` bytes: ceil(length / prediction_unit),
 * at least 1 (0 for an empty chunk). */
uint32_t fccd_probe_count(uint64_t length, uint64_t prediction_unit);

/* A random byte offset in [start, start + length), length > 0; *state is a
 * splitmix64 state, advanced. */
uint64_t fccd_random_next(uint64_t *state);
uint64_t fccd_probe_offset(uint64_t start, uint64_t length, uint64_t *state);

/* Whether a probe slept (the thread's voluntary context switches grew):
 * unknown where getrusage(RUSAGE_THREAD) did not answer. */
enum fccd_probe_sleep {
	FCCD_SLEEP_UNKNOWN = 0,
	FCCD_SLEEP_NO,
	FCCD_SLEEP_YES,
};

/* How a probe asked: a timed one-byte read (the paper's), whose hit is
 * decided by fccd_classify_probes(); or a RWF_NOWAIT read, whose hit the
 * kernel gave (set by the caller, left alone by the classifier); or no
 * read at all: a unit that is a hole of a sparse file (SEEK_HOLE), which
 * reads as zeros without disk I/O - a hit, set by the caller. */
enum fccd_probe_kind {
	FCCD_PROBE_TIMED = 0,
	FCCD_PROBE_NOWAIT,
	FCCD_PROBE_HOLE,
};

/* One probe: its time, the known hit after it, what the kernel says it
 * read, whether it slept, and the piece it speaks for. */
struct fccd_probe_sample {
	uint64_t ns;
	uint64_t again_ns;      /* TIMED only                               */
	uint64_t read_pages;
	enum fccd_probe_sleep slept;
	uint64_t offset;        /* the byte probed                          */
	size_t extent;          /* index of the piece in the caller's array */
	enum fccd_probe_kind kind;
	bool hit;               /* TIMED: out, fccd_classify_probes();
				 * NOWAIT: in, the kernel's answer          */
	bool copy;              /* no probe of its own: the page was probed
				 * for the piece before, and this repeats
				 * that sample (a page is probed once)      */
};

enum fccd_one_group_rule {
	FCCD_RULE_NONE = 0,        /* two groups: the split decided         */
	FCCD_RULE_KERNEL_COUNT,    /* no clear split: a probe that read missed */
	FCCD_RULE_KNOWN_HITS,      /* no clear split, no read counted: all hit
				    * or all missed, against the threshold
				    * (calibrated, else the known hits)     */
	FCCD_RULE_NO_TIMED,        /* no timed probe to classify (none made, or
				    * only nowait ones)                     */
};

struct fccd_probe_verdict {
	struct cluster_split split;    /* 2-means of ln(ns) of the probes    */
	bool two_groups;               /* the split was used                 */
	bool one_group_hits;           /* KNOWN_HITS: all hit (true) or missed */
	enum fccd_one_group_rule rule;
	double known_hit_median_ns;    /* median of the again_ns             */
	size_t timed;                  /* TIMED samples classified           */
	/* A hit/miss threshold decided (the kernel counted no read of any
	 * timed probe, and either the split was checked against it or the
	 * one-group rule used it): the caller that gave none may fetch one
	 * and classify again (fccd_plan.c). */
	bool threshold_needed;
	double miss_ns;                /* where needed, the boundary used: the
					* threshold given, else
					* FCCD_ONE_GROUP_MISS_RATIO known hits;
					* else 0                             */
};

/* Classify the TIMED samples of samples[0 .. n) (NOWAIT ones keep their
 * hit and take no part; with no TIMED sample the rule is
 * FCCD_RULE_NO_TIMED): the 2-means split of { ln ns } when it is
 * significant and its means differ by FCCD_MISS_MIN_RATIO or more (hits:
 * the low group); else by the kernel's read count per probe where it
 * counted any, else all hits or all misses against a threshold (see
 * fccd_order.c).  Where the kernel counted no read, the threshold also
 * checks a split: its fast group must be below it, its slow group not.
 * That threshold is threshold_ns, the calibrated probe threshold of the
 * files' device, when it is > 0; with 0, FCCD_ONE_GROUP_MISS_RATIO times
 * the known hits' median.  Whatever decided, a probe judged a miss that
 * read nothing and provably did not sleep (FCCD_SLEEP_NO) is a hit that
 * lost the CPU.  Classifying again with another threshold_ns replaces
 * every TIMED verdict.  scratch: n doubles.  *verdict may be NULL.
 * Returns 0 or -EINVAL. */
int fccd_classify_probes(struct fccd_probe_sample *samples, size_t n, double *scratch,
			 uint64_t threshold_ns, struct fccd_probe_verdict *verdict);

/* Mark GBP_IN_CACHE on the pieces whose cached_fraction lies in the high
 * group of a 2-means split of all known fractions (pieces with GBP_ERROR
 * or a fraction < 0 take no part and are never in cache).  When the split
 * is not significant, or its means are less than FCCD_FRACTION_MIN_GAP
 * apart, a fraction is an absolute share: a piece is in cache iff at
 * least half of it is.  scratch: n doubles.
 * *split may be NULL. */
void fccd_mark_in_cache(struct gbp_extent *pieces, size_t n, double *scratch,
			struct cluster_split *split);

/* Sort most cached first (GBP_ORDER_MEMORY): errors last; then unknown
 * fractions (not probed: the paper's "fake high probe-time"); among the
 * known, higher cached_fraction first, then lower mean probe time, then
 * the order given (file index, offset) - a stable, total order. */
void fccd_sort_memory(struct gbp_extent *pieces, size_t n);

#endif
