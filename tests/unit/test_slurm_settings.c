/* Description: the Slurm plugin's rule - plugstack.conf words, ceilings per partition, a job's lower cap kept, a higher one refused or clamped, yield under a ceiling, the discnice run words (contrib/slurm/slurm_settings.c). */
#include <errno.h>
#include <string.h>

#include "unit.h"
#include "../../contrib/slurm/slurm_settings.h"

static struct slurm_admin admin;

static int parse(int argc, char *const argv[])
{
	char msg[256] = "";
	int rc = slurm_admin_parse(&admin, argc, argv, msg, sizeof msg);
	if (rc < 0)
		CHECK(msg[0]);
	return rc;
}

static void test_admin_words(void)
{
	char *ok[] = { "rate=20MB/s", "scavenger:rate=5M", "scavenger:policy=yield",
		       "fast:rate=inf", "discnice=/opt/dn/bin/discnice", "read_rate=1GiB/s" };
	CHECK(parse(6, ok) == 0);
	CHECK(admin.global.set[SLURM_CAP_TOTAL]);
	CHECK_EQ_U64(admin.global.bps[SLURM_CAP_TOTAL], 20000000);
	CHECK_EQ_U64(admin.global.bps[SLURM_CAP_READ], UINT64_C(1) << 30);
	CHECK(strcmp(admin.discnice_path, "/opt/dn/bin/discnice") == 0);
	CHECK_EQ_U64(admin.n_partitions, 2);

	struct slurm_limits l;
	slurm_admin_limits(&admin, "scavenger", &l);
	CHECK_EQ_U64(l.bps[SLURM_CAP_TOTAL], 5000000);
	CHECK(l.policy == SLURM_POLICY_YIELD);
	CHECK(l.set[SLURM_CAP_READ]); /* the global one still holds */
	slurm_admin_limits(&admin, "fast", &l);
	CHECK(!l.set[SLURM_CAP_TOTAL]); /* inf: none for this partition */
	slurm_admin_limits(&admin, "other", &l);
	CHECK_EQ_U64(l.bps[SLURM_CAP_TOTAL], 20000000);
	slurm_admin_limits(&admin, NULL, &l);
	CHECK_EQ_U64(l.bps[SLURM_CAP_TOTAL], 20000000);

	char *bad1[] = { "rate=fast" }, *bad2[] = { "speed=5M" }, *bad3[] = { "rate" },
	     *bad4[] = { "discnice=relative" }, *bad5[] = { ":rate=5M" },
	     *bad6[] = { "p:discnice=/x" }, *bad7[] = { "policy=nice" };
	CHECK(parse(1, bad1) == -EINVAL);
	CHECK(parse(1, bad2) == -EINVAL);
	CHECK(parse(1, bad3) == -EINVAL);
	CHECK(parse(1, bad4) == -EINVAL);
	CHECK(parse(1, bad5) == -EINVAL);
	CHECK(parse(1, bad6) == -EINVAL);
	CHECK(parse(1, bad7) == -EINVAL);
	char *global_inf[] = { "rate=inf" };
	CHECK(parse(1, global_inf) == 0);
	CHECK(!admin.global.set[SLURM_CAP_TOTAL]);
}

static void test_checks(void)
{
	struct slurm_limits l;
	memset(&l, 0, sizeof l);
	char msg[256];
	CHECK(slurm_request_check_cap(&l, SLURM_CAP_TOTAL, 0, msg, sizeof msg) == 0);
	l.set[SLURM_CAP_TOTAL] = true;
	l.bps[SLURM_CAP_TOTAL] = 20000000;
	CHECK(slurm_request_check_cap(&l, SLURM_CAP_TOTAL, 20000000, msg, sizeof msg) == 0);
	CHECK(slurm_request_check_cap(&l, SLURM_CAP_TOTAL, 5000000, msg, sizeof msg) == 0);
	CHECK(slurm_request_check_cap(&l, SLURM_CAP_TOTAL, 20000001, msg, sizeof msg) == -ERANGE);
	CHECK(strstr(msg, "--discnice-rate") && strstr(msg, "20 MB/s"));
	CHECK(slurm_request_check_cap(&l, SLURM_CAP_TOTAL, 0, msg, sizeof msg) == -ERANGE);
	/* Another kind has no ceiling. */
	CHECK(slurm_request_check_cap(&l, SLURM_CAP_READ, 0, msg, sizeof msg) == 0);
	CHECK(slurm_request_check_policy(&l, SLURM_POLICY_YIELD, msg, sizeof msg) == -ERANGE);
	CHECK(slurm_request_check_policy(&l, SLURM_POLICY_MANNERS, msg, sizeof msg) == 0);
	l.policy = SLURM_POLICY_YIELD;
	CHECK(slurm_request_check_policy(&l, SLURM_POLICY_YIELD, msg, sizeof msg) == 0);
}

/* At submit time the partition is not known: what some partition takes
 * passes, and the node clamps (a job of `high` asking 100 MB/s under a
 * global 50 was refused though its partition allows 200). */
