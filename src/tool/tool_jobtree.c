/*
 * tool_jobtree.c - the process tree of a benice job and its I/O (see
 * tool_jobtree.h).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/machine_activity.h"
#include "common/proc_io.h"
#include "manners/quiet.h"
#include "tool/tool_jobtree.h"

void jobtree_init(struct jobtree *tree, const pid_t *roots, unsigned nroots, bool ours)
{
	memset(tree, 0, sizeof *tree);
	tree->ours = ours;
	if (nroots > JOBTREE_MAX)
		nroots = JOBTREE_MAX;
	memcpy(tree->roots, roots, nroots * sizeof *roots);
	tree->nroots = nroots;
}

static const struct jobtree_proc *find(const struct jobtree_proc *procs, unsigned n, pid_t pid)
{
	for (unsigned i = 0; i < n; i++)
		if (procs[i].pid == pid)
			return &procs[i];
	return NULL;
}

/* Add pid (unless known, us, or the guard) with its state and counts. */
static void add(struct jobtree *tree, struct jobtree_proc *next, unsigned *found, pid_t pid)
{
	struct proc_stat st;
	if (*found >= JOBTREE_MAX || pid <= 0 || pid == getpid() || pid == tree->skip ||
	    find(next, *found, pid) || proc_process_stat_read(pid, &st) < 0)
		return;
	struct jobtree_proc p = { .pid = pid, .ppid = st.ppid, .state = st.state,
				  .cpu_ticks = st.cpu_ticks };
	struct proc_io io;
	if (proc_io_read(pid, &io) == 0) {
		p.chars = io.rchar + io.wchar;
		p.read_bytes = io.read_bytes;
		p.write_bytes = io.write_bytes > io.cancelled_write_bytes
					? io.write_bytes - io.cancelled_write_bytes : 0;
	} else {
		/* Unreadable for a moment (exiting): keep the last reading. */
		const struct jobtree_proc *was = find(tree->procs, tree->n, pid);
		if (was) {
			p.chars = was->chars;
			p.read_bytes = was->read_bytes;
			p.write_bytes = was->write_bytes;
		}
	}
	next[(*found)++] = p;
}

struct children_into {
	struct jobtree *tree;
	struct jobtree_proc *next;
	unsigned *found;
};

static void child_into(void *ctx, pid_t child)
{
	struct children_into *into = ctx;
	add(into->tree, into->next, into->found, child);
}

/* The children of pid (proc_children: /proc/PID/task/TID/children). */
static void add_children(struct jobtree *tree, struct jobtree_proc *next, unsigned *found,
			 pid_t pid)
{
	struct children_into into = { tree, next, found };
	proc_children(pid, child_into, &into);
}

/* What we reaped: our process's counts minus our thread's own. */
static void reaped_io(struct jobtree_io *out)
{
	struct proc_io all, mine;
	memset(out, 0, sizeof *out);
	/* The process first: the thread's reading then includes the bytes
	 * of that read, which the difference leaves out (a few hundred
	 * bytes short per poll at worst, never more). */
	if (proc_io_read(0, &all) < 0 || proc_thread_io_read(getpid(), getpid(), &mine) < 0)
		return;
	if (all.rchar + all.wchar > mine.rchar + mine.wchar)
		out->chars = all.rchar + all.wchar - mine.rchar - mine.wchar;
	if (all.read_bytes > mine.read_bytes)
		out->read_bytes = all.read_bytes - mine.read_bytes;
	uint64_t aw = all.write_bytes > all.cancelled_write_bytes
			      ? all.write_bytes - all.cancelled_write_bytes : 0;
	uint64_t mw = mine.write_bytes > mine.cancelled_write_bytes
			      ? mine.write_bytes - mine.cancelled_write_bytes : 0;
	if (aw > mw)
		out->write_bytes = aw - mw;
}

/* The CPU time of what we reaped, in clock ticks (as /proc/PID/stat):
 * the job's processes that ended as our children - the command, and
 * orphans re-parented to us - with what they had reaped.  It also holds
 * our helpers' (the guard, a --progress cmd: milliseconds). */
