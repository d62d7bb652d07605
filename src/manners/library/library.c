/*
 * library.c - the testpoint library's API (include/discnice/manners.h,
 * MS Manners §7.1): lazy set-up, each thread's controller in thread-local
 * storage, the fast path, fork and exit.  The turn-taking is multiplex.c's,
 * the file state_file.c's; the decisions are the pure modules' of
 * src/manners (controller.h wires Fig. 2).
 *
 * Locks, outermost first: library_lock (this process's settings and kept
 * targets), then the shared table's lock (multiplex.c).  A thread never
 * sleeps holding either, and nothing is called back into the host.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "discnice/manners.h"
#include "common/machine_activity.h"
#include "common/proc_io.h"
#include "manners/controller.h"
#include "manners/quiet.h"
#include "manners/settings.h"
#include "manners/state_format.h"
#include "manners/library/library.h"
#include "manners/library/multiplex.h"
#include "manners/library/state_file.h"

#define MANNERS_EXPORT __attribute__((visibility("default")))

_Static_assert(MANNERS_METRICS_MAX == MANNERS_REGRESS_MAX, "one limit");
_Static_assert((long long)MANNERS_PROGRESS_MAX == (long long)MANNERS_CONTROLLER_PROGRESS_MAX,
	       "one limit");
_Static_assert(MANNERS_PRIORITY_LOWEST == MANNERS_PRIORITY_MIN &&
	       MANNERS_PRIORITY_HIGHEST == MANNERS_PRIORITY_MAX, "one range");

/* Phases kept for the state file, over all threads of the process. */
#define KEPT_PHASES_MAX 256

/* For /proc/stat and /proc/diskstats (quiet.h's look back). */
#define QUIET_BUFFER 65536

/* One interval's progress, handed to the controller (§4.1). */
struct measurement {
	int index;
	int count;
	double progress[MANNERS_METRICS_MAX];
	int64_t run_ns;
	int64_t end_ns; /* when its interval ended; 0: at this testpoint */
};

/* A regulated thread: its controller (one per thread, §4.5) and clocks. */
struct thread_state {
	struct thread_state *next, *previous; /* all_threads, under library_lock */
	unsigned fork_generation; /* the process it belongs to (see after_fork_child) */
	int slot;                 /* in the shared table; -1 while not in it */
	int interrupted;          /* its last wait ended at a signal (-EINTR) */
	int priority;
	int started;              /* a testpoint has released it since it joined */
	int64_t last_processed_ns; /* when the last processed testpoint let it go */
	/* The fast path (§7.1): progress of calls too close together. */
	int pending;
	int pending_index;
	int pending_count;
	double pending_progress[MANNERS_METRICS_MAX];
	int64_t pending_last_ns;
	/* The testpoint being processed, for decide(). */
	struct measurement measurements[2];
	int measurement_count;
	/* Statistics beyond the controller's own. */
	uint64_t testpoints;
	uint64_t processed;
	int64_t blocked_ns;
	int64_t target_ns;
	int64_t last_run_ns;
	uint32_t loaded_phases;
	/* quiet.h's look back (quiet.quiet_ns 0: off). */
	struct manners_quiet quiet;
	struct manners_quiet_history seen;
	struct manners_busy busy;   /* quiet.h's quick polls (settings.busy_interval_ns) */
	struct manners_stall stall; /* ... sooner, at a rise of CPU pressure */
	int use_stall, rose;
	uint64_t busy_processed, pressure_rises;
	/* ... and a new sample at a rise of others' disk traffic (quiet.h,
	 * settings.disk_rise): the disks' bytes less this process's own. */
	struct manners_disk_rise disk_rise;
	int use_disk_rise, disk_rose;
	uint64_t disk_rises;
	uint64_t shortened;         /* suspensions ended early by quiet_watch() */
	char *proc_buffer;          /* QUIET_BUFFER bytes, on first use */
	struct manners_sign_table signs;
	struct manners_controller controller;
	struct manners_phase phases[MANNERS_PHASES_MAX];
};

static pthread_once_t library_once = PTHREAD_ONCE_INIT;
static pthread_key_t thread_key;
static int thread_key_ok;
static pthread_mutex_t library_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned fork_generation; /* bumped in every child */
static __thread struct thread_state *current_thread;
static struct thread_state *all_threads; /* under library_lock */

