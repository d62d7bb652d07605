/*
 * slurm_settings.h - what the SPANK plugin (discnice_spank.c) decides, as
 * pure logic: the administrator's plugstack.conf arguments, a job's
 * --discnice-* options, and the `discnice run` options a task gets.
 *
 * No I/O, no globals, no Slurm header: tests/unit/test_slurm_settings.c
 * feeds it words and numbers.  Functions return 0 or -EINVAL/-ERANGE/
 * -ENOSPC and, on error, one sentence in `msg`.
 *
 * The rule (issue #13): an administrator's cap is a default and a ceiling.
 * A job that names no cap of that kind gets it; one that names a lower
 * cap keeps its own; one that names a higher cap (or "inf") is refused by
 * srun where no partition allows it, and clamped to its partition's
 * ceiling on the node (srun does not know the partition when it parses
 * options).  --policy yield lifts the caps while the disks are idle, so
 * under a ceiling a job may choose it only when the administrator did.
 */
#ifndef DISCNICE_SLURM_SETTINGS_H
#define DISCNICE_SLURM_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum slurm_cap_kind {
	SLURM_CAP_TOTAL, /* --discnice-rate        -> discnice run --rate       */
	SLURM_CAP_READ,  /* --discnice-read-rate   -> --read-rate               */
	SLURM_CAP_WRITE, /* --discnice-write-rate  -> --write-rate              */
	SLURM_CAP_NET,   /* --discnice-net-rate    -> --net-rate                */
	SLURM_CAP_KINDS
};

enum slurm_policy { SLURM_POLICY_UNSET, SLURM_POLICY_CAP, SLURM_POLICY_YIELD, SLURM_POLICY_MANNERS };

#define SLURM_NAME_MAX 64u       /* a partition or class name, with its NUL */
#define SLURM_PATH_MAX 512u
#define SLURM_PARTITIONS_MAX 16u

/* One set of administrator's settings: global, or one partition's. */
struct slurm_limits {
	bool set[SLURM_CAP_KINDS];
	uint64_t bps[SLURM_CAP_KINDS]; /* the ceiling, > 0 where set */
	enum slurm_policy policy;      /* the default policy, UNSET: cap */
};

struct slurm_admin {
	struct slurm_limits global;
	struct {
		char name[SLURM_NAME_MAX];
		struct slurm_limits limits;
	} partitions[SLURM_PARTITIONS_MAX];
	unsigned n_partitions;
	char discnice_path[SLURM_PATH_MAX]; /* "" = the default */
	char task_path[SLURM_PATH_MAX];     /* "" = the default */
};

/* What a job asked for with its --discnice-* options (rates as parsed by
 * rate_parse(): 0 means inf). */
struct slurm_request {
	bool set[SLURM_CAP_KINDS];
	uint64_t bps[SLURM_CAP_KINDS];
	enum slurm_policy policy;
	char class_name[SLURM_NAME_MAX]; /* "" = slurm-JOBID */
};

/* What a task runs under. */
struct slurm_plan {
	bool wrap;                     /* false: the task runs as without us */
	bool set[SLURM_CAP_KINDS];
	uint64_t bps[SLURM_CAP_KINDS]; /* 0 = inf */
	enum slurm_policy policy;
	char class_name[SLURM_NAME_MAX];
	unsigned clamped;              /* bit per kind lowered to a ceiling */
	bool policy_replaced;          /* yield refused: the default instead */
};

/* plugstack.conf arguments: words KEY=VALUE or PARTITION:KEY=VALUE with KEY
 * rate, read_rate, write_rate, net_rate (RATE as discnice run takes it;
 * "inf" removes a global ceiling for one partition), policy (cap, yield,
 * manners); and discnice=PATH, task=PATH (absolute).  A later word wins. */
int slurm_admin_parse(struct slurm_admin *admin, int argc, char *const argv[], char *msg,
		      size_t msg_len);

/* The settings for a job of `partition` (NULL or "": none known): the
 * global ones, with each that the partition names replaced. */
void slurm_admin_limits(const struct slurm_admin *admin, const char *partition,
			struct slurm_limits *out);

/* At srun/sbatch time: may a job ask for `bps` (0 = inf) of `kind` under
 * `limits`?  0, or -ERANGE and why. */
int slurm_request_check_cap(const struct slurm_limits *limits, enum slurm_cap_kind kind,
			    uint64_t bps, char *msg, size_t msg_len);
/* The same for a policy. */
int slurm_request_check_policy(const struct slurm_limits *limits, enum slurm_policy policy,
			       char *msg, size_t msg_len);

/* At srun/sbatch time, where the partition is not known yet: refused only
 * where neither the global settings nor any partition's would take it
 * (a partition may raise the ceiling, lift it with inf, or choose yield);
 * the node then clamps to the job's own partition, with a warning.
 * 0, or -ERANGE and why. */
int slurm_admin_check_cap(const struct slurm_admin *admin, enum slurm_cap_kind kind,
			  uint64_t bps, char *msg, size_t msg_len);
int slurm_admin_check_policy(const struct slurm_admin *admin, enum slurm_policy policy,
			     char *msg, size_t msg_len);

/* A rate as the administrator most likely wrote it: "50 MB/s", "4 kB/s",
 * else bytes per second. */
void slurm_rate_text(char *buf, size_t len, uint64_t bps);

/* On the node: the request under the limits.  A job that asked for
 * nothing under no limits is not wrapped. */
void slurm_plan_make(const struct slurm_limits *limits, const struct slurm_request *request,
		     uint32_t job_id, struct slurm_plan *plan);

/* The plan as `discnice run` options, one word per element of `words`
 * (pointers into `buf`), without the command: e.g. --rate 5000000 --policy
 * cap --class slurm-12 --quiet.  The number of words, or -ENOSPC. */
int slurm_plan_words(const struct slurm_plan *plan, char *buf, size_t len, const char **words,
		     unsigned max_words);

const char *slurm_cap_option(enum slurm_cap_kind kind);   /* "--rate", ... */
const char *slurm_policy_name(enum slurm_policy policy);  /* "cap", ...     */
int slurm_policy_parse(const char *text, enum slurm_policy *out);

#endif
