/* Description: the testpoint library's settings table (src/manners/settings.c): defaults, every kind parsed whole or refused with the setting kept, alpha < beta (eq. 3), suspend_initial <= suspend_limit, round trip through get, the environment names. */
#include <errno.h>
#include <string.h>

#include "unit.h"
#include "manners/controller.h"
#include "manners/settings.h"

static void test_defaults(void)
{
	struct manners_settings s;
	manners_settings_default(&s);
	CHECK(s.enable == 1 && s.persist == 1);
	CHECK(s.alpha == 0.05 && s.beta == 0.2);
	CHECK_EQ_U64(s.n, 10000);
	CHECK_EQ_U64(s.bootstrap, 50);
	CHECK_EQ_U64(s.interval_ns, 100000000);
	CHECK_EQ_U64(s.hung_ns, 5000000000);
	CHECK(s.state_dir[0] == '\0' && s.share_file[0] == '\0' && s.program[0] == '\0');
}

static void test_numbers(void)
{
	struct manners_settings s;
	manners_settings_default(&s);
	CHECK(manners_settings_set(&s, "alpha", "0.01") == 0 && s.alpha == 0.01);
	CHECK(manners_settings_set(&s, "beta", " 0.3\n") == 0 && s.beta == 0.3); /* blanks around */
	/* Decimal only: strtod's hex, infinity and NaN are not numbers here. */
	CHECK(manners_settings_set(&s, "n", "0x10") == -EINVAL && s.n != 16);
	CHECK(manners_settings_set(&s, "half_life", "inf") == -EINVAL);
	CHECK(manners_settings_set(&s, "half_life", "nan") == -EINVAL);
	CHECK(manners_settings_set(&s, "enable", " ") == -EINVAL);
	CHECK(manners_settings_set(&s, "n", "1e3") == 0 && s.n == 1000);
	/* Not wholly a number, or out of range: refused, value kept. */
	const char *bad_probability[] = { "", "x", "0.1x", "0", "1", "-0.1", "nan", "inf", "1e999" };
	for (size_t i = 0; i < sizeof bad_probability / sizeof *bad_probability; i++) {
		CHECK(manners_settings_set(&s, "alpha", bad_probability[i]) == -EINVAL);
		CHECK(s.alpha == 0.01);
	}
	/* eq. 3: alpha < beta, whichever is set. */
	CHECK(manners_settings_set(&s, "alpha", "0.3") == -EINVAL);
	CHECK(manners_settings_set(&s, "beta", "0.01") == -EINVAL);
	CHECK(s.alpha == 0.01 && s.beta == 0.3);

	CHECK(manners_settings_set(&s, "n", "1") == 0 && s.n == 1);
	CHECK(manners_settings_set(&s, "n", "0") == -EINVAL && s.n == 1);
	CHECK(manners_settings_set(&s, "n", "2.5") == -EINVAL);

	/* The two beyond-the-paper knobs: 0 turns each off, up to a bound. */
	CHECK_EQ_U64(s.quick_window, 20);
	CHECK_EQ_U64(s.probe_below, 2);
	CHECK(manners_settings_set(&s, "quick", "0") == 0 && s.quick_window == 0);
	CHECK(manners_settings_set(&s, "probe", "0") == 0 && s.probe_below == 0);
	CHECK(manners_settings_set(&s, "quick", "64") == 0 && s.quick_window == 64);
	CHECK(manners_settings_set(&s, "quick", "65") == -EINVAL && s.quick_window == 64);
	CHECK(manners_settings_set(&s, "probe", "-1") == -EINVAL && s.probe_below == 0);
	CHECK(manners_settings_set(&s, "probe", "1.5") == -EINVAL && s.probe_below == 0);
	CHECK(manners_settings_set(&s, "n", "4294967296") == -EINVAL);
	CHECK(manners_settings_set(&s, "bootstrap", "7") == 0 && s.bootstrap == 7);
	CHECK(manners_settings_set(&s, "duty", "1") == 0 && s.duty == 1.0);
	CHECK(manners_settings_set(&s, "duty", "0") == -EINVAL && s.duty == 1.0);

	CHECK(manners_settings_set(&s, "enable", "0") == 0 && s.enable == 0);
	CHECK(manners_settings_set(&s, "enable", "2") == -EINVAL && s.enable == 0);
	CHECK(manners_settings_set(&s, "enable", "yes") == -EINVAL);
	/* The disk rise (quiet.h): on by default, a bool. */
	CHECK(s.disk_rise == 1);
	CHECK(manners_settings_set(&s, "disk_rise", "0") == 0 && s.disk_rise == 0);
	CHECK(manners_settings_set(&s, "disk_rise", "on") == -EINVAL && s.disk_rise == 0);
	CHECK(manners_settings_set(&s, "disk_rise", "1") == 0 && s.disk_rise == 1);

	/* Seconds, stored in ns; some may be 0, some not. */
	CHECK(manners_settings_set(&s, "probation", "0") == 0 && s.probation_ns == 0);
	CHECK(manners_settings_set(&s, "interval", "0.02") == 0 && s.interval_ns == 20000000);
	CHECK(manners_settings_set(&s, "hung", "0") == -EINVAL);
	CHECK(manners_settings_set(&s, "hung", "-1") == -EINVAL);
	CHECK(manners_settings_set(&s, "hung", "1e-12") == -EINVAL); /* rounds to 0 ns */
	CHECK(manners_settings_set(&s, "hung", "2.5") == 0 && s.hung_ns == 2500000000);
	CHECK(manners_settings_set(&s, "hung", "1e8") == -EINVAL);   /* beyond the bound */
	/* suspend.h: 0 < initial <= limit.  A limit below the default first
	 * suspension (4 s) lowers the first to it; one below a first set
	 * explicitly is an error. */
	CHECK(manners_settings_set(&s, "suspend_initial", "700") == -EINVAL);
	CHECK(s.suspend_initial_ns == MANNERS_SUSPEND_INITIAL_DEFAULT);
	CHECK(manners_settings_set(&s, "suspend_limit", "0.5") == 0);
	CHECK(s.suspend_initial_ns == 500000000 && s.suspend_limit_ns == 500000000);
	/* ... and a limit raised again brings back the default, which nobody
	 * set (it stayed at the lowered 0.5 s for good). */
	CHECK(manners_settings_set(&s, "suspend_limit", "600") == 0);
	CHECK(s.suspend_initial_ns == MANNERS_SUSPEND_INITIAL_DEFAULT);
	CHECK(manners_settings_set(&s, "suspend_limit", "2") == 0);
	CHECK(s.suspend_initial_ns == 2000000000);
	CHECK(manners_settings_set(&s, "suspend_initial", "2") == 0);
	CHECK(s.suspend_initial_ns == s.suspend_limit_ns);
	CHECK(manners_settings_set(&s, "suspend_limit", "1") == -EINVAL);
	CHECK(s.suspend_limit_ns == 2000000000);
	/* A first suspension that was set stands when the limit rises. */
	CHECK(manners_settings_set(&s, "suspend_limit", "600") == 0);
	CHECK(s.suspend_initial_ns == 2000000000);
}