/* Under library_lock. */
static struct manners_settings settings;
static struct {
	int opened;
	unsigned fork_generation;
	struct multiplex mux;
	int persist;
	char state_path[MANNERS_SETTINGS_PATH_MAX + 128];
	struct manners_saved_phase kept[KEPT_PHASES_MAX];
	size_t kept_count;
	int dirty;
	int save_warned;   /* the last periodic save failed, and said so */
	int64_t last_save_ns;
} process;

static void thread_state_free(void *pointer);

static void after_fork_prepare(void)
{
	pthread_mutex_lock(&library_lock);
}

static void after_fork_parent(void)
{
	pthread_mutex_unlock(&library_lock);
}

static void thread_list_remove(struct thread_state *t)
{
	if (t->previous != NULL)
		t->previous->next = t->next;
	else if (all_threads == t)
		all_threads = t->next;
	if (t->next != NULL)
		t->next->previous = t->previous;
	t->next = t->previous = NULL;
}

/* The child has one thread: the others' states are not its own (they are
 * freed: glibc's malloc is usable again by the time fork handlers run),
 * and a table of this process only is not its parent's
 * (multiplex_reopen_after_fork). */
static void after_fork_child(void)
{
	pthread_mutex_init(&library_lock, NULL);
	__atomic_add_fetch(&fork_generation, 1, __ATOMIC_RELAXED);
	struct thread_state *t = all_threads;
	while (t != NULL) {
		struct thread_state *next = t->next;
		if (t != current_thread) {
			thread_list_remove(t);
			free(t->proc_buffer);
			free(t);
		}
		t = next;
	}
}

/* Settings from MANNERS_* once (CONVENTIONS: a bad value warns, never
 * crashes), the thread key, the fork handlers. */
static void library_initialise(void)
{
	manners_settings_default(&settings);
	/* Two passes: a setting checked against its partner (alpha < beta,
	 * suspend_initial <= suspend_limit) is tried again once the partner
	 * is in, so that MANNERS_ALPHA=0.3 MANNERS_BETA=0.5 is taken whatever
	 * the table's order; only what fails then is ignored. */
	bool failed[64] = { false };
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < manners_settings_count() && i < 64; i++) {
			const char *value = getenv(manners_settings_env(i));
			if (value == NULL || (pass == 1 && !failed[i]))
				continue;
			int rc = manners_settings_set(&settings, manners_settings_name(i), value);
			failed[i] = rc < 0;
			if (rc < 0 && pass == 1)
				library_warn("ignoring %s=%s: %s; keeping the default",
					     manners_settings_env(i), value, strerror(-rc));
		}
	thread_key_ok = pthread_key_create(&thread_key, thread_state_free) == 0;
	pthread_atfork(after_fork_prepare, after_fork_parent, after_fork_child);
}

static void library_start(void)
{
	int saved = errno;
	pthread_once(&library_once, library_initialise);
	errno = saved;
}

/* The shared table and the kept targets of this process, under
 * library_lock: at the first processed testpoint (§7.1: "the first time
 * the testpoint function is called"), and again in a forked child. */
static void process_open_locked(void)
{
	unsigned generation = __atomic_load_n(&fork_generation, __ATOMIC_RELAXED);
	if (process.opened && process.fork_generation == generation)
		return;
	if (process.opened) {
		multiplex_reopen_after_fork(&process.mux, settings.share_file);
		process.fork_generation = generation;
		return;
	}
	if (multiplex_open(&process.mux, settings.share_file) < 0)
		return;
	process.opened = 1;
	process.fork_generation = generation;
	process.last_save_ns = library_clock_ns();
	process.persist = settings.persist;
	if (!process.persist)
		return;
	int rc = state_file_path(&settings, process.state_path, sizeof process.state_path);
	if (rc < 0) {
		library_warn("no state file (%s): targets will not be kept",
			     rc == -ENOENT ? "neither XDG_STATE_HOME nor HOME is an absolute path; "
					     "MANNERS_STATE_FILE names one"
					   : strerror(-rc));
		process.persist = 0;
		return;
	}
	rc = state_file_load(process.state_path, process.kept, KEPT_PHASES_MAX, &process.kept_count);
	if (rc == -ENOENT)
		return;
	if (rc == -EBADMSG || rc == -EPROTONOSUPPORT || rc == -EMEDIUMTYPE) {
		const char *why = rc == -EBADMSG ? "not a valid state file"
				  : rc == -EPROTONOSUPPORT ? "another version's state file"
							   : "a state file of discnice benice or run";
		library_warn("ignoring %s: %s; it will be rewritten", process.state_path, why);
		process.kept_count = 0;
		process.dirty = 1;
	} else if (rc < 0) {
		/* Not a file we can read (a directory, a path through a
		 * file, no permission): not one to rewrite either, and one
		 * warning says so, not a second at every save. */
		library_warn("cannot read %s: %s; targets will not be kept", process.state_path,
			     rc == -EINVAL ? "not a regular file" : strerror(-rc));
		process.kept_count = 0;
		process.persist = 0;
	}
}

