/*
 * tool_manners.c - `discnice run --policy manners` (see tool_manners.h).
 *
 * Testpoints.  The agent's counters move with every hooked read and write,
 * so a testpoint could be made at any tick; one every 250 ms of the job's
 * running time (§4.1: "every few hundred milliseconds") keeps the sign
 * test's samples coarse enough to average out a single slow call.  A
 * testpoint needs progress: an interval in which the job read and wrote
 * nothing is extended until it does (a job blocked on a contended disk
 * shows up as one long, slow interval), and one with no progress for
 * MANNERS_HUNG_NS is discarded, as the library discards a hung thread's
 * (§7.1): a job that computes, or waits for its user, for that long is not
 * measuring the disk.
 *
 * Quick testpoints (manners/quiet.h, not in the paper): while others use
 * a CPU, a testpoint every busy_ns (50 ms) instead, so that a CPU shared
 * with the job is judged in a quarter of a second.  They decide only how
 * often the progress is sampled, never whether the job waits.
 *
 * Running time.  A testpoint's duration is the time the job could run
 * since the last one (§4.1), so the suspensions ordered in between are
 * taken out: an interval starts where the suspension before it ends.  The
 * job waits at its next I/O call, so a process that computes when a
 * suspension starts goes on computing; its progress, file I/O, waits.
 */
#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/machine_activity.h"
#include "common/segment.h"
#include "manners/controller.h"
#include "manners/quiet.h"
#include "tool/tool_jobtree.h"
#include "tool/tool_manners.h"
#include "tool/tool_targets.h"

#define MANNERS_HUNG_NS  (UINT64_C(10) * 1000000000)
#define MIB              1048576.0

struct manners_run {
	struct dn_segment *seg;
	int slot;
	struct manners_sign_table signs;
	struct manners_phase phases[1];
	struct manners_controller ctl;
	uint64_t last_ns;            /* the previous testpoint           */
	uint64_t last_read, last_write;
	uint64_t suspended_until_ns; /* the suspension under way, 0: none */
	uint64_t suspended_ns;       /* all served                       */
	bool use_quiet;
	struct manners_quiet quiet;
	uint64_t shortened;
	/* The look back at a judgment (manners/quiet.h): the machine's
	 * counters at testpoints, and the job's own CPU time from its tree. */
	struct manners_quiet_history seen;
	struct jobtree tree;
	bool watching;
	/* Quick testpoints (manners/quiet.h); busy_ns 0: off. */
	uint64_t busy_ns;
	struct manners_busy busy;
	uint64_t busy_sampled_ns;    /* the last look, at most one per busy_ns */
	struct manners_activity busy_sample; /* what it saw, for a look back at the same tick */
	bool busy_sample_ok;
	uint64_t busy_testpoints;
	/* ... sooner, at a rise of CPU pressure between the testpoints. */
	bool use_stall;
	struct manners_stall stall;
	uint64_t stall_rises;
	/* ... and a new sample at a rise of others' disk traffic. */
	bool use_disk_rise;
	struct manners_disk_rise disk_rise;
	uint64_t disk_rises;
	struct targets_store targets; /* kept across runs */
};

static void progress_now(const struct manners_run *m, uint64_t *read, uint64_t *write)
{
	const struct dn_counters *c = &m->seg->runs[m->slot].counters;
	*read = segment_read_counter(&c->file_read_bytes);
	*write = segment_read_counter(&c->file_write_bytes);
}

