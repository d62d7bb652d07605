/*
 * manners.h - the MS Manners testpoint library (libmanners.so.0): progress-
 * based regulation of a low-importance job from inside it (MS Manners §7.1).
 *
 * A background job calls manners_testpoint() every so often with the
 * progress it made since its previous call.  The call returns when the
 * thread may go on: at once while its progress rate keeps up with the rate
 * it calibrated for itself, later when the rate falls (something more
 * important is using the machine) - the sign test, exponential suspension
 * and target calibration of MS Manners §4.  Only one regulated thread runs
 * at a time, across the threads of a process and across the processes of
 * one user (time-multiplex isolation, §4.5).  Targets persist across runs of
 * the same program (§7.1).  See manners(3).
 *
 * The ABI: plain C, fixed-width types, no struct passed by value; the one
 * struct (manners_stats) is filled up to the size the caller says it has,
 * so it can grow.  Every function returns 0 (or a count) on success and a
 * negative errno value on failure; none of them aborts, exits, raises a
 * signal, or changes errno.  All are thread-safe, and safe after fork().
 */
#ifndef DISCNICE_MANNERS_H
#define DISCNICE_MANNERS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MANNERS_VERSION_MAJOR 0
#define MANNERS_VERSION_MINOR 1

/* Most progress metrics one testpoint may report (regress.h, §4.4). */
#define MANNERS_METRICS_MAX 8
/* The largest progress value one testpoint takes: 2^53, the last count a
 * double holds exactly (larger values made the averages overflow). */
#define MANNERS_PROGRESS_MAX 9007199254740992.0
/* Most distinct phase indexes one thread may use (§4.4's metric sets). */
#define MANNERS_PHASES_MAX 64

/* Relative priority among regulated threads (decay-usage sharing, §7.1):
 * p and p + 1 share running time 1 : 2. */
#define MANNERS_PRIORITY_LOWEST  (-8)
#define MANNERS_PRIORITY_HIGHEST 8

/*
 * One testpoint of the calling thread (§7.1's Testpoint(index, count,
 * metrics)).  progress[0 .. count-1] is the progress made in each metric
 * since this thread's previous testpoint (deltas, >= 0, in the job's own
 * units: bytes, files, records...).  index names the phase (the set of
 * metrics, §4.4): its first call fixes its count.  Blocks until the thread
 * may proceed; calls less than the fast-path interval (setting
 * "interval", 0.1 s) after the last processed one only add up their
 * progress and return at once.  The first call needs no set-up; the
 * progress it reports has no measured interval and is not used.
 *
 * Returns 0, or:
 *   -EINVAL  count < 1 or > MANNERS_METRICS_MAX; progress NULL; a value
 *            negative, NaN, infinite or above MANNERS_PROGRESS_MAX; a
 *            count different from the index's first.  Nothing is
 *            recorded, the thread goes on.
 *   -ENOSPC  the thread already uses MANNERS_PHASES_MAX indexes, or the
 *            per-user table of regulated threads (128) is full.
 *   -ENOMEM  the thread's state could not be allocated (it goes on
 *            unregulated).
 *   -EINTR   with the setting "interruptible" 1 only: a signal handler
 *            ran while the thread was suspended or waiting for its turn
 *            (any caught signal: SA_RESTART does not restart a timed
 *            wait), and the wait ended there, so that the program sees
 *            its signal now (Python's KeyboardInterrupt, a flag its
 *            handler set).  The testpoint counts; manners_resume() waits
 *            out the rest.  By default (0) the wait goes on through
 *            signals, and a program with a timer's or SIGCHLD's handler
 *            stays regulated.  The Python binding sets it, and resumes
 *            once Python has run its handlers.
 */
int manners_testpoint(int index, int count, const double *progress);

/* After manners_testpoint() returned -EINTR: the rest of that suspension
 * and the wait for the thread's turn.  0 (also when there is nothing to
 * wait for), or -EINTR again.  Since libmanners.so.0 MANNERS_0.1. */
int manners_resume(void);

/*
 * The calling thread's priority among regulated threads, clamped to
 * MANNERS_PRIORITY_LOWEST .. HIGHEST (default 0).  0, or -ENOMEM.
 */
int manners_set_priority(int priority);

/*
 * The calling thread stops being regulated (and stops holding the others
 * back) until its next testpoint: call it before a thread goes on to
 * unregulated work or blocks on something else for long.  0 (also when
 * the thread was not regulated).
 */
int manners_leave(void);

