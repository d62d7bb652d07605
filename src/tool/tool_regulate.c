/*
 * tool_regulate.c - measured feedback and duty cycling (see tool_regulate.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/segment.h"
#include "policy/policy.h"
#include "tool/tool_hold.h"
#include "tool/tool_msg.h"
#include "tool/tool_regulate.h"

#define MAX_JOB_PROCS 4096
/* Stop the job only when it is this far ahead of its budget: the agent
 * keeps a hooked job at the budget, and small prediction errors must not
 * turn into stops. */
#define STOP_THRESHOLD_NS (20 * 1000 * 1000ull)
#define MAX_STOP_NS (250 * 1000 * 1000ull)
#define RESCAN_TICKS 5
/* Ticks: every 20 ms while the agent has everything in hand, every 5 ms
 * within a window of I/O it did not see. */
#define TICK_CALM_NS (20 * 1000 * 1000ull)
#define TICK_HOT_NS (5 * 1000 * 1000ull)
#define TICK_IDLE_NS (100 * 1000 * 1000ull)
#define TICK_AFTER_CONTINUE_NS (1000 * 1000ull)

struct proc_entry {
	pid_t pid, ppid;
	char state;
};

struct regulator {
	struct dn_segment *seg;
	int slot;
	struct hold *hold;           /* the job's threads held now          */
	pid_t job;
	struct proc_io base;         /* our own io before the job           */
	uint64_t fed_read, fed_write; /* feedback charged so far            */
	uint64_t debt_read, debt_write; /* fed back, not yet in the window  */
	uint64_t hot_until_ns;        /* tick fast until then              */
	bool uncapped;                /* the class had no cap at last tick */
	/* I/O before the current capped period: neither owed nor predicted
	 * against. */
	uint64_t base_read, base_write, base_pred_read, base_pred_write;
	bool holding;                 /* in a hold period (stop_until_ns)   */
	unsigned ticks;
	unsigned nprocs;              /* the job's processes at the last scan */
	struct proc_entry *procs;
	uint64_t stop_until_ns, stopped_since_ns, stopped_ns, stops;
};

struct regulator *regulator_new(struct dn_segment *seg, int run_slot, bool feedback)
{
	if (!feedback)
		return NULL;
	struct regulator *reg = calloc(1, sizeof *reg);
	if (reg) {
		reg->procs = calloc(MAX_JOB_PROCS, sizeof *reg->procs);
		reg->hold = hold_new();
	}
	if (!reg || !reg->procs || !reg->hold) {
		if (reg) {
			free(reg->procs);
			hold_free(reg->hold);
		}
		free(reg);
		return NULL;
	}
	reg->seg = seg;
	reg->slot = run_slot;
	return reg;
}

bool regulator_child_event(struct regulator *reg, pid_t pid, int status)
{
	return reg && hold_child_event(reg->hold, pid, status);
}

bool regulator_stopped_it(const struct regulator *reg, pid_t pid)
{
	return reg && hold_sigstopped(reg->hold, pid);
}

void regulator_watch(struct regulator *reg, pid_t job, const struct proc_io *base)
{
	if (!reg)
		return;
	reg->job = job;
	reg->base = *base;
	reg->hot_until_ns = clock_now_ns() + reg->seg->window.span_ns;
}

/* ---- the job's processes ------------------------------------------------ */

/* Every process below us except the guard: one pass over /proc, then the
 * descendants of our pid by their parent links.  Orphans of the job are
 * re-parented to us (PR_SET_CHILD_SUBREAPER), so none escapes. */
struct proc_table {
	struct proc_entry *all;
	unsigned n, max;
};

static void collect(void *ctx, pid_t pid)
{
	struct proc_table *t = ctx;
	struct proc_stat st;
	if (t->n < t->max && proc_stat_read(pid, &st) == 0) {
		t->all[t->n].pid = pid;
		t->all[t->n].ppid = st.ppid;
		t->all[t->n].state = st.state;
		t->n++;
	}
}

