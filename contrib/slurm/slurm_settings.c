/*
 * slurm_settings.c - the SPANK plugin's decisions as pure logic (see
 * slurm_settings.h for the rule).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/rate.h"
#include "slurm_settings.h"

static const char *const cap_keys[SLURM_CAP_KINDS] = { "rate", "read_rate", "write_rate",
						       "net_rate" };
static const char *const cap_options[SLURM_CAP_KINDS] = { "--rate", "--read-rate",
							  "--write-rate", "--net-rate" };

const char *slurm_cap_option(enum slurm_cap_kind kind)
{
	return kind < SLURM_CAP_KINDS ? cap_options[kind] : "?";
}

const char *slurm_policy_name(enum slurm_policy policy)
{
	switch (policy) {
	case SLURM_POLICY_YIELD:
		return "yield";
	case SLURM_POLICY_MANNERS:
		return "manners";
	default:
		return "cap";
	}
}

int slurm_policy_parse(const char *text, enum slurm_policy *out)
{
	if (strcmp(text, "cap") == 0)
		*out = SLURM_POLICY_CAP;
	else if (strcmp(text, "yield") == 0)
		*out = SLURM_POLICY_YIELD;
	else if (strcmp(text, "manners") == 0)
		*out = SLURM_POLICY_MANNERS;
	else
		return -EINVAL;
	return 0;
}

/* One KEY=VALUE into `limits` (or the paths of `admin`). */
static int admin_word(struct slurm_admin *admin, struct slurm_limits *limits, bool global,
		      const char *word, const char *key, size_t key_len, const char *value,
		      char *msg, size_t msg_len)
{
	for (int k = 0; k < SLURM_CAP_KINDS; k++) {
		if (strlen(cap_keys[k]) != key_len || strncmp(key, cap_keys[k], key_len) != 0)
			continue;
		uint64_t bps;
		int rc = rate_parse(value, &bps);
		if (rc < 0) {
			snprintf(msg, msg_len, "%s: not a rate (expected e.g. 20MB/s, 5MiB/s, 500k or inf)",
				 word);
			return -EINVAL;
		}
		/* "inf": no ceiling (for a partition: none, whatever the
		 * global one is). */
		limits->set[k] = bps != 0 || !global;
		limits->bps[k] = bps;
		return 0;
	}
	if (key_len == 6 && strncmp(key, "policy", 6) == 0) {
		if (slurm_policy_parse(value, &limits->policy) < 0) {
			snprintf(msg, msg_len, "%s: expected cap, yield or manners", word);
			return -EINVAL;
		}
		return 0;
	}
	bool discnice = key_len == 8 && strncmp(key, "discnice", 8) == 0;
	bool task = key_len == 4 && strncmp(key, "task", 4) == 0;
	if ((discnice || task) && global) {
		if (value[0] != '/' || strlen(value) >= SLURM_PATH_MAX) {
			snprintf(msg, msg_len, "%s: an absolute path is needed", word);
			return -EINVAL;
		}
		snprintf(discnice ? admin->discnice_path : admin->task_path, SLURM_PATH_MAX, "%s",
			 value);
		return 0;
	}
	snprintf(msg, msg_len, "%s: unknown setting (expected [PARTITION:]rate=, read_rate=, "
		 "write_rate=, net_rate=, policy=, or discnice=PATH, task=PATH)", word);
	return -EINVAL;
}

