/*
 * discnice_spank.c - discnice as a Slurm SPANK plugin (issue #13): every
 * task of a job step runs under `discnice run`, with the job's
 * --discnice-* options and the administrator's caps from plugstack.conf.
 *
 *     optional /usr/local/lib/discnice/slurm/discnice.so rate=20MB/s scavenger:rate=5MB/s
 *
 * The mechanism, read from Slurm 22.05's source (src/slurmd/slurmstepd/
 * task.c exec_task(), src/common/plugstack.c):
 *
 *   - slurm_spank_task_init() runs in the forked task, as the job's user,
 *     after the environment is built and before the task prolog, PATH
 *     resolution, user limits and execve(task->argv[0], task->argv,
 *     job->env).  Slurm 22.05 has no call that inserts arguments
 *     (spank_prepend_task_argv() came later), but S_JOB_ARGV hands back
 *     job->argv, which for an ordinary step is the very array task->argv
 *     points to (slurmstepd_job.c: "t->argv is a pointer to job->argv"),
 *     and this is our own forked copy of it.  So we point argv[0] at a
 *     small program of ours, discnice-slurm-task, and hand it the real
 *     argv[0] and the `discnice run` options through spank_setenv(); it
 *     removes those variables and execs `discnice run OPTIONS -- PROGRAM
 *     ARG...`.  Everything slurmstepd does between task_init and execve
 *     (task prolog, TMPDIR, rlimits) still happens, and the supervisor is
 *     the task's own process: Slurm's signals, suspend and resume, and its
 *     process tracking reach it and, through it, the job.
 *   - Why not exec from task_init ourselves: that would skip the task
 *     prolog and the user's limits.  Why not LD_PRELOAD alone through
 *     spank_setenv(): no supervisor, so no class segment, no measured
 *     feedback, no holds, nothing for mmap, io_uring or static programs.
 *   - One class per job per node (slurm-JOBID unless --discnice-class
 *     names one): the batch script and every step's tasks on a node share
 *     one budget, so the cap is per job per node, not per task.
 *
 * Limits: an --multi-prog step gets its own argv per task (multi_prog_
 * get_argv), which S_JOB_ARGV does not show: its tasks run unwrapped, with
 * a warning (slurm_spank_task_init()).  A
 * containerized step (--container) execs through the container runtime.
 * The caps are the user's own process's (discnice is user-level): a job
 * that wants to escape them can (`discnice set`, unsetting LD_PRELOAD); the
 * administrator's cap is a default and a ceiling for jobs that cooperate,
 * not a security boundary.
 *
 * Option values are checked in srun/sbatch/salloc (the option callback, in
 * the local or allocator context) by the tool's own parser
 * (src/tool/tool_options.c, in a forked child, since it exits on bad input),
 * so a malformed value is refused before the job is queued with the same
 * message `discnice run` gives.
 *
 * A plugin built against another Slurm major release is refused by Slurm's
 * loader itself (src/common/plugin.c _verify_syms(): "Incompatible Slurm
 * plugin ... version"), since SPANK_PLUGIN records SLURM_VERSION_NUMBER;
 * slurm_spank_init() checks the running release again and declines with a
 * log line of its own.  Nothing here can bring slurmd down: slurmd itself
 * only loads the plugin (S_CTX_SLURMD) and we do nothing there.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "common/rate.h"
#include "slurm_env.h"
#include "slurm_settings.h"
#include "tool/tool_options.h"

#ifdef DISCNICE_SLURM_TEST_VERSION
/* Test build only (tests/integration/test_slurm.py): claims another Slurm
 * release, so that the loader's refusal can be seen. */
const char plugin_name[] = "discnice";
const char plugin_type[] = "spank";
const unsigned int plugin_version = DISCNICE_SLURM_TEST_VERSION;
const unsigned int spank_plugin_version = 1;
#else
SPANK_PLUGIN(discnice, 1)
#endif

