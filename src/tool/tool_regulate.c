/*
 * tool_regulate.c - measured feedback and duty cycling (see tool_regulate.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/segment.h"
#include "policy/policy.h"
#include "policy/rate_window.h"
#include "tool/tool_hold.h"
#include "tool/tool_msg.h"
#include "tool/tool_net_feedback.h"
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
/* discnice attach: every byte escapes the agent (there is none), and a
 * process let go reads at disk speed until the next tick sees it - on this
 * VM's host-cached disk, 2 GB/s, 10 MiB in a 5 ms tick.  While hot, tick
 * every millisecond (a tick of one process costs ~20 us). */
#define TICK_ATTACH_HOT_NS (1000 * 1000ull)
/* TCP bytes the agent did not see (tool_net_feedback.c): a static sender
 * on loopback moves 2-3 GB/s, a megabyte or more per millisecond let go.
 * Tick every millisecond while they flow (one tick: a /proc/PID/fd walk
 * and two sock_diag dumps, tens of microseconds for a small job), and
 * look 200 us after letting a job with a network debt go. */
#define TICK_NET_HOT_NS (1000 * 1000ull)
#define TICK_NET_AFTER_CONTINUE_NS (200 * 1000ull)

struct proc_entry {
	pid_t pid, ppid;
	char state;
	bool gone;                    /* attach: left since the last pass    */
	uint64_t read_bytes, write_bytes; /* attach: its counts, last read    */
};

struct regulator {
	struct dn_segment *seg;
	int slot;
	struct hold *hold;           /* the job's threads held now          */
	pid_t job;
	struct proc_io base;         /* our own io before the job           */
	uint64_t fed_read, fed_write; /* feedback charged so far            */
	uint64_t debt_read, debt_write; /* fed back, not yet in the window  */
	/* Debt paid into the window lately, newest at paid_head: what a
	 * refund may take back (see regulator_tick()). */
	struct { uint64_t at_ns, read, write; } paid[16];
	unsigned paid_head;
	uint64_t hot_until_ns;        /* tick fast until then              */
	bool warned_unreadable;       /* a job process's io: said once     */
	pid_t unreadable_pid;         /* refused at the last tick, if any  */
	bool uncapped;                /* the class had no cap at last tick */
	bool slack;                   /* DN_RUN_SLACK published            */
	bool slack_seen;              /* ... at some tick (the summary)    */
	/* I/O before the current capped period: neither owed nor predicted
	 * against. */
	uint64_t base_read, base_pred_read;
	int64_t base_write, base_pred_write; /* net writes, signed: see job_io() */
	bool holding;                 /* in a hold period (stop_until_ns)   */
	unsigned ticks;
	unsigned nprocs;              /* the job's processes at the last scan */
	struct proc_entry *procs;
	uint64_t stop_until_ns, stopped_since_ns, stopped_ns, stops;
	/* discnice attach: the job is the processes given and every process
	 * born below them since, none of them ours (see attached_scan()). */
	bool attached;
	bool children_files;          /* /proc/PID/task/TID/children exist  */
	unsigned alive;               /* attached processes alive now       */
	uint64_t departed_read, departed_write; /* counts of those that left */
	uint64_t origin_read, origin_write; /* the counts when we attached   */
	/* The network's feedback (tool_net_feedback.c): made when a network
	 * cap is first seen (start_network()); NULL before, without
	 * sock_diag, and for an attach (it refuses network caps). */
	struct net_feedback *net;
	bool net_tried;               /* start_network() ran               */
	pid_t *net_pids;              /* the processes' pids, for its scans */
	uint64_t net_hot_until_ns;    /* TCP bytes escaped the agent lately  */
	bool net_hot;
};

static void update_slack(struct regulator *reg, uint64_t now);

/*
 * The tables sized for the most a job may have (MAX_JOB_PROCS processes),
 * of which a job uses a few entries: anonymous pages, which the kernel
 * zeroes when first touched.  calloc() cleared all 128 KiB of the process
 * table at start-up, a fault and a clear_page() per page, on every run.
 */
static void *table_new(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void table_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes);
}

/*
 * The network's feedback, when a network cap is first seen: at the start
 * (its books start with the job's) or later (`discnice set`: they start
 * afresh, as after any uncapped stretch).  Most runs never have one, and
 * its socket tables and sock_diag socket were a third of the measured
 * feedback's start-up cost on a short job.  Tried once.
 */
static void start_network(struct regulator *reg, bool at_start)
{
	if (reg->net_tried || reg->attached)
		return;
	struct dn_caps caps = segment_net_caps_now(reg->seg);
	if (!(caps.read_bps | caps.write_bps | caps.total_bps))
		return;
	reg->net_tried = true;
	reg->net_pids = table_new(MAX_JOB_PROCS * sizeof *reg->net_pids);
	if (reg->net_pids)
		reg->net = net_feedback_new(reg->seg, reg->slot);
	if (!at_start)
		net_feedback_uncapped(reg->net);
}