static int save_locked(void)
{
	if (!process.opened || !process.persist)
		return -ENOTSUP;
	if (process.kept_count == 0 && !process.dirty)
		return -ENODATA;
	int rc = state_file_save(process.state_path, process.kept, process.kept_count);
	if (rc == 0)
		process.dirty = 0;
	process.last_save_ns = library_clock_ns();
	return rc;
}

/* At exit (or dlclose): targets written, this process's threads out of
 * the table.  Try-lock: a thread may be inside the library as the
 * process exits, and exit must not hang on it. */
__attribute__((destructor)) static void library_finish(void)
{
	int saved = errno;
	if (pthread_mutex_trylock(&library_lock) != 0) {
		errno = saved;
		return;
	}
	if (process.opened &&
	    process.fork_generation == __atomic_load_n(&fork_generation, __ATOMIC_RELAXED)) {
		if (process.persist && process.dirty) {
			int rc = save_locked();
			if (rc < 0)
				library_warn("cannot write %s: %s", process.state_path, strerror(-rc));
		}
		multiplex_leave_process(&process.mux);
	}
	pthread_mutex_unlock(&library_lock);
	errno = saved;
}

/* The thread has exited: it leaves the table, so nobody waits for it. */
static void thread_state_free(void *pointer)
{
	struct thread_state *t = pointer;
	if (t == NULL)
		return;
	int saved = errno;
	if (t->slot >= 0 && t->fork_generation == __atomic_load_n(&fork_generation, __ATOMIC_RELAXED))
		multiplex_leave(&process.mux, t->slot);
	current_thread = NULL;
	pthread_mutex_lock(&library_lock);
	thread_list_remove(t);
	pthread_mutex_unlock(&library_lock);
	free(t->proc_buffer);
	free(t);
	errno = saved;
}

/* The calling thread's state, made on first use with the settings of now. */
static struct thread_state *thread_get(int *error)
{
	struct thread_state *t = current_thread;
	unsigned generation = __atomic_load_n(&fork_generation, __ATOMIC_RELAXED);
	if (t != NULL && t->fork_generation == generation)
		return t;
	if (t != NULL) {
		/* Forked: the controller's learning is still good, the slot is the
		 * parent's thread's. */
		t->fork_generation = generation;
		t->slot = -1;
		t->started = 0;
		t->pending = 0;
		return t;
	}
	t = calloc(1, sizeof *t);
	if (t == NULL) {
		*error = -ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&library_lock);
	struct manners_settings s = settings;
	t->next = all_threads;
	if (all_threads != NULL)
		all_threads->previous = t;
	all_threads = t;
	pthread_mutex_unlock(&library_lock);
	struct manners_controller_config config;
	manners_controller_config_default(&config);
	config.calib.n = s.n;
	config.calib.bootstrap = s.bootstrap;
	config.calib.probation_ns = s.probation_ns;
	config.calib.probation_duty = s.duty;
	config.suspend_initial_ns = s.suspend_initial_ns;
	config.suspend_limit_ns = s.suspend_limit_ns;
	config.quick_window = s.quick_window;
	config.probe_below = s.probe_below;
	if (s.quiet_ns > 0)
		manners_quiet_init(&t->quiet, s.quiet_ns, MANNERS_QUIET_CPU_DEFAULT,
				   MANNERS_QUIET_DISK_DEFAULT);
	manners_busy_init(&t->busy, MANNERS_BUSY_SPAN_NS_DEFAULT, MANNERS_BUSY_CPUS_DEFAULT);
	t->use_stall = manners_stall_init(&t->stall, MANNERS_STALL_STEP_NS_DEFAULT,
					  MANNERS_STALL_SHARE_DEFAULT) == 0;
	t->use_disk_rise = s.disk_rise &&
			   manners_disk_rise_init(&t->disk_rise, MANNERS_DISK_RISE_STEP_NS_DEFAULT,
						  MANNERS_DISK_RISE_BPS_DEFAULT,
						  MANNERS_DISK_RISE_SHARE_DEFAULT) == 0;
	if (manners_sign_table_init(&t->signs, s.alpha, s.beta, MANNERS_SIGN_P1_DEFAULT,
				    MANNERS_SIGN_N_MAX) < 0 ||
	    manners_controller_init(&t->controller, &t->signs, t->phases, MANNERS_PHASES_MAX,
				    &config) < 0) {
		/* Settings are checked as they are set; this is a last resort. */
		manners_sign_table_init(&t->signs, MANNERS_SIGN_ALPHA_DEFAULT,
					MANNERS_SIGN_BETA_DEFAULT, MANNERS_SIGN_P1_DEFAULT,
					MANNERS_SIGN_N_MAX);
		manners_controller_init(&t->controller, &t->signs, t->phases, MANNERS_PHASES_MAX,
					NULL);
	}
	t->fork_generation = generation;
	t->slot = -1;
	t->target_ns = -1;
	if (thread_key_ok)
		pthread_setspecific(thread_key, t);
	current_thread = t;
	return t;
}

