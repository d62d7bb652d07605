/*
 * signal_disposition.h - a signal's disposition as the kernel has it,
 * asked with rt_sigaction(2) directly: glibc's sigaction() refuses its
 * internal signals (32 and 33), and in a program the agent runs in, a
 * sigaction() may be wrapped.  The struct is the kernel's (struct
 * kernel_sigaction, 64-bit: handler, flags, restorer, mask).
 */
#ifndef DISCNICE_SIGNAL_DISPOSITION_H
#define DISCNICE_SIGNAL_DISPOSITION_H

#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* 0 with *handler (SIG_DFL, SIG_IGN or a function) and *flags (SA_*), or
 * -1 with errno. */
static inline int signal_disposition(int sig, void **handler, unsigned long *flags)
{
	struct { void *handler; unsigned long flags; void *restorer; uint64_t mask; } act;
	if (syscall(SYS_rt_sigaction, sig, NULL, &act, sizeof act.mask) != 0)
		return -1;
	*handler = act.handler;
	*flags = act.flags;
	return 0;
}

#endif
