/*
 * tool_regulators.c - who else regulates a process (tool_regulators.h).
 *
 * Every regulator a user starts has a run slot in one of the user's
 * classes (`discnice ls`), and each slot names what it regulates:
 *   - `discnice run`: its supervisor (the slot's pid) and the job below it;
 *   - `discnice run --exec`: the job itself (no supervisor: the slot's pid
 *     is the job's, and its environment names the class);
 *   - `discnice attach`: itself, and the processes it was given (the
 *     first in attached_pid), with everything below them;
 *   - `discnice benice`: itself, its command below it or its --pid
 *     processes (the first in attached_pid).
 * Two of them on one process undo each other.  Two benice keep a job
 * stopped for good: each SIGSTOPs it while waiting for its turn, and the
 * other sees a job stopped by someone else, which it neither judges nor
 * continues (tool_suspend.c).  An attach on a run's job charges its I/O a
 * second time, from outside, so the job runs well under its cap, and its
 * holds stop processes the other side holds and continues too.  A
 * process above another regulator's tree would take that tree, and
 * perhaps that regulator itself, into its own.
 *
 * Only the first PID of an attach or benice --pid is in its slot: the
 * others are read from its command line (/proc/PID/cmdline, parsed as it
 * parsed it), those that were running when it started.  Two started in
 * the same instant take turns (regulators_lock()): the second sees the
 * first's slot.
 */
#include "tool/tool_regulators.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "common/proc_io.h"
#include "common/segment.h"
#include "tool/tool_benice.h"
#include "tool/tool_class.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"

/* Is pid this program, discnice?  A run slot's pid may be stale (its
 * supervisor killed, the number reused): only a discnice counts.  By name
 * (/proc/PID/comm), not by executable: a discnice rebuilt or upgraded
 * while the other ran has another /proc/PID/exe ("... (deleted)"). */
static bool is_discnice(pid_t pid)
{
	char mine[64], theirs[64];
	proc_comm(0, mine, sizeof mine);
	proc_comm(pid, theirs, sizeof theirs);
	return strcmp(mine, "?") != 0 && strcmp(mine, theirs) == 0;
}

/* Does pid's environment name class `name` (a `run --exec` job, which
 * keeps its slot under its own pid)?  A slot whose pid was reused by
 * another process does not. */
static bool names_class(pid_t pid, const char *name)
{
	char path[64], env[32768];
	snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	size_t n = fread(env, 1, sizeof env - 1, f);
	fclose(f);
	env[n] = '\0';
	for (size_t i = 0; i < n; i += strlen(env + i) + 1) {
		if (strncmp(env + i, "DISCNICE_SEGMENT=", 17) != 0)
			continue;
		const char *base = strrchr(env + i, '/');
		return base && strcmp(base + 1, name) == 0;
	}
	return false;
}

enum regulator_kind { KIND_RUN, KIND_EXEC, KIND_ATTACH, KIND_BENICE };

/* A process's whole command line (NUL-separated, as the kernel keeps
 * it; up to ARG_MAX, so read until the end), NUL-terminated; NULL when it
 * cannot be read.  free() it. */
static char *cmdline_read(pid_t pid, size_t *len)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	size_t size = 4096, n = 0;
	char *buf = malloc(size);
	while (buf) {
		n += fread(buf + n, 1, size - 1 - n, f);
		if (n < size - 1)
			break; /* the end (or an error: what was read) */
		char *bigger = realloc(buf, size * 2);
		if (!bigger) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = bigger;
		size *= 2;
	}
	bool failed = ferror(f);
	fclose(f);
	if (!buf || failed) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

/* The PIDs an attach or a benice --pid (discnice process sup) was given,
 * from its command line: argv[1] is the subcommand (discnice.c), the rest
 * is parsed as that command parsed it.  Only processes that were running
 * when sup started count: a PID since reused names another process.
 * Returns how many were put in *out (malloc'd; free() it). */
