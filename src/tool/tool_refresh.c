/*
 * tool_refresh.c - `discnice refresh DIR`: directory refresh, the control
 * half of graybox-icl's file layout detector and controller (§4.2.1,
 * §4.2.2), made crash-safe (its footnote 4).  The work is in
 * src/graybox/fldc/refresh*.c; this file parses, prints and maps outcomes
 * to exit codes:
 *   0  refreshed, or a dry run, or (--recover) recovered or nothing to do
 *   1  the refresh failed or was stopped and was undone (DIR as it was), or
 *      could not be finished: the line says to run --recover
 *   2  bad usage, or refused: nothing touched
 *   125 discnice itself failed (out of memory, or its summary could not
 *       be written, after the work was done)
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/rate.h"
#include "graybox/fldc/refresh.h"
#include "tool/tool_class.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"
#include "tool/tool_refresh.h"

enum refresh_option { OPT_DRY_RUN, OPT_HELP, OPT_ORDER, OPT_RECOVER };

static const struct command_option refresh_options[] = {
	[OPT_DRY_RUN] = { "dry-run", 'n', NULL, "print the plan (or what recovery would do) and\n"
						"change nothing" },
	[OPT_HELP] = { "help", 'h', NULL, "show this help and exit" },
	[OPT_ORDER] = { "order", 'o', "ORDER", "the order files are written in: smallest, largest,\n"
					       "name, inode or mtime (oldest first)\n"
					       "[default: smallest]" },
	[OPT_RECOVER] = { "recover", 0, NULL, "only finish or undo an interrupted refresh of DIR" },
};
#define N_REFRESH_OPTIONS (sizeof refresh_options / sizeof refresh_options[0])

static void refresh_help(void)
{
	printf("Usage: discnice refresh [OPTION]... DIR\n"
	       "Rewrite DIR's files into a fresh copy, smallest first, so that the\n"
	       "filesystem lays them out anew: i-number order (and so `ls -i | sort`,\n"
	       "FLDC ordering) follows the data's place on disk again, which aging -\n"
	       "files deleted and created over time - had undone (graybox-icl 4.2.1).\n\n");
	command_options_help(refresh_options, N_REFRESH_OPTIONS);
	printf("\nWhat it does.  The copy is made beside DIR, as .NAME.discnice-refresh.d,\n"
	       "in the chosen order, one directory at a time: in each, the regular files,\n"
	       "then symbolic links, then subdirectories (recursively).  Every file and\n"
	       "directory is fsynced; then the copy and DIR swap names in one step\n"
	       "(renameat2 RENAME_EXCHANGE), and the old tree is removed.\n\n"
	       "What is kept: contents (holes of sparse files and preallocated space\n"
	       "too), access and modification times to the nanosecond, modes (set-ID\n"
	       "bits too), owner and group, extended attributes (user.*, POSIX ACLs; as\n"
	       "root also trusted.* and security.*), hard links among DIR's files,\n"
	       "symbolic links (target, owner, times), subdirectories, and DIR's own\n"
	       "mode, owner, times and attributes.  Not kept: i-numbers (that is the\n"
	       "point), change times (the kernel sets them), birth times; as an ordinary\n"
	       "user, trusted.* attributes (only root can see them).  Not added: chattr\n"
	       "flags a new file inherits from its directory (cleared on each copy).\n\n"
	       "Refused - one line, exit 2, nothing touched: '/', a mount point, not a\n"
	       "directory, a symbolic link, no permission to create the copy beside it,\n"
	       "a mount inside it, sockets, FIFOs and devices, files of another owner or\n"
	       "group (unless root), hard links to files outside DIR, extended\n"
	       "attributes it cannot set, chattr flags (immutable, append-only, ...),\n"
	       "unreadable files, a name beside DIR at the copy's or the journal's\n"
	       "names that no interrupted refresh explains, and files in use: open,\n"
	       "mapped, running, or a process's working directory.  /proc shows the\n"
	       "processes refresh may look at (not root: only yours); for the files you\n"
	       "own, a write lease (fcntl F_SETLEASE) asks the kernel about every\n"
	       "process of every user.\n"
	       "Right before the swap refresh leases every file again, looks again, and\n"
	       "undoes itself if anything changed or was opened.  It holds the leases\n"
	       "through the swap: an open(2) of an old file that comes meanwhile waits\n"
	       "(milliseconds), refresh swaps back and undoes itself, and the opener gets\n"
	       "the old file, which stays.  What stays open: files refresh cannot lease\n"
	       "(another owner's, unless root; filesystems without leases, such as NFS;\n"
	       "it says how many), and an open(2) still inside the kernel 10 ms after the\n"
	       "swap.  Refresh a directory nothing is using.\n\n"
	       "Crash-safe.  A journal beside DIR (.NAME.discnice-refresh) records the\n"
	       "phase: copying, copied, exchanged.  A crash at any point leaves DIR's\n"
	       "name holding a complete tree - the old one or the new one.  The next\n"
	       "`discnice refresh DIR`, or `discnice refresh --recover DIR`, finds the\n"
	       "journal: before the exchange it removes the partial copy, after it the\n"
	       "old tree.  Two refreshes of one DIR at once: the second is refused.\n"
	       "Ctrl-C (SIGINT, SIGTERM, SIGHUP) undoes a refresh before the exchange\n"
	       "and finishes it after.\n\n"
	       "Exit status: 0 done (dry run; recovered, or nothing to recover); 1 the\n"
	       "refresh failed or was stopped and was undone - DIR is as it was - or\n"
	       "could not be finished (the line says to run --recover); 2 bad usage or\n"
	       "refused, nothing touched; 125 discnice itself failed (out of memory, or\n"
	       "its summary could not be written to stdout, after the work was done).\n\n"
	       "For tests: DISCNICE_REFRESH_KILL_AT=N kills refresh with SIGKILL right\n"
	       "after the Nth step of its work (journal writes, files written, fsyncs,\n"
	       "links, the exchange, each removal).  DISCNICE_REFRESH_LEASE_GRACE_MS=N\n"
	       "holds the leases N ms after the swap (default 10) before looking.\n\n"
	       "Examples:\n"
	       "  discnice refresh --dry-run ~/mail/inbox\n"
	       "  discnice refresh ~/src/project/include\n"
	       "  discnice refresh --recover ~/mail/inbox\n\n"
	       "See discnice(1), REFRESH.\n");
}

static volatile sig_atomic_t stop_signal;

static void on_stop(int signo)
{
	stop_signal = signo;
}

static int exit_code(enum refresh_status status, int error)
{
	switch (status) {
	case REFRESH_OK: return 0;
	case REFRESH_REFUSED: return error == ENOMEM ? EXIT_INTERNAL : EXIT_USAGE;
	case REFRESH_UNDONE: return 1;
	case REFRESH_STUCK: return 1;
	}
	return EXIT_INTERNAL;
}

static void print_size(uint64_t bytes)
{
	char text[32];
	size_format(text, sizeof text, (double)bytes);
	fputs(text, stdout);
}

/* A name in the plan, one per line: a newline in a name would make two
 * lines of one entry, so control characters and backslashes are shown as
 * C escapes, as ls -b shows them (tool_msg.h put_escaped()). */