static struct manners_phase *phase_of(struct thread_state *t, int index)
{
	for (size_t i = 0; i < MANNERS_PHASES_MAX; i++)
		if (t->phases[i].count > 0 && t->phases[i].index == index)
			return &t->phases[i];
	return NULL;
}

static int arguments_valid(int count, const double *progress)
{
	if (count < 1 || count > MANNERS_METRICS_MAX || progress == NULL)
		return 0;
	for (int k = 0; k < count; k++) /* NaN fails both comparisons */
		if (!(progress[k] >= 0.0 && progress[k] <= MANNERS_PROGRESS_MAX))
			return 0;
	return 1;
}

/*
 * The phase of index, made at its first call (§7.1: "each time the
 * testpoint function is called with a new metric set, it allocates and
 * initializes an internal data structure"), so that its count is fixed
 * from then on and a full table fails before anything is recorded.  A
 * phase whose targets were kept from an earlier run starts calibrated: no
 * bootstrap, no probation (§7.1).
 */
static int phase_prepare(struct thread_state *t, int index, int count)
{
	size_t used = t->controller.phases.used;
	struct manners_phase *phase;
	int rc = manners_phase_lookup(&t->controller.phases, index, count, &phase);
	if (rc < 0 || t->controller.phases.used == used)
		return rc;
	pthread_mutex_lock(&library_lock);
	if (settings.enable)
		process_open_locked(); /* the kept targets are loaded at the first testpoint */
	for (size_t k = 0; k < process.kept_count; k++) {
		const struct manners_saved_phase *kept = &process.kept[k];
		if (kept->index != index || kept->count != count)
			continue;
		if (manners_state_restore(phase, kept) == 0) {
			phase->calib.config.probation_ns = 0;
			t->loaded_phases++;
		}
		break;
	}
	pthread_mutex_unlock(&library_lock);
	return 0;
}

/* The thread's phases just measured, into the process's kept targets. */
static void phases_publish(struct thread_state *t, int64_t now_ns)
{
	pthread_mutex_lock(&library_lock);
	for (int i = 0; i < t->measurement_count; i++) {
		const struct manners_phase *phase = phase_of(t, t->measurements[i].index);
		if (phase == NULL || phase->calib.samples == 0)
			continue;
		size_t k = 0;
		while (k < process.kept_count && process.kept[k].index != phase->index)
			k++;
		if (k == KEPT_PHASES_MAX)
			continue;
		/* A phase whose sums no longer make a target (progress of
		 * 1e300 overflows the regression's) is not kept: written, it
		 * made every save fail, and with it every other phase's. */
		struct manners_saved_phase captured;
		manners_state_capture(&captured, phase);
		if (!manners_state_valid(&captured))
			continue;
		if (k == process.kept_count)
			process.kept_count++;
		process.kept[k] = captured;
		process.dirty = 1;
	}
	if (process.persist && process.dirty && now_ns - process.last_save_ns >= settings.save_interval_ns) {
		/* One warning, not a line every save_interval for ever (a
		 * daemon whose HOME does not exist).  Where the file can
		 * never be written, no more tries; a full disk or a passing
		 * NFS error may clear, so those are tried again, quietly,
		 * and the save at exit too. */
		int rc = save_locked();
		bool lasting = rc == -ENOENT || rc == -EACCES || rc == -EPERM || rc == -EROFS ||
			       rc == -ENOTDIR || rc == -EISDIR || rc == -ELOOP || rc == -EINVAL ||
			       rc == -ENAMETOOLONG;
		if (rc < 0 && (lasting || !process.save_warned))
			library_warn("cannot write %s: %s; %s", process.state_path, strerror(-rc),
				     lasting ? "targets will not be kept" : "trying again later");
		if (rc < 0 && lasting)
			process.persist = 0;
		process.save_warned = rc < 0;
	}
	pthread_mutex_unlock(&library_lock);
}