/*
 * Settings by name, also read once from the environment (MANNERS_<NAME>
 * in upper case) at the first call of any function; a bad environment
 * value warns once on stderr and keeps the default.  Times in seconds.
 *
 *   enable           1: regulate; 0: testpoints only check their arguments
 *   alpha, beta      sign test error rates (§6.1)           0.05, 0.2
 *   n                averaging constant (§6.2)               10000
 *   bootstrap        unregulated testpoints to start (§4.3)  50
 *   probation        seconds of capped running at start      900
 *   duty             largest running fraction on probation   0.25
 *   suspend_initial  first suspension (§4.1)                 4
 *   suspend_limit    longest suspension (§4.1)               600
 *   interval         fast-path interval (§7.1)               0.1
 *   busy_interval    the fast-path interval while others use a CPU (a
 *                    quarter of one, this process's own time left out):
 *                    a shared CPU is judged in a quarter second; from a
 *                    rise of /proc/pressure/cpu, where there is one; 0: off  0.05
 *   interruptible    1: a caught signal ends a wait with -EINTR
 *                    (manners_testpoint); 0: waits go on       0
 *   quick            beyond the paper: a target the thread beats at most
 *                    of its last this many testpoints is raised to their
 *                    median; 0: the paper's average alone      20
 *   probe            beyond the paper: after a poor judgment, this many
 *                    testpoints below target in a row are judged poor at
 *                    once; 0: the paper's comparator           2
 *   disk_rise        beyond the paper: 1: a rise of others' disk traffic
 *                    begins a new sign-test sample; 0: off      1
 *   hung             a thread this late is presumed hung     5
 *   half_life        decay-usage half-life                   10
 *   persist          1: keep targets in the state file       1
 *   state_dir        ""; empty means $XDG_STATE_HOME/discnice/manners
 *   state_file       the file itself (default: in state_dir, named after
 *                    the program)
 *   program          the path that names the state file  /proc/self/exe
 *   save_interval    seconds between saves                   60
 *   quiet            a poor judgment after this long in which nobody else
 *                    used a CPU or a disk (/proc/stat less this process's
 *                    own CPU time, /proc/diskstats) orders no suspension:
 *                    the sign test's alpha, not contention; 0: the paper  1
 *   share_file       the per-user table threads take turns in ("", the
 *                    default: /dev/shm/discnice-manners-UID; "none":
 *                    this process only)
 *
 * Settings that shape a thread's controller (alpha .. suspend_limit) apply
 * to threads whose first testpoint comes after the change; persistence
 * and sharing settings only before the first testpoint of the process.
 *
 * manners_config_set: 0, -ENOENT for an unknown name, -EINVAL for a value
 * out of range or not a decimal number, blanks around it allowed,
 * -ENAMETOOLONG for a path (state_dir, state_file, program, share_file)
 * of 512 bytes or more (the setting is kept).
 * manners_config_get: the length of the value (as snprintf) written into
 * value[size] (value may be NULL when size is 0), -ENOENT for an unknown
 * name, -EINVAL for a NULL name, or a NULL value with a size.
 */
int manners_config_set(const char *name, const char *value);
int manners_config_get(const char *name, char *value, size_t size);

/* The calling thread's regulation so far. */
struct manners_stats {
	uint64_t size;             /* bytes of this struct the library filled */
	uint64_t testpoints;       /* calls, fast path included */
	uint64_t processed;        /* calls fully processed */
	uint64_t compared;         /* comparisons fed to the sign test (§4.2) */
	uint64_t judged_good;
	uint64_t judged_poor;
	uint64_t discarded;        /* measurements thrown away (hung, §7.1) */
	int64_t suspended_ns;      /* suspension ordered (§4.1) */
	int64_t probation_ns;      /* probation waits ordered beyond it (§4.3) */
	int64_t blocked_ns;        /* time blocked in testpoint: suspended or
				    * waiting for its turn (§4.5) */
	int64_t target_ns;         /* target duration of the last processed
				    * interval's progress; -1 while none */
	int64_t last_run_ns;       /* running time of that interval */
	int32_t last_judgment;     /* 0 unknown, 1 good, 2 poor */
	int32_t regulating;        /* 1 once the last phase's bootstrap is over */
	int32_t priority;
	int32_t shared;            /* 1: sharing with other processes */
	uint32_t regulated_threads; /* threads in the table now */
	uint32_t loaded_phases;    /* phases whose targets came from the state file */
	uint64_t forgiven;         /* of judged_poor: made while nobody else used the
				    * machine (the quiet setting), so no suspension */
	uint64_t busy_processed;   /* of processed: at busy_interval (others used a CPU) */
	uint64_t pressure_rises;   /* rises of /proc/pressure/cpu that started
				    * busy_interval sooner */
	uint64_t disk_rises;       /* rises of others' disk traffic, each of which
				    * began a new sample (the disk_rise setting) */
	uint64_t shortened;        /* suspensions ended early: the machine was
				    * quiet for the quiet setting's seconds */
};

/*
 * Fills *out up to size bytes (size >= 8, so at least the size field;
 * a larger size than the library knows is zeroed beyond).  0, or -EINVAL.
 */
int manners_stats(struct manners_stats *out, size_t size);

/* Writes the targets to the state file now (they are also written every
 * save_interval and at exit).  0, -ENODATA when nothing is known yet,
 * -ENOTSUP when persistence is off (by the settings, or since a write
 * every save_interval failed where the file can never be written - no
 * such directory, no permission, read-only: one warning, then no more
 * tries; a full disk is tried again), or the error of the write. */
int manners_save(void);

#ifdef __cplusplus
}
#endif

#endif
