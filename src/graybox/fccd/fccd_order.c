/*
 * fccd_order.c - the FCCD's chunks, probe points, hit/miss clustering and
 * memory order (graybox-icl §4.1.2; see fccd_order.h).
 */
#include "graybox/fccd/fccd_order.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

uint64_t fccd_chunk_length(uint64_t access_unit, uint64_t record_size)
{
	if (access_unit == 0)
		access_unit = GBP_ACCESS_UNIT_DEFAULT;
	if (record_size == 0)
		record_size = 1;
	uint64_t length = access_unit - access_unit % record_size;
	return length > 0 ? length : record_size;
}

uint64_t fccd_chunk_count(uint64_t size, uint64_t chunk_length)
{
	if (size == 0 || chunk_length == 0)
		return 1;
	return size / chunk_length + (size % chunk_length != 0);
}

uint64_t fccd_prediction_unit(uint64_t chunk_length, uint64_t page)
{
	if (page == 0)
		page = 1;
	uint64_t quarter = chunk_length / FCCD_PROBES_PER_CHUNK +
			   (chunk_length % FCCD_PROBES_PER_CHUNK != 0);
	uint64_t unit = (quarter + page - 1) / page * page;
	return unit > 0 ? unit : page;
}

uint32_t fccd_probe_count(uint64_t length, uint64_t prediction_unit)
{
	if (length == 0)
		return 0;
	if (prediction_unit == 0)
		return 1;
	uint64_t n = length / prediction_unit + (length % prediction_unit != 0);
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* splitmix64 (Steele, Lea, Flood 2014): every state gives a good next one,
 * including 0. */
uint64_t fccd_random_next(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

uint64_t fccd_probe_offset(uint64_t start, uint64_t length, uint64_t *state)
{
	if (length <= 1)
		return start;
	/* Modulo bias is < length / 2^64: irrelevant here. */
	return start + fccd_random_next(state) % length;
}

/* ln of a time in ns; a 0 ns reading (a coarse clock) counts as 1 ns. */
static double log_ns(uint64_t ns)
{
	return log((double)(ns > 0 ? ns : 1));
}

static int compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median_sorted(const double *v, size_t n)
{
	if (n == 0)
		return 0;
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Only timed probes are classified; a nowait probe came with the kernel's
 * answer (fccd_order.h). */
static bool is_timed(const struct fccd_probe_sample *sample)
{
	return sample->kind == FCCD_PROBE_TIMED;
}

/* A probe judged a miss by its time alone, which read nothing and never
 * slept, is a hit that lost the CPU: a page-cache miss submits a read and
 * waits for it (filemap_read() -> folio_wait_bit() -> io_schedule(), a
 * voluntary switch); a preempted hit is switched out involuntarily.  A
 * clean-clone CI run called one of six cached files "not in cache" on a
 * single slow probe this way.  Only misses are pardoned: a hit that slept
 * (an atime update waiting on the journal) stays a hit. */
static void pardon_sleepless(struct fccd_probe_sample *samples, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (is_timed(&samples[i]) && !samples[i].hit && samples[i].read_pages == 0 &&
		    samples[i].slept == FCCD_SLEEP_NO)
			samples[i].hit = true;
}

/* ln ns (or ln again_ns) of the timed samples into scratch, sorted; how
 * many. */
static size_t sorted_log_times(const struct fccd_probe_sample *samples, size_t n, bool again,
			       double *scratch)
{
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (is_timed(&samples[i]))
			scratch[m++] = log_ns(again ? samples[i].again_ns : samples[i].ns);
	if (m > 0)
		qsort(scratch, m, sizeof *scratch, compare_double);
	return m;
}

int fccd_classify_probes(struct fccd_probe_sample *samples, size_t n, double *scratch,
			 uint64_t threshold_ns, struct fccd_probe_verdict *verdict)
{
	struct fccd_probe_verdict local;
	if (verdict == NULL)
		verdict = &local;
	memset(verdict, 0, sizeof *verdict);
	if (n > 0 && (samples == NULL || scratch == NULL))
		return -EINVAL;

	/* §4.1.2: sort the probe times, §4.2.4: split them in two by 2-means.
	 * On a log scale: times are multiplicative (a miss costs a hit times
	 * the disk/memory ratio), and there the hits' spread and the misses'
	 * are alike, so neither dominates the within-group variance. */
	size_t m = sorted_log_times(samples, n, false, scratch);
	verdict->timed = m;
	if (m == 0) {
		cluster_two_means_sorted(scratch, 0, &verdict->split);
		verdict->rule = FCCD_RULE_NO_TIMED;
		return 0;
	}
	cluster_two_means_sorted(scratch, m, &verdict->split);
	double probe_median = median_sorted(scratch, m);
	sorted_log_times(samples, n, true, scratch);
	verdict->known_hit_median_ns = exp(median_sorted(scratch, m));

	/* What statistics cannot know (cluster.h): a miss costs at least
	 * FCCD_MISS_MIN_RATIO hits on any storage, so groups closer than that
	 * are one group's jitter. */
	verdict->two_groups = verdict->split.significant &&
			      verdict->split.high_mean - verdict->split.low_mean >=
				      log(FCCD_MISS_MIN_RATIO);
	/* And the fast group must be hits: in an all-miss sample from a disk
	 * whose answers range from 100 us to 15 ms (this VM's, under load),
	 * 2-means splits fast misses from slow ones.  Its probes must not
	 * have made the kernel read (where it counts reads at all), or where
	 * it counts none, it must be below the hit/miss threshold. */
	/* Likewise the slow group must be misses, not hits that lost the CPU
	 * or paid for a cold code path.  Where the kernel counts reads, most
	 * of the fast group read nothing and most of the slow group read;
	 * where it counts none, the fast group is below the threshold and the
	 * slow one above. */
	size_t reads = 0, low_reads = 0, low = 0;
	for (size_t i = 0; i < n; i++) {
		if (!is_timed(&samples[i]))
			continue;
		bool in_low = log_ns(samples[i].ns) < verdict->split.boundary;
		reads += samples[i].read_pages > 0;
		low += in_low;
		low_reads += in_low && samples[i].read_pages > 0;
	}
	/* The hit/miss threshold, where the kernel counted no read: the
	 * device's calibrated probe threshold (graybox-icl §5: "the cache
	 * hit/miss probe threshold"), measured between one-byte reads of
	 * cached and evicted pages on that device
	 * (microbench_probe_threshold()), when the caller has one; else a
	 * fixed factor over the known hits.  (With no read counted it decides
	 * either way: the split's check below, or the one-group rule.) */
	if (reads == 0) {
		verdict->threshold_needed = true;
		verdict->miss_ns = threshold_ns > 0
					   ? (double)threshold_ns
					   : FCCD_ONE_GROUP_MISS_RATIO * verdict->known_hit_median_ns;
	}
	if (verdict->two_groups) {
		if (reads > 0)
			verdict->two_groups = 2 * low_reads < low &&
					      2 * (reads - low_reads) > m - low;
		else
			verdict->two_groups = exp(verdict->split.low_mean) < verdict->miss_ns &&
					      exp(verdict->split.high_mean) >= verdict->miss_ns;
	}
	if (verdict->two_groups) {
		for (size_t i = 0; i < n; i++)
			if (is_timed(&samples[i]))
				samples[i].hit = log_ns(samples[i].ns) < verdict->split.boundary;
		pardon_sleepless(samples, n);
		return 0;
	}

	/* One group by time: every probe hit, every probe missed (§4.2.4:
	 * "all files are actually on disk"), or misses so spread out - this
	 * VM's host-cached disk answers in 20 us to 30 ms - that the split is
	 * not clear.  Times alone cannot say which.  The kernel's count of the
	 * blocks each probe made it read (ru_inblock, the count behind
	 * /proc/PID/io read_bytes; cache_detector.c's probe_is_miss() trusts
	 * it the same way) can, where it counts: a probe that read missed.
	 * Where no probe read anything - file systems without block I/O
	 * accounting, or every probe hit - the group's median is compared
	 * with the threshold above: the calibrated one, else
	 * FCCD_ONE_GROUP_MISS_RATIO times the known hits (the same bytes read
	 * again), the only place a fixed factor decides. */
	if (reads > 0) {
		verdict->rule = FCCD_RULE_KERNEL_COUNT;
		for (size_t i = 0; i < n; i++)
			if (is_timed(&samples[i]))
				samples[i].hit = samples[i].read_pages == 0;
		verdict->one_group_hits = reads == 0;
	} else {
		verdict->rule = FCCD_RULE_KNOWN_HITS;
		bool hits = exp(probe_median) < verdict->miss_ns;
		verdict->one_group_hits = hits;
		for (size_t i = 0; i < n; i++)
			if (is_timed(&samples[i]))
				samples[i].hit = hits;
	}
	pardon_sleepless(samples, n);
	return 0;
}

void fccd_mark_in_cache(struct gbp_extent *pieces, size_t n, double *scratch,
			struct cluster_split *split)
{
	struct cluster_split local;
	if (split == NULL)
		split = &local;
	size_t known = 0;
	for (size_t i = 0; i < n; i++) {
		pieces[i].flags &= ~GBP_IN_CACHE;
		if (!(pieces[i].flags & GBP_ERROR) && pieces[i].cached_fraction >= 0)
			scratch[known++] = pieces[i].cached_fraction;
	}
	if (known == 0) {
		cluster_two_means_sorted(scratch, 0, split);
		return;
	}
	qsort(scratch, known, sizeof *scratch, compare_double);
	cluster_two_means_sorted(scratch, known, split);
	/* Shares are absolute: two groups less than half the file apart are
	 * one group (a file 98 % cached is not "out" beside 100 % ones), and
	 * without two groups each piece is in cache if most of it is. */
	if (split->high_mean - split->low_mean < FCCD_FRACTION_MIN_GAP)
		split->significant = false;
	for (size_t i = 0; i < n; i++) {
		if ((pieces[i].flags & GBP_ERROR) || pieces[i].cached_fraction < 0)
			continue;
		double boundary = split->significant ? split->boundary : 0.5;
		if (pieces[i].cached_fraction >= boundary)
			pieces[i].flags |= GBP_IN_CACHE;
	}
}

/* -1 / 0 / 1 helpers for the comparator. */
static int cmp_u64(uint64_t a, uint64_t b)
{
	return (a > b) - (a < b);
}

static int compare_memory(const void *pa, const void *pb)
{
	const struct gbp_extent *a = pa, *b = pb;
	int ea = !!(a->flags & GBP_ERROR), eb = !!(b->flags & GBP_ERROR);
	if (ea != eb)
		return ea - eb;
	int ua = a->cached_fraction < 0, ub = b->cached_fraction < 0;
	if (ua != ub)
		return ua - ub;
	if (!ua && a->cached_fraction != b->cached_fraction)
		return a->cached_fraction > b->cached_fraction ? -1 : 1;
	/* §4.1.2: sort by the probes' time - per probe, so a big file's many
	 * probes do not count against it.  Cross-multiplied, no division.
	 * Not among pieces wholly in cache: there a time says nothing, and
	 * its noise shuffled a cached file's chunks; they keep their order. */
	bool all_cached = !ua && a->cached_fraction >= 1.0;
	if (a->probes > 0 && b->probes > 0 && !all_cached) {
		double ta = (double)a->probe_ns * b->probes, tb = (double)b->probe_ns * a->probes;
		if (ta != tb)
			return ta < tb ? -1 : 1;
	}
	int c = cmp_u64(a->file, b->file);
	return c ? c : cmp_u64(a->offset, b->offset);
}

void fccd_sort_memory(struct gbp_extent *pieces, size_t n)
{
	if (n > 1)
		qsort(pieces, n, sizeof *pieces, compare_memory);
}
