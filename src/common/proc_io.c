/*
 * proc_io.c - parse /proc/PID/io (see proc_io.h).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/proc_io.h"

ssize_t proc_read_small(const char *path, char *buf, size_t size)
{
	int saved = errno;
	ssize_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		n = -errno;
	} else {
		/* seq_file hands out whole records per read: read on until the
		 * end or a full buffer (/proc/diskstats spans several reads). */
		while ((size_t)n < size - 1) {
			ssize_t got = read(fd, buf + n, size - 1 - (size_t)n);
			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0) {
				n = n ? n : -errno;
				break;
			}
			if (got == 0)
				break;
			n += got;
		}
		close(fd);
	}
	buf[n > 0 ? n : 0] = '\0';
	errno = saved;
	return n;
}

static int io_parse(const char *path, struct proc_io *out)
{
	char buf[512];
	ssize_t n = proc_read_small(path, buf, sizeof buf);
	if (n < 0)
		return (int)n;
	int saved = errno;
	memset(out, 0, sizeof *out);
	static const struct { const char *key; size_t off; } fields[] = {
		{ "rchar", offsetof(struct proc_io, rchar) },
		{ "wchar", offsetof(struct proc_io, wchar) },
		{ "syscr", offsetof(struct proc_io, syscr) },
		{ "syscw", offsetof(struct proc_io, syscw) },
		{ "read_bytes", offsetof(struct proc_io, read_bytes) },
		{ "write_bytes", offsetof(struct proc_io, write_bytes) },
		{ "cancelled_write_bytes", offsetof(struct proc_io, cancelled_write_bytes) },
	};
	for (char *line = buf; line && *line;) {
		char *next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *colon = strchr(line, ':');
		if (colon) {
			*colon = '\0';
			for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
				if (strcmp(line, fields[i].key) == 0)
					*(uint64_t *)((char *)out + fields[i].off) =
						strtoull(colon + 1, NULL, 10);
		}
		line = next;
	}
	errno = saved;
	return 0;
}

char *proc_comm(pid_t pid, char *buf, size_t size)
{
	char path[40];
	if (pid)
		snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
	else
		snprintf(path, sizeof path, "/proc/self/comm");
	ssize_t n = proc_read_small(path, buf, size);
	if (n <= 0)
		snprintf(buf, size, "?");
	else
		buf[strcspn(buf, "\n")] = '\0';
	return buf;
}

int proc_io_read(pid_t pid, struct proc_io *out)
{
	char path[64];
	if (pid)
		snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
	else
		snprintf(path, sizeof path, "/proc/self/io");
	return io_parse(path, out);
}

int proc_thread_io_read(pid_t pid, pid_t tid, struct proc_io *out)
{
	char path[96];
	snprintf(path, sizeof path, "/proc/%d/task/%d/io", (int)pid, (int)tid);
	return io_parse(path, out);
}

static int stat_parse(const char *path, struct proc_stat *out)
{
	char buf[512];
	ssize_t len = proc_read_small(path, buf, sizeof buf);
	if (len <= 0)
		return len < 0 ? (int)len : -EIO;
	/* "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime cutime cstime priority nice num_threads
	 * itrealvalue starttime ...": comm may hold spaces and ')'.  Fields 4
	 * to 22 after the state. */
	char *paren = strrchr(buf, ')');
	if (!paren || paren[1] != ' ' || !paren[2] || paren[3] != ' ')
		return -EPROTO;
	long long field[19];
	char *p = paren + 3;
	for (unsigned i = 0; i < 19; i++) {
		char *end;
		field[i] = strtoll(p, &end, 10);
		if (end == p)
			return -EPROTO;
		p = end;
	}
	out->state = paren[2];
	out->ppid = (pid_t)field[0];
	out->cpu_ticks = 0;
	for (unsigned i = 10; i < 14; i++) /* utime stime cutime cstime */
		out->cpu_ticks += field[i] > 0 ? (uint64_t)field[i] : 0;
	out->start_ticks = field[18] > 0 ? (uint64_t)field[18] : 0;
	return 0;
}