static uint64_t reaped_cpu_ticks(void)
{
	struct rusage ru;
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0 || getrusage(RUSAGE_CHILDREN, &ru) != 0)
		return 0;
	uint64_t us = (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec +
		      (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
	return us * (uint64_t)hz / 1000000u;
}

unsigned jobtree_scan(struct jobtree *tree)
{
	static struct jobtree_proc next[JOBTREE_MAX];
	unsigned found = 0;
	/* A command's orphans are re-parented to us (its subreaper): our
	 * children are the tree's top, the guard excepted. */
	if (tree->ours)
		add_children(tree, next, &found, getpid());
	for (unsigned i = 0; i < tree->nroots; i++)
		add(tree, next, &found, tree->roots[i]);
	for (unsigned head = 0; head < found; head++)
		add_children(tree, next, &found, next[head].pid);
	if (!tree->ours) {
		/* Processes gone since the last scan, whose parent (now or
		 * then) is not in the tree: nobody of ours reaped their
		 * counts, so keep their last reading. */
		for (unsigned i = 0; i < tree->n; i++) {
			const struct jobtree_proc *was = &tree->procs[i];
			if (find(next, found, was->pid) || find(next, found, was->ppid))
				continue;
			tree->departed.chars += was->chars;
			tree->departed.read_bytes += was->read_bytes;
			tree->departed.write_bytes += was->write_bytes;
			tree->departed_cpu_ticks += was->cpu_ticks;
		}
	}
	memcpy(tree->procs, next, found * sizeof *next);
	tree->n = found;

	struct jobtree_io sum = tree->departed;
	if (tree->ours) {
		struct jobtree_io reaped;
		reaped_io(&reaped);
		sum.chars += reaped.chars;
		sum.read_bytes += reaped.read_bytes;
		sum.write_bytes += reaped.write_bytes;
	}
	unsigned alive = 0;
	uint64_t cpu = tree->ours ? reaped_cpu_ticks() : tree->departed_cpu_ticks;
	bool running = false;
	for (unsigned i = 0; i < found; i++) {
		cpu += next[i].cpu_ticks;
		running |= next[i].state == 'R' || next[i].state == 'D';
		sum.chars += next[i].chars;
		sum.read_bytes += next[i].read_bytes;
		sum.write_bytes += next[i].write_bytes;
		alive += next[i].state != 'Z';
	}
	/* The sum dips for a moment as the I/O does (a child reaped between
	 * the readings of its parent and its own).  Kept as read, the job's
	 * CPU time would go back, and quiet.h's manners_others_cpus() reads a
	 * span over which it went back as nobody else using a CPU: the quick
	 * polls would stop, and a look back forgive, for one span.  So the
	 * time kept never decreases either (--pid: what left is kept, as for
	 * the I/O). */
	tree->busy = running || cpu > tree->cpu_ticks;
	if (cpu > tree->cpu_ticks)
		tree->cpu_ticks = cpu;
	if (sum.chars > tree->total.chars)
		tree->total.chars = sum.chars;
	if (sum.read_bytes > tree->total.read_bytes)
		tree->total.read_bytes = sum.read_bytes;
	if (sum.write_bytes > tree->total.write_bytes)
		tree->total.write_bytes = sum.write_bytes;
	return alive;
}

bool jobtree_stopped(const struct jobtree *tree)
{
	for (unsigned i = 0; i < tree->n; i++)
		if (tree->procs[i].state == 'T' || tree->procs[i].state == 't')
			return true;
	return false;
}

bool jobtree_machine_sample(const struct jobtree *tree, uint64_t now_ns,
			    struct manners_activity *out)
{
	struct machine_activity a;
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0 || machine_activity_read(&a) < 0)
		return false;
	/* The job's CPU time in ticks, as /proc/stat counts the machine's. */
	*out = manners_activity_of(&a, (int64_t)now_ns,
				   tree->cpu_ticks * (NS_PER_SEC / (uint64_t)hz));
	out->own_disk_bytes = tree->total.read_bytes + tree->total.write_bytes;
	return true;
}
