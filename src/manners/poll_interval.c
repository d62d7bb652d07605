/*
 * poll_interval.c - the adaptive polling of an external regulator (MS
 * Manners §7.2; the rule and its numbers are in poll_interval.h).
 */
#include <errno.h>
#include <stddef.h>

#include "manners/poll_interval.h"

void manners_poll_config_default(struct manners_poll_config *config)
{
	if (config == NULL)
		return;
	*config = (struct manners_poll_config){
		.min_ns = MANNERS_POLL_MIN_DEFAULT,
		.max_ns = MANNERS_POLL_MAX_DEFAULT,
		.window = MANNERS_POLL_WINDOW_DEFAULT,
		.raise_above = MANNERS_POLL_RAISE_ABOVE_DEFAULT,
		.lower_below = MANNERS_POLL_LOWER_BELOW_DEFAULT,
		.stall_polls = MANNERS_POLL_STALL_DEFAULT,
	};
}

int manners_poll_init(struct manners_poll *poll, const struct manners_poll_config *config)
{
	if (poll == NULL)
		return -EINVAL;
	struct manners_poll_config c;
	if (config == NULL)
		manners_poll_config_default(&c);
	else
		c = *config;
	/* Written so that NaN fails every test. */
	if (!(c.min_ns > 0 && c.max_ns >= c.min_ns && c.window >= 1 && c.stall_polls >= 1 &&
	      c.lower_below >= 0.0 && c.raise_above <= 1.0 && c.lower_below < c.raise_above))
		return -EINVAL;
	*poll = (struct manners_poll){ .config = c, .interval_ns = c.min_ns };
	return 0;
}

/* The end of a round: lengthen, shorten or keep the interval. */
static void round_end(struct manners_poll *poll)
{
	const struct manners_poll_config *c = &poll->config;
	double fraction = (double)poll->unchanged / (double)poll->polls;
	if (fraction > c->raise_above) {
		/* A counter coarser than the polls: wait for it.  Halving
		 * max_ns first keeps the doubling from overflowing. */
		poll->interval_ns = poll->interval_ns > c->max_ns / 2 ? c->max_ns
								     : poll->interval_ns * 2;
	} else if (fraction <= c->lower_below) {
		/* Every poll saw progress: poll more often, down to the
		 * lower limit. */
		int64_t shorter = poll->interval_ns - poll->interval_ns / 4;
		poll->interval_ns = shorter < c->min_ns ? c->min_ns : shorter;
	}
	poll->polls = poll->unchanged = 0;
}

int manners_poll_record(struct manners_poll *poll, int changed)
{
	if (poll == NULL)
		return -EINVAL;
	poll->polls++;
	if (!changed)
		poll->unchanged++;
	if (poll->polls >= poll->config.window)
		round_end(poll);
	if (changed) {
		poll->stalled = 0;
		return 1;
	}
	if (++poll->stalled >= poll->config.stall_polls) {
		poll->stalled = 0;
		return 1;
	}
	return 0;
}
