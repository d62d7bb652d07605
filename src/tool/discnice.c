/*
 * discnice.c - the command's entry: dispatch to a subcommand.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tool/tool_attach.h"
#include "tool/tool_benice.h"
#include "tool/tool_class.h"
#include "tool/tool_graybox.h"
#include "tool/tool_gbp.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"
#include "tool/tool_refresh.h"
#include "tool/tool_run.h"

#define DISCNICE_VERSION "0.1.0"

static void help(void)
{
	printf("Usage: discnice run [OPTION]... [--] COMMAND [ARG]...\n"
	       "       discnice attach [OPTION]... PID...\n"
	       "       discnice benice [OPTION]... [--] COMMAND [ARG]... | --pid PID...\n"
	       "       discnice ls [--json]\n"
	       "       discnice top [--json] [--interval SECONDS] [--count N]\n"
	       "       discnice set CLASS [--rate|--read-rate|--write-rate RATE]...\n"
	       "                          [--net-rate|--send-rate|--recv-rate RATE]...\n"
	       "                          [--net-policy P]\n"
	       "       discnice calibrate [--quick] [--json] [DIR]\n"
	       "       discnice calibrate --show [--json]\n"
	       "       discnice memprobe [--json] [--max SIZE] [--min SIZE] [--hold SECONDS]\n"
	       "                         [--threshold NS] [--timing-only]\n"
	       "       discnice refresh [--order ORDER] [--dry-run] [--recover] DIR\n"
	       "       discnice gbp [--mem | --inode | --physical | --compose] FILE...\n"
	       "       discnice gbp --out FILE [--in-order]\n"
	       "       discnice --help [COMMAND] | --version\n\n"
	       "Let background work use the disk without getting in the way: discnice\n"
	       "runs COMMAND with an LD_PRELOAD agent that predicts how much real disk\n"
	       "I/O each file read and write will cause (page cache, readahead, delayed\n"
	       "writes) and sleeps the job so its disk traffic stays under a cap.\n\n"
	       "Commands:\n"
	       "  run     run a job under a cap\n"
	       "  attach  cap processes that are already running (from outside only:\n"
	       "          measured I/O and holds, no agent)\n"
	       "  benice  run a job (or regulate running processes) so that it gives way\n"
	       "          to other work: suspended while its progress drops (MS Manners)\n"
	       "  ls      list your classes, their caps and their runs\n"
	       "  top     watch your classes: rates, time slept, throttled or free\n"
	       "  set     change the caps of a running class\n"
	       "  calibrate  measure the disk and memory parameters the gray-box layers\n"
	       "          use, and keep them in the calibration file\n"
	       "  memprobe   how much memory this process could take without paging\n"
	       "          (gray-box MAC, gb_alloc)\n"
	       "  refresh rewrite a directory's files in a fresh layout, smallest first\n"
	       "          (gray-box FLDC; crash-safe)\n"
	       "  gbp     print files in the order that reads them fastest: cached\n"
	       "          first, or by disk layout; or copy one file cached chunks first\n\n"
	       "'discnice COMMAND --help' shows a command's options.\n"
	       "See discnice(1).\n");
}

/* What a command printed is its result: lost to a full disk or a closed
 * descriptor, it must not end in success (as coreutils' close_stdout()).
 * A command that failed keeps its own status and message. */
static bool stdout_checked;

static int stdout_flushed(int status)
{
	stdout_checked = true;
	if (status != 0) {
		fflush(stdout);
		return status;
	}
	return stdout_flush_checked() ? 0 : EXIT_INTERNAL;
}

/* The same for a command that ends with exit(0) from deep inside (the
 * --help of run, attach, benice and gbp). */
static void stdout_at_exit(void)
{
	if (!stdout_checked && stdout_flushed(0) != 0)
		_exit(EXIT_INTERNAL);
}

int main(int argc, char **argv)
{
	atexit(stdout_at_exit);
	/* A help text longer than stdio's buffer (4 KiB to a file or pipe)
	 * met a full disk in a flush of its own, and fflush() at the end,
	 * with nothing left to write, saw only the error flag: "write
	 * error", not why.  64 KiB holds any of ours, so the one flush that
	 * fails is the one stdout_flushed() makes and reads errno from. */
	static char stdout_buffer[1 << 16]; /* glibc ignores a size without one */
	if (!isatty(STDOUT_FILENO))
		setvbuf(stdout, stdout_buffer, _IOFBF, sizeof stdout_buffer);
	if (argc < 2) {
		help();
		return stdout_flushed(EXIT_USAGE);
	}
	static const struct {
		const char *name;
		int (*handler)(int argc, char **argv);
	} commands[] = {
		{ "attach", tool_attach },
		{ "benice", tool_benice },
		{ "calibrate", tool_calibrate },
		{ "gbp", tool_gbp },
		{ "ls", tool_ls },
		{ "memprobe", tool_memprobe },
		{ "refresh", tool_refresh },
		{ "run", tool_run },
		{ "set", tool_set },
		{ "top", tool_top },
	};
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return stdout_flushed(commands[i].handler(argc - 1, argv + 1));
	bool asks_help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
	/* discnice --help COMMAND: that command's help, as git help does. */
	if (asks_help && argc == 3) {
		for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
			if (strcmp(argv[2], commands[i].name) == 0) {
				char *command_help[] = { argv[2], (char *)"--help", NULL };
				return stdout_flushed(commands[i].handler(2, command_help));
			}
		errorf("unknown command '%s'", argv[2]);
		fprintf(stderr, "Try 'discnice --help' for more information.\n");
		return EXIT_USAGE;
	}
	if ((asks_help || strcmp(argv[1], "--version") == 0) && argc > 2) {
		errorf("%s takes %s ('%s')", argv[1], asks_help ? "at most one COMMAND" : "no argument",
		       argv[asks_help ? 3 : 2]);
		fprintf(stderr, "Try 'discnice --help' for more information.\n");
		return EXIT_USAGE;
	}
	if (asks_help) {
		help();
		return stdout_flushed(0);
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("discnice %s\n", DISCNICE_VERSION);
		return stdout_flushed(0);
	}
	errorf("unknown command '%s'", argv[1]);
	fprintf(stderr, "Try 'discnice --help' for more information.\n");
	return EXIT_USAGE;
}
