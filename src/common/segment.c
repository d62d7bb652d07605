/*
 * segment.c - the class segment's life: make it, find it, trust it or not,
 * lock it, leave it.  See segment.h and include/discnice/segment.h.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc_io.h"
#include "common/segment.h"

static int dir_is_private(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077))
		return -EPERM;
	return 0;
}

int segment_dir(char *buf, size_t len, int create)
{
	int saved = errno, rc;
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	struct stat st;

	/* $XDG_RUNTIME_DIR is the per-user runtime dir of the XDG spec; use it
	 * only when it is really ours, else fall back to /dev/shm. */
	if (xdg && *xdg == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
	    st.st_uid == getuid())
		rc = snprintf(buf, len, "%s/discnice", xdg);
	else
		rc = snprintf(buf, len, "/dev/shm/discnice-%u", (unsigned)getuid());
	if (rc < 0 || (size_t)rc >= len) {
		errno = saved;
		return -ENAMETOOLONG;
	}
	if (create) {
		if (mkdir(buf, 0700) == 0) {
			/* 0700 whatever the umask: under umask 0777 it was
			 * 0000, which only root could use. */
			chmod(buf, 0700);
		} else if (errno != EEXIST) {
			rc = -errno;
			errno = saved;
			return rc;
		}
	}
	rc = dir_is_private(buf);
	errno = saved;
	return rc;
}

int segment_path(char *buf, size_t len, const char *name)
{
	char dir[DN_PATH_MAX];
	if (!name || !segment_name_ok(name))
		return -EINVAL;
	int rc = segment_dir(dir, sizeof dir, 1);
	if (rc < 0)
		return rc;
	rc = snprintf(buf, len, "%s/%s", dir, name);
	return (rc < 0 || (size_t)rc >= len) ? -ENAMETOOLONG : 0;
}

int segment_validate(const struct dn_segment *seg)
{
	if (__atomic_load_n(&seg->magic, __ATOMIC_ACQUIRE) != DN_SEGMENT_MAGIC)
		return -EPROTO;
	if (seg->version != DN_SEGMENT_VERSION)
		return -EPROTONOSUPPORT;
	if (seg->size != sizeof(struct dn_segment))
		return -EPROTO;
	if (seg->owner_uid != (uint32_t)getuid())
		return -EPERM;
	/* Each window must cover its span with the buckets it has. */
	const struct dn_window *windows[2] = { &seg->window, &seg->net_window };
	for (unsigned i = 0; i < 2; i++)
		if (windows[i]->span_ns == 0 || windows[i]->bucket_ns == 0 ||
		    windows[i]->bucket_ns > windows[i]->span_ns ||
		    windows[i]->bucket_ns * (DN_WINDOW_BUCKETS - 1) < windows[i]->span_ns)
			return -EPROTO;
	if (seg->predict_mask & ~DN_PREDICT_ALL || seg->cache_backend > DN_CACHE_MINCORE)
		return -EPROTO;
	if (seg->window_policy > DN_WINDOW_POLICY_PAPER)
		return -EPROTO;
	return 0;
}

/* Check the file before mapping a byte of it: O_NOFOLLOW refused links,
 * fstat proves owner, mode and size. */