struct manners_run *manners_run_new(struct dn_segment *seg, int slot,
				    const struct manners_run_config *config, uint64_t now_ns)
{
	struct manners_run *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->seg = seg;
	m->slot = slot;
	struct manners_controller_config c;
	manners_controller_config_default(&c);
	c.calib.bootstrap = config->bootstrap;
	c.calib.probation_ns = (int64_t)config->probation_ns;
	c.suspend_limit_ns = (int64_t)config->limit_ns;
	if (config->paper_calibration)
		c.quick_window = 0;
	if (config->initial_ns)
		c.suspend_initial_ns = (int64_t)config->initial_ns;
	/* Given above the limit: refused by the options already. */
	manners_suspend_settle(&c.suspend_initial_ns, c.suspend_limit_ns, config->initial_ns != 0);
	if (manners_sign_table_init(&m->signs, MANNERS_SIGN_ALPHA_DEFAULT, MANNERS_SIGN_BETA_DEFAULT,
				    MANNERS_SIGN_P1_DEFAULT, MANNERS_SIGN_N_MAX) < 0 ||
	    manners_controller_init(&m->ctl, &m->signs, m->phases, 1, &c) < 0) {
		free(m);
		return NULL;
	}
	m->use_quiet = config->quiet_ns > 0 &&
		       manners_quiet_init(&m->quiet, (int64_t)config->quiet_ns, MANNERS_QUIET_CPU_DEFAULT,
					  MANNERS_QUIET_DISK_DEFAULT) == 0;
	m->busy_ns = config->busy_ns;
	if (m->busy_ns && manners_busy_init(&m->busy, MANNERS_BUSY_SPAN_NS_DEFAULT,
					    MANNERS_BUSY_CPUS_DEFAULT) < 0)
		m->busy_ns = 0;
	uint64_t some;
	m->use_stall = m->busy_ns && m->busy_ns < MANNERS_RUN_TESTPOINT_NS &&
		       machine_cpu_stall_read(&some) == 0 &&
		       manners_stall_init(&m->stall, MANNERS_STALL_STEP_NS_DEFAULT,
					  MANNERS_STALL_SHARE_DEFAULT) == 0;
	m->use_disk_rise = config->disk_rise &&
			   manners_disk_rise_init(&m->disk_rise, MANNERS_DISK_RISE_STEP_NS_DEFAULT,
						  MANNERS_DISK_RISE_BPS_DEFAULT,
						  MANNERS_DISK_RISE_SHARE_DEFAULT) == 0;
	/* The target an earlier run of this program kept: its two metrics
	 * (MiB read, MiB written) are known from the start. */
	targets_open(&m->targets, config->persist, config->state_file, config->program,
		     TARGETS_METRIC_RUN, now_ns);
	targets_restore(&m->targets, &m->ctl.phases, 2);
	m->last_ns = now_ns;
	progress_now(m, &m->last_read, &m->last_write);
	return m;
}

/* The target, for `ls --json` and the bench's calibration trace (§9.6). */
static void publish_target(struct manners_run *m)
{
	double one_read[2] = { 1024, 0 }, one_write[2] = { 0, 1024 }, t;
	struct dn_run *run = &m->seg->runs[m->slot];
	if (manners_controller_target_ns(&m->ctl, 0, 2, one_read, &t) == 0 && t >= 0 && t < 1.8e19)
		__atomic_store_n(&run->manners_read_ns_per_gib, (uint64_t)t, __ATOMIC_RELAXED);
	if (manners_controller_target_ns(&m->ctl, 0, 2, one_write, &t) == 0 && t >= 0 && t < 1.8e19)
		__atomic_store_n(&run->manners_write_ns_per_gib, (uint64_t)t, __ATOMIC_RELAXED);
}

static void publish(struct manners_run *m, uint64_t until)
{
	__atomic_store_n(&m->seg->runs[m->slot].suspend_until_ns, until, __ATOMIC_RELEASE);
	__atomic_store_n(&m->seg->runs[m->slot].suspended_ns, m->suspended_ns, __ATOMIC_RELAXED);
}

void manners_run_watch(struct manners_run *m, pid_t job)
{
	if (!m || job <= 0)
		return;
	jobtree_init(&m->tree, &job, 1, true);
	m->watching = true;
}

/* Before a judgment: was anybody else on the machine over the last
 * quiet_ns?  If not, a poor judgment is the sign test's false alarm and
 * orders no suspension (manners_controller_machine_quiet()); the job's own
 * CPU time is its tree's (jobtree_machine_sample()). */
static void look_back(struct manners_run *m, uint64_t now)
{
	struct manners_activity sample;
	if (m->use_quiet && m->watching &&
	    manners_quiet_history_wants(&m->seen, &m->quiet, (int64_t)now)) {
		/* The quick testpoints' look at this very tick, if there was
		 * one: the tree and the counters are not read twice. */
		if (m->busy_sample_ok && m->busy_sampled_ns == now)
			manners_quiet_history_add(&m->seen, &m->quiet, &m->busy_sample);
		else {
			jobtree_scan(&m->tree);
			if (jobtree_machine_sample(&m->tree, now, &sample))
				manners_quiet_history_add(&m->seen, &m->quiet, &sample);
		}
	}
	manners_controller_machine_quiet(&m->ctl, m->use_quiet && m->watching &&
					 manners_quiet_history_quiet(&m->seen, &m->quiet,
								     m->busy_ns ? &m->busy : NULL));
}

/* A look at the machine for the quick testpoints: the job's tree first, for
 * its own CPU time (a suspended job computes on until its next I/O call).
 * At most one per busy_ns: a capped run's regulator ticks far more often.
 * Before they start, where CPU pressure can start them (stall_look()), at
 * most one per testpoint: the pressure is the cheaper look. */