/* The machine's counters now, with this process's own CPU time (all its
 * threads: the machine counts them all).  0, or -1 where they cannot be
 * read (no memory for the buffer, /proc unreadable). */
static int machine_sample(struct thread_state *t, int64_t now, struct manners_activity *out)
{
	if (t->proc_buffer == NULL && (t->proc_buffer = malloc(QUIET_BUFFER)) == NULL)
		return -1;
	struct machine_activity a;
	struct timespec own;
	if (machine_activity_read_into(&a, t->proc_buffer, QUIET_BUFFER) < 0 ||
	    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &own) != 0)
		return -1;
	*out = manners_activity_of(&a, now, (uint64_t)own.tv_sec * 1000000000u + (uint64_t)own.tv_nsec);
	return 0;
}

/* machine_sample() for the look back in decide(), for the quick polls
 * (fast_path_ns()) and for the disk rise. */
static void quiet_sample(struct thread_state *t, int64_t now)
{
	int look_back = t->quiet.quiet_ns > 0 && manners_quiet_history_wants(&t->seen, &t->quiet, now);
	/* The disk rise's step is the fast path's interval (0.1 s): a
	 * testpoint a little early is still the next step's, not skipped. */
	int disk = t->use_disk_rise &&
		   manners_disk_rise_due(&t->disk_rise, now + t->disk_rise.step_ns / 4);
	if (!look_back && !disk && __atomic_load_n(&settings.busy_interval_ns, __ATOMIC_RELAXED) <= 0)
		return;
	struct manners_activity sample;
	if (machine_sample(t, now, &sample) < 0)
		return;
	if (look_back)
		manners_quiet_history_add(&t->seen, &t->quiet, &sample);
	struct proc_io own_io;
	if (disk && proc_io_read(0, &own_io) == 0) {
		/* This process's disk bytes, its reaped children's included
		 * (proc_io.h); a thread's view would miss its siblings'. */
		sample.own_disk_bytes = own_io.read_bytes + own_io.write_bytes;
		if (manners_disk_rise_feed(&t->disk_rise, &sample) == 1) {
			t->disk_rose = 1;
			t->disk_rises++;
		}
	}
	manners_busy_feed(&t->busy, &sample);
	if (t->rose) {
		manners_busy_hint(&t->busy, &sample);
		t->pressure_rises++;
	}
}

/* In the fast path, once a step while the polls are slow: has CPU pressure
 * risen (a rival on this thread's CPU; quiet.h)?  Then this testpoint is
 * processed now, and the quick polls start with it. */
static int stall_rise(struct thread_state *t, int64_t now)
{
	int64_t interval = __atomic_load_n(&settings.interval_ns, __ATOMIC_RELAXED);
	int64_t busy = __atomic_load_n(&settings.busy_interval_ns, __ATOMIC_RELAXED);
	if (!t->use_stall)
		return 0;
	if (t->busy.busy || busy <= 0 || busy >= interval) {
		manners_stall_pause(&t->stall);
		return 0;
	}
	if (now - t->last_processed_ns < busy || !manners_stall_due(&t->stall, now))
		return 0;
	uint64_t some;
	if (machine_cpu_stall_read(&some) < 0) {
		t->use_stall = 0; /* no PSI here: the spans alone */
		return 0;
	}
	t->rose = manners_stall_feed(&t->stall, now, some) == 1;
	return t->rose;
}

/* The fast-path interval (§7.1): settings.busy_interval_ns while others use
 * a CPU (quiet.h's quick polls: a CPU shared with the thread is judged in
 * a quarter second), else settings.interval_ns. */
static int64_t fast_path_ns(const struct thread_state *t)
{
	int64_t interval = __atomic_load_n(&settings.interval_ns, __ATOMIC_RELAXED);
	int64_t busy = __atomic_load_n(&settings.busy_interval_ns, __ATOMIC_RELAXED);
	return t->busy.busy && busy > 0 && busy < interval ? busy : interval;
}

/* Called by multiplex_turn() every MANNERS_QUIET_STEP_NS while this
 * thread sits out a suspension, without the table's lock: has the machine
 * been quiet for quiet_ns (quiet.h: everybody's CPU time less this
 * process's own, the disks)?  Then the foreground has stopped, and the
 * suspension ends now.  It only ever shortens one, as in benice and run. */