static unsigned given_pids(pid_t sup, enum regulator_kind kind, pid_t **out)
{
	*out = NULL;
	size_t n;
	char *line = cmdline_read(sup, &n);
	if (!line)
		return 0;
	size_t words = 0;
	for (size_t i = 0; i < n; i += strlen(line + i) + 1)
		words++;
	char **argv = calloc(words + 1, sizeof *argv);
	pid_t *pids = calloc(words ? words : 1, sizeof *pids);
	unsigned count = 0;
	struct proc_stat regulator, given;
	if (argv && pids && words >= 2 && words <= INT_MAX && proc_stat_read(sup, &regulator) == 0) {
		int argc = 0;
		for (size_t i = 0; i < n; i += strlen(line + i) + 1)
			argv[argc++] = line + i;
		unsigned found = kind == KIND_BENICE
					 ? benice_argv_pids(argc - 1, argv + 1, pids, (unsigned)words)
					 : attach_argv_pids(argc - 1, argv + 1, pids, (unsigned)words);
		for (unsigned i = 0; i < found; i++)
			if (proc_stat_read(pids[i], &given) == 0 &&
			    given.start_ticks <= regulator.start_ticks)
				pids[count++] = pids[i];
	}
	free(argv);
	free(line);
	if (count)
		*out = pids;
	else
		free(pids);
	return count;
}

static const char *const kind_names[] = {
	[KIND_RUN] = "run", [KIND_EXEC] = "run --exec", [KIND_ATTACH] = "attach",
	[KIND_BENICE] = "benice",
};

struct proc_tree {
	const struct proc_node *nodes;
	unsigned n;
};

/* One --pid or attach target against one slot: one line and false if the
 * slot's regulator has it, or has something below it. */
static bool pid_free_of(pid_t pid, const char *comm, const struct class_view *view,
			const struct class_run_view *run, const struct proc_tree *t,
			enum regulator_asker asker)
{
	pid_t sup = (pid_t)run->pid, job = (pid_t)run->attached_pid;
	if (!run->alive || sup <= 0 || sup == getpid())
		return true;
	enum regulator_kind kind;
	if (is_discnice(sup))
		kind = run->kind == RUN_KIND_BENICE ? KIND_BENICE
		       : run->kind == RUN_KIND_ATTACH ? KIND_ATTACH : KIND_RUN;
	else if (run->kind == RUN_KIND_AGENT && names_class(sup, view->name))
		kind = KIND_EXEC;
	else
		return true; /* a stale slot */

	/* What the regulator has: its tree's tops. */
	pid_t tops[2] = { 0, 0 };
	switch (kind) {
	case KIND_BENICE: tops[0] = sup; tops[1] = job; break;
	case KIND_ATTACH: tops[0] = job; break;
	case KIND_EXEC:   tops[0] = sup; break;
	case KIND_RUN:    tops[0] = sup; break; /* its job is below it */
	}
	bool theirs = false, above = false;
	for (int i = 0; i < 2; i++)
		if (tops[i] > 0) {
			theirs |= proc_node_below(t->nodes, t->n, pid, tops[i]);
			above |= proc_node_below(t->nodes, t->n, tops[i], pid);
		}
	/* The slot holds the first PID; an attach or benice --pid of
	 * several has the others too ('benice --pid A C', then '--pid C'). */
	if (kind == KIND_ATTACH || kind == KIND_BENICE) {
		pid_t *given;
		unsigned ngiven = given_pids(sup, kind, &given);
		for (unsigned i = 0; i < ngiven; i++) {
			theirs |= proc_node_below(t->nodes, t->n, pid, given[i]);
			above |= proc_node_below(t->nodes, t->n, given[i], pid);
		}
		free(given);
	}