static void busy_look(struct manners_run *m, uint64_t now)
{
	uint64_t spacing = m->use_stall && !m->busy.busy ? MANNERS_RUN_TESTPOINT_NS : m->busy_ns;
	if (m->busy_sampled_ns && now < m->busy_sampled_ns + spacing)
		return;
	m->busy_sampled_ns = now;
	jobtree_scan(&m->tree);
	m->busy_sample_ok = jobtree_machine_sample(&m->tree, now, &m->busy_sample);
	if (m->busy_sample_ok)
		manners_busy_feed(&m->busy, &m->busy_sample);
}

/* Between the testpoints, once a step: has CPU pressure risen (a rival on
 * the job's CPU)?  Then the quick testpoints start now (manners/quiet.h). */
static void stall_look(struct manners_run *m, uint64_t now)
{
	if (!m->use_stall)
		return;
	if (!m->watching || m->busy.busy) {
		manners_stall_pause(&m->stall);
		return;
	}
	if (!manners_stall_due(&m->stall, (int64_t)now))
		return;
	uint64_t some;
	if (machine_cpu_stall_read(&some) < 0) {
		m->use_stall = false; /* no PSI here: the spans alone */
		return;
	}
	if (manners_stall_feed(&m->stall, (int64_t)now, some) != 1)
		return;
	m->busy_sampled_ns = 0; /* a look now */
	busy_look(m, now);
	if (m->busy_sample_ok) {
		manners_busy_hint(&m->busy, &m->busy_sample);
		m->stall_rises++;
		/* A rival has just come: what the job did before says nothing
		 * of now.  The interval so far (mostly alone) is not measured,
		 * and the sign test begins a new sample, so that the first
		 * quick testpoints judge contention alone
		 * (manners_controller_new_sample()). */
		manners_controller_discard(&m->ctl);
		manners_controller_new_sample(&m->ctl);
		m->last_ns = now;
		progress_now(m, &m->last_read, &m->last_write);
	}
}

/* Between the testpoints, once a step: have others' disk bytes risen (a
 * rival on the job's disk)?  Then the sign test begins a new sample, as at
 * a rise of CPU pressure, but the testpoints stay 250 ms apart: a disk
 * job's progress over 50 ms is mostly noise (manners/quiet.h). */
static void disk_look(struct manners_run *m, uint64_t now)
{
	if (!m->use_disk_rise)
		return;
	if (!m->watching) {
		manners_disk_rise_pause(&m->disk_rise);
		return;
	}
	if (!manners_disk_rise_due(&m->disk_rise, (int64_t)now))
		return;
	struct manners_activity sample;
	if (m->busy_sample_ok && m->busy_sampled_ns == now) {
		sample = m->busy_sample; /* the tree and the counters, read this tick */
	} else {
		jobtree_scan(&m->tree);
		if (!jobtree_machine_sample(&m->tree, now, &sample))
			return;
	}
	if (manners_disk_rise_feed(&m->disk_rise, &sample) != 1)
		return;
	m->disk_rises++;
	/* What the job did before the rival came says nothing of now. */
	manners_controller_discard(&m->ctl);
	manners_controller_new_sample(&m->ctl);
	m->last_ns = now;
	progress_now(m, &m->last_read, &m->last_write);
}

/* The time to the next tick, `left`, or less: the next look at the
 * pressure while it can start the quick testpoints, or at the disks. */
static uint64_t stall_wake(const struct manners_run *m, uint64_t now, uint64_t left)
{
	uint64_t next = (uint64_t)m->stall.next_ns;
	if (m->use_stall && m->watching && !m->busy.busy && next > now && next - now < left)
		left = next - now;
	next = (uint64_t)m->disk_rise.next_ns;
	if (m->use_disk_rise && m->watching && next > now && next - now < left)
		left = next - now;
	return left;
}

/* The testpoint interval from now on: busy_ns while others use a CPU
 * (the job's own CPU time, from its tree, left out), else 250 ms. */
static uint64_t testpoint_interval(struct manners_run *m, uint64_t now)
{
	if (!m->busy_ns || !m->watching || m->busy_ns >= MANNERS_RUN_TESTPOINT_NS)
		return MANNERS_RUN_TESTPOINT_NS;
	stall_look(m, now);
	busy_look(m, now);
	return m->busy.busy ? m->busy_ns : MANNERS_RUN_TESTPOINT_NS;
}

