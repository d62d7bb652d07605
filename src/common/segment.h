/*
 * segment.h - creating, joining, validating and locking a class's shared
 * segment (layout: include/discnice/segment.h).
 *
 * Library code: every function returns 0 / a value, or -errno, and leaves
 * errno as it found it.
 */
#ifndef DISCNICE_COMMON_SEGMENT_H
#define DISCNICE_COMMON_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "discnice/segment.h"

/* Directory holding the user's class segments: $XDG_RUNTIME_DIR/discnice when
 * XDG_RUNTIME_DIR is a directory we own, else /dev/shm/discnice-UID.
 * create != 0 makes it (mode 0700).  Refuses a directory owned by someone
 * else or open to others (-EPERM). */
int segment_dir(char *buf, size_t len, int create);

/* Is name a class name: 1 to DN_CLASS_NAME_MAX - 1 printable ASCII
 * characters, no '/', no leading '.' - so that it can never leave the
 * segments' directory?  Inline: the Slurm plugin checks --discnice-class
 * with run's own option code and links no segment code. */
static inline bool segment_name_ok(const char *name)
{
	size_t n = 0;
	for (; name[n]; n++)
		if ((unsigned char)name[n] < 0x21 || (unsigned char)name[n] > 0x7e || name[n] == '/')
			return false;
	return n > 0 && n < DN_CLASS_NAME_MAX && name[0] != '.';
}
/* What segment_name_ok() asks, for messages. */
#define SEGMENT_NAME_RULE "a class name is 1-63 printable ASCII characters, no '/', no spaces, " \
			  "not starting with '.'"
_Static_assert(DN_CLASS_NAME_MAX == 64, "SEGMENT_NAME_RULE says 1-63");

/* Full path of class `name`'s segment. -EINVAL for a bad class name
 * (segment_name_ok()). */
int segment_path(char *buf, size_t len, const char *name);

/* Open class `name`, creating it from `init` if it does not exist.  On
 * return *created says which; the caller holds one attached_runs count. */
int segment_open_or_create(const char *name, const struct dn_segment *init,
			   struct dn_segment **out, int *created);

/* Map an existing segment read-write after checking it is ours: a regular
 * file, owned by us, mode 0600, the right size, magic and version.
 * -EPERM (not ours / wrong mode), -EPROTONOSUPPORT (another version's:
 * our magic, another version), -EPROTO (bad magic, size or window). */
int segment_attach_path(const char *path, struct dn_segment **out);
/* The same, also telling which file it mapped (*ino). */
int segment_attach_path_ino(const char *path, struct dn_segment **out, ino_t *ino);

/* Drop one attached_runs count; the last one removes the file.  Unmaps. */
void segment_detach(struct dn_segment *seg, const char *name);

/* Validate a mapped segment's header (also used on attach). */
int segment_validate(const struct dn_segment *seg);

/* The segment lock: a word holding the holder's token (pid << 32 |
 * sequence; include/discnice/segment.h).  Critical sections are a few
 * microseconds and never sleep (policy.h).  A waiter takes over a lock whose
 * holder is dead (kill(pid, 0) == ESRCH) at once and one it has seen held
 * by the same token for DN_LOCK_BREAK_NS (stopped, traced, or its pid
 * reused) unless the holder's process has a thread running or runnable
 * (then up to DN_LOCK_BREAK_BUSY_NS), so no process blocks its class for
 * longer.  Returns the token to
 * hand to segment_unlock(). */
uint64_t segment_lock(struct dn_segment *seg);
/* In a fork child, before any segment_lock(): the pid changed. */
void segment_forget_pid(void);
/* Release the lock if `token` still holds it (a holder whose lock was taken
 * over releases nothing). */
void segment_unlock(struct dn_segment *seg, uint64_t token);
/* Take the lock only if it is free now: its token, or 0 (the supervisor,
 * while it holds processes of the job, must never wait for one of them). */
uint64_t segment_trylock(struct dn_segment *seg);
/* The pid of the lock's holder now, 0 if free (racy: a hint). */
pid_t segment_lock_holder(const struct dn_segment *seg);

/* Is the supervisor of this run slot alive?  Not if the slot is free, its
 * pid is gone or a zombie, or the pid now names another process (its start
 * time is not the one the slot recorded).  Reads /proc: never under the
 * class lock. */
bool segment_run_alive(const struct dn_run *run);

