/*
 * refresh.h - directory refresh, the control half of the FLDC (graybox-icl
 * §4.2.1-4.2.2): write a directory's entries anew, in a known order, so
 * that the filesystem lays them out fresh and i-number order follows the
 * data's layout again; crash-safe, which the paper's footnote 4 left open.
 *
 * The steps (the paper's six, made crash-safe; refresh_plan.h has the
 * journal's phases and names):
 *   1. refresh_begin: resolve DIR; refuse "/", a mount point, a non-
 *      directory, no permission; lock and read the journal if one exists.
 *   2. refresh_recover: finish or undo an interrupted refresh.
 *   3. refresh_scan: every entry, checked for what cannot be copied
 *      faithfully, and for files in use: in any process we can see
 *      (/proc), and by any process at all where the kernel grants us a
 *      write lease (refresh_lease.h).
 *   4. refresh_run: journal "copying"; copy into PARENT/.NAME.discnice-
 *      refresh.d in plan order, every file and directory fsynced; journal
 *      "copied"; lease both trees' files; check nothing changed or opened
 *      meanwhile; renameat2(RENAME_EXCHANGE); if a lease of the old tree
 *      broke (an open(2) came), exchange back and undo; journal
 *      "exchanged"; remove the old tree; remove the journal.
 * Nothing prints: every outcome is a status and one line of text in a
 * struct refresh_result.  The library never reads the environment, never
 * installs signal handlers; the testing hook (kill_at) and the stop flag
 * come from the caller.
 */
#ifndef DISCNICE_FLDC_REFRESH_H
#define DISCNICE_FLDC_REFRESH_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graybox/fldc/refresh_plan.h"

enum refresh_status {
	REFRESH_OK = 0,
	REFRESH_REFUSED,   /* refused before touching anything            */
	REFRESH_UNDONE,    /* failed or stopped before the exchange, and
			    * undone: DIR is exactly as it was            */
	REFRESH_STUCK,     /* failed and could not clean up: the journal
			    * stays, `refresh --recover` finishes it     */
};

struct refresh_options {
	enum refresh_order order;
	/* Testing hook: raise(SIGKILL) right after the Nth step of the work
	 * (0 = never).  A step is each journal write, each file written, each
	 * link, symbolic link and directory made, each fsync, the exchange and
	 * each entry of the old copy removed. */
	unsigned long kill_at;
	/* Set (by the caller's signal handler) to stop: before the exchange the
	 * copy is undone, after it the refresh is finished. */
	const volatile sig_atomic_t *stop;
	/* How long the leases are held after the exchange before looking
	 * whether an open(2) of an old file came (refresh_run); 0 =
	 * REFRESH_LEASE_GRACE_MS.  Longer only for tests. */
	unsigned lease_grace_ms;
};

#define REFRESH_LEASE_GRACE_MS 10

struct refresh_counts {
	uint64_t files, hard_links, symlinks, dirs; /* dirs include DIR itself */
	uint64_t bytes;                             /* st_size of the files    */
};

struct refresh_result {
	enum refresh_status status;
	int error;                    /* the errno behind a failure, or 0 */
	char message[1024];           /* one line, no newline: what and why */
	struct refresh_counts counts;
	/* refresh_scan: processes whose open files could not be looked at
	 * (not ours, and we are not root) */
	unsigned unchecked_processes;
	/* refresh_scan: regular files the kernel would not lease to us (not
	 * ours without CAP_LEASE, no leases on the filesystem): only /proc
	 * guards them; and the first refusal's errno */
	size_t unleased_files;
	int unleased_error;
	unsigned long steps;          /* steps done (see kill_at) */
};

struct refresh;

/* Step 1.  path: the directory.  On REFRESH_OK *out is set; free it with
 * refresh_end().  Touches nothing (it only looks, and flock(2)s an
 * existing journal). */
enum refresh_status refresh_begin(const char *path, const struct refresh_options *options,
				  struct refresh **out, struct refresh_result *result);

/* Is an interrupted refresh of this directory journalled?  Then *journal
 * (may be NULL) gets it.  An empty journal (a crash before its first
 * write) counts as none. */
bool refresh_pending(const struct refresh *r, struct refresh_journal *journal);

/* Step 2.  With dry_run, only say (in result->message) what it would do.
 * REFRESH_OK: done (or nothing to do), result->message says what;
 * REFRESH_REFUSED: the names do not match what the journal recorded
 * (someone moved things): nothing touched, look at them by hand;
 * REFRESH_STUCK: a removal failed half-way; run it again. */
enum refresh_status refresh_recover(struct refresh *r, bool dry_run, struct refresh_result *result);

/* Step 3.  REFRESH_OK or REFRESH_REFUSED.  Touches nothing. */
enum refresh_status refresh_scan(struct refresh *r, struct refresh_result *result);

/* The plan refresh_scan made, in creation order (index 0 is DIR itself):
 * the path relative to DIR ("" for DIR), the kind, st_size, and for the
 * second and later names of a hard-linked file the index of the first
 * (else SIZE_MAX). */
size_t refresh_entry_count(const struct refresh *r);
void refresh_entry(const struct refresh *r, size_t index, const char **path,
		   enum refresh_kind *kind, uint64_t *size, size_t *link_to);
/* DIR's canonical path. */
const char *refresh_path(const struct refresh *r);

/* Step 4.  REFRESH_OK, REFRESH_REFUSED (another refresh took the lock
 * after the scan: nothing touched), REFRESH_UNDONE, REFRESH_STUCK. */
enum refresh_status refresh_run(struct refresh *r, struct refresh_result *result);

void refresh_end(struct refresh *r);

#endif
