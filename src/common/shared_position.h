/*
 * shared_position.h - what a read or write that took its range of a
 * shared file position gives back (the agent's io_range_take() and
 * io_range_done(), src/agent/io.c).  Pure: no I/O, no globals; tested
 * with every order of several calls (tests/unit/test_shared_position.c).
 *
 * The kernel holds a shared description's position for a whole read(2)
 * (fdget_pos(), FMODE_ATOMIC_POS) and moves it by what the call moved.
 * The agent cuts a regulated call into pieces, so it takes the call's
 * whole range first - lseek(fd, count, SEEK_CUR), under the same lock -
 * and gives back afterwards what it did not move.  Other processes take
 * their ranges after it meanwhile, and finish in any order.
 */
#ifndef DISCNICE_SHARED_POSITION_H
#define DISCNICE_SHARED_POSITION_H

#include <stdbool.h>
#include <stdint.h>

struct shared_range_end {
	int64_t base, end;  /* the range the call took */
	uint64_t done;      /* bytes it moved, from base */
	bool at_eof;        /* it stopped short at the file's end */
};

enum shared_give_back {
	SHARED_KEEP,    /* leave the position as it is */
	SHARED_SET,     /* lseek(fd, arg, SEEK_SET) */
	SHARED_BACK,    /* lseek(fd, -arg, SEEK_CUR) */
};

/*
 * How the call gives back what it did not move, given the position now.
 *
 * A call that met the end of the file moves the position back by what it
 * did not read, relative to where it is, as one lseek(SEEK_CUR) under the
 * kernel's lock.  Every range taken after it lies past the end too, and
 * its call gives back all of it; moves back add up in any order, so the
 * position ends where the whole calls would have left it.  (Set absolute,
 * the last to finish won: one of two readers at the end, finishing after
 * the other, left the position a record past the end.)
 *
 * A call cut short elsewhere (a signal, an error) gives back only while
 * nobody took a range after it (now == end): theirs are being read, and
 * must not be read again.
 */
enum shared_give_back shared_position_give_back(const struct shared_range_end *r, int64_t now,
						int64_t *arg);

#endif