static void put_name(const char *s)
{
	put_escaped(stdout, s, true);
}

static void print_plan(const struct refresh *r)
{
	static const char *const kinds[] = { "file", "symlink", "dir" };
	size_t n = refresh_entry_count(r);
	for (size_t i = 1; i < n; i++) {
		const char *path;
		enum refresh_kind kind;
		uint64_t size;
		size_t link_to;
		refresh_entry(r, i, &path, &kind, &size, &link_to);
		if (link_to != SIZE_MAX) {
			const char *first;
			enum refresh_kind k2;
			uint64_t s2;
			size_t l2;
			refresh_entry(r, link_to, &first, &k2, &s2, &l2);
			printf("link     %12s  ", "-");
			put_name(path);
			fputs(" => ", stdout);
			put_name(first);
		} else if (kind == REFRESH_KIND_FILE) {
			printf("%-8s %12llu  ", kinds[kind], (unsigned long long)size);
			put_name(path);
		} else {
			printf("%-8s %12s  ", kinds[kind], "-");
			put_name(path);
		}
		putchar('\n');
	}
}

/* A testing hook's number from the environment: 0 when unset or empty;
 * anything but a decimal number up to max is a usage error (exit 2). */
static unsigned long env_number(const char *name, unsigned long max, const char *what)
{
	const char *value = getenv(name);
	if (!value || !*value)
		return 0;
	unsigned long long n;
	if (!whole_number(value, &n) || n > max)
		usage_error("%s '%s': %s", name, value, what);
	return n;
}

/* The summary's last words: "smallest first", but not "name first". */
static const char *order_phrase(enum refresh_order order)
{
	switch (order) {
	case REFRESH_ORDER_SMALLEST: return "smallest first";
	case REFRESH_ORDER_LARGEST: return "largest first";
	case REFRESH_ORDER_NAME: return "in name order";
	case REFRESH_ORDER_INODE: return "in i-number order";
	case REFRESH_ORDER_MTIME: return "oldest first";
	}
	return refresh_order_name(order);
}