int proc_stat_read(pid_t pid, struct proc_stat *out)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	return stat_parse(path, out);
}

int proc_thread_stat_read(pid_t pid, pid_t tid, struct proc_stat *out)
{
	char path[80];
	snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	return stat_parse(path, out);
}

bool proc_any_thread(pid_t pid, bool (*fn)(void *ctx, pid_t pid, pid_t tid), void *ctx)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	int saved = errno;
	int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0) {
		errno = saved;
		return false;
	}
	bool found = false;
	char buf[2048] __attribute__((aligned(8)));
	long n;
	while (!found && (n = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0)
		for (long at = 0; !found && at < n;) {
			const struct dirent64 *e = (const struct dirent64 *)(buf + at);
			at += e->d_reclen;
			if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
				found = fn(ctx, pid, (pid_t)atoi(e->d_name));
		}
	close(dir);
	errno = saved;
	return found;
}

/* ctx: the caller's own thread, running to look. */
static bool thread_busy(void *ctx, pid_t pid, pid_t tid)
{
	struct proc_stat st;
	return tid != *(pid_t *)ctx && proc_thread_stat_read(pid, tid, &st) == 0 &&
	       (st.state == 'R' || st.state == 'D');
}

bool proc_process_busy(pid_t pid)
{
	pid_t self = gettid();
	return proc_any_thread(pid, thread_busy, &self);
}

/* A thread alive (neither Z nor X): its state into *ctx. */
static bool live_thread_state(void *ctx, pid_t pid, pid_t tid)
{
	struct proc_stat t;
	if (tid == pid || proc_thread_stat_read(pid, tid, &t) != 0 || t.state == 'Z' ||
	    t.state == 'X')
		return false;
	*(char *)ctx = t.state;
	return true;
}

int proc_process_stat_read(pid_t pid, struct proc_stat *out)
{
	int rc = proc_stat_read(pid, out);
	if (rc == 0 && out->state == 'Z')
		proc_any_thread(pid, live_thread_state, &out->state);
	return rc;
}

int proc_tracer_pid(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	ssize_t n = proc_read_small(path, buf, sizeof buf);
	if (n <= 0)
		return n < 0 ? (int)n : -EIO;
	const char *line = strstr(buf, "\nTracerPid:");
	return line ? atoi(line + 11) : -EPROTO;
}

int proc_thread_signals(pid_t pid, pid_t tid, struct proc_signals *out)
{
	char path[80], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)tid);
	ssize_t n = proc_read_small(path, buf, sizeof buf);
	if (n <= 0)
		return n < 0 ? (int)n : -EIO;
	int saved = errno;
	static const struct { const char *key; size_t off; } fields[] = {
		{ "SigPnd:", offsetof(struct proc_signals, pending) },
		{ "ShdPnd:", offsetof(struct proc_signals, shared_pending) },
		{ "SigBlk:", offsetof(struct proc_signals, blocked) },
		{ "SigIgn:", offsetof(struct proc_signals, ignored) },
		{ "SigCgt:", offsetof(struct proc_signals, caught) },
	};
	memset(out, 0, sizeof *out);
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		const char *at = strstr(buf, fields[i].key);
		if (at)
			*(uint64_t *)((char *)out + fields[i].off) =
				strtoull(at + strlen(fields[i].key), NULL, 16);
	}
	errno = saved;
	return 0;
}

unsigned proc_thread_count(pid_t pid)
{
	int saved = errno;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	unsigned threads = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		threads += e->d_name[0] != '.';
	if (d)
		closedir(d);
	errno = saved;
	return threads;
}