#define TASK_PROGRAM "discnice-slurm-task"
/* The protocol with discnice-slurm-task (contrib/slurm/discnice_slurm_task.c). */
#define ENV_PROGRAM  "DISCNICE_SLURM_PROGRAM"
#define ENV_OPTIONS  "DISCNICE_SLURM_OPTIONS"
#define ENV_DISCNICE "DISCNICE_SLURM_DISCNICE"

enum option_val { OPT_RATE, OPT_READ_RATE, OPT_WRITE_RATE, OPT_NET_RATE, OPT_POLICY, OPT_CLASS };

/* The administrator's settings, parsed once per process in
 * slurm_spank_init() (srun, sbatch, slurmstepd each load the stack). */
static struct slurm_admin admin;

static int option_cb(int val, const char *value, int remote);

static struct spank_option options[] = {
	{ "discnice-rate", "RATE",
	  "discnice: cap the job's disk reads plus writes on each node (e.g. 20MB/s; "
	  "all tasks of the job on a node share it)", 1, OPT_RATE, option_cb },
	{ "discnice-read-rate", "RATE", "discnice: cap the job's disk reads on each node", 1,
	  OPT_READ_RATE, option_cb },
	{ "discnice-write-rate", "RATE", "discnice: cap the job's disk writes on each node", 1,
	  OPT_WRITE_RATE, option_cb },
	{ "discnice-net-rate", "RATE",
	  "discnice: cap what the job's sockets send plus receive on each node", 1, OPT_NET_RATE,
	  option_cb },
	{ "discnice-policy", "cap|yield|manners",
	  "discnice: cap (always), yield (free while the disks are idle), manners "
	  "(suspended while its I/O runs slow)", 1, OPT_POLICY, option_cb },
	{ "discnice-class", "NAME",
	  "discnice: share one budget with every run of class NAME on the node "
	  "(default: slurm-JOBID)", 1, OPT_CLASS, option_cb },
	SPANK_OPTIONS_TABLE_END
};
#define N_OPTIONS (sizeof options / sizeof options[0] - 1)

/* The `discnice run` option each of ours stands for. */
static const char *const run_option[] = { "--rate", "--read-rate", "--write-rate", "--net-rate",
					  "--policy", "--class" };

/*
 * Check one value with discnice run's own parser: run_options_parse()
 * prints its one line and exits 2 on bad input, so it runs in a child.
 * Its first line goes to our stderr (srun's, sbatch's: the user's
 * terminal).  0 if the value is good.
 */