uint64_t manners_run_tick(struct manners_run *m, uint64_t now)
{
	if (!m)
		return MANNERS_RUN_TESTPOINT_NS;
	/* A suspension over: lift it, so that the agent's calls go back to
	 * one load each. */
	if (m->suspended_until_ns && now >= m->suspended_until_ns) {
		m->suspended_until_ns = 0;
		publish(m, 0);
	}
	if (m->suspended_until_ns) {
		manners_stall_pause(&m->stall); /* not looked at meanwhile */
		manners_disk_rise_pause(&m->disk_rise);
		/* Beyond the paper (quiet.h): a machine quiet for quiet_ns
		 * means the foreground has stopped; end the suspension now.
		 * Only ever shortens one. */
		struct machine_activity a;
		if (m->use_quiet && machine_activity_read(&a) == 0) {
			struct manners_activity sample = manners_activity_of(&a, (int64_t)now, 0);
			if (m->busy_ns && m->watching)
				busy_look(m, now);
			if (manners_quiet_feed(&m->quiet, &sample) == 1) {
				m->suspended_ns -= m->suspended_until_ns - now; /* not served */
				m->suspended_until_ns = 0;
				m->last_ns = now;
				m->shortened++;
				publish(m, 0);
				return MANNERS_RUN_TESTPOINT_NS;
			}
			uint64_t left = m->suspended_until_ns - now;
			return left < (uint64_t)MANNERS_QUIET_STEP_NS ? left : (uint64_t)MANNERS_QUIET_STEP_NS;
		}
		return m->suspended_until_ns - now;
	}

	/* An interval starts at the end of the suspension before it, so
	 * all of it is running time. */
	uint64_t interval = testpoint_interval(m, now);
	disk_look(m, now);
	uint64_t ran = now > m->last_ns ? now - m->last_ns : 0;
	if (ran < interval)
		return stall_wake(m, now, interval - ran);
	uint64_t read, write;
	progress_now(m, &read, &write);
	double progress[2] = { (double)(read - m->last_read) / MIB,
			       (double)(write - m->last_write) / MIB };
	if (read == m->last_read && write == m->last_write) {
		if (ran < MANNERS_HUNG_NS)
			return stall_wake(m, now, interval); /* extend the interval */
		manners_controller_discard(&m->ctl);
		m->last_ns = now;
		return interval;
	}
	if (interval < MANNERS_RUN_TESTPOINT_NS)
		m->busy_testpoints++;
	look_back(m, now);
	int judgment;
	int64_t wait = manners_controller_testpoint(&m->ctl, 0, 2, progress, (int64_t)ran,
						    (int64_t)now, &judgment);
	m->last_ns = now;
	m->last_read = read;
	m->last_write = write;
	if (wait >= 0)
		targets_update(&m->targets, &m->phases[0], now);
	publish_target(m);
	if (wait > 0) {
		m->suspended_until_ns = now + (uint64_t)wait;
		if (m->use_quiet)
			manners_quiet_reset(&m->quiet);
		m->suspended_ns += (uint64_t)wait;
		/* The next interval starts after it: nothing to take out. */
		m->last_ns = m->suspended_until_ns;
		publish(m, m->suspended_until_ns);
		return (uint64_t)wait;
	}
	/* Not the interval itself: the next look at the pressure may be due
	 * sooner (before, a testpoint put the next look off by a step). */
	return stall_wake(m, now, interval);
}

void manners_run_end(struct manners_run *m)
{
	if (m)
		targets_close(&m->targets, &m->phases[0], clock_now_ns());
	if (m && m->suspended_until_ns) {
		/* Time not served is not counted. */
		uint64_t now = clock_now_ns();
		if (now < m->suspended_until_ns)
			m->suspended_ns -= m->suspended_until_ns - now;
		m->suspended_until_ns = 0;
		publish(m, 0);
	}
}

void manners_run_stats(const struct manners_run *m, struct manners_run_stats *out)
{
	memset(out, 0, sizeof *out);
	if (!m)
		return;
	out->testpoints = m->ctl.stats.testpoints;
	out->judged_good = m->ctl.stats.judged_good;
	out->judged_poor = m->ctl.stats.judged_poor;
	out->discarded = m->ctl.stats.discarded;
	out->suspended_ns = m->suspended_ns;
	out->shortened = m->shortened;
	out->forgiven = m->ctl.stats.forgiven;
	out->busy_testpoints = m->busy_testpoints;
	out->cpu_pressure = m->use_stall;
	out->pressure_rises = m->stall_rises;
	out->new_samples = m->ctl.stats.new_samples;
	out->disk_rises = m->disk_rises;
	if (m->targets.persist)
		snprintf(out->state_file, sizeof out->state_file, "%s", m->targets.path);
	out->target_restored = m->targets.restored;
	out->restored_samples = m->targets.restored_samples;
	double one_read[2] = { 1, 0 }, one_write[2] = { 0, 1 }, t;
	struct manners_controller *ctl = (struct manners_controller *)&m->ctl;
	if (manners_controller_target_ns(ctl, 0, 2, one_read, &t) == 0)
		out->target_ns_per_mib_read = t;
	if (manners_controller_target_ns(ctl, 0, 2, one_write, &t) == 0)
		out->target_ns_per_mib_written = t;
}

void manners_run_free(struct manners_run *m)
{
	free(m);
}
