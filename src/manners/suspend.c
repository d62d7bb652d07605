/*
 * suspend.c - exponential suspension, instantaneous resumption (MS Manners
 * §4.1, §6.1 eq. 3; the reading of eq. 3 is in suspend.h).
 */
#include <errno.h>
#include <stddef.h>

#include "manners/sign_test.h"
#include "manners/suspend.h"

int manners_suspend_init(struct manners_suspend *suspend, int64_t initial_ns, int64_t limit_ns)
{
	if (suspend == NULL || initial_ns <= 0 || limit_ns < initial_ns)
		return -EINVAL;
	suspend->initial_ns = initial_ns;
	suspend->limit_ns = limit_ns;
	suspend->next_ns = initial_ns;
	suspend->poor_run = 0;
	return 0;
}

int manners_suspend_settle(int64_t *initial_ns, int64_t limit_ns, int given)
{
	if (initial_ns == NULL || limit_ns <= 0)
		return -EINVAL;
	if (*initial_ns <= limit_ns)
		return 0;
	if (given)
		return -EINVAL;
	*initial_ns = limit_ns;
	return 0;
}

int64_t manners_suspend_judge(struct manners_suspend *suspend, int judgment)
{
	if (suspend == NULL || suspend->initial_ns <= 0 || suspend->limit_ns < suspend->initial_ns)
		return -EINVAL;
	switch (judgment) {
	case MANNERS_UNKNOWN:
		return 0; /* run on to the next testpoint, suspension kept (§4.2) */
	case MANNERS_GOOD:
		suspend->next_ns = suspend->initial_ns;
		suspend->poor_run = 0;
		return 0;
	case MANNERS_POOR: {
		int64_t wait = suspend->next_ns;
		/* A damaged value is brought back inside [initial, limit]. */
		if (wait < suspend->initial_ns)
			wait = suspend->initial_ns;
		if (wait > suspend->limit_ns)
			wait = suspend->limit_ns;
		/* Doubling compared against the limit first: never overflows. */
		suspend->next_ns = wait > suspend->limit_ns / 2 ? suspend->limit_ns : 2 * wait;
		if (suspend->poor_run < UINT32_MAX)
			suspend->poor_run++;
		return wait;
	}
	default:
		return -EINVAL;
	}
}
