/*
 * tool_regulators.h - who else regulates a process: the run slots of the
 * user's classes (`discnice ls`) set against the process tree, for the
 * commands that take over running processes (`attach`, `benice --pid`).
 */
#ifndef DISCNICE_TOOL_REGULATORS_H
#define DISCNICE_TOOL_REGULATORS_H

#include <stdbool.h>
#include <sys/types.h>

enum regulator_asker {
	ASKER_ATTACH,  /* discnice attach                 */
	ASKER_BENICE,  /* discnice benice --pid           */
};

/* Every PID checked against the regulators the user's classes name: one
 * line on stderr for each PID another regulator has (or has below it),
 * then false.  True when no class exists or none can be read. */
bool pids_free_of_regulators(const pid_t *pids, unsigned npids, enum regulator_asker asker);

#endif
