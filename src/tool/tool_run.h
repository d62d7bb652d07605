/* tool_run.h - `discnice run` (tool_run.c). */
#ifndef DISCNICE_TOOL_RUN_H
#define DISCNICE_TOOL_RUN_H

#include <stdbool.h>

#include "common/segment.h"
#include "tool/tool_options.h"

int tool_run(int argc, char **argv);

/* Make or join class config->class_name (removing stale classes first) and
 * claim a run slot in it for this process, for `run`, `attach` and
 * `benice` alike: kind says which (segment_run_kind(): a run's agent
 * calibrates the probe, an attach is held from outside by its disk count,
 * benice takes no cap at all).  Joining sets the caps config names and reads the
 * class's own settings back into config.  A class is capped or benice's,
 * never both.  Returns 0, or the exit status after one line on stderr
 * (125; 2 for a bad --trace, or for a class of the other kind). */
int run_class_join(struct run_config *config, enum run_kind kind, struct dn_segment **seg,
		   int *slot);

/* A wait status as the exit status discnice passes on: the job's own,
 * 128+N for a job killed by signal N (*signal_out = N, else 0). */
int wait_status_to_exit(int status, int *signal_out);

/* The job was killed by signal sig: so is discnice (no core of ours), so
 * that the shell sees what it sees for the plain command; core_dumped (the
 * job's wait status said so) is said on stderr, since the shell cannot say
 * it.  Returns only for a signal that cannot kill. */
void die_of_signal(int sig, bool core_dumped);

/* --report FILE, --state-file FILE (option names the option, without its
 * dashes): exit 2 with one line now if FILE cannot be written later.
 * Returns the name to write: FILE, or where its symbolic links lead (the
 * file is replaced, not the link); one through /proc (/dev/stdout) is
 * refused. */
const char *output_path_check(const char *option, const char *path);

#endif
