/*
 * suspension.c - where a job under --policy manners is suspended: at its
 * next hooked I/O call (MS Manners §4.1; the controller runs in the
 * supervisor, src/tool/tool_manners.c).
 *
 * Why here and not by a signal.  BeNice (§7.2) stops an unmodified program
 * wherever it happens to be, possibly holding a lock or an exclusive file
 * handle a foreground process then waits for: §3's priority inversion,
 * for which the paper has no answer.  A hooked I/O call is a well-defined
 * point: the program is inside read(), write(), ... of its own accord, and
 * holds only what it holds across any system call.  The library form of
 * the paper (§7.1) has the same property for the same reason.
 *
 * The deadline is re-read at least every 100 ms, so that the supervisor can
 * shorten a suspension (contention seen to end, Ctrl-C, the job's end) or
 * lengthen it; a signal handler that runs meanwhile runs as it would during
 * any blocking call, and the wait resumes after it.
 */
#include <errno.h>
#include <time.h>

#include "agent/agent.h"
#include "common/clock.h"

#define RECHECK_NS (100 * 1000 * 1000ull)

void agent_suspension_wait(void)
{
	for (;;) {
		uint64_t until = __atomic_load_n(&agent.run->suspend_until_ns, __ATOMIC_ACQUIRE);
		uint64_t now = clock_now_ns();
		if (until <= now)
			return;
		uint64_t step = until - now < RECHECK_NS ? until - now : RECHECK_NS;
		struct timespec ts = { .tv_sec = (time_t)(step / NS_PER_SEC),
				       .tv_nsec = (long)(step % NS_PER_SEC) };
		(void)agent_sleep(0, &ts); /* EINTR: look again */
	}
}
