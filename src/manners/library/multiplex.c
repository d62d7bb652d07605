/*
 * multiplex.c - time-multiplex isolation across threads and processes
 * (MS Manners §4.5, §7.1): the shared table, its lock, the waiting.  The
 * design and the layout are in multiplex.h; the decisions (who runs next,
 * decay usage, priority, the hung threshold) are timeshare.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "manners/library/library.h"
#include "manners/library/multiplex.h"

_Static_assert(sizeof(pthread_mutex_t) <= MANNERS_SHARE_LOCK_BYTES, "the lock must fit");

/* A waiter looks at the table at least this often, so that a thread or
 * process that died without leaving is reclaimed (§7.1's hung threshold
 * covers one that lives on without testpoints). */
#define MULTIPLEX_POLL_NS (INT64_C(500000000))

static pthread_mutex_t *share_lock_of(struct manners_share *share)
{
	return (pthread_mutex_t *)(void *)share->lock;
}

static uint32_t thread_id(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

static void share_initialise(struct manners_share *share)
{
	memset(share, 0, sizeof *share);
	share->version = MANNERS_SHARE_VERSION;
	share->size = sizeof *share;
	share->owner_uid = (uint32_t)getuid();
	share->running = -1;
	pthread_mutexattr_t attr;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(share_lock_of(share), &attr);
	pthread_mutexattr_destroy(&attr);
	for (uint32_t i = 0; i < MANNERS_SHARE_THREADS; i++)
		share->threads[i].state = MANNERS_SHARE_FREE;
	/* Magic last: a reader that sees it sees the rest. */
	__atomic_store_n(&share->magic, MANNERS_SHARE_MAGIC, __ATOMIC_RELEASE);
}

static int share_valid(const struct manners_share *share)
{
	return __atomic_load_n(&share->magic, __ATOMIC_ACQUIRE) == MANNERS_SHARE_MAGIC &&
	       share->version == MANNERS_SHARE_VERSION && share->size == sizeof *share &&
	       share->owner_uid == (uint32_t)getuid() && share->running >= -1 &&
	       share->running < (int32_t)MANNERS_SHARE_THREADS;
}

static int open_local(struct multiplex *mux)
{
	void *map = mmap(NULL, sizeof(struct manners_share), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
		return -ENOMEM;
	share_initialise(map);
	mux->share = map;
	mux->shared = 0;
	mux->pid = (uint32_t)getpid();
	return 0;
}

const char *multiplex_default_path(char *buf, size_t size)
{
	snprintf(buf, size, "/dev/shm/discnice-manners-%u", (unsigned)getuid());
	return buf;
}

/* The per-user file, made or checked under flock so that two processes
 * starting together initialise it once. */
int multiplex_open_shared(struct multiplex *mux, const char *path, const char **why)
{
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	struct stat st;
	if (fd < 0 && errno == EACCES && lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
	    st.st_uid == getuid() && (st.st_mode & 077) == 0 && chmod(path, 0600) == 0)
		/* Ours and private, but made under a umask that took its
		 * owner's write bit (0377: 0400): every process but its
		 * creator was refused, and took no turns. */
		fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		*why = "cannot open it";
		return -errno;
	}
	int rc = 0;
	void *map = MAP_FAILED;
	if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) {
		rc = -errno;
		*why = "cannot lock it";
		goto out;
	}
	/* Another user's file, or one others may write, is not ours to trust. */
	if (!S_ISREG(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0) {
		rc = -EPERM;
		*why = "it is not a private file of this user";
		goto out;
	}
	/* 0600 whatever the umask of the process that made it. */
	if ((st.st_mode & 0777) != 0600)
		(void)fchmod(fd, 0600);
	if (st.st_size != 0 && st.st_size != (off_t)sizeof(struct manners_share)) {
		rc = -EPROTO;
		*why = "it has another size (another version of the library?)";
		goto out;
	}
	if (st.st_size == 0 && ftruncate(fd, sizeof(struct manners_share)) != 0) {
		rc = -errno;
		*why = "cannot size it";
		goto out;
	}
	map = mmap(NULL, sizeof(struct manners_share), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		*why = "cannot map it";
		goto out;
	}
	struct manners_share *share = map;
	uint64_t magic = __atomic_load_n(&share->magic, __ATOMIC_ACQUIRE);
	if (magic == 0) {
		share_initialise(share); /* new, or its creator died before the magic */
	} else if (!share_valid(share)) {
		rc = -EPROTO;
		*why = "its header is not this version's";
		goto out;
	}
	mux->share = share;
	mux->shared = 1;
	mux->pid = (uint32_t)getpid();
	map = MAP_FAILED;
out:
	if (map != MAP_FAILED)
		munmap(map, sizeof(struct manners_share));
	/* Unlocked explicitly: a flock belongs to the open file, which the
	 * mapping keeps open after close(). */
	flock(fd, LOCK_UN);
	close(fd); /* the mapping stays; no fd is left for exec'd children */
	return rc;
}

int multiplex_open(struct multiplex *mux, const char *path)
{
	char fallback[64];
	if (path == NULL || path[0] == '\0')
		path = multiplex_default_path(fallback, sizeof fallback);
	if (strcmp(path, "none") == 0)
		return open_local(mux);
	const char *why = "";
	int rc = multiplex_open_shared(mux, path, &why);
	if (rc == 0)
		return 0;
	library_warn("cannot share turns with other processes through %s: %s (%s); "
		     "taking turns among this process's threads only", path, why, strerror(-rc));
	return open_local(mux);
}

int multiplex_reopen_after_fork(struct multiplex *mux, const char *path)
{
	if (mux->share == NULL)
		return 0;
	if (mux->shared) {
		mux->pid = (uint32_t)getpid();
		return 0;
	}
	munmap(mux->share, sizeof(struct manners_share));
	mux->share = NULL;
	(void)path;
	return open_local(mux);
}

/* Takes the table's lock; a holder that died left it to us (EOWNERDEAD):
 * the table is still usable, as every change under it is a few stores. */
static void share_lock(struct manners_share *share)
{
	int rc = pthread_mutex_lock(share_lock_of(share));
	if (rc == EOWNERDEAD)
		pthread_mutex_consistent(share_lock_of(share));
}

static void share_unlock(struct manners_share *share)
{
	pthread_mutex_unlock(share_lock_of(share));
}

/* struct manners_timeshare over the table, for timeshare.c's functions. */
static void view_load(struct manners_share *share, struct manners_timeshare *view,
		      int64_t hung_ns, int64_t half_life_ns)
{
	view->threads = share->threads;
	view->capacity = MANNERS_SHARE_THREADS;
	/* Checked at every use, not only at open: any process of the user can
	 * write the file, and a bad index must not become a bad access. */
	int32_t running = share->running;
	view->running = running >= -1 && running < (int32_t)MANNERS_SHARE_THREADS ? running : -1;
	view->half_life_ns = half_life_ns;
	view->hung_ns = hung_ns;
	view->decayed_ns = share->decayed_ns;
	view->decay_started = share->decay_started;
}

static void view_store(struct manners_share *share, const struct manners_timeshare *view)
{
	share->running = view->running;
	share->decayed_ns = view->decayed_ns;
	share->decay_started = view->decay_started;
}

/* Everyone waiting looks again. */
static void wake_all(struct manners_share *share)
{
	__atomic_add_fetch(&share->wake_sequence, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &share->wake_sequence, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int slot_owned(const struct manners_share *share, int slot, uint32_t pid, uint32_t tid)
{
	return slot >= 0 && (uint32_t)slot < MANNERS_SHARE_THREADS &&
	       share->owners[slot].pid == pid && share->owners[slot].tid == tid &&
	       share->threads[slot].state != MANNERS_SHARE_FREE;
}

/* Slots whose thread or process is gone are freed; 1 when any was. */
static int reclaim_dead(struct manners_share *share, struct manners_timeshare *view)
{
	int freed = 0;
	for (uint32_t i = 0; i < MANNERS_SHARE_THREADS; i++) {
		struct manners_share_owner *o = &share->owners[i];
		if (share->threads[i].state == MANNERS_SHARE_FREE)
			continue;
		/* In use with no owner a thread can have (pid 0, a number no
		 * pid can be: tgkill says EINVAL, not ESRCH): a slot no one
		 * will ever free, and enough of them kept every testpoint at
		 * -ENOSPC until the file was removed.  Freed as the dead. */
		bool dead = o->pid == 0 || o->tid == 0 || o->pid > INT32_MAX || o->tid > INT32_MAX ||
			    (syscall(SYS_tgkill, (pid_t)o->pid, (pid_t)o->tid, 0) != 0 &&
			     (errno == ESRCH || errno == EINVAL));
		if (dead) {
			manners_timeshare_remove(view, (int)i);
			o->pid = 0;
			o->tid = 0;
			freed = 1;
		}
	}
	return freed;
}

int multiplex_join(struct multiplex *mux, int priority)
{
	struct manners_share *share = mux->share;
	struct manners_timeshare view;
	int saved = errno;
	share_lock(share);
	view_load(share, &view, MANNERS_SHARE_THREADS, 1);
	int slot = manners_timeshare_add(&view, priority);
	if (slot == -ENOSPC && reclaim_dead(share, &view))
		slot = manners_timeshare_add(&view, priority);
	if (slot >= 0) {
		share->owners[slot].pid = mux->pid;
		share->owners[slot].tid = thread_id();
	}
	view_store(share, &view);
	share_unlock(share);
	errno = saved;
	return slot;
}

void multiplex_leave(struct multiplex *mux, int slot)
{
	struct manners_share *share = mux->share;
	struct manners_timeshare view;
	share_lock(share);
	if (slot_owned(share, slot, mux->pid, thread_id())) {
		view_load(share, &view, 1, 1);
		manners_timeshare_remove(&view, slot);
		view_store(share, &view);
		share->owners[slot].pid = 0;
		share->owners[slot].tid = 0;
		wake_all(share);
	}
	share_unlock(share);
}

void multiplex_leave_process(struct multiplex *mux)
{
	struct manners_share *share = mux->share;
	struct manners_timeshare view;
	if (share == NULL)
		return;
	share_lock(share);
	view_load(share, &view, 1, 1);
	for (uint32_t i = 0; i < MANNERS_SHARE_THREADS; i++) {
		if (share->owners[i].pid != mux->pid || share->threads[i].state == MANNERS_SHARE_FREE)
			continue;
		manners_timeshare_remove(&view, (int)i);
		share->owners[i].pid = 0;
		share->owners[i].tid = 0;
	}
	view_store(share, &view);
	wake_all(share);
	share_unlock(share);
}

int multiplex_set_priority(struct multiplex *mux, int slot, int priority)
{
	struct manners_share *share = mux->share;
	struct manners_timeshare view;
	int rc = -EINVAL;
	share_lock(share);
	if (slot_owned(share, slot, mux->pid, thread_id())) {
		view_load(share, &view, 1, 1);
		rc = manners_timeshare_set_priority(&view, slot, priority);
		wake_all(share);
	}
	share_unlock(share);
	return rc;
}

/* The thread at slot arrives at a testpoint, under the lock: its
 * suspension ends wait_ns from now (a negative wait is none). */
static void arrive_locked(struct manners_share *share, int slot, int64_t now, int64_t wait_ns,
			  int64_t hung_ns, int64_t half_life_ns)
{
	struct manners_timeshare view;
	if (wait_ns < 0)
		wait_ns = 0;
	int64_t eligible = now > INT64_MAX - wait_ns ? INT64_MAX : now + wait_ns;
	/* A slot just joined is waiting already: nothing to arrive from. */
	if (share->threads[slot].state == MANNERS_SHARE_WAITING) {
		share->threads[slot].eligible_ns = eligible;
	} else {
		view_load(share, &view, hung_ns, half_life_ns);
		manners_timeshare_arrive(&view, slot, now, eligible);
		view_store(share, &view);
	}
	wake_all(share); /* the runner has arrived: others may be picked */
}

/* One look at the table, under the lock: 1 when slot runs (picked now or
 * before), 0 when it waits - *wake_ns is when to look again (the end of
 * the earliest suspension, or MULTIPLEX_POLL_NS on, so that a dead
 * runner is reclaimed) - or -EINVAL when slot is not the caller's. */
static int step_locked(struct multiplex *mux, int slot, uint32_t tid, int64_t hung_ns,
		       int64_t half_life_ns, int64_t now, int64_t *last_reclaim, int64_t *wake_ns)
{
	struct manners_share *share = mux->share;
	struct manners_timeshare view;
	for (;;) {
		if (!slot_owned(share, slot, mux->pid, tid))
			return -EINVAL; /* reclaimed under us (cannot happen to a live thread) */
		if (share->threads[slot].state == MANNERS_SHARE_RUNNING && share->running == slot)
			return 1;
		int64_t wake;
		view_load(share, &view, hung_ns, half_life_ns);
		int picked = manners_timeshare_pick(&view, now, &wake);
		view_store(share, &view);
		if (picked >= 0) {
			if (picked != slot)
				wake_all(share);
			continue;
		}
		if (now - *last_reclaim >= MULTIPLEX_POLL_NS) {
			*last_reclaim = now;
			if (reclaim_dead(share, &view)) {
				view_store(share, &view);
				continue;
			}
		}
		if (wake == INT64_MAX || wake - now > MULTIPLEX_POLL_NS)
			wake = now + MULTIPLEX_POLL_NS;
		*wake_ns = wake;
		return 0;
	}
}

int multiplex_turn(struct multiplex *mux, int slot, int64_t hung_ns, int64_t half_life_ns,
		   multiplex_decide_fn decide, multiplex_watch_fn watch, int64_t watch_step_ns,
		   void *context, int interruptible)
{
	struct manners_share *share = mux->share;
	uint32_t tid = thread_id();
	int saved = errno;
	share_lock(share);
	if (!slot_owned(share, slot, mux->pid, tid)) {
		share_unlock(share);
		errno = saved;
		return -EINVAL;
	}
	int64_t now = library_clock_ns();
	if (decide != NULL) {
		int was_hung = share->threads[slot].state == MANNERS_SHARE_HUNG;
		arrive_locked(share, slot, now, decide(context, was_hung, now), hung_ns, half_life_ns);
	}
	int64_t last_reclaim = now, wake_ns, next_watch = now;
	int first_watch = 1, interrupted = 0;
	while (step_locked(mux, slot, tid, hung_ns, half_life_ns, now, &last_reclaim, &wake_ns) == 0) {
		/* Still suspended?  Then watch() may end it (the machine gone
		 * quiet); a thread only waiting for its turn is not watched. */
		int watching = watch != NULL && watch_step_ns > 0 &&
			       share->threads[slot].state == MANNERS_SHARE_WAITING &&
			       share->threads[slot].eligible_ns > now;
		if (watching && now >= next_watch) {
			share_unlock(share);
			int quiet = watch(context, first_watch, now);
			share_lock(share);
			first_watch = 0;
			next_watch = now + watch_step_ns;
			if (quiet == 1 && slot_owned(share, slot, mux->pid, tid) &&
			    share->threads[slot].state == MANNERS_SHARE_WAITING) {
				if (share->threads[slot].eligible_ns > now)
					share->threads[slot].eligible_ns = now;
				wake_all(share);
			}
			now = library_clock_ns();
			continue;
		}
		if (watching && wake_ns > next_watch)
			wake_ns = next_watch;
		int64_t sleep_ns = wake_ns - now;
		if (sleep_ns < 1000)
			sleep_ns = 1000;
		uint32_t sequence = __atomic_load_n(&share->wake_sequence, __ATOMIC_ACQUIRE);
		share_unlock(share);
		struct timespec timeout = { .tv_sec = sleep_ns / 1000000000,
					    .tv_nsec = sleep_ns % 1000000000 };
		long waited = syscall(SYS_futex, &share->wake_sequence, FUTEX_WAIT, sequence,
				      &timeout, NULL, 0);
		/* A signal handler ran.  A timed futex wait is never
		 * restarted, SA_RESTART or not (kernel/futex/waitwake.c: the
		 * restart block): any caught signal comes here.  Interruptible
		 * (the Python binding), the wait ends and the caller sees
		 * -EINTR: Python raises KeyboardInterrupt only when the call
		 * returns, which a suspension of up to suspend_limit held
		 * back; the caller then resumes the rest (decide NULL).  Not
		 * interruptible (the default), it waits on, as it always did:
		 * a program with a timer's or SIGCHLD's handler stays
		 * regulated. */
		if (waited < 0 && errno == EINTR && interruptible) {
			share_lock(share);
			interrupted = 1;
			break;
		}
		share_lock(share);
		now = library_clock_ns();
	}
	share_unlock(share);
	errno = saved;
	return interrupted ? -EINTR : 0;
}

int multiplex_arrive(struct multiplex *mux, int slot, int64_t wait_ns, int64_t hung_ns,
		     int64_t half_life_ns)
{
	struct manners_share *share = mux->share;
	int saved = errno, rc = -EINVAL;
	share_lock(share);
	if (slot_owned(share, slot, mux->pid, thread_id())) {
		arrive_locked(share, slot, library_clock_ns(), wait_ns, hung_ns, half_life_ns);
		rc = 0;
	}
	share_unlock(share);
	errno = saved;
	return rc;
}

int multiplex_try_run(struct multiplex *mux, int slot, int64_t hung_ns, int64_t half_life_ns,
		      int64_t *wake_ns)
{
	int saved = errno;
	share_lock(mux->share);
	int64_t now = library_clock_ns(), last_reclaim = now - MULTIPLEX_POLL_NS;
	*wake_ns = now;
	int rc = step_locked(mux, slot, thread_id(), hung_ns, half_life_ns, now, &last_reclaim,
			     wake_ns);
	share_unlock(mux->share);
	errno = saved;
	return rc;
}

void multiplex_end_suspension(struct multiplex *mux, int slot)
{
	struct manners_share *share = mux->share;
	share_lock(share);
	if (slot_owned(share, slot, mux->pid, thread_id()) &&
	    share->threads[slot].state == MANNERS_SHARE_WAITING) {
		int64_t now = library_clock_ns();
		if (share->threads[slot].eligible_ns > now)
			share->threads[slot].eligible_ns = now;
		wake_all(share);
	}
	share_unlock(share);
}

int multiplex_touch(struct multiplex *mux, int slot, int64_t hung_ns, int64_t half_life_ns)
{
	struct manners_share *share = mux->share;
	struct manners_timeshare view;
	int saved = errno, rc = -EINVAL;
	share_lock(share);
	if (slot_owned(share, slot, mux->pid, thread_id())) {
		view_load(share, &view, hung_ns, half_life_ns);
		rc = manners_timeshare_touch(&view, slot, library_clock_ns());
		view_store(share, &view);
	}
	share_unlock(share);
	errno = saved;
	return rc;
}

uint32_t multiplex_threads(struct multiplex *mux)
{
	uint32_t n = 0;
	if (mux->share == NULL)
		return 0;
	share_lock(mux->share);
	for (uint32_t i = 0; i < MANNERS_SHARE_THREADS; i++)
		if (mux->share->threads[i].state != MANNERS_SHARE_FREE)
			n++;
	share_unlock(mux->share);
	return n;
}