static unsigned job_processes(const struct regulator *reg, struct proc_entry *out, unsigned max)
{
	static struct proc_entry all[32768];
	struct proc_table table = { all, 0, sizeof all / sizeof all[0] };
	proc_each(collect, &table);
	unsigned n = table.n;
	/* Breadth-first from us. */
	unsigned found = 0;
	pid_t self = getpid(), guard = hold_guard(reg->hold);
	for (unsigned i = 0; i < n && found < max; i++)
		if (all[i].ppid == self && all[i].pid != guard)
			out[found++] = all[i];
	for (unsigned head = 0; head < found; head++)
		for (unsigned i = 0; i < n && found < max; i++)
			if (all[i].ppid == out[head].pid)
				out[found++] = all[i];
	return found;
}

/* The job's disk I/O so far, by the kernel: what we reaped into our own
 * counters plus every live process's (each of which holds what it reaped). */
static void job_io(const struct regulator *reg, const struct proc_entry *procs, unsigned n,
		   uint64_t *reads, uint64_t *writes)
{
	struct proc_io io;
	*reads = *writes = 0;
	if (proc_io_read(0, &io) == 0) {
		*reads += io.read_bytes - reg->base.read_bytes;
		*writes += (io.write_bytes - reg->base.write_bytes) -
			   (io.cancelled_write_bytes - reg->base.cancelled_write_bytes);
	}
	for (unsigned i = 0; i < n; i++)
		if (proc_io_read(procs[i].pid, &io) == 0) {
			*reads += io.read_bytes;
			*writes += io.write_bytes > io.cancelled_write_bytes
					   ? io.write_bytes - io.cancelled_write_bytes : 0;
		}
}

/* For `discnice top`: the state and the time, published together. */
static void publish_hold(struct regulator *reg, uint64_t now)
{
	struct dn_run *run = &reg->seg->runs[reg->slot];
	uint64_t total = reg->stopped_ns + (reg->holding ? now - reg->stopped_since_ns : 0);
	__atomic_store_n(&run->stopped_ns, total, __ATOMIC_RELAXED);
	__atomic_store_n(&run->state, reg->holding && hold_count(reg->hold) ? DN_RUN_STOPPED : 0,
			 __ATOMIC_RELEASE);
}

static void continue_job(struct regulator *reg, uint64_t now)
{
	if (!reg->holding)
		return;
	hold_release(reg->hold);
	reg->stopped_ns += now - reg->stopped_since_ns;
	reg->holding = false;
	publish_hold(reg, now);
}

/* Hold every thread of the job that runs or reads now (tool_hold.c);
 * called at every tick of a hold period, so that a thread that wakes is
 * held too.  The process that holds the class lock now is left to finish
 * its few microseconds in it (a later tick holds it). */
static void hold_job(struct regulator *reg, const struct proc_entry *procs, unsigned n)
{
	pid_t locker = segment_lock_holder(reg->seg);
	/* (A zombie leader's live threads are held too: hold_process()
	 * judges every thread by its own state.) */
	for (unsigned i = 0; i < n; i++)
		if (procs[i].pid != locker)
			hold_process(reg->hold, procs[i].pid);
	/* A held process with a signal to take goes at once: Ctrl-C, kill(1)
	 * and its own timers reach it as they would an unheld program. */
	hold_let_signals_through(reg->hold);
}

/* Start a hold period: the job's running threads are held until the
 * window can take the debt. */
static void stop_job(struct regulator *reg, const struct proc_entry *procs, unsigned n,
		     uint64_t now, uint64_t for_ns)
{
	reg->holding = true;
	reg->stops++;
	reg->stopped_since_ns = now;
	reg->stop_until_ns = now + for_ns;
	hold_job(reg, procs, n);
	publish_hold(reg, now);
}

/* Debts enter the window in pieces of a quarter of its budget, like the
 * agent's charges (throttle.c): the window cannot take more than R*N. */
static uint64_t debt_piece(const struct dn_segment *seg)
{
	uint64_t cap = caps_smallest(&seg->caps);
	if (!cap)
		return UINT64_MAX;
	unsigned __int128 piece = (unsigned __int128)cap * seg->window.span_ns / NS_PER_SEC / 4;
	return piece < 4096 ? 4096 : (uint64_t)piece;
}

