/*
 * tool_graybox.h - the gray-box ICL subcommands of issue #11 that this
 * file's author owns: `discnice calibrate` (the gray toolbox,
 * graybox-icl §5) and `discnice memprobe` (MAC, §4.3).  argv[0] is the
 * command's name; each returns the exit status.
 */
#ifndef DISCNICE_TOOL_GRAYBOX_H
#define DISCNICE_TOOL_GRAYBOX_H

/* Exit status of calibrate and memprobe beyond tool_msg.h's: a
 * measurement could not be made, or the file could not be written. */
enum { EXIT_MEASURE_FAILED = 1 };

int tool_calibrate(int argc, char **argv);
int tool_memprobe(int argc, char **argv);

#endif
