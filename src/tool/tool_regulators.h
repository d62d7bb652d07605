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

/* The check above and the slot that makes a regulator seen (its class
 * joined, attached_pid stored) as one step among the user's regulators:
 * two attaches of one PID started together both passed the check, and
 * both held it.  An flock(2) on the classes' directory (segment_dir()),
 * held from before the check until the slot is published (or
 * the command gives up); released by the kernel if we die.  Returns the
 * descriptor, or -1 where the directory cannot hold it (then unlocked,
 * as before). */
int regulators_lock(void);
void regulators_unlock(int fd);

#endif
