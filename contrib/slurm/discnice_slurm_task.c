/*
 * discnice_slurm_task.c - discnice-slurm-task: what a Slurm task execs when
 * the discnice SPANK plugin wraps it (contrib/slurm/discnice_spank.c).
 *
 * The plugin pointed the task's argv[0] at this program and left in the
 * environment the real argv[0] (DISCNICE_SLURM_PROGRAM), the `discnice run`
 * options, space-separated (DISCNICE_SLURM_OPTIONS), and where discnice is
 * (DISCNICE_SLURM_DISCNICE).  We remove them, so the job never sees them,
 * and exec
 *
 *     discnice run OPTIONS -- PROGRAM ARG...
 *
 * in this same process: the task's pid, which slurmstepd tracks, signals,
 * suspends and waits for, is the supervisor's.
 *
 * PROGRAM is found as slurmstepd would have found it (task.c _build_path():
 * a name with no '/' is searched along the job's PATH, and used as it is,
 * relative to the working directory, if it is not there).
 *
 * An agent inherited from an enclosing regulated process (an srun inside a
 * batch script that runs under the plugin passes its environment on) is
 * dropped from LD_PRELOAD with its segment: discnice run sets its own, and
 * the supervisor itself must not be charged to the batch step's slot.
 * Every DISCNICE_* variable goes too: the submitting shell's defaults are
 * not the job's (srun checked the options without them).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "slurm_env.h"

#define MAX_WORDS 64

/* Take a variable out of the environment, keeping its value. */
static char *take_env(const char *name)
{
	const char *value = getenv(name);
	char *copy = value ? strdup(value) : NULL;
	unsetenv(name);
	return copy;
}

/* LD_PRELOAD without any libdiscnice.so (whatever its directory). */
static void drop_inherited_agent(void)
{
	const char *preload = getenv("LD_PRELOAD");
	if (!preload)
		return;
	char *copy = strdup(preload), *kept = calloc(1, strlen(preload) + 1);
	if (!copy || !kept) {
		free(copy);
		free(kept);
		return;
	}
	char *save = NULL;
	for (char *entry = strtok_r(copy, ": ", &save); entry; entry = strtok_r(NULL, ": ", &save)) {
		const char *base = strrchr(entry, '/');
		if (strcmp(base ? base + 1 : entry, "libdiscnice.so") == 0)
			continue;
		if (*kept)
			strcat(kept, ":");
		strcat(kept, entry);
	}
	if (*kept)
		setenv("LD_PRELOAD", kept, 1);
	else
		unsetenv("LD_PRELOAD");
	free(copy);
	free(kept);
}

/* slurmstepd's _build_path(), so that the job runs what it would have run. */
static char *resolve(const char *name)
{
	if (name[0] == '/' || name[0] == '.' || strchr(name, '/'))
		return strdup(name);
	char full[PATH_MAX];
	if (slurm_path_search(getenv("PATH"), name, full, sizeof full))
		return strdup(full);
	/* Not on PATH: execve() would take it relative to the working
	 * directory; discnice run searches PATH for a bare name, so say "./"
	 * (main() says what slurmstepd says when that is not there either). */
	size_t len = strlen(name) + 3;
	char *here = malloc(len);
	if (here)
		snprintf(here, len, "./%s", name);
	return here;
}

int main(int argc, char **argv)
{
	char *program = take_env("DISCNICE_SLURM_PROGRAM");
	char *options = take_env("DISCNICE_SLURM_OPTIONS");
	char *discnice = take_env("DISCNICE_SLURM_DISCNICE");
	if (!program || !options || !discnice || !*program || discnice[0] != '/') {
		fprintf(stderr, "discnice-slurm-task: started without the discnice Slurm plugin's "
				"settings (DISCNICE_SLURM_PROGRAM, _OPTIONS, _DISCNICE); it is not meant "
				"to be run by hand\n");
		return 125;
	}
	drop_inherited_agent();
	/* Every other DISCNICE_* variable: an enclosing run's segment and
	 * slot, and the submitting shell's defaults (DISCNICE_READ_RATE=1k in
	 * the shell that ran srun re-capped the job's class on the node). */
	slurm_drop_discnice_environment();

	char **run_argv = calloc((size_t)argc + MAX_WORDS + 4, sizeof *run_argv);
	char *resolved = resolve(program);
	if (!run_argv || !resolved) {
		fprintf(stderr, "discnice-slurm-task: out of memory\n");
		return 125;
	}
	struct stat st;
	if (!strchr(program, '/') && strncmp(resolved, "./", 2) == 0 &&
	    strcmp(resolved + 2, program) == 0 &&
	    stat(resolved, &st) != 0) {
		/* Found nowhere: slurmstepd's own words and status (exec_task():
		 * error("execve(): %s: %m"), exit(errno)), not discnice run's
		 * about a "./NAME" the user never typed. */
		int e = errno;
		fprintf(stderr, "slurmstepd: error: execve(): %s: %s\n", program, strerror(e));
		return e;
	}
	int n = 0;
	run_argv[n++] = discnice;
	run_argv[n++] = "run";
	char *save = NULL;
	for (char *word = strtok_r(options, " ", &save); word; word = strtok_r(NULL, " ", &save)) {
		if (n >= MAX_WORDS) {
			fprintf(stderr, "discnice-slurm-task: too many options\n");
			return 125;
		}
		run_argv[n++] = word;
	}
	run_argv[n++] = "--";
	run_argv[n++] = resolved;
	for (int i = 1; i < argc; i++)
		run_argv[n++] = argv[i];
	run_argv[n] = NULL;
	execv(discnice, run_argv);
	int e = errno;
	fprintf(stderr, "discnice-slurm-task: cannot run %s: %s\n", discnice, strerror(e));
	return e == ENOENT ? 127 : 126;
}
