/*
 * settings.h - the testpoint library's settings (MS Manners §6.1-§6.3,
 * §4.1, §4.3, §7.1), in one table: name, environment variable, default,
 * range, units.  Pure: parsing and formatting only; the library reads the
 * environment and owns the one live copy (src/manners/library/library.c).
 */
#ifndef DISCNICE_MANNERS_SETTINGS_H
#define DISCNICE_MANNERS_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#define MANNERS_SETTINGS_PATH_MAX 512

/* Defaults the paper does not give (the others are in calibrate.h,
 * controller.h, sign_test.h). */
#define MANNERS_INTERVAL_DEFAULT      (INT64_C(100000000))      /* 0.1 s, §7.1 fast path */
#define MANNERS_HUNG_DEFAULT          (INT64_C(5000000000))     /* 5 s, §7.1 */
#define MANNERS_HALF_LIFE_DEFAULT     (INT64_C(10000000000))    /* 10 s */
#define MANNERS_SAVE_INTERVAL_DEFAULT (INT64_C(60000000000))    /* 60 s */
#define MANNERS_BUSY_INTERVAL_DEFAULT (INT64_C(50000000))       /* 0.05 s, quiet.h's quick polls */

struct manners_settings {
	int enable;
	double alpha, beta;
	uint32_t n;
	uint32_t bootstrap;
	int64_t probation_ns;
	double duty;
	int64_t suspend_initial_ns;
	int64_t suspend_limit_ns;
	int64_t interval_ns;
	int64_t busy_interval_ns; /* the fast-path interval while others use a CPU; 0: off */
	int64_t hung_ns;
	int64_t half_life_ns;
	int persist;
	int64_t save_interval_ns;
	char state_dir[MANNERS_SETTINGS_PATH_MAX];  /* "" = the XDG default */
	char state_file[MANNERS_SETTINGS_PATH_MAX]; /* "" = named after the program */
	char program[MANNERS_SETTINGS_PATH_MAX];    /* "" = /proc/self/exe; names the state file */
	char share_file[MANNERS_SETTINGS_PATH_MAX]; /* "" = the per-user default */
	uint32_t quick_window; /* controller.h's quick raise, 0 = off (the paper) */
	uint32_t probe_below;  /* controller.h's short probe, 0 = off (the paper) */
	int64_t quiet_ns;      /* quiet.h's look back, 0 = off (the paper) */
	int disk_rise;         /* quiet.h's new sample at a rise of others' disk
	                        * traffic, 0 = off (the paper) */
	int interruptible;     /* a caught signal ends a wait: -EINTR, then
	                        * manners_resume() (the Python binding) */
	int suspend_initial_given; /* suspend_initial was set: a lower limit then
	                            * refuses, rather than lowers, it */
};

/* The defaults. */
void manners_settings_default(struct manners_settings *settings);

/*
 * Sets one setting by name from text.  0; -ENOENT for an unknown name;
 * -EINVAL for NULL, a value that is not wholly a number, out of range,
 * or (alpha/beta, suspend_initial/limit) inconsistent with its partner;
 * the setting is then unchanged.
 */
int manners_settings_set(struct manners_settings *settings, const char *name, const char *value);

/* The value as text into buf[size]: its length (as snprintf), -ENOENT, -EINVAL. */
int manners_settings_get(const struct manners_settings *settings, const char *name, char *buf,
			 size_t size);

/* The number of settings, and the name and environment variable of the i-th
 * (NULL beyond): for the library's environment scan and manners(3). */
size_t manners_settings_count(void);
const char *manners_settings_name(size_t i);
const char *manners_settings_env(size_t i);

#endif