void proc_each(void (*fn)(void *ctx, pid_t pid), void *ctx)
{
	int saved = errno;
	DIR *d = opendir("/proc");
	if (!d) {
		errno = saved;
		return;
	}
	struct dirent *e;
	while ((e = readdir(d)))
		if (isdigit((unsigned char)e->d_name[0]))
			fn(ctx, (pid_t)atoi(e->d_name));
	closedir(d);
	errno = saved;
}

struct orphan_pass {
	pid_t pgrp, sid;
	bool anchored; /* a member's parent is in another group of the session */
};

static void orphan_one(void *ctx, pid_t pid)
{
	struct orphan_pass *p = ctx;
	struct proc_stat st;
	if (p->anchored || getpgid(pid) != p->pgrp || proc_stat_read(pid, &st) < 0)
		return;
	pid_t parent_pgrp = getpgid(st.ppid);
	if (parent_pgrp >= 0 && parent_pgrp != p->pgrp && getsid(st.ppid) == p->sid)
		p->anchored = true;
}

bool proc_pgrp_orphaned(pid_t pid)
{
	int saved = errno;
	struct orphan_pass p = { .pgrp = getpgid(pid), .sid = getsid(pid) };
	errno = saved;
	if (p.pgrp < 0 || p.sid < 0)
		return false;
	proc_each(orphan_one, &p);
	errno = saved;
	return !p.anchored;
}

struct node_pass {
	struct proc_node *all;
	unsigned n, max;
	int err;
};

static void node_one(void *ctx, pid_t pid)
{
	struct node_pass *p = ctx;
	struct proc_stat st;
	struct proc_io io;
	if (p->err)
		return;
	if (p->n == p->max) {
		unsigned max = p->max ? 2 * p->max : 1024;
		struct proc_node *all = realloc(p->all, max * sizeof *all);
		if (!all) {
			p->err = -ENOMEM;
			return;
		}
		p->all = all;
		p->max = max;
	}
	if (proc_stat_read(pid, &st) < 0 || proc_io_read(pid, &io) < 0)
		return; /* gone, or not ours to read */
	p->all[p->n++] = (struct proc_node){ pid, st.ppid, io.read_bytes, io.write_bytes };
}

static int node_by_pid(const void *a, const void *b)
{
	pid_t x = ((const struct proc_node *)a)->pid, y = ((const struct proc_node *)b)->pid;
	return (x > y) - (x < y);
}

int proc_nodes(struct proc_node **out)
{
	struct node_pass pass = { 0 };
	proc_each(node_one, &pass);
	if (pass.err) {
		free(pass.all);
		*out = NULL;
		return pass.err;
	}
	qsort(pass.all, pass.n, sizeof *pass.all, node_by_pid);
	*out = pass.all;
	return (int)pass.n;
}

const struct proc_node *proc_node_find(const struct proc_node *nodes, unsigned n, pid_t pid)
{
	struct proc_node key = { .pid = pid };
	return n ? bsearch(&key, nodes, n, sizeof *nodes, node_by_pid) : NULL;
}

bool proc_node_below(const struct proc_node *nodes, unsigned n, pid_t pid, pid_t top)
{
	for (int depth = 0; depth < 64 && pid > 1; depth++) {
		if (pid == top)
			return true;
		const struct proc_node *node = proc_node_find(nodes, n, pid);
		if (!node)
			return false;
		pid = node->ppid;
	}
	return false;
}

bool proc_children(pid_t pid, void (*child)(void *ctx, pid_t c), void *ctx)
{
	char path[96], buf[4096];
	bool whole = true;
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return true; /* gone: no children to list */
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, atoi(e->d_name));
		ssize_t n = proc_read_small(path, buf, sizeof buf);
		if (n <= 0)
			continue;
		/* A full buffer may have cut the list (500-odd children). */
		if ((size_t)n >= sizeof buf - 1)
			whole = false;
		for (char *p = buf, *end; *p; p = end) {
			long c = strtol(p, &end, 10);
			if (end == p)
				break;
			child(ctx, (pid_t)c);
		}
	}
	closedir(d);
	return whole;
}