static void test_paths_and_names(void)
{
	struct manners_settings s;
	manners_settings_default(&s);
	CHECK(manners_settings_set(&s, "state_dir", "/tmp/x") == 0 && strcmp(s.state_dir, "/tmp/x") == 0);
	char longer[MANNERS_SETTINGS_PATH_MAX + 1];
	memset(longer, 'a', sizeof longer - 1);
	longer[sizeof longer - 1] = '\0';
	CHECK(manners_settings_set(&s, "state_dir", longer) == -ENAMETOOLONG);
	CHECK(strcmp(s.state_dir, "/tmp/x") == 0);
	CHECK(manners_settings_set(&s, "no_such", "1") == -ENOENT);
	CHECK(manners_settings_set(&s, NULL, "1") == -EINVAL);
	CHECK(manners_settings_set(&s, "n", NULL) == -EINVAL);
	CHECK(manners_settings_set(NULL, "n", "1") == -EINVAL);

	/* Every setting reads back what it was set to, and has its MANNERS_ name. */
	char buf[64];
	CHECK(manners_settings_get(&s, "alpha", buf, sizeof buf) == 4 && strcmp(buf, "0.05") == 0);
	CHECK(manners_settings_get(&s, "hung", buf, sizeof buf) == 1 && strcmp(buf, "5") == 0);
	CHECK(manners_settings_get(&s, "state_dir", buf, sizeof buf) == 6);
	CHECK(manners_settings_get(&s, "nope", buf, sizeof buf) == -ENOENT);
	CHECK(manners_settings_get(&s, "alpha", buf, 2) == 4 && strcmp(buf, "0") == 0); /* truncated */
	CHECK(manners_settings_count() >= 17);
	for (size_t i = 0; i < manners_settings_count(); i++) {
		const char *name = manners_settings_name(i), *env = manners_settings_env(i);
		CHECK(name != NULL && env != NULL && strncmp(env, "MANNERS_", 8) == 0);
		for (size_t k = 0; name[k]; k++)
			CHECK(env[8 + k] == (name[k] >= 'a' && name[k] <= 'z' ? name[k] - 32 : name[k]));
		if (i > 0)
			CHECK(strcmp(manners_settings_name(i - 1), name) < 0); /* sorted */
		CHECK(manners_settings_get(&s, name, buf, sizeof buf) >= 0);
		struct manners_settings copy = s;
		CHECK(manners_settings_set(&copy, name, buf) == 0);
		/* Setting suspend_initial marks it set by hand: that alone
		 * may differ. */
		copy.suspend_initial_given = s.suspend_initial_given;
		CHECK(memcmp(&copy, &s, sizeof s) == 0);
	}
	CHECK(manners_settings_name(manners_settings_count()) == NULL);
}

int main(void)
{
	test_defaults();
	test_numbers();
	test_paths_and_names();
	return 0;
}