struct regulator *regulator_new(struct dn_segment *seg, int run_slot, bool feedback)
{
	if (!feedback)
		return NULL;
	struct regulator *reg = calloc(1, sizeof *reg);
	if (reg) {
		reg->procs = table_new(MAX_JOB_PROCS * sizeof *reg->procs);
		reg->hold = hold_new();
	}
	if (!reg || !reg->procs || !reg->hold) {
		if (reg) {
			table_free(reg->procs, MAX_JOB_PROCS * sizeof *reg->procs);
			hold_free(reg->hold);
		}
		free(reg);
		return NULL;
	}
	reg->seg = seg;
	reg->slot = run_slot;
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
	reg->children_files = access(path, R_OK) == 0;
	start_network(reg, true);
	/* Before the job starts: the agent charges less where we charge. */
	__atomic_or_fetch(&seg->runs[run_slot].state, DN_RUN_FEEDBACK, __ATOMIC_RELEASE);
	/* And a cap far above what any job can do is slack from its first
	 * call, not from the first tick 5-20 ms in: a short job (a warm grep
	 * -r of 0.1 s) would otherwise classify its first files, which is most
	 * of what a non-binding cap cost it.  The first tick corrects it. */
	uint64_t now = clock_now_ns();
	uint64_t token = segment_lock(seg);
	update_slack(reg, now);
	segment_unlock(seg, token);
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

static struct proc_entry all_processes[32768];

static struct proc_entry *entry_find(struct proc_entry *list, unsigned n, pid_t pid)
{
	for (unsigned i = 0; i < n; i++)
		if (list[i].pid == pid && !list[i].gone)
			return &list[i];
	return NULL;
}

/* Add pid, a child of one of ours, unless known (an orphan re-parented
 * while we read may be listed twice), us or our guard. */
static void list_add(struct regulator *reg, struct proc_entry *list, unsigned *found, pid_t pid)
{
	struct proc_stat st;
	if (*found >= MAX_JOB_PROCS || pid == getpid() || pid == hold_guard(reg->hold) ||
	    entry_find(list, *found, pid) || proc_stat_read(pid, &st) < 0)
		return;
	list[(*found)++] = (struct proc_entry){ .pid = pid, .ppid = st.ppid, .state = st.state };
}

struct children_into {
	struct regulator *reg;
	struct proc_entry *list;
	unsigned *found;
};

static void child_into(void *ctx, pid_t child)
{
	struct children_into *into = ctx;
	list_add(into->reg, into->list, into->found, child);
}

/* Add the children of pid (proc_children: /proc/PID/task/TID/children);
 * false when a list may have been cut short. */
static bool list_add_children(struct regulator *reg, struct proc_entry *list, unsigned *found,
			      pid_t pid)
{
	struct children_into into = { reg, list, found };
	return proc_children(pid, child_into, &into);
}

/* The job: every process below us, breadth-first.  From the children
 * files (/proc/PID/task/TID/children), a few small reads per process of
 * the job; a pass over all of /proc read every process's stat on the
 * machine, which at the end of a short capped run was most of what the
 * supervisor did (hundreds of system calls on a quiet machine, thousands
 * on a busy one).  The pass remains for kernels without those files and
 * for a list a read may have cut short. */
static unsigned job_processes(struct regulator *reg, struct proc_entry *out)
{
	const unsigned max = MAX_JOB_PROCS;
	pid_t self = getpid(), guard = hold_guard(reg->hold);
	if (reg->children_files) {
		unsigned found = 0;
		bool whole = list_add_children(reg, out, &found, self);
		for (unsigned head = 0; head < found; head++)
			whole &= list_add_children(reg, out, &found, out[head].pid);
		if (whole)
			return found;
	}
	struct proc_entry *all = all_processes;
	struct proc_table table = { all, 0, sizeof all_processes / sizeof all_processes[0] };
	proc_each(collect, &table);
	unsigned n = table.n;
	/* Breadth-first from us. */
	unsigned found = 0;
	for (unsigned i = 0; i < n && found < max; i++)
		if (all[i].ppid == self && all[i].pid != guard)
			out[found++] = all[i];
	for (unsigned head = 0; head < found; head++)
		for (unsigned i = 0; i < n && found < max; i++)
			if (all[i].ppid == out[head].pid)
				out[found++] = all[i];
	return found;
}

/* ---- discnice attach: processes that are not ours ---------------------- */

/* An attached process has left (it was reaped, and /proc no longer shows
 * it).  Its counts must not drop out of the job's total: a parent reaps a
 * child's counts into its own (wait_task_zombie), so if the parent is one
 * of ours they arrive with it; otherwise (its parent is a shell we do not
 * watch, or init) we keep them.  The I/O it did after our last read of it
 * is lost in that case: at most a tick's worth. */
static void attached_depart(struct regulator *reg, struct proc_entry *e)
{
	if (e->gone)
		return;
	e->gone = true;
	if (!entry_find(reg->procs, reg->nprocs, e->ppid)) {
		reg->departed_read += e->read_bytes;
		reg->departed_write += e->write_bytes;
	}
}

/* The attached processes still there (with their parent and state now: an
 * orphan is re-parented, and stays ours), then, breadth-first, every
 * process whose parent is one of them - children born since the last
 * scan, and at the first every descendant.  Children are read from
 * /proc/PID/task/TID/children, a few small reads per process, cheap enough
 * for every tick, so a child is held within a tick of its birth; a kernel
 * without those files (CONFIG_PROC_CHILDREN) gets a pass over /proc every
 * RESCAN_TICKS instead.  We and our guard are never part of it, and
 * validation refused our ancestors (tool_attach.c). */
static void attached_scan(struct regulator *reg)
{
	static struct proc_entry next[MAX_JOB_PROCS];
	unsigned found = 0;
	for (unsigned i = 0; i < reg->nprocs; i++) {
		struct proc_entry *was = &reg->procs[i];
		struct proc_stat st;
		if (was->gone)
			continue;
		if (proc_stat_read(was->pid, &st) < 0) {
			attached_depart(reg, was);
			continue;
		}
		next[found] = *was;
		next[found].ppid = st.ppid;
		next[found].state = st.state;
		found++;
	}
	if (reg->children_files) {
		for (unsigned head = 0; head < found; head++)
			list_add_children(reg, next, &found, next[head].pid);
	} else {
		struct proc_entry *all = all_processes;
		struct proc_table table = { all, 0, sizeof all_processes / sizeof all_processes[0] };
		proc_each(collect, &table);
		for (unsigned head = 0; head < found; head++)
			for (unsigned i = 0; i < table.n; i++)
				if (all[i].ppid == next[head].pid)
					list_add(reg, next, &found, all[i].pid);
	}
	memcpy(reg->procs, next, found * sizeof *next);
	reg->nprocs = found;
	reg->alive = 0;
	for (unsigned i = 0; i < found; i++)
		reg->alive += next[i].state != 'Z' || proc_thread_count(next[i].pid) > 1;
}

/* The attached processes' disk I/O so far, by the kernel: every one's
 * /proc/PID/io (which holds what it reaped) plus what departed ones did. */
static void attached_io(struct regulator *reg, uint64_t *reads, uint64_t *writes)
{
	struct proc_io io;
	for (unsigned i = 0; i < reg->nprocs; i++) {
		struct proc_entry *e = &reg->procs[i];
		if (e->gone)
			continue;
		if (proc_io_read(e->pid, &io) == 0) {
			e->read_bytes = io.read_bytes;
			e->write_bytes = io.write_bytes > io.cancelled_write_bytes
						 ? io.write_bytes - io.cancelled_write_bytes : 0;
		} else {
			attached_depart(reg, e);
		}
	}
	*reads = reg->departed_read;
	*writes = reg->departed_write;
	for (unsigned i = 0; i < reg->nprocs; i++)
		if (!reg->procs[i].gone) {
			*reads += reg->procs[i].read_bytes;
			*writes += reg->procs[i].write_bytes;
		}
}

/* For `discnice top`: no agent counts for an attached job, so we publish
 * the kernel's count of it since we attached. */
static void publish_measured(struct regulator *reg, uint64_t reads, uint64_t writes)
{
	struct dn_run *run = &reg->seg->runs[reg->slot];
	__atomic_store_n(&run->measured_read_bytes,
			 reads > reg->origin_read ? reads - reg->origin_read : 0, __ATOMIC_RELAXED);
	__atomic_store_n(&run->measured_write_bytes,
			 writes > reg->origin_write ? writes - reg->origin_write : 0,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&run->attached_processes, reg->alive, __ATOMIC_RELAXED);
}

/* ---- the job's processes and their I/O, either way ---------------------- */

/* Is a scan due at this tick?  An attach with children files scans at
 * every one (see attached_scan()). */
static bool scan_due(struct regulator *reg)
{
	return reg->ticks++ % RESCAN_TICKS == 0 || (reg->attached && reg->children_files);
}

static void scan_processes(struct regulator *reg)
{
	if (reg->attached)
		attached_scan(reg);
	else
		reg->nprocs = job_processes(reg, reg->procs);
}

/* The job's disk I/O so far, by the kernel: what we reaped into our own
 * counters plus every live process's (each of which holds what it reaped).
 * Net writes (write_bytes - cancelled_write_bytes) are signed, as the
 * agent's are (predicted()): a process of the job that removes a file
 * someone else dirtied cancels more than it wrote, the kernel counts it
 * so, and so does the agent (cachestat's nr_dirty).  Clamped at 0 per
 * process, that refund read as the job's writes going unpredicted, and
 * feedback charged the next 64 MiB it wrote twice (`rm` of a 64 MiB file
 * dd had just dirtied, then 16 MiB written at 8MB/s: 4.2 s instead of
 * 2.6); and the reaped part wrapped below 0 to 2^64. */
static void job_io(struct regulator *reg, const struct proc_entry *procs, unsigned n,
		   uint64_t *reads, int64_t *writes)
{
	struct proc_io io;
	*reads = 0;
	*writes = 0;
	if (proc_io_read(0, &io) == 0) {
		*reads += io.read_bytes - reg->base.read_bytes;
		*writes += (int64_t)(io.write_bytes - reg->base.write_bytes) -
			   (int64_t)(io.cancelled_write_bytes - reg->base.cancelled_write_bytes);
	}
	pid_t refused = 0;
	for (unsigned i = 0; i < n; i++) {
		int rc = proc_io_read(procs[i].pid, &io);
		if (rc == 0) {
			*reads += io.read_bytes;
			*writes += (int64_t)io.write_bytes - (int64_t)io.cancelled_write_bytes;
		} else if ((rc == -EACCES || rc == -EPERM) && !reg->warned_unreadable) {
			/* A set-user-ID program run by an ordinary user, or one
			 * that made itself not dumpable: the kernel shows its io
			 * to nobody else (proc_pid_io_accounting() asks
			 * ptrace_may_access()).  Its disk I/O is seen only when
			 * it is reaped, too late to hold it for.  Said only when
			 * the same process is refused at two ticks running: an
			 * ordinary process in the middle of its execve() is
			 * refused for an instant too (seen as nobody, 3 runs in
			 * 7 of tar and cp, without discnice as well). */
			if (reg->unreadable_pid != procs[i].pid) {
				if (!refused)
					refused = procs[i].pid;
				continue;
			}
			char comm[64];
			proc_comm(procs[i].pid, comm, sizeof comm);
			reg->warned_unreadable = true;
			warnf("cannot read /proc/%d/io (%s): not readable to you (a set-user-ID "
			      "program, or one not dumpable), so its disk I/O is measured only after "
			      "it ends, and is not held for (see discnice(1), Measured feedback)",
			      (int)procs[i].pid, comm);
		}
	}
	reg->unreadable_pid = refused;
}

static void measure(struct regulator *reg, uint64_t *reads, int64_t *writes)
{
	if (reg->attached) {
		/* No agent, no refunds: each process's net clamped at 0. */
		uint64_t w;
		attached_io(reg, reads, &w);
		publish_measured(reg, *reads, w);
		*writes = (int64_t)w;
	} else {
		job_io(reg, reg->procs, reg->nprocs, reads, writes);
	}
}

bool regulator_attach(struct regulator *reg, const pid_t *pids, unsigned n)
{
	if (!reg || !n || n > MAX_JOB_PROCS)
		return false;
	reg->attached = true;
	reg->job = pids[0];
	net_feedback_free(reg->net); /* attach polices no sockets */
	reg->net = NULL;
	/* (attach published pids[0] in the slot's attached_pid as it joined.) */
	for (unsigned i = 0; i < n; i++)
		reg->procs[i] = (struct proc_entry){ .pid = pids[i] };
	reg->nprocs = n;
	/* From now on every byte is owed: what they did before is not. */
	scan_processes(reg);
	uint64_t r, w;
	attached_io(reg, &r, &w);
	reg->origin_read = reg->base_read = r;
	reg->origin_write = w;
	reg->base_write = (int64_t)w;
	publish_measured(reg, r, w);
	reg->hot_until_ns = clock_now_ns() + reg->seg->window.span_ns;
	return true;
}

unsigned regulator_alive(const struct regulator *reg)
{
	return reg && reg->attached ? reg->alive : 0;
}

/* For `discnice top`: the state and the time, published together. */
static void publish_hold(struct regulator *reg, uint64_t now)
{
	struct dn_run *run = &reg->seg->runs[reg->slot];
	uint64_t total = reg->stopped_ns + (reg->holding ? now - reg->stopped_since_ns : 0);
	__atomic_store_n(&run->stopped_ns, total, __ATOMIC_RELAXED);
	__atomic_store_n(&run->state,
			 (reg->holding && hold_count(reg->hold) ? DN_RUN_STOPPED : 0) | DN_RUN_FEEDBACK |
				 (reg->slack ? DN_RUN_SLACK : 0),
			 __ATOMIC_RELEASE);
}

static void continue_job(struct regulator *reg, uint64_t now)
{
	if (!reg->holding)
		return;
	hold_release(reg->hold);
	hold_socket_waits(reg->hold, false);
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
		if (procs[i].pid != locker && !procs[i].gone)
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
/* Remember debt paid at now (a refund may take it back while the window
 * still holds it). */
static void note_paid(struct regulator *reg, uint64_t now, uint64_t r, uint64_t w)
{
	unsigned n = sizeof reg->paid / sizeof reg->paid[0];
	if (reg->paid[reg->paid_head].at_ns != now)
		reg->paid_head = (reg->paid_head + 1) % n;
	if (reg->paid[reg->paid_head].at_ns != now)
		reg->paid[reg->paid_head].read = reg->paid[reg->paid_head].write = 0;
	reg->paid[reg->paid_head].at_ns = now;
	reg->paid[reg->paid_head].read += r;
	reg->paid[reg->paid_head].write += w;
}

static uint64_t pay_debt(struct regulator *reg, uint64_t now)
{
	const struct policy *policy = policy_of(reg->seg); /* --window-policy */
	uint64_t piece = debt_piece(reg->seg);
	while (reg->debt_read || reg->debt_write) {
		uint64_t r = reg->debt_read < piece ? reg->debt_read : piece;
		uint64_t w = reg->debt_write < piece - r ? reg->debt_write : piece - r;
		uint64_t late = policy->delay(&reg->seg->window, &reg->seg->caps, now, r, w);
		if (late)
			return late;
		policy->charge(&reg->seg->window, &reg->seg->caps, now, (int64_t)r, (int64_t)w);
		note_paid(reg, now, r, w);
		reg->debt_read -= r;
		reg->debt_write -= w;
	}
	return 0;
}

/* Take back up to (*r, *w) of the debt paid within the window's span,
 * newest first; what the window has forgotten cannot be taken back (a
 * refund of it would hand the job budget it never lost).  Returns the
 * amounts taken in *r, *w. */
static void unpay(struct regulator *reg, uint64_t now, uint64_t *r, uint64_t *w)
{
	unsigned n = sizeof reg->paid / sizeof reg->paid[0];
	uint64_t want_r = *r, want_w = *w, span = reg->seg->window.span_ns;
	*r = *w = 0;
	for (unsigned k = 0; k < n && (want_r || want_w); k++) {
		unsigned i = (reg->paid_head + n - k) % n;
		if (!reg->paid[i].at_ns || now - reg->paid[i].at_ns >= span)
			break;
		uint64_t tr = want_r < reg->paid[i].read ? want_r : reg->paid[i].read;
		uint64_t tw = want_w < reg->paid[i].write ? want_w : reg->paid[i].write;
		reg->paid[i].read -= tr;
		reg->paid[i].write -= tw;
		want_r -= tr;
		want_w -= tw;
		*r += tr;
		*w += tw;
	}
}

/* Our run's predictions so far (read, net write).  Net writes are signed:
 * the agent refunds every dirty page a truncate cancels, as the kernel
 * counts it, also pages it never charged (dirtied while the class had no
 * cap, through a mapping, by another process).  Clamped at 0, such a
 * refund swallowed every later prediction until the job had written as
 * much again, and feedback charged all of it a second time: with a
 * 1MiB/s cap lifted and set again around a truncate of 40 MiB, 8 MiB took
 * 15.1 s.  Signed, the excess sits in the base taken when the cap came. */
static void predicted(const struct regulator *reg, uint64_t *reads, int64_t *writes)
{
	const struct dn_counters *c = &reg->seg->runs[reg->slot].counters;
	uint64_t dirtied = segment_read_counter(&c->predicted_write_bytes);
	uint64_t cancelled = segment_read_counter(&c->cancelled_write_bytes);
	*reads = segment_read_counter(&c->predicted_read_bytes);
	*writes = (int64_t)dirtied - (int64_t)cancelled; /* may be < 0 */
}

/*
 * Slack (issue #9 item 3, segment.h DN_RUN_SLACK).  A cap far above what
 * the job does still cost it the agent's per-file work (an fstat at open,
 * a cache question at the first read, the model, the region table): warm
 * `grep -r` ran 22-25 % longer under a 64GiB/s cap than under none.  The
 * agent can leave new files to the kernel while we charge what they cost
 * (this tick's feedback), as long as every window stays far from its cap:
 * each cap set, times the window's span, a budget of at least
 * DN_SLACK_MIN_BUDGET, with at most an eighth of it used to enter and a
 * quarter to stay.  Between two ticks (5-20 ms) the job can do I/O at
 * disk speed unseen; the budget's floor keeps that a small part of it,
 * and the window then makes the job pay it back, as it does for any I/O
 * the agent cannot see (static programs).  The caps of the rate tables
 * (up to 200 MiB/s, 1-s window) never go slack.
 */
static bool cap_slack(uint64_t bps, uint64_t span_ns, int64_t used, bool staying)
{
	if (!bps)
		return true; /* no cap on this kind */
	/* bps * span / 1e9 without overflow at 64GiB/s and minutes. */
	uint64_t budget = bps / 1000 * (span_ns / 1000000) + bps % 1000 * (span_ns / 1000000) / 1000;
	return budget >= DN_SLACK_MIN_BUDGET && used <= (int64_t)(budget / (staying ? 4 : 8));
}

/* Called with the segment locked. */
static void update_slack(struct regulator *reg, uint64_t now)
{
	const struct dn_caps *caps = &reg->seg->caps;
	uint64_t span = reg->seg->window.span_ns;
	bool slack = false;
	if (!reg->debt_read && !reg->debt_write && !reg->holding) {
		int64_t rd, wr;
		rate_window_sums(&reg->seg->window, now, &rd, &wr);
		slack = cap_slack(caps->read_bps, span, rd, reg->slack) &&
			cap_slack(caps->write_bps, span, wr, reg->slack) &&
			cap_slack(caps->total_bps, span, rd + wr, reg->slack);
	}
	if (slack != reg->slack) {
		reg->slack = slack;
		reg->slack_seen |= slack;
		publish_hold(reg, now);
	}
}

/* The network's feedback at this tick (tool_net_feedback.c): sample the
 * job's TCP sockets; true if bytes escaped the agent. */
static bool measure_network(struct regulator *reg, uint64_t now)
{
	for (unsigned i = 0; i < reg->nprocs; i++)
		reg->net_pids[i] = reg->procs[i].pid;
	return net_feedback_measure(reg->net, reg->net_pids, reg->nprocs, now);
}

/* The disk has no cap: its books start afresh when one comes. */
static void disk_uncapped(struct regulator *reg, uint64_t now)
{
	reg->fed_read = reg->fed_write = 0;
	reg->debt_read = reg->debt_write = 0;
	reg->uncapped = true;
	if (reg->slack) {
		reg->slack = false;
		publish_hold(reg, now);
	}
}

uint64_t regulator_tick(struct regulator *reg, uint64_t now)
{
	if (!reg || !reg->job)
		return TICK_CALM_NS;
	/* The network's caps are its own (issue #12): its feedback runs
	 * while one is set, beside the disk's or alone. */
	start_network(reg, false);
	bool net = net_feedback_capped(reg->net);
	if (!net)
		net_feedback_uncapped(reg->net);
	/* No cap (--rate inf, or lifted by yield or `discnice set`): nothing
	 * to hold, so nothing to measure; look again in a while. */
	const struct dn_caps *caps = &reg->seg->caps;
	bool disk = caps->read_bps || caps->write_bps || caps->total_bps;
	if (!reg->holding && !disk && !net) {
		disk_uncapped(reg, now);
		if (reg->attached) {
			/* Still followed: `top` shows its rates, and attach
			 * ends when the last process does.  And a cap that
			 * comes back (`discnice set`) is seen within a calm
			 * tick, not an idle one: until then the process runs
			 * free, at disk speed (200 MB in 100 ms here). */
			uint64_t r;
			int64_t w;
			scan_processes(reg);
			measure(reg, &r, &w);
			return TICK_CALM_NS;
		}
		return TICK_IDLE_NS;
	}
	if (!disk) {
		disk_uncapped(reg, now);
	} else if (reg->uncapped) {
		/* A cap came (back): what happened meanwhile is not owed. */
		reg->uncapped = false;
		reg->ticks = 0;
		scan_processes(reg);
		uint64_t r;
		int64_t w;
		measure(reg, &r, &w);
		predicted(reg, &reg->base_pred_read, &reg->base_pred_write);
		reg->base_read = r;
		reg->base_write = w;
		/* Look often at first, as at an attach's start: a job that ran
		 * free reads at disk speed until the next tick, and a calm
		 * tick's 20 ms of it (40 MB here) was one debt that held an
		 * attach 'set' back to 512KiB/s for over a minute. */
		reg->hot_until_ns = now + reg->seg->window.span_ns;
	}
	if (reg->holding) {
		/* Threads that woke since the last tick are held too; a new
		 * process is found by the pass every RESCAN_TICKS. */
		if (scan_due(reg))
			scan_processes(reg);
		hold_job(reg, reg->procs, reg->nprocs);
		/* `discnice top` sees a long stop grow, not only its end. */
		publish_hold(reg, now);
		/* ... and an attach's kernel count stays current through it:
		 * published only at measure(), a count last read before the
		 * hold made top's next interval take in what the job did
		 * before it (the held thread's read in flight, or one that
		 * slept on a pipe and ran between two ticks). */
		if (reg->attached) {
			uint64_t r, w;
			attached_io(reg, &r, &w);
			publish_measured(reg, r, w);
		}
		/* Data keeps arriving at a held receiver's sockets, and once
		 * receives are counted as they arrive (tool_net_feedback.c) it
		 * is owed before the job may go and read it. */
		if (net)
			measure_network(reg, now);
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
			uint64_t net_late = net_feedback_pay(reg->net, now);
			if (net_late > late)
				late = net_late;
			segment_unlock(reg->seg, token);
			/* Until all of it is paid, not just until the next piece
			 * is nearly payable. */
			if (late) {
				reg->stop_until_ns = now + (late < MAX_STOP_NS ? late : MAX_STOP_NS);
				return TICK_HOT_NS;
			}
		}
		bool net_held = reg->net_hot;
		continue_job(reg, now);
		/* Look again soon: a job just let go can move a tick's worth of
		 * I/O at disk speed, and if it exits then, nobody holds it. */
		return net_held ? TICK_NET_AFTER_CONTINUE_NS : TICK_AFTER_CONTINUE_NS;
	}
	/* A pass over /proc costs a millisecond or two: every fifth tick.
	 * In between, the known processes are re-read; one born since is
	 * counted from the next pass on (its counters are cumulative). */
	if (scan_due(reg))
		scan_processes(reg);
	struct proc_entry *procs = reg->procs;
	unsigned n = reg->nprocs;
	bool net_escaped = net && measure_network(reg, now);
	uint64_t actual_r = 0, actual_w = 0, pred_r = 0, pred_w = 0;
	int64_t net_w = reg->base_pred_write, kernel_w = reg->base_write;
	if (disk) {
		measure(reg, &actual_r, &kernel_w);
		predicted(reg, &pred_r, &net_w);
	}
	actual_r = actual_r > reg->base_read ? actual_r - reg->base_read : 0;
	pred_r = pred_r > reg->base_pred_read ? pred_r - reg->base_pred_read : 0;
	/* Writes: only the difference of the two counts matters below (what
	 * is owed, what is given back).  Removing pages someone else dirtied
	 * lowers both alike, and may take both under their bases: shifted
	 * together, not clamped apart, or the next writes would go unseen. */
	int64_t kernel_dw = kernel_w - reg->base_write, pred_dw = net_w - reg->base_pred_write;
	int64_t floor_w = kernel_dw < pred_dw ? kernel_dw : pred_dw;
	if (floor_w > 0)
		floor_w = 0;
	actual_w = (uint64_t)(kernel_dw - floor_w);
	pred_w = (uint64_t)(pred_dw - floor_w);

	/* §1: what the hooks did not predict, never twice.  The agent
	 * predicts before the I/O happens, so its count leads; the kernel's
	 * overtakes it only by I/O the agent did not see. */
	uint64_t owe_r = actual_r > pred_r + reg->fed_read ? actual_r - pred_r - reg->fed_read : 0;
	uint64_t owe_w = actual_w > pred_w + reg->fed_write ? actual_w - pred_w - reg->fed_write : 0;
	reg->fed_read += owe_r;
	reg->fed_write += owe_w;
	reg->debt_read += owe_r;
	reg->debt_write += owe_w;

	/* ... and what the agent predicted after we charged it, given back.
	 * The kernel counts a readahead window when it submits the bios; the
	 * model can meet the same window a call later.  The tick in between
	 * then took it for I/O nobody predicted, the agent charged it again,
	 * and the window held it twice: `cat` of a cold file at 7.5MiB/s ran
	 * 5.8 % under its cap, with 14 MiB of its 216 MiB charged by us and by
	 * the agent both (issue #9 item 2).  So once the agent's count and
	 * ours together pass the kernel's, the excess is refunded, up to what
	 * we charged: fed stays max(0, actual - predicted), and the window
	 * holds max(predicted, actual) - each byte once. */
	uint64_t back_r = pred_r + reg->fed_read > actual_r ? pred_r + reg->fed_read - actual_r : 0;
	uint64_t back_w = pred_w + reg->fed_write > actual_w ? pred_w + reg->fed_write - actual_w : 0;
	if (back_r > reg->fed_read)
		back_r = reg->fed_read;
	if (back_w > reg->fed_write)
		back_w = reg->fed_write;
	reg->fed_read -= back_r;
	reg->fed_write -= back_w;
	/* Unpaid debt first; then what was paid and the window still holds,
	 * as a refund. */
	uint64_t unpaid_r = back_r < reg->debt_read ? back_r : reg->debt_read;
	uint64_t unpaid_w = back_w < reg->debt_write ? back_w : reg->debt_write;
	reg->debt_read -= unpaid_r;
	reg->debt_write -= unpaid_w;
	back_r -= unpaid_r;
	back_w -= unpaid_w;

	/* It is owed to the window as a debt, paid in pieces as the window
	 * accepts them (a window of N seconds forgets a lump charged at
	 * once after N seconds; a debt is not forgotten). */
	if (back_r || back_w)
		unpay(reg, now, &back_r, &back_w);
	uint64_t token = segment_lock(reg->seg);
	if (back_r || back_w)
		policy_of(reg->seg)->charge(&reg->seg->window, &reg->seg->caps, now,
					    -(int64_t)back_r, -(int64_t)back_w);
	uint64_t late = pay_debt(reg, now);
	/* The network's debt, into its own window; a hold for either. */
	uint64_t net_late = net ? net_feedback_pay(reg->net, now) : 0;
	/* A network debt holds the threads asleep in socket calls as well
	 * (tool_hold.c waits_on_sockets): a sender blocked in write() keeps
	 * sending without ever running in user space. */
	hold_socket_waits(reg->hold, net_late > STOP_THRESHOLD_NS);
	if (net_late > late)
		late = net_late;
	if (disk)
		update_slack(reg, now);
	segment_unlock(reg->seg, token);

	/* §2: a debt the window cannot take yet is I/O nobody slept for:
	 * stop the job until it can (small debts the next tick pays). */
	if (late > STOP_THRESHOLD_NS)
		stop_job(reg, procs, n, now, late < MAX_STOP_NS ? late : MAX_STOP_NS);
	/* While I/O escapes the agent, look often: a job left running for a
	 * tick can move a tick's worth of disk bandwidth. */
	if (owe_r || owe_w || reg->debt_read || reg->debt_write)
		reg->hot_until_ns = now + reg->seg->window.span_ns;
	if (net_escaped || net_feedback_owes(reg->net)) {
		reg->hot_until_ns = now + reg->seg->net_window.span_ns;
		reg->net_hot_until_ns = reg->hot_until_ns;
	}
	reg->net_hot = now < reg->net_hot_until_ns;
	/* In slack every byte escapes the agent by design, and a tick's worth
	 * of it (20 ms at disk speed) is what the slack floor was sized for
	 * (update_slack): looking 200 times a second would only cost the job
	 * the /proc walks of a many-process job (make). */
	if (now >= reg->hot_until_ns || reg->slack)
		return TICK_CALM_NS;
	if (reg->net_hot)
		return TICK_NET_HOT_NS;
	return reg->attached ? TICK_ATTACH_HOT_NS : TICK_HOT_NS;
}

uint64_t regulator_settle(struct regulator *reg, const volatile sig_atomic_t *interrupted)
{
	if (!reg || (reg->uncapped && !net_feedback_owes(reg->net)))
		return 0;
	uint64_t start = clock_now_ns(), now = start;
	/* The job is gone; what it did in its last moments is still owed. */
	for (int i = 0; i < 100000 && !*interrupted &&
			(reg->debt_read || reg->debt_write || net_feedback_owes(reg->net)); i++) {
		uint64_t token = segment_lock(reg->seg);
		uint64_t late = pay_debt(reg, now);
		uint64_t net_late = net_feedback_pay(reg->net, now);
		if (net_late > late)
			late = net_late;
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

void regulator_forgive(struct regulator *reg)
{
	if (reg)
		disk_uncapped(reg, clock_now_ns());
}

void regulator_end(struct regulator *reg)
{
	if (!reg)
		return;
	continue_job(reg, clock_now_ns());
	hold_free(reg->hold);
	net_feedback_free(reg->net);
	table_free(reg->net_pids, MAX_JOB_PROCS * sizeof *reg->net_pids);
	table_free(reg->procs, MAX_JOB_PROCS * sizeof *reg->procs);
	free(reg);
}

void regulator_stats(const struct regulator *reg, struct regulator_stats *out)
{
	memset(out, 0, sizeof *out);
	if (!reg)
		return;
	out->feedback_read_bytes = reg->fed_read;
	out->feedback_write_bytes = reg->fed_write;
	net_feedback_totals(reg->net, &out->feedback_net_sent_bytes,
			    &out->feedback_net_received_bytes);
	out->stopped_ns = reg->stopped_ns;
	out->stops = reg->stops;
	out->slack_seen = reg->slack_seen;
}
