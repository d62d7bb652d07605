/*
 * multiplex.h - time-multiplex isolation across the regulated threads of
 * all processes of one user (MS Manners §4.5, §7.1), and the layout of the
 * shared table it keeps them in.
 *
 * The paper has a supervisor thread per process and a superintendent
 * process that shares time among processes (§7.1).  Here there is neither:
 * every thread that arrives at a testpoint takes the table's lock, records
 * its arrival and suspension (timeshare.h, the pure decision logic), and
 * makes the pick itself - of itself or of another thread, which it then
 * wakes.  No extra thread or process can die, hang or be left behind, and
 * a host's fork() or exec() meets no helper.  The table is a file of mode
 * 0600, /dev/shm/discnice-manners-UID by default (setting share_file): one
 * name per user, whatever session or environment a job started from.
 *
 * Rules for this layout (tests/unit/test_manners_share_layout.c), as for
 * include/discnice/segment.h: fixed-width types, no pointers; any change
 * bumps MANNERS_SHARE_VERSION; magic, version, size and owner are checked
 * before a byte of it is trusted.  One exception: the lock is a glibc
 * pthread_mutex_t (robust, process-shared), kept in a byte array of fixed
 * size - robustness (a holder's death gives EOWNERDEAD to the next locker)
 * is what a home-made futex lock would lack.  Processes built against
 * another libc must not share the file; the version word says glibc.
 */
#ifndef DISCNICE_MANNERS_LIBRARY_MULTIPLEX_H
#define DISCNICE_MANNERS_LIBRARY_MULTIPLEX_H

#include <stdint.h>

#include "manners/timeshare.h"

#define MANNERS_SHARE_MAGIC   UINT64_C(0x315352454e4e414d) /* "MANNERS1" little-endian */
#define MANNERS_SHARE_VERSION 0x676c0001u                    /* "gl" (glibc lock) + 1 */
#define MANNERS_SHARE_THREADS 128u
#define MANNERS_SHARE_LOCK_BYTES 64u

struct manners_share_owner {
	uint32_t pid; /* process, 0 = slot free */
	uint32_t tid; /* thread (gettid) */
};

struct manners_share {
	uint64_t magic;
	uint32_t version;
	uint32_t size;           /* sizeof(struct manners_share) of the creator */
	uint32_t owner_uid;
	uint32_t wake_sequence;  /* futex word: bumped and woken at every change */
	uint64_t lock[MANNERS_SHARE_LOCK_BYTES / 8]; /* pthread_mutex_t, robust + pshared */
	/* struct manners_timeshare's state, without its pointer. */
	int32_t running;
	int32_t decay_started;
	int64_t decayed_ns;
	struct manners_share_owner owners[MANNERS_SHARE_THREADS];
	struct manners_share_thread threads[MANNERS_SHARE_THREADS];
};

/* A process's handle on the table: shared, or its own when sharing failed. */
struct multiplex {
	struct manners_share *share;
	int shared;       /* 1: the per-user file; 0: this process only */
	uint32_t pid;     /* the process that opened it */
};

/*
 * Maps the table at path ("" = the per-user default, "none" = this process
 * only).  When the file cannot be trusted or made, warns once and falls
 * back to a table of this process only.  0, or -ENOMEM.
 */
int multiplex_open(struct multiplex *mux, const char *path);

/* The shared table at path alone, for a caller that says its own words
 * (benice): 0, or -errno with *why set, and nothing warned or mapped. */
int multiplex_open_shared(struct multiplex *mux, const char *path, const char **why);

/* The per-user table's path, /dev/shm/discnice-manners-UID, in buf. */
const char *multiplex_default_path(char *buf, size_t size);

/* After fork(), in the child: a table of this process only is made anew;
 * the shared one is kept.  0 or -ENOMEM. */
int multiplex_reopen_after_fork(struct multiplex *mux, const char *path);

/* The calling thread joins: its slot id, or -ENOSPC. */
int multiplex_join(struct multiplex *mux, int priority);

/* The thread leaves (exit, manners_leave); whoever waits is woken. */
void multiplex_leave(struct multiplex *mux, int slot);

/* Every slot of this process leaves (at exit). */
void multiplex_leave_process(struct multiplex *mux);

int multiplex_set_priority(struct multiplex *mux, int slot, int priority);

/*
 * What the thread's controller decides at its testpoint, called under the
 * table's lock: was_hung (it was presumed hung, §7.1: discard), now_ns;
 * returns the suspension in ns (>= 0).
 */
typedef int64_t (*multiplex_decide_fn)(void *context, int was_hung, int64_t now_ns);

/*
 * Looked at, without the table's lock, every watch_step_ns while the
 * thread sits out a suspension: 1 ends the suspension now (the machine
 * has gone quiet, manners/quiet.h), 0 lets it run its course.  first
 * is 1 at the first look of a suspension (a new one begins: start
 * afresh), 0 after.
 */
typedef int (*multiplex_watch_fn)(void *context, int first, int64_t now_ns);

/*
 * The thread arrives at a testpoint: decide() sets its suspension, and the
 * call returns when the thread has been picked to run (after its
 * suspension, in its turn, §4.5).  hung_ns and half_life_ns are this
 * process's settings.  watch (NULL: none) may end the suspension early,
 * looked at every watch_step_ns.  decide NULL: no arrival, the rest of
 * a wait that was interrupted.  0, -EINVAL for a slot that is not the
 * caller's (it was reclaimed: the caller joins again), or, when
 * interruptible, -EINTR if a signal handler ran while it waited (any: a
 * timed futex wait is never restarted): the wait ends there.
 */
int multiplex_turn(struct multiplex *mux, int slot, int64_t hung_ns, int64_t half_life_ns,
		   multiplex_decide_fn decide, multiplex_watch_fn watch, int64_t watch_step_ns,
		   void *context, int interruptible);

/*
 * The same turn without blocking, for a caller with its own event loop
 * (`discnice benice`, whose "thread" is a job it stops and continues):
 * multiplex_arrive() at its testpoint, with the suspension its controller
 * decided; then multiplex_try_run() whenever it likes: 1 when the thread
 * may run (picked, §4.5), 0 when not yet - *wake_ns (CLOCK_MONOTONIC) is
 * when to look again - or -EINVAL for a slot that is not the caller's.
 * multiplex_end_suspension() ends the suspension now (a machine gone
 * quiet): the thread is eligible at once, in its turn.
 */
int multiplex_arrive(struct multiplex *mux, int slot, int64_t wait_ns, int64_t hung_ns,
		     int64_t half_life_ns);
int multiplex_try_run(struct multiplex *mux, int slot, int64_t hung_ns, int64_t half_life_ns,
		      int64_t *wake_ns);
void multiplex_end_suspension(struct multiplex *mux, int slot);
/* The thread runs on between testpoints (manners_timeshare_touch): 0,
 * -ESRCH when it is not the one running, -EINVAL when slot is not the
 * caller's. */
int multiplex_touch(struct multiplex *mux, int slot, int64_t hung_ns, int64_t half_life_ns);

/* Threads in the table now. */
uint32_t multiplex_threads(struct multiplex *mux);

#endif