static int quiet_watch(void *context, int first, int64_t now_ns)
{
	struct thread_state *t = context;
	if (t->quiet.quiet_ns <= 0)
		return 0;
	if (first)
		manners_quiet_reset(&t->quiet);
	struct manners_activity sample;
	if (machine_sample(t, now_ns, &sample) < 0 || manners_quiet_feed(&t->quiet, &sample) != 1)
		return 0;
	t->shortened++;
	return 1;
}

/* Called by multiplex_turn() under the table's lock: the controller's
 * judgment of this testpoint (Fig. 2), or a discard (§7.1, hung). */
static int64_t decide(void *context, int was_hung, int64_t now_ns)
{
	struct thread_state *t = context;
	if (t->measurement_count == 0)
		return 0;
	if (was_hung) {
		manners_controller_discard(&t->controller);
		return 0;
	}
	int64_t wait = 0;
	for (int i = 0; i < t->measurement_count; i++) {
		struct measurement *m = &t->measurements[i];
		if (m->run_ns <= 0)
			continue;
		/* An interval that ended at an earlier fast-path call is placed
		 * there, so that subsampling (§4.3) sees when it ran. */
		int64_t end = m->end_ns != 0 && m->end_ns < now_ns ? m->end_ns : now_ns;
		manners_controller_machine_quiet(&t->controller,
						 manners_quiet_history_quiet(&t->seen, &t->quiet,
									     &t->busy));
		int64_t w = manners_controller_testpoint(&t->controller, m->index, m->count,
							 m->progress, m->run_ns, end, NULL);
		if (w > wait)
			wait = w;
		double target;
		t->target_ns = manners_controller_target_ns(&t->controller, m->index, m->count,
							    m->progress, &target) == 0
				       ? (int64_t)target : -1;
		t->last_run_ns = m->run_ns;
	}
	return wait;
}

static void measurement_set(struct measurement *m, int index, int count, const double *progress,
			    int64_t run_ns, int64_t end_ns)
{
	m->end_ns = end_ns;
	m->index = index;
	m->count = count;
	for (int k = 0; k < count; k++)
		m->progress[k] = progress[k];
	m->run_ns = run_ns;
}

/* Progress gathered over fast-path calls, each at most MANNERS_PROGRESS_MAX:
 * the sum stops there too, so that the controller takes it. */
static double progress_add(double a, double b)
{
	double sum = a + b;
	return sum < MANNERS_PROGRESS_MAX ? sum : MANNERS_PROGRESS_MAX;
}

static int process_testpoint(struct thread_state *t, int index, int count, const double *progress,
			     int64_t now)
{
	pthread_mutex_lock(&library_lock);
	process_open_locked();
	int opened = process.opened;
	int64_t hung_ns = settings.hung_ns, half_life_ns = settings.half_life_ns;
	pthread_mutex_unlock(&library_lock);
	if (!opened)
		return -ENOMEM;

	/* What this testpoint measured: the interval since the last processed
	 * one, split at the last fast-path call when the phase changed. */
	t->measurement_count = 0;
	if (t->started && t->slot >= 0) {
		if (t->pending && t->pending_index != index) {
			measurement_set(&t->measurements[0], t->pending_index, t->pending_count,
					t->pending_progress, t->pending_last_ns - t->last_processed_ns,
					t->pending_last_ns);
			measurement_set(&t->measurements[1], index, count, progress,
					now - t->pending_last_ns, 0);
			t->measurement_count = 2;
		} else {
			struct measurement *m = &t->measurements[0];
			measurement_set(m, index, count, progress, now - t->last_processed_ns, 0);
			if (t->pending)
				for (int k = 0; k < count; k++)
					m->progress[k] = progress_add(m->progress[k],
								      t->pending_progress[k]);
			t->measurement_count = 1;
		}
	}
	t->pending = 0;
	if (t->measurement_count > 0 &&
	    fast_path_ns(t) < __atomic_load_n(&settings.interval_ns, __ATOMIC_RELAXED))
		t->busy_processed++; /* due at the busy interval */
	if (t->measurement_count > 0)
		quiet_sample(t, now);
	if (((t->rose && t->busy.busy) || t->disk_rose) && t->measurement_count > 0) {
		/* A rival has just come, to this thread's CPU (stall_rise()) or
		 * to the disk (quiet_sample()): what this thread did before says
		 * nothing of now, so the sign test begins a new sample
		 * (manners_controller_new_sample()).  This testpoint's
		 * measurement is its first: the pressure is read only in the
		 * second half of an interval (0.05-0.1 s), whose contended part
		 * is at least a quarter step of the pressure, and the disks at
		 * the end of one (0.1 s) whose last step saw the rival - not, as
		 * in benice's and run's 0.25 s, mostly the thread alone. */
		manners_controller_new_sample(&t->controller);
	}
	t->disk_rose = 0;
	int turn = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		if (t->slot < 0) {
			t->slot = multiplex_join(&process.mux, t->priority);
			if (t->slot < 0) {
				int rc = t->slot;
				t->slot = -1;
				return rc;
			}
			t->started = 0;
		}
		turn = multiplex_turn(&process.mux, t->slot, hung_ns, half_life_ns, decide, quiet_watch,
				      MANNERS_QUIET_STEP_NS, t,
				      __atomic_load_n(&settings.interruptible, __ATOMIC_RELAXED));
		if (turn != -EINVAL)
			break;
		t->slot = -1; /* reclaimed as if dead: join again */
		t->measurement_count = 0;
	}
	int64_t released = library_clock_ns();
	t->blocked_ns += released - now;
	if (released - now >= t->stall.step_ns)
		manners_stall_pause(&t->stall); /* suspended or waiting: not looked at */
	if (t->use_disk_rise && released - now >= t->disk_rise.step_ns)
		manners_disk_rise_pause(&t->disk_rise);
	t->last_processed_ns = released;
	t->started = 1;
	t->processed++;
	if (t->measurement_count > 0)
		phases_publish(t, released);
	t->interrupted = turn == -EINTR;
	return turn == -EINTR ? -EINTR : 0;
}

