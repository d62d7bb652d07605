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
 * any blocking call, and the wait resumes after it.  And at each
 * re-read the supervisor is looked for: one killed (SIGKILL) mid-
 * suspension left its job blocked until the deadline - up to
 * --manners-limit, a week - while discnice(1) promises a job whose
 * supervisor died runs on under the agent.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/clock.h"

#define RECHECK_NS (100 * 1000 * 1000ull)

/* Is the supervisor gone: no such process, or one that has ended and
 * that its parent has not reaped yet (a zombie: the test's Popen, a
 * script's background job)?  A pidfd is readable from the moment the
 * process ends (kernel/pid.c, pidfd_poll()); where there is none
 * (Linux < 5.3, a seccomp filter), kill(pid, 0), which sees a zombie as
 * alive.  Raw system calls, and no /proc read: close() and poll() are
 * the job's own hooked calls, and a read of /proc/PID/stat would count
 * in the job's rchar - about 1.5 kB/s of "progress" while suspended,
 * for whoever watches it. */
static bool supervisor_gone(void)
{
	pid_t pid = (pid_t)__atomic_load_n(&agent.run->pid, __ATOMIC_ACQUIRE);
	if (pid <= 0)
		return false;
	int saved = errno;
	bool gone;
	long fd = syscall(SYS_pidfd_open, pid, 0);
	if (fd >= 0) {
		struct pollfd p = { .fd = (int)fd, .events = POLLIN };
		struct timespec zero = { 0, 0 };
		gone = syscall(SYS_ppoll, &p, 1, &zero, NULL, 0) == 1 && (p.revents & POLLIN);
		syscall(SYS_close, (int)fd);
	} else {
		gone = errno == ESRCH || (kill(pid, 0) < 0 && errno == ESRCH);
	}
	errno = saved;
	return gone;
}

void agent_suspension_wait(void)
{
	for (;;) {
		uint64_t until = __atomic_load_n(&agent.run->suspend_until_ns, __ATOMIC_ACQUIRE);
		uint64_t now = clock_now_ns();
		if (until <= now)
			return;
		if (supervisor_gone()) {
			/* Nobody will end it: ended here, for every process
			 * of the job (unless the deadline moved meanwhile). */
			__atomic_compare_exchange_n(&agent.run->suspend_until_ns, &until, 0, false,
						    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
			return;
		}
		uint64_t step = until - now < RECHECK_NS ? until - now : RECHECK_NS;
		struct timespec ts = { .tv_sec = (time_t)(step / NS_PER_SEC),
				       .tv_nsec = (long)(step % NS_PER_SEC) };
		(void)agent_sleep(0, &ts); /* EINTR: look again */
	}
}
