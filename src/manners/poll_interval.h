/*
 * poll_interval.h - how often `discnice benice` reads an unmodified
 * program's progress, and which reads become testpoints (MS Manners §7.2,
 * §4.1).
 *
 * §7.2: "BeNice automatically adjusts the polling frequency to track the
 * rate of performance-counter updates.  If the fraction of polling intervals
 * with no change in progress exceeds a threshold, BeNice increases the
 * polling interval.  If this fraction falls below a threshold, BeNice
 * decreases the interval, subject to a lower limit."  The paper gives no
 * numbers.  The rule here:
 *
 *  - polls are judged in rounds of `window` polls (default 8);
 *  - a round in which more than `raise_above` of the polls (default 1/4)
 *    saw no change doubles the interval, up to max_ns (default 8 s): the
 *    counter is coarser than the polls;
 *  - a round in which at most `lower_below` of them (default 0) saw no
 *    change shortens it by a quarter, down to min_ns (default 250 ms: §4.1
 *    wants a testpoint "at least once per few hundred milliseconds");
 *  - in between, the interval stays (a hysteresis band, so a counter
 *    updated about once per poll does not make it oscillate).
 *
 * Which polls are testpoints.  A poll that saw no change is not one on its
 * own: a coarse counter's unchanged reading says nothing about the rate
 * (it would be judged "below target" and suspend a job that runs at full
 * speed).  Its running time is carried into the next poll that sees a
 * change, so that testpoint's rate covers the whole interval.  But a job
 * that makes no progress at all is the strongest sign of contention, so
 * after `stall_polls` unchanged polls in a row (default 4) the poll is a
 * testpoint with zero progress.
 *
 * Plain C: no I/O, no clock; the caller polls and passes what it saw.
 */
#ifndef DISCNICE_MANNERS_POLL_INTERVAL_H
#define DISCNICE_MANNERS_POLL_INTERVAL_H

#include <stdint.h>

#define MANNERS_POLL_MIN_DEFAULT   (INT64_C(250) * 1000000)  /* §4.1 */
#define MANNERS_POLL_MAX_DEFAULT   (INT64_C(8) * 1000000000)
#define MANNERS_POLL_WINDOW_DEFAULT 8u
#define MANNERS_POLL_RAISE_ABOVE_DEFAULT 0.25
#define MANNERS_POLL_LOWER_BELOW_DEFAULT 0.0
#define MANNERS_POLL_STALL_DEFAULT 4u

struct manners_poll_config {
	int64_t min_ns;      /* shortest interval, and the first one, > 0 */
	int64_t max_ns;      /* longest interval, >= min_ns */
	uint32_t window;     /* polls per round, >= 1 */
	double raise_above;  /* unchanged fraction above which the interval doubles */
	double lower_below;  /* unchanged fraction at or below which it shortens */
	uint32_t stall_polls; /* unchanged polls in a row that make a testpoint, >= 1 */
};

struct manners_poll {
	struct manners_poll_config config;
	int64_t interval_ns; /* the interval to wait before the next poll */
	uint32_t polls;      /* polls in the current round */
	uint32_t unchanged;  /* of which saw no change */
	uint32_t stalled;    /* unchanged polls in a row */
};

/* The defaults above. */
void manners_poll_config_default(struct manners_poll_config *config);

/* config NULL: the defaults.  0, or -EINVAL for a config out of range
 * (lower_below must be below raise_above, both in [0, 1]). */
int manners_poll_init(struct manners_poll *poll, const struct manners_poll_config *config);

/*
 * One poll: changed != 0 when the progress moved since the previous poll.
 * Updates the interval (the rule above) and returns 1 when this poll is a
 * testpoint (it saw a change, or closes a stall), 0 when its running time
 * is to be carried into the next one; -EINVAL for a NULL poll.
 */
int manners_poll_record(struct manners_poll *poll, int changed);

#endif