int slurm_admin_parse(struct slurm_admin *admin, int argc, char *const argv[], char *msg,
		      size_t msg_len)
{
	memset(admin, 0, sizeof *admin);
	for (int i = 0; i < argc; i++) {
		const char *word = argv[i];
		const char *eq = strchr(word, '=');
		if (!eq) {
			snprintf(msg, msg_len, "%s: expected KEY=VALUE", word);
			return -EINVAL;
		}
		const char *colon = memchr(word, ':', (size_t)(eq - word));
		struct slurm_limits *limits = &admin->global;
		const char *key = word;
		if (colon) {
			size_t n = (size_t)(colon - word);
			if (n == 0 || n >= SLURM_NAME_MAX) {
				snprintf(msg, msg_len, "%s: a partition name is 1-%u characters", word,
					 SLURM_NAME_MAX - 1);
				return -EINVAL;
			}
			unsigned p;
			for (p = 0; p < admin->n_partitions; p++)
				if (strlen(admin->partitions[p].name) == n &&
				    strncmp(admin->partitions[p].name, word, n) == 0)
					break;
			if (p == admin->n_partitions) {
				if (p == SLURM_PARTITIONS_MAX) {
					snprintf(msg, msg_len, "%s: more than %u partitions", word,
						 SLURM_PARTITIONS_MAX);
					return -ENOSPC;
				}
				memcpy(admin->partitions[p].name, word, n);
				admin->partitions[p].name[n] = '\0';
				admin->n_partitions++;
			}
			limits = &admin->partitions[p].limits;
			key = colon + 1;
		}
		int rc = admin_word(admin, limits, !colon, word, key, (size_t)(eq - key), eq + 1,
				    msg, msg_len);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void slurm_admin_limits(const struct slurm_admin *admin, const char *partition,
			struct slurm_limits *out)
{
	*out = admin->global;
	if (!partition || !*partition)
		return;
	for (unsigned p = 0; p < admin->n_partitions; p++) {
		if (strcmp(admin->partitions[p].name, partition) != 0)
			continue;
		const struct slurm_limits *own = &admin->partitions[p].limits;
		for (int k = 0; k < SLURM_CAP_KINDS; k++)
			if (own->set[k]) {
				/* bps 0 here: "inf" for this partition. */
				out->set[k] = own->bps[k] != 0;
				out->bps[k] = own->bps[k];
			}
		if (own->policy != SLURM_POLICY_UNSET)
			out->policy = own->policy;
	}
}

void slurm_rate_text(char *buf, size_t len, uint64_t bps)
{
	/* Decimal units, as the administrator most likely wrote them. */
	if (bps % 1000000 == 0)
		snprintf(buf, len, "%" PRIu64 " MB/s", bps / 1000000);
	else if (bps % 1000 == 0)
		snprintf(buf, len, "%" PRIu64 " kB/s", bps / 1000);
	else
		snprintf(buf, len, "%" PRIu64 " B/s", bps);
}

int slurm_request_check_cap(const struct slurm_limits *limits, enum slurm_cap_kind kind,
			    uint64_t bps, char *msg, size_t msg_len)
{
	if (kind >= SLURM_CAP_KINDS || !limits->set[kind])
		return 0;
	if (bps != 0 && bps <= limits->bps[kind])
		return 0;
	char ceiling[32];
	slurm_rate_text(ceiling, sizeof ceiling, limits->bps[kind]);
	snprintf(msg, msg_len, "--discnice%s: above the administrator's cap of %s (a job may "
		 "lower it, not raise it)", cap_options[kind] + 1, ceiling);
	return -ERANGE;
}

static bool any_ceiling(const struct slurm_limits *limits)
{
	for (int k = 0; k < SLURM_CAP_KINDS; k++)
		if (limits->set[k])
			return true;
	return false;
}

int slurm_request_check_policy(const struct slurm_limits *limits, enum slurm_policy policy,
			       char *msg, size_t msg_len)
{
	if (policy != SLURM_POLICY_YIELD || !any_ceiling(limits) ||
	    limits->policy == SLURM_POLICY_YIELD)
		return 0;
	snprintf(msg, msg_len, "--discnice-policy yield: not under the administrator's caps "
		 "(yield lifts them while the disks are idle); use cap or manners");
	return -ERANGE;
}

/* Every set of limits a job may run under: the global one (a partition
 * not named), then each partition's.  0 once fn accepts under one. */
static int any_limits_accept(const struct slurm_admin *admin,
			     int (*fn)(const struct slurm_limits *, const void *, char *, size_t),
			     const void *arg, char *msg, size_t msg_len)
{
	struct slurm_limits l;
	slurm_admin_limits(admin, NULL, &l);
	if (fn(&l, arg, msg, msg_len) == 0)
		return 0;
	char unused[256];
	for (unsigned p = 0; p < admin->n_partitions; p++) {
		slurm_admin_limits(admin, admin->partitions[p].name, &l);
		if (fn(&l, arg, unused, sizeof unused) == 0)
			return 0;
	}
	return -ERANGE; /* msg: the global settings' reason */
}

struct cap_ask {
	enum slurm_cap_kind kind;
	uint64_t bps;
};

static int cap_accept(const struct slurm_limits *l, const void *arg, char *msg, size_t len)
{
	const struct cap_ask *ask = arg;
	return slurm_request_check_cap(l, ask->kind, ask->bps, msg, len);
}

static int policy_accept(const struct slurm_limits *l, const void *arg, char *msg, size_t len)
{
	return slurm_request_check_policy(l, *(const enum slurm_policy *)arg, msg, len);
}

int slurm_admin_check_cap(const struct slurm_admin *admin, enum slurm_cap_kind kind,
			  uint64_t bps, char *msg, size_t msg_len)
{
	struct cap_ask ask = { kind, bps };
	return any_limits_accept(admin, cap_accept, &ask, msg, msg_len);
}

int slurm_admin_check_policy(const struct slurm_admin *admin, enum slurm_policy policy,
			     char *msg, size_t msg_len)
{
	return any_limits_accept(admin, policy_accept, &policy, msg, msg_len);
}

void slurm_plan_make(const struct slurm_limits *limits, const struct slurm_request *request,
		     uint32_t job_id, struct slurm_plan *plan)
{
	memset(plan, 0, sizeof *plan);
	bool asked = request->policy != SLURM_POLICY_UNSET || request->class_name[0];
	for (int k = 0; k < SLURM_CAP_KINDS; k++) {
		asked |= request->set[k];
		if (request->set[k]) {
			plan->set[k] = true;
			plan->bps[k] = request->bps[k];
			/* Above the ceiling, or inf under one: the ceiling. */
			if (limits->set[k] && (request->bps[k] == 0 || request->bps[k] > limits->bps[k])) {
				plan->bps[k] = limits->bps[k];
				plan->clamped |= 1u << k;
			}
		} else if (limits->set[k]) {
			plan->set[k] = true;
			plan->bps[k] = limits->bps[k];
		}
	}
	plan->wrap = asked || any_ceiling(limits) || limits->policy != SLURM_POLICY_UNSET;
	plan->policy = request->policy != SLURM_POLICY_UNSET ? request->policy : limits->policy;
	if (plan->policy == SLURM_POLICY_UNSET)
		plan->policy = SLURM_POLICY_CAP;
	char unused[256];
	if (slurm_request_check_policy(limits, plan->policy, unused, sizeof unused) < 0) {
		plan->policy = limits->policy == SLURM_POLICY_UNSET ? SLURM_POLICY_CAP : limits->policy;
		plan->policy_replaced = true;
	}
	if (request->class_name[0])
		snprintf(plan->class_name, sizeof plan->class_name, "%s", request->class_name);
	else
		/* One class per job per node: every step's tasks share it. */
		snprintf(plan->class_name, sizeof plan->class_name, "slurm-%" PRIu32, job_id);
}

int slurm_plan_words(const struct slurm_plan *plan, char *buf, size_t len, const char **words,
		     unsigned max_words)
{
	unsigned n = 0;
	size_t used = 0;
#define ADD(...) do {                                                           \
		if (n >= max_words)                                             \
			return -ENOSPC;                                         \
		int w_ = snprintf(buf + used, len - used, __VA_ARGS__);         \
		if (w_ < 0 || (size_t)w_ >= len - used)                         \
			return -ENOSPC;                                         \
		words[n++] = buf + used;                                        \
		used += (size_t)w_ + 1;                                         \
	} while (0)
	bool capped = false;
	for (int k = 0; k < SLURM_CAP_KINDS; k++) {
		if (!plan->set[k])
			continue;
		ADD("%s", cap_options[k]);
		if (plan->bps[k])
			ADD("%" PRIu64, plan->bps[k]);
		else
			ADD("inf");
		capped = true;
	}
	/* discnice run needs one cap (or manners): "inf" measures only. */
	if (!capped && plan->policy != SLURM_POLICY_MANNERS) {
		ADD("--rate");
		ADD("inf");
	}
	ADD("--policy");
	ADD("%s", slurm_policy_name(plan->policy));
	ADD("--class");
	ADD("%s", plan->class_name);
	/* No status line or summary per task in the job's output. */
	ADD("--quiet");
#undef ADD
	return (int)n;
}