	if (asker == ASKER_BENICE) {
		/* benice --pid on a run's job: the supervisor follows its
		 * job's stops (tool_run.c: follow_job_stop(), so that a shell
		 * sees the job stopped at Ctrl-Z), so every suspension would
		 * stop and continue the run too, and a run that holds its job
		 * with SIGSTOP would take benice's stops for a user's, as
		 * benice its.  Below the job, or under --exec, no one follows
		 * the stops: the agent caps the I/O and benice judges the
		 * progress. */
		if (kind == KIND_RUN) {
			const struct proc_node *node = proc_node_find(t->nodes, t->n, pid);
			if (node && node->ppid == sup) {
				errorf("process %d (%s) is the job of discnice run %d (class %s), which "
				       "follows its job's stops: use 'discnice run --policy manners' "
				       "instead", (int)pid, comm, (int)sup, view->name);
				return false;
			}
			return true;
		}
		if (kind == KIND_EXEC)
			return true;
		if (kind == KIND_BENICE && (theirs || above)) {
			errorf("process %d (%s) %s another discnice benice's job (benice %d, class "
			       "%s): two benice on one job keep it stopped", (int)pid, comm,
			       theirs ? "is in" : "has below it", (int)sup, view->name);
			return false;
		}
	}
	if (kind == KIND_RUN && pid == sup)
		return true; /* attach refuses a discnice by itself, with its own line */
	if (theirs) {
		if (kind == KIND_BENICE)
			errorf("process %d (%s) is regulated by discnice benice %d (class %s), which "
			       "suspends it by its progress: stop that one first", (int)pid, comm,
			       (int)sup, view->name);
		else
			errorf("process %d (%s) is already regulated by discnice %s %d (class %s): "
			       "change its caps with 'discnice set %s'", (int)pid, comm,
			       kind_names[kind], (int)sup, view->name, view->name);
		return false;
	}
	if (above) {
		errorf("process %d (%s) has below it processes that discnice %s %d regulates "
		       "(class %s): %s would hold them a second time", (int)pid, comm,
		       kind_names[kind], (int)sup, view->name,
		       asker == ASKER_ATTACH ? "attach" : "benice");
		return false;
	}
	return true;
}

bool pids_free_of_regulators(const pid_t *pids, unsigned npids, enum regulator_asker asker)
{
	struct class_view *views = NULL;
	int nviews = class_list(&views);
	if (nviews <= 0) {
		free(views);
		return true; /* no classes (or none readable): nobody else regulates */
	}
	struct proc_node *nodes = NULL;
	int nnodes = proc_nodes(&nodes);
	struct proc_tree tree = { nodes, nnodes > 0 ? (unsigned)nnodes : 0 };
	bool free_of_them = true;
	for (unsigned i = 0; i < npids; i++) {
		char comm[32];
		proc_comm(pids[i], comm, sizeof comm);
		bool ok = true;
		for (int v = 0; v < nviews && ok; v++)
			for (unsigned r = 0; r < views[v].n_runs && ok; r++)
				ok = pid_free_of(pids[i], comm, &views[v], &views[v].runs[r], &tree,
						 asker);
		free_of_them &= ok;
	}
	free(nodes);
	free(views);
	return free_of_them;
}

int regulators_lock(void)
{
	char dir[DN_PATH_MAX];
	if (segment_dir(dir, sizeof dir, 1) < 0)
		return -1;
	/* The directory itself: a lock file would stay behind in it (and
	 * removing one while another waits on it is no lock). */
	int saved = errno;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	/* Held for milliseconds; one holder stopped in that instant (Ctrl-Z)
	 * or hung must not hang every later attach without a word: 5 s, then
	 * on without it, said. */
	for (int tries = 0; fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0; tries++) {
		if ((errno != EWOULDBLOCK && errno != EINTR) || tries == 500) {
			if (tries == 500)
				warnf("another discnice attach or benice --pid has held the check of "
				      "who regulates what for 5 s (stopped?): going on without it");
			close(fd);
			fd = -1;
			break;
		}
		struct timespec pause = { 0, 10 * 1000 * 1000 };
		nanosleep(&pause, NULL);
	}
	errno = saved;
	return fd;
}

void regulators_unlock(int fd)
{
	if (fd >= 0)
		close(fd); /* the lock goes with the last descriptor */
}
