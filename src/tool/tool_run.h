/* tool_run.h - `discnice run` (tool_run.c). */
#ifndef DISCNICE_TOOL_RUN_H
#define DISCNICE_TOOL_RUN_H

int tool_run(int argc, char **argv);

#endif