static int map_checked(int fd, struct dn_segment **out)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077))
		return -EPERM;
	if (st.st_size != (off_t)sizeof(struct dn_segment)) {
		/* Another version's class (a job started before an upgrade)
		 * is not a corrupt one: magic first, then the version. */
		struct { uint64_t magic; uint32_t version; } head;
		bool other = pread(fd, &head, sizeof head, 0) == (ssize_t)sizeof head &&
			     head.magic == DN_SEGMENT_MAGIC && head.version != DN_SEGMENT_VERSION;
		return other ? -EPROTONOSUPPORT : -EPROTO;
	}
	void *p = mmap(NULL, sizeof(struct dn_segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

/* segment_attach_path(), also telling which file it mapped. */
int segment_attach_path_ino(const char *path, struct dn_segment **out, ino_t *ino)
{
	int saved = errno, rc;
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		errno = saved;
		return rc;
	}
	struct dn_segment *seg = NULL;
	struct stat st;
	rc = map_checked(fd, &seg);
	if (rc == 0 && ino)
		*ino = fstat(fd, &st) == 0 ? st.st_ino : 0;
	close(fd);
	if (rc == 0) {
		rc = segment_validate(seg);
		if (rc < 0)
			munmap(seg, sizeof *seg);
		else
			*out = seg;
	}
	errno = saved;
	return rc;
}

int segment_attach_path(const char *path, struct dn_segment **out)
{
	return segment_attach_path_ino(path, out, NULL);
}

/* Does `path` still name the file with inode `ino`? */
static bool path_is(const char *path, ino_t ino)
{
	struct stat st;
	return ino && stat(path, &st) == 0 && st.st_ino == ino;
}

/* Link the filled file fd (unnamed, or named tmp) at path: 0, -EEXIST
 * where a class is there already, or a negative errno. */
static int segment_link(int fd, const char *tmp, const char *path)
{
	if (*tmp)
		return link(tmp, path) == 0 ? 0 : -errno;
	/* linkat(fd, "", AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; the
	 * /proc/self/fd link is open to anyone (open(2), O_TMPFILE). */
	char proc[32];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0 ? 0 : -errno;
}

/*
 * Make class file path in dir whole - every byte of init, magic included -
 * before it has its name, so that no reader (a joining run, the agent,
 * ls, top, set) ever meets a class half made.  Made in place, as before
 * 2026-11-29, an empty file sat at the name between its creation and the
 * magic's publication: `ls --json` listed a starting job's class as
 * corrupt once in CI, and every reader had to wait a while before
 * believing a bad magic.  The file is made unnamed (O_TMPFILE) and
 * linked at path; link(2) fails with EEXIST where another run made the
 * class first, as O_CREAT | O_EXCL did.  Where O_TMPFILE or /proc is
 * missing, a dot file (not a class: class_list()) is filled, linked and
 * unlinked.  Returns 0 with *out mapped, -EEXIST, or a negative errno.
 */
static int segment_create(const char *dir, const char *path, const struct dn_segment *init,
			  struct dn_segment **out)
{
	int rc = 0;
	for (int named = 0; named < 2; named++) {
		char tmp[DN_PATH_MAX + 48] = "";
		int fd;
		if (!named) {
			fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		} else {
			snprintf(tmp, sizeof tmp, "%s/.creating.%ld.%llx", dir, (long)getpid(),
				 (unsigned long long)clock_now_ns());
			fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		}
		if (fd < 0) {
			rc = -errno;
			if (!named && (rc == -EOPNOTSUPP || rc == -EISDIR || rc == -EINVAL))
				continue; /* no O_TMPFILE on this file system */
			return rc;
		}
		/* Allocate the pages now: on a full tmpfs ftruncate succeeds
		 * and the first store through the mapping raises SIGBUS
		 * (shmem_fault); posix_fallocate says ENOSPC instead (issue #8
		 * item 6).  fchmod: 0600 whatever the umask, as map_checked()
		 * and every joiner need. */
		struct dn_segment *seg = NULL;
		int fa = posix_fallocate(fd, 0, sizeof *seg);
		rc = fa ? -fa : fchmod(fd, 0600) != 0 ? -errno : map_checked(fd, &seg);
		if (rc == 0) {
			memcpy(seg, init, sizeof *seg);
			seg->magic = DN_SEGMENT_MAGIC;
			seg->attached_runs = 1;
			rc = segment_link(fd, tmp, path);
			if (rc == 0)
				*out = seg;
			else
				munmap(seg, sizeof *seg);
		}
		close(fd);
		if (*tmp)
			unlink(tmp);
		if (!named && rc == -ENOENT && access("/proc/self/fd", F_OK) != 0)
			continue; /* no /proc to link the unnamed file through */
		return rc;
	}
	return rc;
}

int segment_open_or_create(const char *name, const struct dn_segment *init,
			   struct dn_segment **out, int *created)
{
	char dir[DN_PATH_MAX], path[DN_PATH_MAX];
	int saved = errno;
	int rc = segment_path(path, sizeof path, name);
	if (rc < 0)
		return rc;
	/* The directory segment_path() made sure of: path less its name. */
	memcpy(dir, path, sizeof dir);
	*strrchr(dir, '/') = '\0';

	/* Join the class, or make it; a class removed between the two, or
	 * made by another run between them, sends us round again. */
	for (int attempt = 0; attempt < 50; attempt++) {
		struct dn_segment *seg;
		ino_t ino = 0;
		rc = segment_attach_path_ino(path, &seg, &ino);
		if (rc == -ENOENT) {
			rc = segment_create(dir, path, init, out);
			if (rc == -EEXIST)
				continue;
			if (rc == 0)
				*created = 1;
			errno = saved;
			return rc;
		}
		if (rc < 0) {
			errno = saved;
			return rc; /* whole when named: a bad one is corrupt */
		}
		uint64_t token = segment_lock(seg);
		/* The last process of an orphaned class removes the file
		 * under this lock (segment_remove_abandoned()): if it did so
		 * after we opened it, create the class anew. */
		if (!path_is(path, ino)) {
			segment_unlock(seg, token);
			munmap(seg, sizeof *seg);
			continue;
		}
		seg->attached_runs++;
		segment_unlock(seg, token);
		*out = seg;
		*created = 0;
		errno = saved;
		return 0;
	}
	errno = saved;
	return -EAGAIN;
}

void segment_detach(struct dn_segment *seg, const char *name)
{
	char path[DN_PATH_MAX];
	int saved = errno;
	uint64_t token = segment_lock(seg);
	int last = --seg->attached_runs == 0;
	/* Unlink under the lock, so a joiner either got its count in before
	 * (and we are not last) or finds no file and creates a fresh one. */
	if (last && segment_path(path, sizeof path, name) == 0)
		unlink(path);
	segment_unlock(seg, token);
	munmap(seg, sizeof *seg);
	errno = saved;
}

static int holder_is_dead(uint32_t pid)
{
	return pid && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* getpid() is a system call since glibc 2.25 and the lock is taken on
 * every throttled piece: remember it, and forget it in a fork child. */
static uint32_t lock_pid;
static uint32_t lock_sequence;

void segment_forget_pid(void)
{
	lock_pid = 0;
}

/* A token no other holding of the lock has had or will have while this
 * one can be live: the pid tells the process, the sequence (shared by its
 * threads, 2^32 before it wraps) the holding. */
static uint64_t lock_token(void)
{
	if (!lock_pid)
		lock_pid = (uint32_t)getpid();
	uint32_t sequence = __atomic_add_fetch(&lock_sequence, 1, __ATOMIC_RELAXED);
	return (uint64_t)lock_pid << 32 | sequence;
}

/*
 * Spin briefly (the critical sections take microseconds), then yield, then
 * sleep 100 us at a time, so a waiter behind a stuck holder costs little CPU.
 * The waiter times each holding itself: tokens are unique, so seeing one
 * token for DN_LOCK_BREAK_NS by its own clock means one holder kept the
 * lock that long - stopped, killed, preempted, or its pid reused.  The
 * waiter then takes the lock over, unless a thread of the holder's process
 * is running or runnable (proc_process_busy: preempted on a busy machine,
 * or faulting a page in, still in its critical section, which taking the
 * lock over would interleave with ours): that holder will finish, and is
 * waited for up to DN_LOCK_BREAK_BUSY_NS (beyond which the pid is likely
 * another process's now).  (A time stored beside the word by the holder
 * would be written after its compare-and-swap, so a waiter could pair a new
 * token with the previous holder's time.)  A holder seen dead (kill(pid, 0)
 * = ESRCH) is taken over at once.
 */
uint64_t segment_lock(struct dn_segment *seg)
{
	int saved = errno;
	uint64_t self = lock_token(), seen = 0, seen_since = 0, looked = 0;
	for (unsigned spins = 0;; spins++) {
		uint64_t holder = 0;
		if (__atomic_compare_exchange_n(&seg->lock, &holder, self, 0, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			break;
		if (spins < 64) {
			cpu_relax();
			continue;
		}
		uint64_t now = clock_now_ns();
		bool stale;
		if (holder != seen) {
			seen = holder;
			seen_since = now;
			stale = holder_is_dead((uint32_t)(holder >> 32));
		} else if (now - seen_since >= DN_LOCK_BREAK_BUSY_NS) {
			stale = true;
		} else if (now - seen_since >= DN_LOCK_BREAK_NS && now - looked >= DN_LOCK_BREAK_NS) {
			looked = now;
			stale = !proc_process_busy((pid_t)(holder >> 32));
		} else {
			stale = false;
		}
		if (stale && __atomic_compare_exchange_n(&seg->lock, &holder, self, 0,
							 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
		if (spins < 128) {
			sched_yield();
		} else {
			struct timespec pause = { 0, 100 * 1000 };
			nanosleep(&pause, NULL);
		}
	}
	errno = saved;
	return self;
}

uint64_t segment_trylock(struct dn_segment *seg)
{
	uint64_t free_word = 0, self = lock_token();
	return __atomic_compare_exchange_n(&seg->lock, &free_word, self, 0, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED) ? self : 0;
}

void segment_unlock(struct dn_segment *seg, uint64_t token)
{
	/* Only our own holding: if a waiter took the lock over while we were
	 * stopped, it is someone else's now. */
	__atomic_compare_exchange_n(&seg->lock, &token, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

pid_t segment_lock_holder(const struct dn_segment *seg)
{
	return (pid_t)(__atomic_load_n(&seg->lock, __ATOMIC_RELAXED) >> 32);
}

bool segment_run_alive(const struct dn_run *run)
{
	uint32_t pid = __atomic_load_n(&run->pid, __ATOMIC_ACQUIRE);
	uint64_t start = __atomic_load_n(&run->start_ticks, __ATOMIC_RELAXED);
	if (!pid || holder_is_dead(pid))
		return false;
	int saved = errno;
	struct proc_stat st;
	int rc = proc_stat_read((pid_t)pid, &st);
	errno = saved;
	if (rc == -ENOENT || rc == -ESRCH)
		return false;
	/* A supervisor that exited under a parent that has not reaped it yet
	 * is a zombie (fs/proc/array.c task_state_array: Z, X). */
	return rc < 0 || (st.state != 'Z' && st.state != 'X' &&
			  (!start || !st.start_ticks || st.start_ticks == start));
}

int segment_claim_run(struct dn_segment *seg, uint32_t pid)
{
	/* Which slots hold a dead supervisor, judged outside the lock (each
	 * judgment reads /proc); under it a slot is taken only if it still
	 * holds the pid judged dead, or nothing. */
	uint32_t dead_pid[DN_MAX_RUNS];
	for (unsigned i = 0; i < DN_MAX_RUNS; i++) {
		uint32_t was = __atomic_load_n(&seg->runs[i].pid, __ATOMIC_ACQUIRE);
		dead_pid[i] = was && !segment_run_alive(&seg->runs[i]) ? was : 0;
	}
	int saved = errno;
	struct proc_stat st;
	uint64_t start = proc_stat_read((pid_t)pid, &st) == 0 ? st.start_ticks : 0;
	errno = saved;

	int slot = -ENOSPC;
	uint64_t token = segment_lock(seg);
	for (unsigned i = 0; i < DN_MAX_RUNS; i++) {
		uint32_t holder = seg->runs[i].pid;
		if (holder == 0 || holder == dead_pid[i]) {
			/* A dead supervisor never detached: its count goes
			 * with its slot (segment_remove_abandoned() counts on it). */
			if (holder && seg->attached_runs > 1)
				seg->attached_runs--;
			memset(&seg->runs[i], 0, sizeof seg->runs[i]);
			seg->runs[i].start_ticks = start;
			__atomic_store_n(&seg->runs[i].pid, pid, __ATOMIC_RELEASE);
			slot = (int)i;
			break;
		}
	}
	segment_unlock(seg, token);
	return slot;
}

void segment_release_run(struct dn_segment *seg, int slot)
{
	if (slot >= 0 && (unsigned)slot < DN_MAX_RUNS)
		__atomic_store_n(&seg->runs[slot].pid, 0, __ATOMIC_RELEASE);
}

bool segment_end_exec_run(struct dn_segment *seg, struct dn_run *run, uint32_t pid,
			  const char *path, ino_t ino)
{
	int saved = errno;
	uint64_t token = segment_lock(seg);
	/* Under the lock, so that of two threads leaving at once (one in
	 * exit(), one in _exit()) only one ends the run. */
	bool ours = __atomic_load_n(&run->pid, __ATOMIC_ACQUIRE) == pid;
	if (ours) {
		__atomic_store_n(&run->pid, 0, __ATOMIC_RELEASE);
		if (--seg->attached_runs == 0 && path_is(path, ino))
			unlink(path);
	}
	segment_unlock(seg, token);
	errno = saved;
	return ours;
}

/* No supervisor alive; *dead = how many slots hold a dead one.  exact:
 * a pid another process took counts as dead (segment_run_alive, which
 * reads /proc); else only a pid that is gone does (one kill(pid, 0) per
 * slot, for the exit of every process of a job: a reused pid then keeps
 * the class, which the next `discnice run` removes, exact). */
static bool unsupervised(const struct dn_segment *seg, uint32_t *dead, bool exact,
			 uint32_t seen[DN_MAX_RUNS])
{
	*dead = 0;
	for (unsigned i = 0; i < DN_MAX_RUNS; i++) {
		uint32_t pid = __atomic_load_n(&seg->runs[i].pid, __ATOMIC_ACQUIRE);
		seen[i] = pid;
		if (!pid)
			continue;
		if (exact ? segment_run_alive(&seg->runs[i]) : !holder_is_dead(pid))
			return false;
		++*dead;
	}
	return true;
}

/* Does one line of /proc/PID/maps map the file dev:ino? */
static bool maps_line_is(const char *line, dev_t dev, ino_t ino)
{
	unsigned maj, min;
	unsigned long long inode;
	return sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &inode) == 3 &&
	       inode == (unsigned long long)ino && makedev(maj, min) == dev;
}

static bool pid_maps(const char *pid, dev_t dev, ino_t ino)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%s/maps", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	size_t have = 0;
	bool found = false;
	ssize_t n;
	while (!found && (n = read(fd, buf + have, sizeof buf - 1 - have)) > 0) {
		have += (size_t)n;
		buf[have] = '\0';
		char *line = buf, *nl;
		while (!found && (nl = strchr(line, '\n'))) {
			*nl = '\0';
			found = maps_line_is(line, dev, ino);
			line = nl + 1;
		}
		/* Keep the unfinished line; a line longer than the buffer
		 * (a path of ~4000 bytes) is not ours: drop it. */
		have = line < buf + have ? (size_t)(buf + have - line) : 0;
		if (have == sizeof buf - 1)
			have = 0;
		memmove(buf, line, have);
	}
	close(fd);
	return found;
}

int segment_mapped_elsewhere(const char *path, pid_t self)
{
	int saved = errno;
	struct stat st;
	if (stat(path, &st) != 0) {
		int rc = -errno;
		errno = saved;
		return rc;
	}
	DIR *d = opendir("/proc");
	if (!d) {
		errno = saved;
		return -ENOENT;
	}
	bool found = false;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9' || atol(e->d_name) == (long)self)
			continue;
		found = pid_maps(e->d_name, st.st_dev, st.st_ino);
	}
	closedir(d);
	errno = saved;
	return found;
}

/* No slot claimed or released since `seen` (under the lock, where claims
 * are made: no /proc read there). */
static bool same_runs(const struct dn_segment *seg, const uint32_t seen[DN_MAX_RUNS])
{
	for (unsigned i = 0; i < DN_MAX_RUNS; i++)
		if (__atomic_load_n(&seg->runs[i].pid, __ATOMIC_ACQUIRE) != seen[i])
			return false;
	return true;
}

bool segment_remove_abandoned(struct dn_segment *seg, const char *path, ino_t ino, bool stale)
{
	/* The common case, a live supervisor: one kill(pid, 0). */
	uint32_t dead, seen[DN_MAX_RUNS];
	if (!unsupervised(seg, &dead, stale, seen))
		return false;
	/* A supervisor that exits detaches; one between attaching and
	 * claiming its slot is counted but has no slot yet, and a killed one
	 * leaves its count behind, which only a stale sweep ignores. */
	uint32_t attached = __atomic_load_n(&seg->attached_runs, __ATOMIC_ACQUIRE);
	if (!stale && attached > dead)
		return false;
	/* Scan outside the lock (it takes milliseconds); decide under it,
	 * where a joiner counts itself and then checks that the file it
	 * opened is still there (segment_open_or_create()). */
	if (segment_mapped_elsewhere(path, getpid()) != 0)
		return false;
	bool removed = false;
	int saved = errno;
	uint64_t token = segment_lock(seg);
	/* The path must still name the file we map: a run of the same class
	 * name may have made a new one since this one was unlinked, and with
	 * run --exec nobody maps that one until its job's agent starts. */
	if (seg->attached_runs == attached && same_runs(seg, seen) && path_is(path, ino))
		removed = unlink(path) == 0;
	segment_unlock(seg, token);
	errno = saved;
	return removed;
}