static int tool_check(int val, const char *value)
{
	int pipe_fds[2];
	if (pipe2(pipe_fds, O_CLOEXEC) != 0)
		return 0; /* cannot check here: the node's discnice run will */
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		close(pipe_fds[0]);
		close(pipe_fds[1]);
		return 0;
	}
	if (pid == 0) {
		dup2(pipe_fds[1], STDERR_FILENO);
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, STDOUT_FILENO);
		slurm_drop_discnice_environment();
		/* "--rate inf" first: run wants a cap; the value checked may
		 * replace it. */
		char *argv[] = { "run", "--rate", "inf", (char *)run_option[val], (char *)value,
				 "--", "true", NULL };
		struct run_config config;
		run_options_parse(&config, 7, argv);
		_exit(0);
	}
	close(pipe_fds[1]);
	char text[1024];
	size_t got = 0;
	ssize_t n;
	while (got < sizeof text - 1 &&
	       (n = read(pipe_fds[0], text + got, sizeof text - 1 - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		got += (size_t)n;
	}
	close(pipe_fds[0]);
	text[got] = '\0';
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	text[strcspn(text, "\n")] = '\0';
	/* run's parser names its own option ("discnice: --rate 'x': ..."):
	 * the user typed ours. */
	char prefix[64];
	snprintf(prefix, sizeof prefix, "discnice: %s ", run_option[val]);
	if (!strncmp(text, prefix, strlen(prefix)))
		fprintf(stderr, "discnice: --%s %s\n", options[val].name, text + strlen(prefix));
	else
		fprintf(stderr, "%s\n", text[0] ? text : "discnice: bad option value");
	return -1;
}

/* The last value given of each cap and of the policy (srun, salloc,
 * sbatch: option_cb() runs once per occurrence, in order), checked
 * against the ceilings once all are in, by slurm_spank_init_post_opt(). */
static char last_value[OPT_POLICY + 1][64];

static int option_cb(int val, const char *value, int remote)
{
	/* On the node the value was checked where the job was submitted;
	 * slurm_spank_task_init() parses it again. */
	if (remote || val < 0 || val > OPT_CLASS || !value)
		return 0;
	if (tool_check(val, value) < 0)
		return -1;
	if (val <= OPT_POLICY)
		snprintf(last_value[val], sizeof last_value[val], "%s", value);
	return 0;
}

/* Once every option is in: refused here only what no partition would
 * take (srun does not know the partition yet); the node clamps to the
 * job's own.  Checked per occurrence, `--discnice-rate 100M
 * --discnice-rate 5M` was refused for a value the job does not use. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	spank_context_t context = spank_context();
	if (context != S_CTX_LOCAL && context != S_CTX_ALLOCATOR)
		return 0;
	char msg[256];
	for (int val = OPT_RATE; val <= OPT_POLICY; val++) {
		const char *value = last_value[val];
		if (!value[0])
			continue;
		if (val <= OPT_NET_RATE) {
			uint64_t bps;
			if (rate_parse(value, &bps) == 0 &&
			    slurm_admin_check_cap(&admin, (enum slurm_cap_kind)val, bps, msg,
						  sizeof msg) < 0) {
				fprintf(stderr, "discnice: %s\n", msg);
				return -1;
			}
		} else {
			enum slurm_policy policy;
			if (slurm_policy_parse(value, &policy) == 0 &&
			    slurm_admin_check_policy(&admin, policy, msg, sizeof msg) < 0) {
				fprintf(stderr, "discnice: %s\n", msg);
				return -1;
			}
		}
	}
	return 0;
}

/* Does the running Slurm have the major and minor release we were built
 * for?  Slurm's loader checks the same before it calls us; this is the
 * second net, with a line that says what to do. */
static int release_matches(spank_t sp)
{
	char *major = NULL, *minor = NULL;
	if (spank_get_item(sp, S_SLURM_VERSION_MAJOR, &major) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_SLURM_VERSION_MINOR, &minor) != ESPANK_SUCCESS || !major || !minor)
		return 1; /* cannot tell: the loader's check stands */
	if (atoi(major) == (int)SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER) &&
	    atoi(minor) == (int)SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER))
		return 1;
	slurm_error("discnice: this plugin was built for Slurm %d.%02d, this is Slurm %s.%s: not "
		    "loaded (rebuild it: make slurm && make install-slurm)",
		    (int)SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER),
		    (int)SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER), major, minor);
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t context = spank_context();
	if (!release_matches(sp))
		return -1;
	char msg[256];
	if (slurm_admin_parse(&admin, ac, av, msg, sizeof msg) < 0) {
		slurm_error("discnice: plugstack.conf: %s", msg);
		return -1;
	}
	if (context != S_CTX_LOCAL && context != S_CTX_REMOTE && context != S_CTX_ALLOCATOR)
		return 0;
	for (size_t i = 0; i < N_OPTIONS; i++)
		if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS) {
			slurm_error("discnice: cannot register --%s", options[i].name);
			return -1;
		}
	return 0;
}

/* The directory this plugin was loaded from. */
static int own_directory(char *buf, size_t len)
{
	Dl_info info;
	if (!dladdr((void *)own_directory, &info) || !info.dli_fname || info.dli_fname[0] != '/')
		return -1;
	snprintf(buf, len, "%s", info.dli_fname);
	char *slash = strrchr(buf, '/');
	*slash = '\0';
	return 0;
}

/* discnice-slurm-task beside the plugin (both in PREFIX/lib/discnice/slurm/,
 * or build/slurm/), and discnice in PREFIX/bin or build/, unless
 * plugstack.conf names them. */
