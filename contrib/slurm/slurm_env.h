/*
 * slurm_env.h - what the plugin and discnice-slurm-task share about a
 * task's environment.  Inline: the two are separate programs.
 *
 *   - The submitting shell's DISCNICE_* variables are not the job's.  srun
 *     checks a job's options without them (discnice_spank.c, tool_check()),
 *     and the task drops them before `discnice run` reads its defaults
 *     there (discnice_slurm_task.c), so what srun accepted is what runs.
 *   - A bare program name is looked for along PATH as slurmstepd looks
 *     for it, by the task to run what the job would have run, by the plugin
 *     to tell an --multi-prog step's configuration file.
 */
#ifndef DISCNICE_SLURM_ENV_H
#define DISCNICE_SLURM_ENV_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static inline void slurm_drop_discnice_environment(void)
{
	extern char **environ;
	for (char **e = environ; *e;) {
		if (strncmp(*e, "DISCNICE_", 9) == 0) {
			char name[256];
			const char *before = *e;
			snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
			unsetenv(name);
			if (*e != before)
				continue; /* unsetenv moved the next entry here */
		}
		e++; /* (a name too long for name[], or an entry without '=') */
	}
}

/* slurmstepd's search of a bare name (task.c _build_path()): the first
 * DIR/name along path (empty entries skipped) that is there and no
 * directory, into out; false if none. */
static inline bool slurm_path_search(const char *path, const char *name, char *out, size_t len)
{
	for (const char *dir = path; dir && *dir;) {
		size_t n = strcspn(dir, ":");
		struct stat st;
		int w = snprintf(out, len, "%.*s/%s", (int)n, dir, name);
		if (n && w > 0 && (size_t)w < len && stat(out, &st) == 0 && !S_ISDIR(st.st_mode))
			return true;
		dir += n + (dir[n] == ':');
	}
	return false;
}

#endif
