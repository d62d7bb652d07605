/*
 * tool_suspend.h - `discnice benice` suspends its job's whole process tree
 * with SIGSTOP and resumes it with SIGCONT (MS Manners §4.1's suspension,
 * §7.2's BeNice suspending "a process's threads"), and never leaves it
 * stopped.
 *
 * Why plain signals and not tool_hold.c's ptrace holds: a suspension lasts
 * seconds to minutes (§4.1's exponential back-off), the whole tree is
 * stopped - sleeping threads too, which a hold leaves alone - and issue #10
 * asks for SIGSTOP/SIGCONT.  The price is tool_hold.h's: the program and
 * its parent can see the stop.
 *
 * Never left stopped, however benice ends: before each SIGSTOP the pid is
 * told to the stop guard (tool_guard.h), which continues it if benice dies,
 * even by SIGKILL.
 *
 * Others' stops are theirs: a process already stopped (T: job control,
 * kill -STOP; t: a debugger) when benice would stop it is left out, and a
 * process someone asked to stop while benice held it stopped (a stop
 * signal pending on it) is not continued, so benice's SIGCONT never ends a
 * stop it did not make.  (A stop that reached the process before benice's
 * own SIGSTOP, in the same instant, cannot be told apart.)
 */
#ifndef DISCNICE_TOOL_SUSPEND_H
#define DISCNICE_TOOL_SUSPEND_H

#include <stdbool.h>
#include <sys/types.h>

#include "tool/tool_guard.h"
#include "tool/tool_jobtree.h"

struct suspender {
	struct stop_guard guard;    /* continues them if benice dies */
	pid_t stopped[JOBTREE_MAX]; /* what we stopped and have not continued */
	unsigned n;
};

/* Fork the guard.  0, or -errno (then nothing may be stopped: the caller
 * fails before starting anything). */
int suspender_start(struct suspender *s);

/* SIGSTOP every live process of the tree that is not stopped already,
 * each told to the guard first.  Returns how many were stopped. */
unsigned suspender_stop(struct suspender *s, const struct jobtree *tree);

/* SIGCONT one process we stopped with SIGSTOP, then send again every stop
 * signal pending on it but a SIGSTOP (which cannot be told from ours):
 * one with its default action stops it again, now as the sender asked,
 * and its parent hears of that stop (WSTOPSIG), as without us.  For
 * tool_hold.c's SIGSTOP fallback, whose holds last milliseconds: `discnice
 * run` follows a stop of its job only when it hears of one. */
void suspend_continue_handing_back(pid_t pid);

/* SIGCONT what we stopped (only that), and tell the guard.  A process
 * someone else asked to stop meanwhile (a default-action stop signal
 * pending) stays stopped, theirs to continue; a stop signal it catches
 * or blocks is sent again after the SIGCONT, which would flush it. */
void suspender_continue(struct suspender *s);

/* Continue, then end the guard (EOF) and reap it. */
void suspender_end(struct suspender *s);

#endif
