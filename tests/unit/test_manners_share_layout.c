/* Description: the testpoint library's per-user turn table (src/manners/library/multiplex.h) has a fixed layout of fixed-width types; any change must bump MANNERS_SHARE_VERSION so that libraries of another version refuse the file instead of misreading it. */
#include <pthread.h>
#include <stddef.h>

#include "unit.h"
#include "manners/library/multiplex.h"

_Static_assert(MANNERS_SHARE_VERSION == 0x676c0001u, "layout changed: update the offsets below");
_Static_assert(offsetof(struct manners_share, magic) == 0, "magic first");
_Static_assert(offsetof(struct manners_share, version) == 8, "");
_Static_assert(offsetof(struct manners_share, size) == 12, "");
_Static_assert(offsetof(struct manners_share, owner_uid) == 16, "");
_Static_assert(offsetof(struct manners_share, wake_sequence) == 20, "");
_Static_assert(offsetof(struct manners_share, lock) == 24, "");
_Static_assert(offsetof(struct manners_share, running) == 88, "");
_Static_assert(offsetof(struct manners_share, decay_started) == 92, "");
_Static_assert(offsetof(struct manners_share, decayed_ns) == 96, "");
_Static_assert(offsetof(struct manners_share, owners) == 104, "");
_Static_assert(offsetof(struct manners_share, threads) == 104 + 8 * MANNERS_SHARE_THREADS, "");
_Static_assert(sizeof(struct manners_share_thread) == 32, "timeshare.h's slot is part of it");
_Static_assert(offsetof(struct manners_share_thread, usage_ns) == 8, "");
_Static_assert(offsetof(struct manners_share_thread, eligible_ns) == 16, "");
_Static_assert(offsetof(struct manners_share_thread, since_ns) == 24, "");
_Static_assert(sizeof(struct manners_share) == 104 + 40 * MANNERS_SHARE_THREADS, "");
_Static_assert(sizeof(pthread_mutex_t) <= MANNERS_SHARE_LOCK_BYTES, "the lock must fit");

int main(void)
{
	/* The futex word must be 4-byte aligned, the lock 8-byte. */
	CHECK(offsetof(struct manners_share, wake_sequence) % 4 == 0);
	CHECK(offsetof(struct manners_share, lock) % 8 == 0);
	return 0;
}
