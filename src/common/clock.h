/*
 * clock.h - one clock for every process of a class: CLOCK_MONOTONIC in ns.
 * The rate window lives in shared memory, so all writers must agree on the
 * time base; CLOCK_MONOTONIC is system-wide and read through the vDSO.
 */
#ifndef DISCNICE_CLOCK_H
#define DISCNICE_CLOCK_H

#include <stdint.h>
#include <time.h>

#define NS_PER_SEC UINT64_C(1000000000)

/* Tell the CPU we are spinning (PAUSE on x86, YIELD on arm64). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
	__asm__ __volatile__("yield");
#endif
}

static inline uint64_t clock_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

#endif
