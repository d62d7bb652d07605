/*
 * unit.h - the few macros every unit test uses.  A test is a program:
 * exit 0 pass, 1 fail, 77 skip (as automake and liburing's tests do).
 */
#ifndef DISCNICE_UNIT_H
#define DISCNICE_UNIT_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define UNIT_SKIP 77

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		exit(1); \
	} \
} while (0)

#define CHECK_EQ_U64(got, want) do { \
	uint64_t got_ = (uint64_t)(got), want_ = (uint64_t)(want); \
	if (got_ != want_) { \
		fprintf(stderr, "%s:%d: %s = %" PRIu64 ", want %" PRIu64 "\n", \
			__FILE__, __LINE__, #got, got_, want_); \
		exit(1); \
	} \
} while (0)

#endif
