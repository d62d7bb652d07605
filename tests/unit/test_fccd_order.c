/* Description: gbp's pure order logic (graybox-icl §4.1.2, §4.2.2, §4.2.4): chunk and prediction-unit geometry with record alignment, random probe points inside their unit, hit/miss by 2-means with the one-group fallbacks and, where the kernel counted no read, a calibrated threshold or the known-hit factor (nowait probes keep the kernel's answer), in-cache marks, memory, i-number, physical and composed order. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "unit.h"
#include "graybox/fccd/fccd_order.h"
#include "graybox/fldc/layout_order.h"

static struct gbp_extent piece(uint32_t file, uint64_t off, double fraction, uint32_t probes,
			       uint64_t probe_ns, uint64_t ino, uint64_t phys)
{
	struct gbp_extent e;
	memset(&e, 0, sizeof e);
	e.file = file;
	e.offset = off;
	e.length = 100;
	e.cached_fraction = fraction;
	e.probes = probes;
	e.probe_ns = probe_ns;
	e.device = 1;
	e.inode = ino;
	e.physical = phys;
	return e;
}

int main(void)
{
	/* Geometry: 20 MiB default, records of 100 bytes: 20971500. */
	CHECK_EQ_U64(fccd_chunk_length(0, 0), 20u << 20);
	CHECK_EQ_U64(fccd_chunk_length(0, 100), 20971500);
	CHECK_EQ_U64(fccd_chunk_length(50, 100), 100);      /* at least a record */
	CHECK_EQ_U64(fccd_chunk_count(0, 4096), 1);
	CHECK_EQ_U64(fccd_chunk_count(4096, 4096), 1);
	CHECK_EQ_U64(fccd_chunk_count(4097, 4096), 2);
	/* Prediction unit: a quarter of 20 MiB = 5 MiB (the paper's); of
	 * 20971500 bytes 5242875, rounded up to pages 5242880. */
	CHECK_EQ_U64(fccd_prediction_unit(20u << 20, 4096), 5u << 20);
	CHECK_EQ_U64(fccd_prediction_unit(20971500, 4096), 5242880);
	CHECK_EQ_U64(fccd_prediction_unit(100, 4096), 4096);
	/* Four probes per full chunk, one for a small file, none if empty. */
	CHECK_EQ_U64(fccd_probe_count(20u << 20, 5u << 20), 4);
	CHECK_EQ_U64(fccd_probe_count((5u << 20) + 1, 5u << 20), 2);
	CHECK_EQ_U64(fccd_probe_count(3000, 5u << 20), 1);
	CHECK_EQ_U64(fccd_probe_count(0, 5u << 20), 0);

	/* Probe points: inside their unit, not all the same, reproducible. */
	uint64_t state = 42, again = 42;
	uint64_t first = fccd_probe_offset(1000, 5000, &state), distinct = 0;
	CHECK_EQ_U64(first, fccd_probe_offset(1000, 5000, &again));
	for (int i = 0; i < 1000; i++) {
		uint64_t at = fccd_probe_offset(1000, 5000, &state);
		CHECK(at >= 1000 && at < 6000);
		distinct += at != first;
	}
	CHECK(distinct > 990);
	CHECK_EQ_U64(fccd_probe_offset(7, 1, &state), 7);

	/* Hits and misses by time: 6 hits ~1.5 us, 4 misses 60-900 us. */
	struct fccd_probe_sample s[10];
	double scratch[64];
	uint64_t times[10] = { 1400, 1500, 1700, 90000, 1450, 60000, 1600, 900000, 1550, 250000 };
	for (int i = 0; i < 10; i++)
		s[i] = (struct fccd_probe_sample){ .ns = times[i], .again_ns = 700, .extent = (size_t)i };
	struct fccd_probe_verdict v;
	CHECK(fccd_classify_probes(s, 10, scratch, 0, &v) == 0);
	CHECK(v.two_groups && v.rule == FCCD_RULE_NONE);
	CHECK_EQ_U64(v.split.low_count, 6);
	for (int i = 0; i < 10; i++)
		CHECK(s[i].hit == (times[i] < 10000));
	CHECK(fabs(v.known_hit_median_ns - 700) < 1e-6);
	CHECK_EQ_U64(v.timed, 10);

	/* The same ten timed probes beside six nowait ones (RWF_NOWAIT: the
	 * kernel said hit or miss).  Their times - a hit that lost the CPU
	 * for 5 ms, misses answered in 45 us, a miss in 900 ns - must neither
	 * move the split of the timed ones nor be judged by it, and a nowait
	 * miss that read nothing and did not sleep is not "pardoned". */
	struct fccd_probe_sample mixed[16];
	uint64_t nowait_ns[6] = { 2000, 5000000, 45000, 47000, 900, 2100 };
	bool nowait_hit[6] = { true, true, false, false, false, true };
	for (int i = 0; i < 10; i++)
		mixed[i] = (struct fccd_probe_sample){ .ns = times[i], .again_ns = 700 };
	for (int i = 0; i < 6; i++)
		mixed[10 + i] = (struct fccd_probe_sample){ .ns = nowait_ns[i], .kind = FCCD_PROBE_NOWAIT,
							    .hit = nowait_hit[i],
							    .slept = FCCD_SLEEP_NO };
	/* Interleave them: the classifier must not rely on their order. */
	struct fccd_probe_sample swap = mixed[2];
	mixed[2] = mixed[12];
	mixed[12] = swap;
	struct fccd_probe_verdict mv;
	CHECK(fccd_classify_probes(mixed, 16, scratch, 0, &mv) == 0);
	CHECK(mv.two_groups && mv.rule == FCCD_RULE_NONE);
	CHECK_EQ_U64(mv.timed, 10);
	CHECK_EQ_U64(mv.split.low_count, 6);
	CHECK(fabs(mv.split.boundary - v.split.boundary) < 1e-12);
	for (int i = 0; i < 16; i++) {
		if (mixed[i].kind == FCCD_PROBE_TIMED)
			CHECK(mixed[i].hit == (mixed[i].ns < 10000));
	}
	CHECK(mixed[2].kind == FCCD_PROBE_NOWAIT && !mixed[2].hit);   /* 45 us miss */
	CHECK(mixed[11].hit);                                          /* 5 ms hit   */
	CHECK(!mixed[14].hit);                                         /* 900 ns miss */
	CHECK(mixed[15].hit);
	/* Only nowait probes: nothing to classify, every answer kept. */
	struct fccd_probe_sample only[6];
	for (int i = 0; i < 6; i++)
		only[i] = (struct fccd_probe_sample){ .ns = nowait_ns[i], .kind = FCCD_PROBE_NOWAIT,
						      .hit = nowait_hit[i] };
	CHECK(fccd_classify_probes(only, 6, scratch, 0, &mv) == 0);
	CHECK(mv.rule == FCCD_RULE_NO_TIMED && !mv.two_groups);
	CHECK_EQ_U64(mv.timed, 0);
	for (int i = 0; i < 6; i++)
		CHECK(only[i].hit == nowait_hit[i]);
	CHECK(fccd_classify_probes(NULL, 0, NULL, 0, &mv) == 0 && mv.rule == FCCD_RULE_NO_TIMED);

	/* All hits (first touches, ~2.5x the repeated reads): one group by
	 * time, no reads counted -> all hit. */
	for (int i = 0; i < 10; i++)
		s[i] = (struct fccd_probe_sample){ .ns = 1500 + 37 * (uint64_t)i, .again_ns = 600 };
	CHECK(fccd_classify_probes(s, 10, scratch, 0, &v) == 0);
	CHECK(!v.two_groups && v.rule == FCCD_RULE_KNOWN_HITS && v.one_group_hits);
	for (int i = 0; i < 10; i++)
		CHECK(s[i].hit);
	/* All misses, no reads counted (say NFS): 80 us vs known hits 0.6 us. */
	for (int i = 0; i < 10; i++)
		s[i] = (struct fccd_probe_sample){ .ns = 80000 + 1000 * (uint64_t)i, .again_ns = 600 };
	CHECK(fccd_classify_probes(s, 10, scratch, 0, &v) == 0);
	CHECK(!v.two_groups && !v.one_group_hits);
	for (int i = 0; i < 10; i++)
		CHECK(!s[i].hit);
	CHECK(v.threshold_needed && fabs(v.miss_ns - 8 * 600) < 1e-6);

	/* The kernel counting no read, a calibrated probe threshold decides
	 * instead of FCCD_ONE_GROUP_MISS_RATIO known hits (graybox-icl §5).
	 * One group at 6-6.9 us, known hits 0.6 us: the factor (4.8 us) calls
	 * them misses; a device whose misses take 50 us or more (threshold 20
	 * us) calls them hits, one whose hits were measured under 1 us
	 * (threshold 1 us) misses.  A threshold given is what the verdict
	 * says it used. */
	for (int i = 0; i < 10; i++)
		s[i] = (struct fccd_probe_sample){ .ns = 6000 + 100 * (uint64_t)i, .again_ns = 600 };
	CHECK(fccd_classify_probes(s, 10, scratch, 0, &v) == 0);
	CHECK(v.rule == FCCD_RULE_KNOWN_HITS && v.threshold_needed && !v.one_group_hits);
	CHECK(fabs(v.miss_ns - 4800) < 1e-6);
	for (int i = 0; i < 10; i++)
		CHECK(!s[i].hit);
	CHECK(fccd_classify_probes(s, 10, scratch, 20000, &v) == 0);
	CHECK(v.rule == FCCD_RULE_KNOWN_HITS && v.threshold_needed && v.one_group_hits);
	CHECK(fabs(v.miss_ns - 20000) < 1e-6);
	for (int i = 0; i < 10; i++)
		CHECK(s[i].hit);
	CHECK(fccd_classify_probes(s, 10, scratch, 1000, &v) == 0);
	CHECK(!v.one_group_hits && fabs(v.miss_ns - 1000) < 1e-6);
	for (int i = 0; i < 10; i++)
		CHECK(!s[i].hit);
	/* A clear split, no read counted: the threshold checks it.  Between
	 * the groups (20 us) it stands, as with the factor; below the fast
	 * group (1 us: "hits" slower than a hit) or above the slow one (10 ms:
	 * "misses" faster than a miss) the split is not hits and misses, and
	 * the one-group rule decides by the same threshold. */
	for (int i = 0; i < 10; i++)
		s[i] = (struct fccd_probe_sample){ .ns = times[i], .again_ns = 700 };
	CHECK(fccd_classify_probes(s, 10, scratch, 0, &v) == 0);
	CHECK(v.two_groups && v.threshold_needed && fabs(v.miss_ns - 5600) < 1e-6);
	CHECK(fccd_classify_probes(s, 10, scratch, 20000, &v) == 0);
	CHECK(v.two_groups && v.rule == FCCD_RULE_NONE);
	for (int i = 0; i < 10; i++)
		CHECK(s[i].hit == (times[i] < 10000));
	CHECK(fccd_classify_probes(s, 10, scratch, 1000, &v) == 0);
	CHECK(!v.two_groups && v.rule == FCCD_RULE_KNOWN_HITS && !v.one_group_hits);
	for (int i = 0; i < 10; i++)
		CHECK(!s[i].hit);
	CHECK(fccd_classify_probes(s, 10, scratch, 10000000, &v) == 0);
	CHECK(!v.two_groups && v.rule == FCCD_RULE_KNOWN_HITS && v.one_group_hits);
	for (int i = 0; i < 10; i++)
		CHECK(s[i].hit);
	/* Where the kernel counted reads no threshold decides: none needed,
	 * and one given changes nothing. */
	for (int i = 0; i < 10; i++)
		s[i] = (struct fccd_probe_sample){ .ns = times[i], .again_ns = 700,
						   .read_pages = times[i] > 10000 };
	CHECK(fccd_classify_probes(s, 10, scratch, 1000, &v) == 0);
	CHECK(v.two_groups && !v.threshold_needed && v.miss_ns == 0);
	for (int i = 0; i < 10; i++)
		CHECK(s[i].hit == (times[i] < 10000));

	/* Misses spread from 20 us to 30 ms beside hits: no clear split by
	 * time; the kernel's read count says which read. */
	uint64_t wide[10] = { 1500, 1600, 1550, 20000, 30000000, 400000, 1500000, 70000, 9000000, 1650 };
	for (int i = 0; i < 10; i++)
		s[i] = (struct fccd_probe_sample){ .ns = wide[i], .again_ns = 700,
						   .read_pages = wide[i] > 10000 };
	CHECK(fccd_classify_probes(s, 10, scratch, 0, &v) == 0);
	CHECK(!v.threshold_needed);
	for (int i = 0; i < 10; i++)
		CHECK(s[i].hit == (wide[i] < 10000));
	/* A single probe: no spread; decided by the read count. */
	s[0] = (struct fccd_probe_sample){ .ns = 50000, .again_ns = 700, .read_pages = 1 };
	CHECK(fccd_classify_probes(s, 1, scratch, 0, &v) == 0);
	CHECK(!s[0].hit && v.rule == FCCD_RULE_KERNEL_COUNT);
	CHECK(fccd_classify_probes(s, 0, scratch, 0, &v) == 0);

	/* Six cached files, one probe each; the fourth lost the CPU for 1 ms
	 * (a clean-clone CI run).  By time it is a miss; it read nothing and
	 * did not sleep, so it hit.  Had it slept, or were it unknown, the
	 * time decides as before. */
	enum fccd_probe_sleep sleeps[3] = { FCCD_SLEEP_NO, FCCD_SLEEP_YES, FCCD_SLEEP_UNKNOWN };
	for (int k = 0; k < 3; k++) {
		for (int i = 0; i < 6; i++)
			s[i] = (struct fccd_probe_sample){ .ns = i == 3 ? 1000000 : 1500 + 10 * (uint64_t)i,
							   .again_ns = 700, .slept = FCCD_SLEEP_NO,
							   .extent = (size_t)i };
		s[3].slept = sleeps[k];
		CHECK(fccd_classify_probes(s, 6, scratch, 0, &v) == 0);
		for (int i = 0; i < 6; i++)
			CHECK(s[i].hit == (i != 3 || k == 0));
	}

	/* In-cache marks: shares 1, 0.9, 0.75 vs 0, 0.25 split at 0.5;
	 * unknown and errors never in cache. */
	struct gbp_extent p[8];
	p[0] = piece(0, 0, 1.0, 4, 6000, 50, 900);
	p[1] = piece(1, 0, 0.0, 4, 400000, 10, 100);
	p[2] = piece(2, 0, 0.9, 4, 7000, 30, 300);
	p[3] = piece(3, 0, 0.25, 4, 300000, 20, UINT64_MAX);
	p[4] = piece(4, 0, -1, 0, 0, 5, 50);              /* not probed */
	p[4].flags = GBP_NOT_PROBED;
	p[5] = piece(5, 0, 0.75, 4, 100000, 40, 200);
	p[6] = piece(6, 0, -1, 0, 0, 0, UINT64_MAX);      /* error */
	p[6].flags = GBP_ERROR;
	p[7] = piece(7, 0, 1.0, 4, 5000, 60, 600);
	struct cluster_split cs;
	fccd_mark_in_cache(p, 8, scratch, &cs);
	CHECK(cs.significant);
	uint32_t in = 0;
	for (int i = 0; i < 8; i++)
		if (p[i].flags & GBP_IN_CACHE)
			in |= 1u << p[i].file;
	CHECK_EQ_U64(in, (1u << 0) | (1u << 2) | (1u << 5) | (1u << 7));
	/* Shares all alike (0.98, 1, 1): one group, each by its majority. */
	struct gbp_extent q[3] = { piece(0, 0, 0.98, 1, 1, 1, 1), piece(1, 0, 1, 1, 1, 2, 2),
				   piece(2, 0, 0.2, 1, 1, 3, 3) };
	q[2].cached_fraction = 1;
	fccd_mark_in_cache(q, 3, scratch, &cs);
	CHECK(!cs.significant);
	CHECK((q[0].flags & q[1].flags & q[2].flags) & GBP_IN_CACHE);

	/* Memory order: by share, then probe time per probe, unknown then
	 * errors last.  Files 0 and 7 are wholly cached: their times (1500
	 * and 1250 ns per probe) say nothing, and they keep their order. */
	struct gbp_extent m[8];
	memcpy(m, p, sizeof m);
	fccd_sort_memory(m, 8);
	uint32_t want_mem[8] = { 0, 7, 2, 5, 3, 1, 4, 6 };
	for (int i = 0; i < 8; i++)
		CHECK_EQ_U64(m[i].file, want_mem[i]);
	/* Equal shares below 1: the faster probes first (file 7 now). */
	memcpy(m, p, sizeof m);
	m[0].cached_fraction = m[7].cached_fraction = 0.5;
	fccd_sort_memory(m, 8);
	CHECK_EQ_U64(m[2].file, 7);
	CHECK_EQ_U64(m[3].file, 0);

	/* i-number order (errors last). */
	memcpy(m, p, sizeof m);
	layout_order_sort(m, 8, false, false);
	uint32_t want_ino[8] = { 4, 1, 3, 2, 5, 0, 7, 6 };
	for (int i = 0; i < 8; i++)
		CHECK_EQ_U64(m[i].file, want_ino[i]);
	/* Physical order: known addresses first, then by i-number. */
	memcpy(m, p, sizeof m);
	layout_order_sort(m, 8, true, false);
	uint32_t want_phys[8] = { 4, 1, 5, 2, 7, 0, 3, 6 };
	for (int i = 0; i < 8; i++)
		CHECK_EQ_U64(m[i].file, want_phys[i]);
	/* Composed (§4.2.4): in cache first, each group by i-number. */
	memcpy(m, p, sizeof m);
	layout_order_sort(m, 8, false, true);
	uint32_t want_comp[8] = { 2, 5, 0, 7, 4, 1, 3, 6 };
	for (int i = 0; i < 8; i++)
		CHECK_EQ_U64(m[i].file, want_comp[i]);
	/* Chunks of one file stay in offset order within a layout group. */
	struct gbp_extent c[3] = { piece(0, 200, 1, 1, 1, 9, 9), piece(0, 0, 1, 1, 1, 9, 9),
				   piece(0, 100, 1, 1, 1, 9, 9) };
	layout_order_sort(c, 3, true, false);
	CHECK_EQ_U64(c[0].offset, 0);
	CHECK_EQ_U64(c[2].offset, 200);
	return 0;
}