static int find_programs(char *task, char *discnice, size_t len, char *why, size_t why_len)
{
	char dir[SLURM_PATH_MAX];
	if (own_directory(dir, sizeof dir) < 0)
		dir[0] = '\0';
	if (admin.task_path[0])
		snprintf(task, len, "%s", admin.task_path);
	else
		snprintf(task, len, "%s/" TASK_PROGRAM, dir);
	if (admin.discnice_path[0]) {
		snprintf(discnice, len, "%s", admin.discnice_path);
	} else {
		snprintf(discnice, len, "%s/../../../bin/discnice", dir);
		if (access(discnice, X_OK) != 0)
			snprintf(discnice, len, "%s/../discnice", dir);
	}
	if (access(task, X_OK) != 0) {
		snprintf(why, why_len, "%s: %s (set task=PATH in plugstack.conf)", task,
			 strerror(errno));
		return -1;
	}
	if (access(discnice, X_OK) != 0) {
		snprintf(why, why_len, "%s: %s (set discnice=PATH in plugstack.conf)", discnice,
			 strerror(errno));
		return -1;
	}
	return 0;
}

/* A task that cannot be put under discnice: say so on its stderr (the
 * job's output) and in slurmd's log.  What happens next is Slurm's: a
 * failed task_init ends the task when the plugin is "required" in
 * plugstack.conf, and is ignored when it is "optional" (the task then runs
 * unregulated); the plugin cannot tell which, so the line says both. */