static const char *plural(uint64_t n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

/* "), 2 hard links, 1 symbolic link, 3 directories" */
static void print_counts(const struct refresh_counts *c)
{
	printf("), %llu %s, %llu %s, %llu %s", (unsigned long long)c->hard_links,
	       plural(c->hard_links, "hard link", "hard links"), (unsigned long long)c->symlinks,
	       plural(c->symlinks, "symbolic link", "symbolic links"), (unsigned long long)c->dirs,
	       plural(c->dirs, "directory", "directories"));
}

int tool_refresh(int argc, char **argv)
{
	struct refresh_options options = { .order = REFRESH_ORDER_SMALLEST, .stop = &stop_signal };
	bool dry_run = false, recover_only = false;
	set_usage_command("refresh");
	optind = 1;
	int i;
	while ((i = command_option_next("refresh", refresh_options, N_REFRESH_OPTIONS, false, argc,
					argv)) >= 0) {
		switch ((enum refresh_option)i) {
		case OPT_DRY_RUN:
			dry_run = true;
			break;
		case OPT_HELP:
			refresh_help();
			return 0;
		case OPT_ORDER: {
			int order = refresh_order_parse(optarg);
			if (order < 0)
				usage_error("--order '%s': expected smallest, largest, name, inode or mtime",
					    optarg);
			options.order = (enum refresh_order)order;
			break;
		}
		case OPT_RECOVER:
			recover_only = true;
			break;
		}
	}
	if (optind >= argc)
		usage_error("no directory given (usage: discnice refresh [OPTION]... DIR)");
	if (argc - optind > 1)
		usage_error("one directory at a time ('%s' is a second one)", argv[optind + 1]);
	options.kill_at = env_number("DISCNICE_REFRESH_KILL_AT", ULONG_MAX,
				     "a step number (1, 2, ...)");
	options.lease_grace_ms = (unsigned)env_number("DISCNICE_REFRESH_LEASE_GRACE_MS", 600000,
						      "milliseconds (1 to 600000)");
	/* One descriptor per file holds its lease during the exchange
	 * (refresh_lease.h): let a large tree have them all. */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}

	/* A signal stops the work at its next step: undone before the exchange,
	 * finished after it (refresh.h). */
	struct sigaction sa = { .sa_handler = on_stop };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	struct refresh *r;
	struct refresh_result res;
	enum refresh_status status = refresh_begin(argv[optind], &options, &r, &res);
	if (status != REFRESH_OK) {
		errorf("refresh: %s", res.message);
		return exit_code(status, res.error);
	}
	int code = 0;
	if (refresh_pending(r, NULL) || recover_only) {
		status = refresh_recover(r, dry_run, &res);
		if (status != REFRESH_OK) {
			errorf("refresh: %s", res.message);
			code = exit_code(status, res.error);
			goto out;
		}
		if (recover_only || refresh_pending(r, NULL)) {
			/* --recover, or a dry run that found a journal: say it, stop. */
			put_escaped(stdout, res.message, false);
			putchar('\n');
			goto out;
		}
		warnf("refresh: %s", res.message);
	}
	status = refresh_scan(r, &res);
	/* What could not be checked matters to a refresh that goes on; a
	 * refused one says why on its own line (a file the leases found in
	 * use contradicted "none has a file open"). */
	if (res.unchecked_processes && status == REFRESH_OK)
		warnf("refresh: %u processes of other users could not be checked for a working "
		      "directory in %s (not root)%s", res.unchecked_processes, refresh_path(r),
		      res.unleased_files ? "" : "; the kernel's leases say none has a file open");
	if (res.unleased_files && status == REFRESH_OK)
		warnf("refresh: %zu files in %s could not be leased (%s): only the processes "
		      "refresh can see were checked for them", res.unleased_files,
		      refresh_path(r), strerror(res.unleased_error));
	if (status != REFRESH_OK) {
		errorf("refresh: %s", res.message);
		code = exit_code(status, res.error);
		goto out;
	}
	struct refresh_counts counts = res.counts;
	if (dry_run) {
		print_plan(r);
		put_name(refresh_path(r));
		printf(": would rewrite %llu %s (", (unsigned long long)counts.files,
		       plural(counts.files, "file", "files"));
		print_size(counts.bytes);
		print_counts(&counts);
		printf(", %s; nothing changed (dry run)\n", order_phrase(options.order));
		goto out;
	}
	status = refresh_run(r, &res);
	if (status != REFRESH_OK) {
		errorf("refresh: %s", res.message);
		code = exit_code(status, res.error);
		goto out;
	}
	put_name(refresh_path(r));
	printf(": rewrote %llu %s (", (unsigned long long)counts.files,
	       plural(counts.files, "file", "files"));
	print_size(counts.bytes);
	print_counts(&counts);
	printf(", %s\n", order_phrase(options.order));
out:
	refresh_end(r);
	return code;
}
