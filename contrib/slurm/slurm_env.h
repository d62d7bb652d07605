/*
 * slurm_env.h - the one environment rule of the plugin and of
 * discnice-slurm-task: the submitting shell's DISCNICE_* variables are not
 * the job's.  srun checks a job's options without them (discnice_spank.c,
 * tool_check()), and the task drops them before `discnice run` reads its
 * defaults there (discnice_slurm_task.c), so what srun accepted is what
 * runs.  Inline: the two are separate programs.
 */
#ifndef DISCNICE_SLURM_ENV_H
#define DISCNICE_SLURM_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#endif
