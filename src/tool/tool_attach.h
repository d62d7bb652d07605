/* tool_attach.h - `discnice attach` (tool_attach.c). */
#ifndef DISCNICE_TOOL_ATTACH_H
#define DISCNICE_TOOL_ATTACH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

int tool_attach(int argc, char **argv);

/* One PID operand checked as attach checks it (exists, a process and not a
 * thread, not init nor a kernel thread, not discnice nor one of its
 * ancestors - the caller's shell -, not a zombie, the caller's own unless
 * root, its /proc/PID/io readable): true with *pid and its name in comm,
 * or one line on stderr and false.  Touches no process.  Also used by
 * `discnice benice --pid`. */
bool attach_pid_check(const char *text, pid_t *pid, char *comm, size_t comm_len);

#endif
