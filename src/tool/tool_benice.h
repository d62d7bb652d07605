/* tool_benice.h - `discnice benice` (tool_benice.c): MS Manners' external
 * regulator (§7.2). */
#ifndef DISCNICE_TOOL_BENICE_H
#define DISCNICE_TOOL_BENICE_H

#include <sys/types.h>

int tool_benice(int argc, char **argv);

/* The PIDs a running `discnice benice --pid` was given, from its command
 * line (argv[0] "benice", the rest as typed): how many were put in pids;
 * 0 for a command's benice or a line that does not parse
 * (tool_regulators.c). */
unsigned benice_argv_pids(int argc, char **argv, pid_t *pids, unsigned max);

#endif