MANNERS_EXPORT int manners_testpoint(int index, int count, const double *progress)
{
	int saved = errno, rc = 0;
	library_start();
	if (!arguments_valid(count, progress)) {
		errno = saved;
		return -EINVAL;
	}
	struct thread_state *t = thread_get(&rc);
	if (t == NULL)
		goto out;
	/* Disabled: the arguments checked, nothing else - no phase made (a
	 * phase made while disabled never loaded its kept target once
	 * enabled, and 64 indexes used so made -ENOSPC of the 65th). */
	if (!__atomic_load_n(&settings.enable, __ATOMIC_RELAXED)) {
		t->testpoints++;
		if (t->slot >= 0)
			multiplex_leave(&process.mux, t->slot);
		t->slot = -1;
		t->pending = 0;
		goto out;
	}
	/* An index keeps the count of its first call (§7.1). */
	const struct manners_phase *phase = phase_of(t, index);
	if (phase != NULL && phase->count != count) {
		rc = -EINVAL;
		goto out;
	}
	if (phase == NULL && (rc = phase_prepare(t, index, count)) < 0)
		goto out;
	t->testpoints++;
	int64_t now = library_clock_ns();
	/* The fast path (§7.1): too soon after the last processed testpoint to
	 * be worth judging; the progress is kept for the next one. */
	if (t->started && t->slot >= 0 && now - t->last_processed_ns < fast_path_ns(t) &&
	    (!t->pending || t->pending_index == index) && !stall_rise(t, now)) {
		if (!t->pending) {
			t->pending = 1;
			t->pending_index = index;
			t->pending_count = count;
			memset(t->pending_progress, 0, sizeof t->pending_progress);
		}
		for (int k = 0; k < count; k++)
			t->pending_progress[k] = progress_add(t->pending_progress[k], progress[k]);
		t->pending_last_ns = now;
		goto out;
	}
	rc = process_testpoint(t, index, count, progress, now);
	t->rose = 0; /* spent, or lost with an error */
out:
	errno = saved;
	return rc;
}

MANNERS_EXPORT int manners_resume(void)
{
	int saved = errno, rc = 0;
	library_start();
	struct thread_state *t = current_thread;
	if (t == NULL || !t->interrupted || t->slot < 0 ||
	    t->fork_generation != __atomic_load_n(&fork_generation, __ATOMIC_RELAXED)) {
		errno = saved;
		return 0;
	}
	int64_t start = library_clock_ns();
	rc = multiplex_turn(&process.mux, t->slot, __atomic_load_n(&settings.hung_ns, __ATOMIC_RELAXED),
			    __atomic_load_n(&settings.half_life_ns, __ATOMIC_RELAXED), NULL,
			    quiet_watch, MANNERS_QUIET_STEP_NS, t,
			    __atomic_load_n(&settings.interruptible, __ATOMIC_RELAXED));
	if (rc == -EINVAL) {
		t->slot = -1; /* reclaimed meanwhile: the next testpoint joins */
		rc = 0;
	}
	t->interrupted = rc == -EINTR;
	/* The time waited is no running time of the next measurement. */
	int64_t released = library_clock_ns();
	t->blocked_ns += released - start;
	t->last_processed_ns = released;
	errno = saved;
	return rc;
}