/* Pay what the window accepts of the debt now; returns how long until it
 * accepts the next piece (0: all paid).  The segment lock is held. */
static uint64_t pay_debt(struct regulator *reg, uint64_t now)
{
	const struct policy *policy = &policy_rate_window;
	uint64_t piece = debt_piece(reg->seg);
	while (reg->debt_read || reg->debt_write) {
		uint64_t r = reg->debt_read < piece ? reg->debt_read : piece;
		uint64_t w = reg->debt_write < piece - r ? reg->debt_write : piece - r;
		uint64_t late = policy->delay(&reg->seg->window, &reg->seg->caps, now, r, w);
		if (late)
			return late;
		policy->charge(&reg->seg->window, now, (int64_t)r, (int64_t)w);
		reg->debt_read -= r;
		reg->debt_write -= w;
	}
	return 0;
}

/* Our run's predictions so far (read, net write). */
static void predicted(const struct regulator *reg, uint64_t *reads, uint64_t *writes)
{
	const struct dn_counters *c = &reg->seg->runs[reg->slot].counters;
	uint64_t dirtied = segment_read_counter(&c->predicted_write_bytes);
	uint64_t cancelled = segment_read_counter(&c->cancelled_write_bytes);
	*reads = segment_read_counter(&c->predicted_read_bytes);
	*writes = dirtied > cancelled ? dirtied - cancelled : 0;
}

