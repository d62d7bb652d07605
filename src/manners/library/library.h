/*
 * library.h - what the testpoint library's runtime files share: the clock,
 * the one diagnostics function, and the process-wide settings.
 */
#ifndef DISCNICE_MANNERS_LIBRARY_LIBRARY_H
#define DISCNICE_MANNERS_LIBRARY_LIBRARY_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ns: intervals between testpoints, suspensions. */
static inline int64_t library_clock_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One line on stderr, prefixed "manners: ", errno preserved (warn.c).
 * Every diagnostic of the library goes through here. */
void library_warn(const char *format, ...) __attribute__((format(printf, 1, 2)));

#endif