MANNERS_EXPORT int manners_set_priority(int priority)
{
	int saved = errno, rc = 0;
	library_start();
	struct thread_state *t = thread_get(&rc);
	if (t != NULL) {
		if (priority < MANNERS_PRIORITY_LOWEST)
			priority = MANNERS_PRIORITY_LOWEST;
		if (priority > MANNERS_PRIORITY_HIGHEST)
			priority = MANNERS_PRIORITY_HIGHEST;
		t->priority = priority;
		if (t->slot >= 0)
			multiplex_set_priority(&process.mux, t->slot, priority);
	}
	errno = saved;
	return rc;
}

MANNERS_EXPORT int manners_leave(void)
{
	int saved = errno;
	library_start();
	struct thread_state *t = current_thread;
	if (t != NULL && t->fork_generation == __atomic_load_n(&fork_generation, __ATOMIC_RELAXED) &&
	    t->slot >= 0) {
		multiplex_leave(&process.mux, t->slot);
		t->slot = -1;
		t->started = 0;
		t->pending = 0;
	}
	errno = saved;
	return 0;
}

MANNERS_EXPORT int manners_config_set(const char *name, const char *value)
{
	int saved = errno;
	library_start();
	pthread_mutex_lock(&library_lock);
	int rc = manners_settings_set(&settings, name, value);
	pthread_mutex_unlock(&library_lock);
	errno = saved;
	return rc;
}

MANNERS_EXPORT int manners_config_get(const char *name, char *value, size_t size)
{
	int saved = errno;
	library_start();
	pthread_mutex_lock(&library_lock);
	int rc = manners_settings_get(&settings, name, value, size);
	pthread_mutex_unlock(&library_lock);
	errno = saved;
	return rc;
}

MANNERS_EXPORT int manners_stats(struct manners_stats *out, size_t size)
{
	int saved = errno;
	if (out == NULL || size < sizeof out->size) {
		errno = saved;
		return -EINVAL;
	}
	library_start();
	struct manners_stats s;
	memset(&s, 0, sizeof s);
	s.target_ns = -1;
	struct thread_state *t = current_thread;
	if (t != NULL) {
		const struct manners_controller_stats *c = &t->controller.stats;
		s.testpoints = t->testpoints;
		s.processed = t->processed;
		s.compared = c->compared;
		s.judged_good = c->judged_good;
		s.judged_poor = c->judged_poor;
		s.discarded = c->discarded;
		s.suspended_ns = c->suspended_ns;
		s.probation_ns = c->probation_ns;
		s.blocked_ns = t->blocked_ns;
		s.target_ns = t->target_ns;
		s.last_run_ns = t->last_run_ns;
		s.last_judgment = c->last_judgment;
		s.priority = t->priority;
		s.loaded_phases = t->loaded_phases;
		s.forgiven = c->forgiven;
		s.busy_processed = t->busy_processed;
		s.pressure_rises = t->pressure_rises;
		s.disk_rises = t->disk_rises;
		s.shortened = t->shortened;
		if (t->measurement_count > 0) {
			const struct manners_phase *phase =
				phase_of(t, t->measurements[t->measurement_count - 1].index);
			s.regulating = phase != NULL && manners_calib_regulating(&phase->calib);
		}
	}
	pthread_mutex_lock(&library_lock);
	if (process.opened) {
		s.shared = process.mux.shared;
		s.regulated_threads = multiplex_threads(&process.mux);
	}
	pthread_mutex_unlock(&library_lock);
	size_t n = size < sizeof s ? size : sizeof s;
	s.size = n;
	memcpy(out, &s, n);
	if (size > sizeof s)
		memset((char *)out + sizeof s, 0, size - sizeof s);
	errno = saved;
	return 0;
}

MANNERS_EXPORT int manners_save(void)
{
	int saved = errno;
	library_start();
	pthread_mutex_lock(&library_lock);
	process_open_locked();
	int rc = save_locked();
	pthread_mutex_unlock(&library_lock);
	errno = saved;
	return rc;
}
