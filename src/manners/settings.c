/*
 * settings.c - one table of the testpoint library's settings (CONVENTIONS
 * lesson 5): parse, check, format.  See settings.h and manners(3).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h> /* isfinite only: a macro, no libm (this file is linked into the agent) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manners/calibrate.h"
#include "manners/controller.h"
#include "manners/quiet.h"
#include "manners/settings.h"
#include "manners/sign_test.h"

enum setting_kind {
	SETTING_BOOL,        /* 0 or 1 */
	SETTING_PROBABILITY, /* a double in (0, 1) */
	SETTING_FRACTION,    /* a double in (0, 1] */
	SETTING_COUNT,       /* an integer >= 1 */
	SETTING_SMALL_COUNT, /* an integer 0 .. max (0: the feature is off) */
	SETTING_SECONDS,     /* seconds >= 0 (or > 0), stored in ns */
	SETTING_PATH,        /* text */
};

struct setting {
	const char *name;
	const char *env;
	enum setting_kind kind;
	size_t offset;
	int positive; /* SETTING_SECONDS: 0 not allowed */
	uint32_t max; /* SETTING_SMALL_COUNT: the largest value */
};

#define FIELD(f) offsetof(struct manners_settings, f)

/* Sorted by name. */
static const struct setting settings_table[] = {
	{ "alpha", "MANNERS_ALPHA", SETTING_PROBABILITY, FIELD(alpha), 0, 0 },
	{ "beta", "MANNERS_BETA", SETTING_PROBABILITY, FIELD(beta), 0, 0 },
	{ "bootstrap", "MANNERS_BOOTSTRAP", SETTING_COUNT, FIELD(bootstrap), 0, 0 },
	{ "busy_interval", "MANNERS_BUSY_INTERVAL", SETTING_SECONDS, FIELD(busy_interval_ns), 0, 0 },
	{ "disk_rise", "MANNERS_DISK_RISE", SETTING_BOOL, FIELD(disk_rise), 0, 0 },
	{ "duty", "MANNERS_DUTY", SETTING_FRACTION, FIELD(duty), 0, 0 },
	{ "enable", "MANNERS_ENABLE", SETTING_BOOL, FIELD(enable), 0, 0 },
	{ "half_life", "MANNERS_HALF_LIFE", SETTING_SECONDS, FIELD(half_life_ns), 1, 0 },
	{ "hung", "MANNERS_HUNG", SETTING_SECONDS, FIELD(hung_ns), 1, 0 },
	{ "interruptible", "MANNERS_INTERRUPTIBLE", SETTING_BOOL, FIELD(interruptible), 0, 0 },
	{ "interval", "MANNERS_INTERVAL", SETTING_SECONDS, FIELD(interval_ns), 0, 0 },
	{ "n", "MANNERS_N", SETTING_COUNT, FIELD(n), 0, 0 },
	{ "persist", "MANNERS_PERSIST", SETTING_BOOL, FIELD(persist), 0, 0 },
	{ "probation", "MANNERS_PROBATION", SETTING_SECONDS, FIELD(probation_ns), 0, 0 },
	{ "probe", "MANNERS_PROBE", SETTING_SMALL_COUNT, FIELD(probe_below), 0, 64 },
	{ "program", "MANNERS_PROGRAM", SETTING_PATH, FIELD(program), 0, 0 },
	{ "quick", "MANNERS_QUICK", SETTING_SMALL_COUNT, FIELD(quick_window), 0, MANNERS_QUICK_MAX },
	{ "quiet", "MANNERS_QUIET", SETTING_SECONDS, FIELD(quiet_ns), 0, 0 },
	{ "save_interval", "MANNERS_SAVE_INTERVAL", SETTING_SECONDS, FIELD(save_interval_ns), 1, 0 },
	{ "share_file", "MANNERS_SHARE_FILE", SETTING_PATH, FIELD(share_file), 0, 0 },
	{ "state_dir", "MANNERS_STATE_DIR", SETTING_PATH, FIELD(state_dir), 0, 0 },
	{ "state_file", "MANNERS_STATE_FILE", SETTING_PATH, FIELD(state_file), 0, 0 },
	{ "suspend_initial", "MANNERS_SUSPEND_INITIAL", SETTING_SECONDS, FIELD(suspend_initial_ns), 1, 0 },
	{ "suspend_limit", "MANNERS_SUSPEND_LIMIT", SETTING_SECONDS, FIELD(suspend_limit_ns), 1, 0 },
};

