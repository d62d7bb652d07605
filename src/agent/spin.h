/*
 * spin.h - the agent's process-local lock.  Critical sections are tens of
 * nanoseconds of bookkeeping; a pthread mutex would cost as much as the
 * section and is not safe to reset after fork.  Never held across a
 * sleep or a real I/O call (an open file's lock is held across a class
 * lock, which waits only while another holder overstays:
 * pieces_in_hand.c).
 */
#ifndef DISCNICE_SPIN_H
#define DISCNICE_SPIN_H

#include <sched.h>
#include <stdint.h>

#include <stdbool.h>

#include "common/clock.h"

extern bool agent_locks_abandoned;

/* In a child forked from a signal handler that interrupted the agent (see
 * agent.c), a lock may be held by a thread that does not exist there: the
 * child, alone, takes it anyway rather than spin for ever. */
static inline void spin_lock(uint32_t *lock)
{
	for (unsigned spins = 0;; spins++) {
		if (!__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE))
			return;
		while (__atomic_load_n(lock, __ATOMIC_RELAXED)) {
			if (++spins > 100) {
				if (agent_locks_abandoned)
					return;
				sched_yield();
			} else {
				cpu_relax();
			}
		}
	}
}

static inline void spin_unlock(uint32_t *lock)
{
	__atomic_store_n(lock, 0, __ATOMIC_RELEASE);
}

#endif