__attribute__((format(printf, 1, 2))) static int task_error(const char *fmt, ...)
{
	char why[3 * SLURM_PATH_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	fprintf(stderr, "discnice: %s: the task is not regulated (a 'required' plugin in "
		"plugstack.conf fails it; an 'optional' one lets it run)\n", why);
	slurm_error("discnice: %s: task not regulated", why);
	return -1;
}

/* A job option's value.  sbatch --export=NONE (or a list) leaves the
 * batch step's environment without the options sbatch put there, which is
 * where slurmstepd reads them for a batch script (Slurm 22.05:
 * spank_get_remote_options_env(job->env)); its SPANK job environment,
 * exported to the job with the prefix SLURM_SPANK_, still has them. */
static char *option_value(spank_t sp, struct spank_option *opt, char *buf, size_t len)
{
	char *value = NULL;
	if (spank_option_getopt(sp, opt, &value) == ESPANK_SUCCESS && value)
		return value;
	char name[128];
	int n = snprintf(name, sizeof name, "SLURM_SPANK__SLURM_SPANK_OPTION_discnice_%s",
			 opt->name);
	if (n < 0 || (size_t)n >= sizeof name)
		return NULL;
	for (char *c = name; *c; c++)
		if (*c == '-')
			*c = '_';
	if (spank_getenv(sp, name, buf, (int)len) != ESPANK_SUCCESS)
		return NULL;
	return buf;
}

/* The job's request, from its options as slurmstepd received them. */
static int read_request(spank_t sp, struct slurm_request *request)
{
	memset(request, 0, sizeof *request);
	for (size_t i = 0; i < N_OPTIONS; i++) {
		char text[SLURM_PATH_MAX];
		char *value = option_value(sp, &options[i], text, sizeof text);
		if (!value)
			continue;
		int val = options[i].val;
		if (val <= OPT_NET_RATE) {
			if (rate_parse(value, &request->bps[val]) < 0)
				return task_error("--%s '%s': not a rate", options[i].name, value);
			request->set[val] = true;
		} else if (val == OPT_POLICY) {
			if (slurm_policy_parse(value, &request->policy) < 0)
				return task_error("--%s '%s': expected cap, yield or manners",
						  options[i].name, value);
		} else {
			/* discnice run checks the name; the words we hand on
			 * are separated by spaces. */
			if (strlen(value) >= SLURM_NAME_MAX || strpbrk(value, " \t\n"))
				return task_error("--%s '%s': not a class name", options[i].name, value);
			snprintf(request->class_name, sizeof request->class_name, "%s", value);
		}
	}
	return 0;
}

/* Is name a file but no program, as slurmstepd would look for it (the
 * job's PATH for a bare name, else the working directory)?  An --multi-prog
 * step's configuration file, typed "multi.conf" or "/path/multi.conf". */
static bool not_a_program(spank_t sp, const char *name)
{
	char path[4096], full[SLURM_PATH_MAX];
	if (!strchr(name, '/') && spank_getenv(sp, "PATH", path, sizeof path) == ESPANK_SUCCESS &&
	    slurm_path_search(path, name, full, sizeof full))
		return false; /* slurmstepd runs what it found there */
	return access(name, F_OK) == 0 && access(name, X_OK) != 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!spank_remote(sp))
		return 0;
	struct slurm_request request;
	if (read_request(sp, &request) < 0)
		return -1;
	char partition[SLURM_NAME_MAX] = "";
	if (spank_getenv(sp, "SLURM_JOB_PARTITION", partition, sizeof partition) != ESPANK_SUCCESS)
		partition[0] = '\0';
	struct slurm_limits limits;
	slurm_admin_limits(&admin, partition, &limits);
	uint32_t job_id = 0;
	spank_get_item(sp, S_JOB_ID, &job_id);
	struct slurm_plan plan;
	slurm_plan_make(&limits, &request, job_id, &plan);
	if (!plan.wrap)
		return 0;

	int task_id = -1;
	spank_get_item(sp, S_TASK_ID, &task_id);
	for (int k = 0; k < SLURM_CAP_KINDS && task_id == 0; k++)
		if (plan.clamped & (1u << k)) {
			char rate[32];
			slurm_rate_text(rate, sizeof rate, plan.bps[k]);
			fprintf(stderr, "discnice: warning: --discnice%s is above the administrator's "
				"cap for partition %s: the job runs at %s\n",
				slurm_cap_option((enum slurm_cap_kind)k) + 1,
				partition[0] ? partition : "(none)", rate);
		}
	if (plan.policy_replaced && task_id == 0)
		fprintf(stderr, "discnice: warning: --discnice-policy yield is not allowed under the "
			"administrator's caps for partition %s: policy %s\n",
			partition[0] ? partition : "(none)", slurm_policy_name(plan.policy));

	char buf[1024], joined[1024];
	const char *words[32];
	int n = slurm_plan_words(&plan, buf, sizeof buf, words, 32);
	if (n < 0)
		return task_error("options too long");
	size_t used = 0;
	for (int i = 0; i < n; i++)
		used += (size_t)snprintf(joined + used, sizeof joined - used, "%s%s", i ? " " : "",
					 words[i]);

	int argc = 0;
	char **argv = NULL;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv ||
	    !argv[0])
		return 0; /* nothing to run: slurmstepd says so itself */
	/* --multi-prog: slurmstepd runs each task's own line of the file
	 * argv[0] names (multi_prog_get_argv()), not argv, so nothing of ours
	 * would run, and our variables would be left in the tasks'
	 * environment.  SPANK does not say so (Slurm 22.05); a file that is
	 * not executable is how it shows (a plain step of one fails in
	 * execve() anyway, with Slurm's own message). */
	if (not_a_program(sp, argv[0])) {
		if (task_id == 0)
			fprintf(stderr, "discnice: warning: %s is not a program (an --multi-prog "
				"step?): the step's tasks run unregulated\n", argv[0]);
		return 0;
	}
	char task[SLURM_PATH_MAX], discnice[SLURM_PATH_MAX], why[2 * SLURM_PATH_MAX];
	if (find_programs(task, discnice, sizeof task, why, sizeof why) < 0)
		return task_error("%s", why);
	char *wrapper = strdup(task);
	if (!wrapper ||
	    spank_setenv(sp, ENV_PROGRAM, argv[0], 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, ENV_OPTIONS, joined, 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, ENV_DISCNICE, discnice, 1) != ESPANK_SUCCESS)
		return task_error("cannot hand the task to discnice");
	/* This process is the task slurmstepd forked; its argv is our copy
	 * (see the top of this file).  slurmstepd execs what argv[0] names. */
	argv[0] = wrapper;
	return 0;
}