#define SETTINGS_COUNT (sizeof settings_table / sizeof settings_table[0])

void manners_settings_default(struct manners_settings *settings)
{
	if (settings == NULL)
		return;
	memset(settings, 0, sizeof *settings);
	settings->enable = 1;
	settings->alpha = MANNERS_SIGN_ALPHA_DEFAULT;
	settings->beta = MANNERS_SIGN_BETA_DEFAULT;
	settings->n = MANNERS_CALIB_N_DEFAULT;
	settings->bootstrap = MANNERS_CALIB_BOOTSTRAP_DEFAULT;
	settings->probation_ns = MANNERS_CALIB_PROBATION_DEFAULT;
	settings->duty = MANNERS_CALIB_DUTY_DEFAULT;
	settings->suspend_initial_ns = MANNERS_SUSPEND_INITIAL_DEFAULT;
	settings->suspend_limit_ns = MANNERS_SUSPEND_LIMIT_DEFAULT;
	settings->interval_ns = MANNERS_INTERVAL_DEFAULT;
	settings->busy_interval_ns = MANNERS_BUSY_INTERVAL_DEFAULT;
	settings->hung_ns = MANNERS_HUNG_DEFAULT;
	settings->half_life_ns = MANNERS_HALF_LIFE_DEFAULT;
	settings->persist = 1;
	settings->save_interval_ns = MANNERS_SAVE_INTERVAL_DEFAULT;
	settings->quick_window = MANNERS_QUICK_WINDOW_DEFAULT;
	settings->probe_below = MANNERS_PROBE_DEFAULT;
	settings->quiet_ns = MANNERS_QUIET_NS_DEFAULT;
	settings->disk_rise = 1;
}

static const struct setting *setting_find(const char *name)
{
	if (name == NULL)
		return NULL;
	for (size_t i = 0; i < SETTINGS_COUNT; i++)
		if (strcmp(settings_table[i].name, name) == 0)
			return &settings_table[i];
	return NULL;
}

/* The whole of text as a finite decimal double, blanks around it allowed
 * (an environment value read from a file keeps its newline).  strtod()
 * alone would also take hex, "inf" and "nan". */