static void test_submit_checks(void)
{
	char *words_[] = { "rate=50MB/s", "high:rate=200MB/s", "free:write_rate=inf",
			   "scavenger:rate=4MB/s", "scavenger:policy=yield" };
	CHECK(parse(5, words_) == 0);
	char msg[256] = "";
	CHECK(slurm_admin_check_cap(&admin, SLURM_CAP_TOTAL, 100000000, msg, sizeof msg) == 0);
	CHECK(slurm_admin_check_cap(&admin, SLURM_CAP_TOTAL, 200000000, msg, sizeof msg) == 0);
	CHECK(slurm_admin_check_cap(&admin, SLURM_CAP_TOTAL, 200000001, msg, sizeof msg) == -ERANGE);
	CHECK(strstr(msg, "50 MB/s") != NULL);
	CHECK(slurm_admin_check_cap(&admin, SLURM_CAP_TOTAL, 0, msg, sizeof msg) == -ERANGE);
	CHECK(slurm_admin_check_cap(&admin, SLURM_CAP_WRITE, 0, msg, sizeof msg) == 0);
	/* yield: chosen by the administrator for scavenger. */
	CHECK(slurm_admin_check_policy(&admin, SLURM_POLICY_YIELD, msg, sizeof msg) == 0);
	char *no_yield[] = { "rate=50MB/s", "high:rate=200MB/s" };
	CHECK(parse(2, no_yield) == 0);
	CHECK(slurm_admin_check_policy(&admin, SLURM_POLICY_YIELD, msg, sizeof msg) == -ERANGE);
	CHECK(slurm_admin_check_policy(&admin, SLURM_POLICY_MANNERS, msg, sizeof msg) == 0);
	char rate[32];
	slurm_rate_text(rate, sizeof rate, 4000000);
	CHECK(strcmp(rate, "4 MB/s") == 0);
}

static int words(const struct slurm_plan *p, char *joined, size_t len)
{
	char buf[512];
	const char *w[32];
	int n = slurm_plan_words(p, buf, sizeof buf, w, 32);
	joined[0] = '\0';
	for (int i = 0; i < n; i++) {
		strncat(joined, w[i], len - strlen(joined) - 1);
		if (i + 1 < n)
			strncat(joined, " ", len - strlen(joined) - 1);
	}
	return n;
}

static void test_plans(void)
{
	struct slurm_limits none, ceiling;
	memset(&none, 0, sizeof none);
	memset(&ceiling, 0, sizeof ceiling);
	ceiling.set[SLURM_CAP_TOTAL] = true;
	ceiling.bps[SLURM_CAP_TOTAL] = 20000000;
	struct slurm_request r;
	struct slurm_plan p;
	char text[512];

	/* Nothing asked, nothing imposed: the task runs as without us. */
	memset(&r, 0, sizeof r);
	slurm_plan_make(&none, &r, 7, &p);
	CHECK(!p.wrap);

	/* The admin default alone. */
	slurm_plan_make(&ceiling, &r, 7, &p);
	CHECK(p.wrap);
	words(&p, text, sizeof text);
	CHECK(strcmp(text, "--rate 20000000 --policy cap --class slurm-7 --quiet") == 0);

	/* A lower cap is kept, a read cap added beside the default. */
	r.set[SLURM_CAP_TOTAL] = true;
	r.bps[SLURM_CAP_TOTAL] = 5000000;
	r.set[SLURM_CAP_READ] = true;
	r.bps[SLURM_CAP_READ] = 1000000;
	slurm_plan_make(&ceiling, &r, 8, &p);
	CHECK_EQ_U64(p.clamped, 0);
	words(&p, text, sizeof text);
	CHECK(strcmp(text, "--rate 5000000 --read-rate 1000000 --policy cap --class slurm-8 --quiet") == 0);

	/* A higher one, or inf, is clamped. */
	r.bps[SLURM_CAP_TOTAL] = 50000000;
	slurm_plan_make(&ceiling, &r, 8, &p);
	CHECK_EQ_U64(p.bps[SLURM_CAP_TOTAL], 20000000);
	CHECK_EQ_U64(p.clamped, 1u << SLURM_CAP_TOTAL);
	r.bps[SLURM_CAP_TOTAL] = 0;
	slurm_plan_make(&ceiling, &r, 8, &p);
	CHECK_EQ_U64(p.bps[SLURM_CAP_TOTAL], 20000000);

	/* Without a ceiling inf stays inf (measure only). */
	slurm_plan_make(&none, &r, 8, &p);
	words(&p, text, sizeof text);
	CHECK(strncmp(text, "--rate inf --read-rate 1000000", 30) == 0);

	/* A class alone: measured under "--rate inf", in the named class. */
	memset(&r, 0, sizeof r);
	strcpy(r.class_name, "mine");
	slurm_plan_make(&none, &r, 9, &p);
	CHECK(p.wrap);
	words(&p, text, sizeof text);
	CHECK(strcmp(text, "--rate inf --policy cap --class mine --quiet") == 0);

	/* Manners needs no cap. */
	memset(&r, 0, sizeof r);
	r.policy = SLURM_POLICY_MANNERS;
	slurm_plan_make(&none, &r, 9, &p);
	words(&p, text, sizeof text);
	CHECK(strcmp(text, "--policy manners --class slurm-9 --quiet") == 0);

	/* Yield under a ceiling the administrator did not choose it for. */
	r.policy = SLURM_POLICY_YIELD;
	slurm_plan_make(&ceiling, &r, 9, &p);
	CHECK(p.policy == SLURM_POLICY_CAP && p.policy_replaced);
	ceiling.policy = SLURM_POLICY_YIELD;
	slurm_plan_make(&ceiling, &r, 9, &p);
	CHECK(p.policy == SLURM_POLICY_YIELD && !p.policy_replaced);

	/* Too little room: -ENOSPC, never a cut word. */
	char small[8];
	const char *w[32];
	CHECK(slurm_plan_words(&p, small, sizeof small, w, 32) == -ENOSPC);
	CHECK(slurm_plan_words(&p, text, sizeof text, w, 2) == -ENOSPC);
}

int main(void)
{
	test_admin_words();
	test_checks();
	test_submit_checks();
	test_plans();
	return 0;
}
