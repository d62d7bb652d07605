/*
 * Description: every documented error of include/discnice/manners.h comes
 * back as its -errno, errno is left alone, and the program goes on
 * regulated afterwards.  Prints "ok" and exits 0, or names the first
 * failed check and exits 1.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <discnice/manners.h>

static int failures;

#define EXPECT(call, want) do { \
	errno = 12345; \
	int got_ = (call); \
	if (got_ != (want) || errno != 12345) { \
		printf("FAIL %s = %d (errno %d), want %d\n", #call, got_, errno, (want)); \
		failures++; \
	} \
} while (0)

int main(void)
{
	double one[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	double bad[1];

	EXPECT(manners_testpoint(0, 0, one), -EINVAL);
	EXPECT(manners_testpoint(0, -1, one), -EINVAL);
	EXPECT(manners_testpoint(0, MANNERS_METRICS_MAX + 1, one), -EINVAL);
	EXPECT(manners_testpoint(0, 1, NULL), -EINVAL);
	bad[0] = -1.0;
	EXPECT(manners_testpoint(0, 1, bad), -EINVAL);
	bad[0] = NAN;
	EXPECT(manners_testpoint(0, 1, bad), -EINVAL);
	bad[0] = INFINITY;
	EXPECT(manners_testpoint(0, 1, bad), -EINVAL);
	bad[0] = MANNERS_PROGRESS_MAX * 2;
	EXPECT(manners_testpoint(0, 1, bad), -EINVAL);

	/* A valid first call, then the count of index 0 is fixed at 2. */
	EXPECT(manners_testpoint(0, 2, one), 0);
	EXPECT(manners_testpoint(0, 2, one), 0);
	EXPECT(manners_testpoint(0, 3, one), -EINVAL);

	/* Fill the phase table: MANNERS_PHASES_MAX indexes, then one more.
	 * interval 0: every call is processed, so phases are made at once. */
	EXPECT(manners_config_set("interval", "0"), 0);
	for (int i = 1; i < MANNERS_PHASES_MAX; i++)
		EXPECT(manners_testpoint(i, 1, one), 0);
	EXPECT(manners_testpoint(MANNERS_PHASES_MAX, 1, one), -ENOSPC);
	EXPECT(manners_testpoint(1, 1, one), 0); /* an old phase still works */

	EXPECT(manners_config_set("no_such_setting", "1"), -ENOENT);
	EXPECT(manners_config_set("alpha", "abc"), -EINVAL);
	EXPECT(manners_config_set("alpha", "0.5"), -EINVAL); /* eq. 3: alpha < beta */
	EXPECT(manners_config_set("bootstrap", "0"), -EINVAL);
	EXPECT(manners_config_set("hung", "-1"), -EINVAL);
	EXPECT(manners_config_set(NULL, "1"), -EINVAL);
	EXPECT(manners_config_set("n", NULL), -EINVAL);
	EXPECT(manners_config_set("alpha", "0.01"), 0);
	char value[32];
	EXPECT(manners_config_get("alpha", value, sizeof value), 4);
	if (strcmp(value, "0.01") != 0) {
		printf("FAIL alpha reads back as %s\n", value);
		failures++;
	}
	EXPECT(manners_config_get("nope", value, sizeof value), -ENOENT);

	struct manners_stats stats;
	EXPECT(manners_stats(NULL, sizeof stats), -EINVAL);
	EXPECT(manners_stats(&stats, 4), -EINVAL);
	EXPECT(manners_stats(&stats, sizeof stats), 0);
	if (stats.size != sizeof stats || stats.processed < (uint64_t)MANNERS_PHASES_MAX) {
		printf("FAIL stats size %llu processed %llu\n", (unsigned long long)stats.size,
		       (unsigned long long)stats.processed);
		failures++;
	}
	/* A caller built against an older header (the struct up to forgiven)
	 * gets what it asked for, and nothing written beyond it. */
	size_t older = offsetof(struct manners_stats, busy_processed);
	memset(&stats, 0xa5, sizeof stats);
	EXPECT(manners_stats(&stats, older), 0);
	if (stats.size != older || stats.busy_processed != UINT64_C(0xa5a5a5a5a5a5a5a5)) {
		printf("FAIL older stats size %llu\n", (unsigned long long)stats.size);
		failures++;
	}
	EXPECT(manners_set_priority(100), 0);
	EXPECT(manners_stats(&stats, sizeof stats), 0);
	if (stats.priority != MANNERS_PRIORITY_HIGHEST) {
		printf("FAIL priority %d not clamped\n", (int)stats.priority);
		failures++;
	}
	EXPECT(manners_leave(), 0);

	/* The fast path (§7.1): with a long interval a call of the same index
	 * only adds up; a call of another index is processed at once, its
	 * interval split at the last call of the old one. */
	EXPECT(manners_config_set("interval", "10"), 0);
	struct manners_stats before, after;
	EXPECT(manners_stats(&before, sizeof before), 0);
	EXPECT(manners_testpoint(1, 1, one), 0); /* first after leave: processed */
	EXPECT(manners_testpoint(1, 1, one), 0); /* fast path */
	EXPECT(manners_testpoint(1, 1, one), 0); /* fast path */
	EXPECT(manners_testpoint(2, 1, one), 0); /* phase change: processed */
	EXPECT(manners_stats(&after, sizeof after), 0);
	if (after.testpoints - before.testpoints != 4 || after.processed - before.processed != 2) {
		printf("FAIL fast path: %llu testpoints, %llu processed\n",
		       (unsigned long long)(after.testpoints - before.testpoints),
		       (unsigned long long)(after.processed - before.processed));
		failures++;
	}
	EXPECT(manners_testpoint(2, 2, one), -EINVAL); /* counts still checked on the fast path */
	if (failures == 0)
		printf("ok\n");
	return failures ? 1 : 0;
}