uint64_t regulator_tick(struct regulator *reg, uint64_t now)
{
	if (!reg || !reg->job)
		return TICK_CALM_NS;
	/* No cap (--rate inf, or lifted by yield or `discnice set`): nothing
	 * to hold, so nothing to measure; look again in a while. */
	const struct dn_caps *caps = &reg->seg->caps;
	if (!reg->holding && !caps->read_bps && !caps->write_bps && !caps->total_bps) {
		reg->fed_read = reg->fed_write = 0;
		reg->debt_read = reg->debt_write = 0;
		reg->uncapped = true;
		return TICK_IDLE_NS;
	}
	if (reg->uncapped) {
		/* A cap came (back): what happened meanwhile is not owed. */
		reg->uncapped = false;
		reg->ticks = 0;
		reg->nprocs = job_processes(reg, reg->procs, MAX_JOB_PROCS);
		uint64_t r, w;
		job_io(reg, reg->procs, reg->nprocs, &r, &w);
		predicted(reg, &reg->base_pred_read, &reg->base_pred_write);
		reg->base_read = r;
		reg->base_write = w;
	}
	if (reg->holding) {
		/* Threads that woke since the last tick are held too; a new
		 * process is found by the pass every RESCAN_TICKS. */
		if (reg->ticks++ % RESCAN_TICKS == 0)
			reg->nprocs = job_processes(reg, reg->procs, MAX_JOB_PROCS);
		hold_job(reg, reg->procs, reg->nprocs);
		/* `discnice top` sees a long stop grow, not only its end. */
		publish_hold(reg, now);
		if (now < reg->stop_until_ns)
			return reg->stop_until_ns - now < TICK_HOT_NS ? reg->stop_until_ns - now
								       : TICK_HOT_NS;
		/* Stay stopped while the debt is unpaid: a job that did all its
		 * I/O in one burst would otherwise exit the moment it is
		 * continued, far above its cap on average.  Only a try: a
		 * held process may hold the segment lock, and then it must
		 * run to release it. */
		uint64_t late;
		uint64_t token = segment_trylock(reg->seg);
		if (token) {
			late = pay_debt(reg, now);
			segment_unlock(reg->seg, token);
			/* Until all of it is paid, not just until the next piece
			 * is nearly payable. */
			if (late) {
				reg->stop_until_ns = now + (late < MAX_STOP_NS ? late : MAX_STOP_NS);
				return TICK_HOT_NS;
			}
		}
		continue_job(reg, now);
		/* Look again soon: a job just let go can move a tick's worth of
		 * I/O at disk speed, and if it exits then, nobody holds it. */
		return TICK_AFTER_CONTINUE_NS;
	}
	/* A pass over /proc costs a millisecond or two: every fifth tick.
	 * In between, the known processes are re-read; one born since is
	 * counted from the next pass on (its counters are cumulative). */
	if (reg->ticks++ % RESCAN_TICKS == 0)
		reg->nprocs = job_processes(reg, reg->procs, MAX_JOB_PROCS);
	struct proc_entry *procs = reg->procs;
	unsigned n = reg->nprocs;
	uint64_t actual_r, actual_w, pred_r, pred_w;
	job_io(reg, procs, n, &actual_r, &actual_w);
	predicted(reg, &pred_r, &pred_w);
	actual_r = actual_r > reg->base_read ? actual_r - reg->base_read : 0;
	actual_w = actual_w > reg->base_write ? actual_w - reg->base_write : 0;
	pred_r = pred_r > reg->base_pred_read ? pred_r - reg->base_pred_read : 0;
	pred_w = pred_w > reg->base_pred_write ? pred_w - reg->base_pred_write : 0;

	/* §1: what the hooks did not predict, never twice.  The agent
	 * predicts before the I/O happens, so its count leads; the kernel's
	 * overtakes it only by I/O the agent did not see. */
	uint64_t owe_r = actual_r > pred_r + reg->fed_read ? actual_r - pred_r - reg->fed_read : 0;
	uint64_t owe_w = actual_w > pred_w + reg->fed_write ? actual_w - pred_w - reg->fed_write : 0;
	reg->fed_read += owe_r;
	reg->fed_write += owe_w;
	reg->debt_read += owe_r;
	reg->debt_write += owe_w;

	/* It is owed to the window as a debt, paid in pieces as the window
	 * accepts them (a window of N seconds forgets a lump charged at
	 * once after N seconds; a debt is not forgotten). */
	uint64_t token = segment_lock(reg->seg);
	uint64_t late = pay_debt(reg, now);
	segment_unlock(reg->seg, token);

	/* §2: a debt the window cannot take yet is I/O nobody slept for:
	 * stop the job until it can (small debts the next tick pays). */
	if (late > STOP_THRESHOLD_NS)
		stop_job(reg, procs, n, now, late < MAX_STOP_NS ? late : MAX_STOP_NS);
	/* While I/O escapes the agent, look often: a job left running for a
	 * tick can move a tick's worth of disk bandwidth. */
	if (owe_r || owe_w || reg->debt_read || reg->debt_write)
		reg->hot_until_ns = now + reg->seg->window.span_ns;
	return now < reg->hot_until_ns ? TICK_HOT_NS : TICK_CALM_NS;
}

uint64_t regulator_settle(struct regulator *reg)
{
	if (!reg || reg->uncapped)
		return 0;
	uint64_t start = clock_now_ns(), now = start;
	/* The job is gone; what it did in its last moments is still owed. */
	for (int i = 0; i < 100000 && (reg->debt_read || reg->debt_write); i++) {
		uint64_t token = segment_lock(reg->seg);
		uint64_t late = pay_debt(reg, now);
		segment_unlock(reg->seg, token);
		if (!late)
			break;
		struct timespec ts = { (time_t)(late / NS_PER_SEC), (long)(late % NS_PER_SEC) };
		nanosleep(&ts, NULL);
		now = clock_now_ns();
	}
	return now - start;
}

void regulator_release(struct regulator *reg)
{
	if (reg)
		continue_job(reg, clock_now_ns());
}

void regulator_end(struct regulator *reg)
{
	if (!reg)
		return;
	continue_job(reg, clock_now_ns());
	hold_free(reg->hold);
	free(reg->procs);
	free(reg);
}

void regulator_stats(const struct regulator *reg, struct regulator_stats *out)
{
	memset(out, 0, sizeof *out);
	if (!reg)
		return;
	out->feedback_read_bytes = reg->fed_read;
	out->feedback_write_bytes = reg->fed_write;
	out->stopped_ns = reg->stopped_ns;
	out->stops = reg->stops;
}