/* Who regulates a run slot: one rule for run, set, ls, top, attach and
 * benice.  benice marks its slot DN_RUN_BENICE as it claims it (its --pid's
 * first process goes in attached_pid too); an attach has its job's first
 * PID in attached_pid; any other slot is an agent's (`run`'s supervisor, or
 * under --exec the job itself). */
enum run_kind { RUN_KIND_AGENT, RUN_KIND_ATTACH, RUN_KIND_BENICE };

static inline enum run_kind segment_run_kind(const struct dn_run *run)
{
	if (__atomic_load_n(&run->state, __ATOMIC_ACQUIRE) & DN_RUN_BENICE)
		return RUN_KIND_BENICE;
	return __atomic_load_n(&run->attached_pid, __ATOMIC_RELAXED) ? RUN_KIND_ATTACH
								     : RUN_KIND_AGENT;
}

/* Claim a free run slot for supervisor `pid` (the caller, or a process it
 * is about to become): a slot never claimed, released, or holding a dead
 * supervisor (segment_run_alive).  -ENOSPC if all are taken. */
int segment_claim_run(struct dn_segment *seg, uint32_t pid);
void segment_release_run(struct dn_segment *seg, int slot);

/* A run started with --exec ends: its job, which holds the slot under its
 * own pid, gives the slot back and detaches, removing the class's file
 * (path, inode ino) when it was the last (segment_detach(), without the
 * unmap: the process's other threads may still be in a hook).  Does
 * nothing and returns false unless the slot still holds pid. */
bool segment_end_exec_run(struct dn_segment *seg, struct dn_run *run, uint32_t pid,
			  const char *path, ino_t ino);

/* 1 if a process other than `self` maps the file at `path` (read from the
 * /proc/PID/maps we may read), 0 if none, -errno if unknown. */
int segment_mapped_elsewhere(const char *path, pid_t self);

/* Remove the file of an abandoned class: no supervisor alive and no other
 * process mapping it (issue #4 §5: no segment left behind once the last
 * process exits).  As a process of the class exits (stale false), every
 * supervisor that attached must also be dead (killed: one that exits
 * detaches); `discnice run` cleaning up after
 * killed supervisors (stale true) ignores the attach count, which a
 * supervisor killed between attaching and claiming a slot left behind.
 * It removes path only while it names the mapped file, inode ino.
 * True if it removed the file. */
bool segment_remove_abandoned(struct dn_segment *seg, const char *path, ino_t ino, bool stale);

/* Add to a counter from any process: relaxed atomic, never a lock. */
static inline void segment_count(uint64_t *counter, uint64_t value)
{
	__atomic_fetch_add(counter, value, __ATOMIC_RELAXED);
}
static inline uint64_t segment_read_counter(const uint64_t *counter)
{
	return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

/* The class's disk caps now (`discnice set` and the yield policy change
 * them while jobs run), read without the lock. */
static inline struct dn_caps segment_caps_now(const struct dn_segment *seg)
{
	struct dn_caps caps = {
		__atomic_load_n(&seg->caps.read_bps, __ATOMIC_RELAXED),
		__atomic_load_n(&seg->caps.write_bps, __ATOMIC_RELAXED),
		__atomic_load_n(&seg->caps.total_bps, __ATOMIC_RELAXED),
	};
	return caps;
}

/* The class's network caps as they bind now: under the scavenger
 * (--net-policy scavenger, dn_scavenger) its rate is one more send cap,
 * the smaller of the two binding.  The agent's window (src/agent/throttle.c)
 * and the supervisor's network feedback (src/tool/tool_net_feedback.c)
 * both police these. */
static inline struct dn_caps segment_net_caps_now(const struct dn_segment *seg)
{
	struct dn_caps caps = {
		__atomic_load_n(&seg->net_caps.read_bps, __ATOMIC_RELAXED),
		__atomic_load_n(&seg->net_caps.write_bps, __ATOMIC_RELAXED),
		__atomic_load_n(&seg->net_caps.total_bps, __ATOMIC_RELAXED),
	};
	if (__atomic_load_n(&seg->scavenger.target_ns, __ATOMIC_RELAXED)) {
		uint64_t rate = __atomic_load_n(&seg->scavenger.rate_bps, __ATOMIC_RELAXED);
		if (rate && (!caps.write_bps || rate < caps.write_bps))
			caps.write_bps = rate;
	}
	return caps;
}

#endif
