/*
 * tool_exec.h - finding the job's program the way execvp(3) will, and
 * telling beforehand whether LD_PRELOAD can reach it.
 */
#ifndef DISCNICE_TOOL_EXEC_H
#define DISCNICE_TOOL_EXEC_H

#include <stddef.h>

enum program_reach {
	PROGRAM_PRELOADABLE,   /* dynamically linked: the agent will load     */
	PROGRAM_STATIC,        /* no PT_INTERP: LD_PRELOAD does nothing        */
	PROGRAM_SECURE,        /* setuid/setgid: the loader ignores LD_PRELOAD */
	PROGRAM_OTHER_CLASS,   /* dynamic, but not our ELF class (32-bit)      */
	PROGRAM_UNKNOWN,       /* not ELF, unreadable: nothing to say          */
};

/* Resolve name through PATH into buf.  Returns 0, or EXIT_NOT_FOUND /
 * EXIT_CANNOT_EXEC with *err set to the errno that explains it. */
int program_find(const char *name, char *buf, size_t len, int *err);

/* Follows one "#!" interpreter line.  why receives the file it judged. */
enum program_reach program_reach(const char *path, char *why, size_t len);

/* For a program the kernel refused with ENOEXEC (a script without "#!"):
 * the argv that hands it to /bin/sh, as execvp(3) and env(1) do (POSIX:
 * "as if ... by the shell") - "/bin/sh", path, then argv[1...].  calloc'd
 * (free it); NULL without memory. */
char **program_sh_argv(const char *path, char *const argv[]);

/* execv(path, argv), handing a script without "#!" to /bin/sh as above.
 * Returns only on failure, with the errno that explains it. */
int program_exec(const char *path, char *const argv[]);

#endif