static int parse_double(const char *text, double *out)
{
	while (*text == ' ' || *text == '\t' || *text == '\n')
		text++;
	const char *digits = text + (*text == '-' || *text == '+');
	if (!isdigit((unsigned char)digits[0]) &&
	    !(digits[0] == '.' && isdigit((unsigned char)digits[1])))
		return -EINVAL;
	if (strpbrk(text, "xXpP"))
		return -EINVAL;
	char *end;
	errno = 0;
	double v = strtod(text, &end);
	if (end == text || errno == ERANGE || !isfinite(v))
		return -EINVAL;
	while (*end == ' ' || *end == '\t' || *end == '\n')
		end++;
	if (*end != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

int manners_settings_set(struct manners_settings *settings, const char *name, const char *value)
{
	if (settings == NULL || name == NULL || value == NULL)
		return -EINVAL;
	const struct setting *s = setting_find(name);
	if (s == NULL)
		return -ENOENT;
	char *field = (char *)settings + s->offset;
	if (s->kind == SETTING_PATH) {
		if (strlen(value) >= MANNERS_SETTINGS_PATH_MAX)
			return -ENAMETOOLONG; /* said apart from a bad value */
		strcpy(field, value);
		return 0;
	}
	int saved = errno;
	double v;
	int rc = parse_double(value, &v);
	errno = saved;
	if (rc < 0)
		return rc;
	switch (s->kind) {
	case SETTING_BOOL:
		if (v != 0.0 && v != 1.0)
			return -EINVAL;
		*(int *)(void *)field = (int)v;
		return 0;
	case SETTING_PROBABILITY: {
		if (!(v > 0.0 && v < 1.0))
			return -EINVAL;
		/* eq. 3: alpha < beta, or the suspension state is unstable. */
		double alpha = s->offset == FIELD(alpha) ? v : settings->alpha;
		double beta = s->offset == FIELD(beta) ? v : settings->beta;
		if (!(alpha < beta))
			return -EINVAL;
		*(double *)(void *)field = v;
		return 0;
	}
	case SETTING_FRACTION:
		if (!(v > 0.0 && v <= 1.0))
			return -EINVAL;
		*(double *)(void *)field = v;
		return 0;
	case SETTING_COUNT:
		if (v < 1.0 || v > 4294967295.0 || v != (double)(uint32_t)v)
			return -EINVAL;
		*(uint32_t *)(void *)field = (uint32_t)v;
		return 0;
	case SETTING_SMALL_COUNT:
		if (v < 0.0 || v > (double)s->max || v != (double)(uint32_t)v)
			return -EINVAL;
		*(uint32_t *)(void *)field = (uint32_t)v;
		return 0;
	case SETTING_SECONDS: {
		/* Up to ~292 years in ns; a day is plenty for any of them. */
		if (v < 0.0 || (s->positive && v == 0.0) || v > 1e7)
			return -EINVAL;
		int64_t ns = (int64_t)(v * 1e9 + 0.5);
		if (s->positive && ns == 0)
			return -EINVAL;
		/* An initial suspension nobody set follows the limit down and
		 * back up (from the default, each time: a limit lowered to 2 s
		 * and raised again once left it at 2 s for good); one that was
		 * set stands, and a limit below it is refused. */
		int setting_initial = s->offset == FIELD(suspend_initial_ns);
		int given = setting_initial || settings->suspend_initial_given;
		int64_t initial = setting_initial ? ns
				  : given ? settings->suspend_initial_ns
					  : MANNERS_SUSPEND_INITIAL_DEFAULT;
		int64_t limit = s->offset == FIELD(suspend_limit_ns) ? ns : settings->suspend_limit_ns;
		if (manners_suspend_settle(&initial, limit, given) < 0)
			return -EINVAL;
		settings->suspend_initial_ns = initial;
		settings->suspend_initial_given = given;
		/* Atomic: the testpoint fast path reads the intervals with no
		 * lock (library.c fast_path_ns()). */
		__atomic_store_n((int64_t *)(void *)field, ns, __ATOMIC_RELAXED);
		return 0;
	}
	case SETTING_PATH:
		break;
	}
	return -EINVAL;
}

/* The fewest digits that read back as the same double ("0.05", not
 * "0.050000000000000003"). */
static int format_shortest(char *buf, size_t size, double v)
{
	char text[32];
	for (int digits = 1; digits <= 17; digits++) {
		snprintf(text, sizeof text, "%.*g", digits, v);
		if (strtod(text, NULL) == v)
			break;
	}
	return snprintf(buf, size, "%s", text);
}

int manners_settings_get(const struct manners_settings *settings, const char *name, char *buf,
			 size_t size)
{
	if (settings == NULL || name == NULL || (buf == NULL && size > 0))
		return -EINVAL;
	const struct setting *s = setting_find(name);
	if (s == NULL)
		return -ENOENT;
	const char *field = (const char *)settings + s->offset;
	int saved = errno, rc = -EINVAL;
	switch (s->kind) {
	case SETTING_BOOL:
		rc = snprintf(buf, size, "%d", *(const int *)(const void *)field);
		break;
	case SETTING_PROBABILITY:
	case SETTING_FRACTION:
		rc = format_shortest(buf, size, *(const double *)(const void *)field);
		break;
	case SETTING_COUNT:
	case SETTING_SMALL_COUNT:
		rc = snprintf(buf, size, "%u", (unsigned)*(const uint32_t *)(const void *)field);
		break;
	case SETTING_SECONDS:
		rc = snprintf(buf, size, "%.9g", (double)*(const int64_t *)(const void *)field / 1e9);
		break;
	case SETTING_PATH:
		rc = snprintf(buf, size, "%s", field);
		break;
	}
	errno = saved;
	return rc < 0 ? -EINVAL : rc;
}

size_t manners_settings_count(void)
{
	return SETTINGS_COUNT;
}

const char *manners_settings_name(size_t i)
{
	return i < SETTINGS_COUNT ? settings_table[i].name : NULL;
}

const char *manners_settings_env(size_t i)
{
	return i < SETTINGS_COUNT ? settings_table[i].env : NULL;
}
