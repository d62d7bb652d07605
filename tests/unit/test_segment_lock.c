/* Description: the class lock is never held longer than DN_LOCK_BREAK_NS by a stopped, killed or pid-reused holder, nor taken from one that is running, a holder whose lock was taken over releases nothing, and the rate window survives two writers at once. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/segment.h"
#include "policy/policy.h"
#include "policy/rate_window.h"
#include "unit.h"

/* Generous: the bound is 20 ms; a loaded CI machine may add scheduling
 * delay, but nothing near this. */
#define TAKEOVER_LIMIT_NS (2 * NS_PER_SEC)

static struct dn_segment *shared_segment(void)
{
	void *p = mmap(NULL, sizeof(struct dn_segment), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	struct dn_segment *seg = p;
	rate_window_init(&seg->window, NS_PER_SEC, clock_now_ns());
	return seg;
}

/* Taking the lock from whatever holds it now: how long it took. */
static uint64_t time_to_lock(struct dn_segment *seg, uint64_t *token)
{
	uint64_t t0 = clock_now_ns();
	errno = 4321;
	*token = segment_lock(seg);
	CHECK(errno == 4321); /* library code leaves errno alone */
	CHECK(__atomic_load_n(&seg->lock, __ATOMIC_RELAXED) == *token);
	return clock_now_ns() - t0;
}

/* Fork a child that takes the lock, tells us, runs inside() in the
 * critical section, then releases it; returns once the child holds it. */
static pid_t fork_holder(struct dn_segment *seg, void (*inside)(void))
{
	int ready[2];
	CHECK(pipe(ready) == 0);
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		segment_forget_pid();
		uint64_t mine = segment_lock(seg);
		char c = 'x';
		if (write(ready[1], &c, 1) != 1)
			_exit(2);
		inside();
		/* If the parent took the lock over meanwhile, releasing must
		 * leave its holding alone. */
		segment_unlock(seg, mine);
		_exit(0);
	}
	char c;
	CHECK(read(ready[0], &c, 1) == 1);
	close(ready[0]);
	close(ready[1]);
	return child;
}

static void stop_self(void)
{
	raise(SIGSTOP);
}

/* A child takes the lock and stops itself inside the critical section, as
 * a job process stopped by the user (or held by a debugger) would. */
static void stopped_holder(void)
{
	struct dn_segment *seg = shared_segment();
	pid_t child = fork_holder(seg, stop_self);
	int status;
	CHECK(waitpid(child, &status, WUNTRACED) == child && WIFSTOPPED(status));
	uint64_t token;
	uint64_t took = time_to_lock(seg, &token);
	CHECK(took >= DN_LOCK_BREAK_NS / 2); /* a live holder is not broken at once */
	CHECK(took < TAKEOVER_LIMIT_NS);
	kill(child, SIGCONT);
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0);
	CHECK(__atomic_load_n(&seg->lock, __ATOMIC_RELAXED) == token);
	segment_unlock(seg, token);
	CHECK(seg->lock == 0);
	munmap(seg, sizeof *seg);
}

static volatile int *busy_released;

static void compute_300ms(void)
{
	uint64_t until = clock_now_ns() + 300 * (NS_PER_SEC / 1000);
	while (clock_now_ns() < until)
		;
	*busy_released = 1;
}

/* A child takes the lock and computes for 300 ms inside the critical
 * section, as a holder preempted on a busy machine would: it is running,
 * so the lock is not taken from it; the waiter gets it from its release. */
static void busy_holder(void)
{
	struct dn_segment *seg = shared_segment();
	busy_released = mmap(NULL, sizeof *busy_released, PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(busy_released != MAP_FAILED);
	*busy_released = 0;
	pid_t child = fork_holder(seg, compute_300ms);
	uint64_t token;
	uint64_t took = time_to_lock(seg, &token);
	CHECK(*busy_released == 1); /* not taken from a running holder */
	CHECK(took < TAKEOVER_LIMIT_NS);
	int status;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0);
	segment_unlock(seg, token);
	munmap((void *)busy_released, sizeof *busy_released);
	munmap(seg, sizeof *seg);
}

/* A lock word naming a live process that is not in any critical section:
 * pid 1 (a reused pid looks exactly like this), and our own pid with an
 * old sequence number (a thread of ours that lost its lock long ago). */
static void live_unrelated_holder(void)
{
	struct dn_segment *seg = shared_segment();
	uint64_t holders[] = { (uint64_t)1 << 32 | 7,
			       (uint64_t)getpid() << 32 | 0xfffffff0u };
	for (unsigned i = 0; i < 2; i++) {
		seg->lock = holders[i];
		uint64_t token;
		uint64_t took = time_to_lock(seg, &token);
		CHECK(took < TAKEOVER_LIMIT_NS);
		/* The stale holder "unlocks" late: nothing happens. */
		segment_unlock(seg, holders[i]);
		CHECK(seg->lock == token);
		segment_unlock(seg, token);
	}
	munmap(seg, sizeof *seg);
}

/* A holder that died (SIGKILL inside the section): taken over at once,
 * without waiting out the bound. */
static void dead_holder(void)
{
	struct dn_segment *seg = shared_segment();
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0)
		_exit(0);
	CHECK(waitpid(child, NULL, 0) == child);
	seg->lock = (uint64_t)child << 32 | 1;
	uint64_t token;
	CHECK(time_to_lock(seg, &token) < DN_LOCK_BREAK_NS);
	segment_unlock(seg, token);
	munmap(seg, sizeof *seg);
}

/* Two writers inside the policy at once, as after a takeover: under ASan
 * and UBSan, no access outside the ring, whatever the interleaving. */
static struct dn_segment *race_seg;
static volatile int race_stop;

static void *race_writer(void *arg)
{
	const struct policy *policy = &policy_rate_window;
	uint64_t salt = (uint64_t)(uintptr_t)arg;
	while (!race_stop) {
		uint64_t now = clock_now_ns() + (salt * 7919) % (3 * NS_PER_SEC);
		policy->delay(&race_seg->window, &race_seg->caps, now, 4096 * salt, 4096);
		policy->charge(&race_seg->window, NULL, now, (int64_t)(4096 * salt),
			       salt & 1 ? -8192 : 8192);
		int64_t r, w;
		rate_window_sums(&race_seg->window, now, &r, &w);
		salt = salt * 6364136223846793005u + 1442695040888963407u;
	}
	return NULL;
}

static void overlapping_writers(void)
{
	race_seg = shared_segment();
	race_seg->caps.read_bps = 1 << 20;
	race_seg->caps.write_bps = 1 << 20;
	race_seg->caps.total_bps = 3 << 20;
	pthread_t threads[3];
	for (uintptr_t i = 0; i < 3; i++)
		CHECK(pthread_create(&threads[i], NULL, race_writer, (void *)(i + 1)) == 0);
	struct timespec half = { 0, 500 * 1000 * 1000 };
	nanosleep(&half, NULL);
	race_stop = 1;
	for (unsigned i = 0; i < 3; i++)
		pthread_join(threads[i], NULL);
	munmap(race_seg, sizeof *race_seg);
}

int main(void)
{
	stopped_holder();
	busy_holder();
	live_unrelated_holder();
	dead_holder();
	overlapping_writers();
	return 0;
}
