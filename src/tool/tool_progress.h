/*
 * tool_progress.h - where `discnice benice` reads an unmodified program's
 * progress (MS Manners §7.2: BeNice polls "a standard means for programs to
 * export measurements"; §5 on good metrics):
 *
 *   io            the job tree's bytes read and written, rchar + wchar of
 *                 /proc/PID/io (tool_jobtree.h): any program, static ones
 *                 too, counted by the kernel at every read(2)/write(2)
 *                 whether the bytes come from disk, cache, pipe or socket;
 *   file:PATH     a file the program rewrites with its cumulative count(s);
 *   cmd:COMMAND   a command run with /bin/sh -c at each poll, which prints
 *                 the count(s) on its standard output.
 *
 * Counts are cumulative; several numbers are several metrics progressing
 * at once (§4.4), parsed by manners/progress_text.h.
 */
#ifndef DISCNICE_TOOL_PROGRESS_H
#define DISCNICE_TOOL_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>

#include "tool/tool_jobtree.h"

/* A command that takes longer than this to print its count is killed and
 * the poll skipped: benice must keep polling (and resuming) on time. */
#define PROGRESS_CMD_TIMEOUT_MS 5000

enum progress_kind { PROGRESS_IO, PROGRESS_FILE, PROGRESS_CMD };

struct progress_source {
	enum progress_kind kind;
	const char *arg;      /* PATH or COMMAND; NULL for io */
	const char *spec;     /* as given, for messages and the report */
};

/* "io", "file:PATH" or "cmd:COMMAND" (PATH and COMMAND not empty).
 * 0, or -EINVAL. */
int progress_source_parse(const char *spec, struct progress_source *out);

/* Asked every 20 ms while a cmd: runs: true to give it up at once (the
 * job ended, a signal came), so that benice is never kept waiting for a
 * count it no longer needs.  NULL: never. */
struct progress_cancel {
	bool (*now)(void *ctx);
	void *ctx;
};

/*
 * The counts now, into values[0 .. max): their number (>= 1), or a
 * negative errno with a short reason in why (-EINVAL: not numbers;
 * -ETIMEDOUT: the command hung; -ECANCELED: cancel said so, the command
 * killed; else a read or run error).  For io the tree must have been
 * scanned just before.
 */
int progress_read(const struct progress_source *src, const struct jobtree *tree,
		  const struct progress_cancel *cancel, double *values, int max, char *why,
		  size_t why_len);

#endif
