/*
 * refresh_plan.h - the pure logic of `discnice refresh` (graybox-icl §4.2.1,
 * §4.2.2; src/graybox/fldc/refresh.c does the I/O):
 *
 *   - the order in which a directory's entries are written anew;
 *   - the journal that makes a refresh crash-safe (the paper's footnote 4
 *     left it open), as text;
 *   - the recovery decision: what an interrupted refresh left, and what
 *     finishes or undoes it.
 *
 * Plain C: no I/O, no globals.  tests/unit/test_refresh_plan.c feeds it
 * numbers and strings.
 */
#ifndef DISCNICE_FLDC_REFRESH_PLAN_H
#define DISCNICE_FLDC_REFRESH_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the order ----------------------------------------------------------- */

/* §4.2.1: "small files should be placed first so that the small files are
 * assigned the first i-nodes in the directory".  The others are the
 * paper's "(or by user-specification)". */
enum refresh_order {
	REFRESH_ORDER_SMALLEST, /* st_size ascending (the paper's; default)    */
	REFRESH_ORDER_LARGEST,  /* st_size descending                            */
	REFRESH_ORDER_NAME,     /* byte order of the names (strcmp)              */
	REFRESH_ORDER_INODE,    /* today's i-number order: the current creation
				 * order kept, the layout made fresh            */
	REFRESH_ORDER_MTIME,    /* oldest modification first                     */
};

/* "smallest" ... -> the order; -1 for an unknown name. */
int refresh_order_parse(const char *name);
const char *refresh_order_name(enum refresh_order order);

enum refresh_kind { REFRESH_KIND_FILE, REFRESH_KIND_SYMLINK, REFRESH_KIND_DIR };

/* One entry of one directory, as the plan sees it. */
struct refresh_plan_entry {
	const char *name;
	enum refresh_kind kind;
	uint64_t size;     /* st_size */
	uint64_t ino;      /* st_ino  */
	int64_t mtime_ns;
	size_t id;         /* the caller's: carried through the sort */
};

/* Sort the entries of ONE directory into the order they are created in the
 * copy: the regular files first, in `order` (ties by name, so the plan is
 * the same every run); then the symbolic links, by name (a few bytes each,
 * often stored in the inode itself); then the subdirectories, by name (ext4
 * puts a new directory in a block group of its own - Orlov allocator,
 * fs/ext4/ialloc.c: find_group_orlov() - so where they come does not move
 * the files).  Stable and total. */
void refresh_plan_sort(struct refresh_plan_entry *entries, size_t n, enum refresh_order order);

/* ---- the journal --------------------------------------------------------- */

/* A refresh of PARENT/NAME keeps, in PARENT:
 *   .NAME.discnice-refresh      the journal (and the lock: flock(2) on it)
 *   .NAME.discnice-refresh.tmp  the journal's next version, renamed over it
 *   .NAME.discnice-refresh.d    the copy: the new directory before the
 *                               exchange, the old one after it
 * The phases, in order (the journal file's absence is the end state): */
enum refresh_phase {
	REFRESH_PHASE_COPYING,   /* the copy may exist, partial; NAME is the old */
	REFRESH_PHASE_COPIED,    /* the copy is complete and on disk (every file
				  * and directory fsynced); NAME is still the old */
	REFRESH_PHASE_EXCHANGED, /* NAME is the new; the copy's name holds the old
				  * (perhaps partly removed) */
};

#define REFRESH_JOURNAL_SUFFIX ".discnice-refresh"
#define REFRESH_JOURNAL_TMP_SUFFIX ".discnice-refresh.tmp"
#define REFRESH_COPY_SUFFIX ".discnice-refresh.d"
#define REFRESH_NAME_MAX 255
/* The longest NAME that leaves room for the names above (NAME_MAX 255). */
#define REFRESH_DIR_NAME_MAX (REFRESH_NAME_MAX - 1 - (sizeof REFRESH_JOURNAL_TMP_SUFFIX - 1))

struct refresh_journal {
	enum refresh_phase phase;
	enum refresh_order order;
	char name[REFRESH_NAME_MAX + 1]; /* NAME, the directory's own name      */
	uint64_t dev;                    /* st_dev of PARENT and of both trees   */
	uint64_t old_ino;                /* the directory as it was              */
	uint64_t new_ino;                /* the copy; 0 until it exists          */
	int64_t pid;                     /* who wrote it (for messages only)     */
};

/* The journal's text: "discnice-refresh 1\n" then "key value\n" lines.  The
 * name is written hex-encoded, so any byte but '/' and NUL survives.
 * Returns the length (without the NUL) or -ENOSPC if it does not fit. */
int refresh_journal_format(const struct refresh_journal *journal, char *buf, size_t len);
/* Parse what refresh_journal_format wrote; -EINVAL for anything else (an
 * unknown version, a missing or repeated key, a bad number). */
int refresh_journal_parse(const char *text, size_t len, struct refresh_journal *journal);
const char *refresh_phase_name(enum refresh_phase phase);

/* ---- recovery ------------------------------------------------------------ */

/* What is found at a name, matched against the journal's inode numbers. */
enum refresh_found {
	REFRESH_FOUND_NOTHING, /* no such name                                 */
	REFRESH_FOUND_OLD,     /* a directory, i-number = journal old_ino       */
	REFRESH_FOUND_NEW,     /* a directory, i-number = journal new_ino       */
	REFRESH_FOUND_OTHER,   /* a directory with another i-number             */
	REFRESH_FOUND_NOT_DIR, /* a file, a symbolic link, ...: never ours      */
};

enum refresh_recovery {
	REFRESH_RECOVER_UNDO,         /* the exchange never happened: remove the
				       * copy (if there), then the journal        */
	REFRESH_RECOVER_FINISH,       /* the exchange happened: remove the old
				       * tree at the copy's name (if there), then
				       * the journal                             */
	REFRESH_RECOVER_REFUSE,       /* not what a refresh leaves: touch nothing */
};

/* The decision table (tests/unit/test_refresh_plan.c walks every cell).
 * The phase says what was started; the names say what happened - the
 * journal is written after each step, so a crash between a step and its
 * journal write leaves the journal one phase behind: an exchange done but
 * not yet journalled shows as NAME = new, copy = old under "copied".
 *
 *   phase      at NAME   at copy            decision
 *   copying    old       nothing/new/other  undo (the copy's name was free
 *                                           when the refresh began; the
 *                                           directory there is its partial
 *                                           copy, whose i-number may not yet
 *                                           be journalled)
 *   copied     old       nothing/new        undo
 *   copied     new       old/nothing        finish
 *   exchanged  new       old/nothing        finish
 *   anything else                           refuse
 */
enum refresh_recovery refresh_recovery_decide(enum refresh_phase phase, enum refresh_found at_name,
					      enum refresh_found at_copy);

#endif
