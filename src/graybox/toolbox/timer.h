/*
 * timer.h - the gray toolbox's fast timer (graybox-icl §5, "Measuring
 * Output"): a monotonic clock in nanoseconds, cheap enough to wrap every
 * probe.
 *
 * The paper used rdtsc.  We read CLOCK_MONOTONIC through the vDSO instead:
 * on x86-64 Linux that is rdtsc underneath (arch/x86/entry/vdso, the "tsc"
 * clocksource) already scaled to ns, about 20 ns a call, with no syscall;
 * a raw rdtsc would need its own frequency calibration, is not ordered
 * against the timed load without a fence, and on a VM may be trapped or
 * drift between CPUs.  Where the kernel falls back to a clocksource the
 * vDSO cannot read (e.g. hpet), each call becomes a syscall (~0.5 us):
 * timer_overhead_ns() measures what a call costs here, so a caller can tell
 * whether its shortest interval is above the timer's own noise.
 */
#ifndef DISCNICE_TOOLBOX_TIMER_H
#define DISCNICE_TOOLBOX_TIMER_H

#include <stdint.h>
#include <time.h>

#define TIMER_NS_PER_SEC UINT64_C(1000000000)

/* Now, in ns since an arbitrary fixed point (system-wide, never steps). */
static inline uint64_t timer_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * TIMER_NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* The smallest difference of two back-to-back timer_now_ns() calls over a
 * few hundred tries: what timing "nothing" costs on this machine. */
static inline uint64_t timer_overhead_ns(void)
{
	uint64_t best = UINT64_MAX;
	for (int i = 0; i < 256; i++) {
		uint64_t a = timer_now_ns();
		uint64_t b = timer_now_ns();
		if (b - a < best)
			best = b - a;
	}
	return best;
}

#endif
