/*
 * agent.c - start-up, the re-entry guard, fork, counters and trace of
 * libdiscnice.so (see agent.h).
 *
 * Start-up is once-only and may happen from the constructor or from the
 * first hooked call (a program's own constructors, or the dynamic loader,
 * may call read() before ours runs).  Whatever goes wrong here, the agent
 * says so once on stderr and the program runs unregulated: it is never
 * stopped, and no call it makes fails because of us.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/io.h"
#include "agent/libc_real.h"
#include "agent/open_file.h"
#include "common/clock.h"
#include "common/segment.h"

struct agent agent = { .trace_fd = -1 };

enum { AGENT_UNSTARTED, AGENT_STARTING, AGENT_ON, AGENT_OFF };
static int agent_state = AGENT_UNSTARTED;

/* initial-exec: no __tls_get_addr call (and no allocation) on the hot path. */
static __thread int in_agent __attribute__((tls_model("initial-exec")));

bool agent_enter(void)
{
	if (in_agent)
		return false;
	int state = __atomic_load_n(&agent_state, __ATOMIC_ACQUIRE);
	if (state != AGENT_ON) {
		if (state != AGENT_UNSTARTED)
			return false;
		agent_init();
		if (__atomic_load_n(&agent_state, __ATOMIC_ACQUIRE) != AGENT_ON)
			return false;
	}
	in_agent = 1;
	return true;
}

void agent_leave(void)
{
	in_agent = 0;
}

/* One line on stderr, once per process, through the real write. */
static void agent_warn(const char *fmt, const char *arg, int err)
{
	char line[512];
	int n = snprintf(line, sizeof line, "discnice: ");
	n += snprintf(line + n, sizeof line - (size_t)n, fmt, arg, err ? strerror(err) : "");
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	if (libc_real.write)
		libc_real.write(STDERR_FILENO, line, (size_t)n);
}

static uint64_t read_centisecs(const char *path, uint64_t fallback)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fallback;
	ssize_t n = libc_real.read(fd, buf, sizeof buf - 1);
	libc_real.close(fd);
	if (n <= 0)
		return fallback;
	buf[n] = '\0';
	return strtoull(buf, NULL, 10);
}

static void open_trace(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		agent_warn("cannot open trace file %s: %s", path, errno);
		return;
	}
	/* Keep out of the low numbers programs expect to get from open(). */
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 1000);
	if (high >= 0) {
		libc_real.close(fd);
		fd = high;
	}
	agent.trace_fd = fd;
}

/* fork in a threaded program: the prepare handler takes the agent's
 * process-wide locks so no other thread is inside them when the address
 * space is copied; both sides then let go (CONVENTIONS: libfaketime's
 * "re-done after fork"). */
static void before_fork(void)
{
	io_before_fork();
}

static void after_fork_parent(void)
{
	io_after_fork(false);
	open_file_after_fork(false);
}

static void after_fork_child(void)
{
	segment_forget_pid();
	io_after_fork(true);
	open_file_after_fork(true);
	in_agent = 0;
}

void agent_init(void)
{
	int expected = AGENT_UNSTARTED;
	if (!__atomic_compare_exchange_n(&agent_state, &expected, AGENT_STARTING, 0,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	int saved = errno;
	in_agent = 1;
	libc_real_resolve();

	int state = AGENT_OFF;
	const char *path = getenv(DN_ENV_SEGMENT);
	struct dn_segment *seg = NULL;
	int rc;
	if (!path || !*path) {
		/* Preloaded by hand, not by `discnice run`: nothing to police. */
		agent_warn("libdiscnice.so loaded without a class%s (start jobs with 'discnice run'); "
			   "running unregulated", "", 0);
	} else if ((rc = segment_attach_path(path, &seg)) < 0) {
		agent_warn("class segment %s is unusable (%s); running unregulated", path, -rc);
	} else {
		agent.seg = seg;
		/* The program may change its environment before it exits. */
		snprintf(agent.seg_path, sizeof agent.seg_path, "%s", path);
		const char *slot = getenv(DN_ENV_RUN_SLOT);
		if (slot) {
			unsigned long i = strtoul(slot, NULL, 10);
			if (i < DN_MAX_RUNS)
				agent.run = &seg->runs[i];
		}
		agent.predict_mask = seg->predict_mask;
		agent.chunk_bytes = seg->chunk_bytes ? seg->chunk_bytes : (256u << 10);
		/* Periodic writeback cleans a page within dirty_expire +
		 * dirty_writeback of its dirtying (mm/page-writeback.c). */
		agent.writeback_expire_ns =
			(read_centisecs("/proc/sys/vm/dirty_expire_centisecs", 3000) +
			 read_centisecs("/proc/sys/vm/dirty_writeback_centisecs", 500)) *
			(NS_PER_SEC / 100);
		if (seg->trace_path[0])
			open_trace(seg->trace_path);
		if (io_init() == 0) {
			pthread_atfork(before_fork, after_fork_parent, after_fork_child);
			state = AGENT_ON;
		}
	}
	in_agent = 0;
	errno = saved;
	__atomic_store_n(&agent_state, state, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void agent_constructor(void)
{
	agent_init();
}

/* exit(): a process of a class whose supervisor was killed may be the
 * last user of the class's file; then it removes it (issue #4 §5).  A
 * process that is killed, or leaves by exec or _exit, runs no destructor:
 * the next `discnice run` removes what is left (tool_run.c). */
__attribute__((destructor)) static void agent_destructor(void)
{
	if (__atomic_load_n(&agent_state, __ATOMIC_ACQUIRE) != AGENT_ON || !agent.seg_path[0])
		return;
	int saved = errno, was_in = in_agent;
	in_agent = 1;
	segment_remove_abandoned(agent.seg, agent.seg_path, false);
	in_agent = was_in;
	errno = saved;
}

/* One atomic add per event: to this run's counters, which the class's
 * readers sum; to the class's own only for a process with no run slot. */
void agent_count(size_t field_offset, uint64_t value)
{
	if (!value || !agent.seg)
		return;
	struct dn_counters *counters = agent.run ? &agent.run->counters : &agent.seg->counters;
	segment_count((uint64_t *)((char *)counters + field_offset), value);
}

void agent_trace(const char *op, uint64_t file_bytes, uint64_t predicted_bytes, uint64_t delay_ns)
{
	if (agent.trace_fd < 0)
		return;
	char line[160];
	uint64_t t = clock_now_ns() - agent.seg->created_ns;
	int n = snprintf(line, sizeof line, "%" PRIu64 ".%06" PRIu64 " %d %s %" PRIu64 " %" PRIu64
			 " %" PRIu64 ".%06" PRIu64 "\n",
			 t / NS_PER_SEC, t % NS_PER_SEC / 1000, (int)getpid(), op, file_bytes,
			 predicted_bytes, delay_ns / NS_PER_SEC, delay_ns % NS_PER_SEC / 1000);
	if (n > 0 && n < (int)sizeof line)
		libc_real.write(agent.trace_fd, line, (size_t)n); /* O_APPEND: whole lines */
}
