/* tool_attach.h - `discnice attach` (tool_attach.c). */
#ifndef DISCNICE_TOOL_ATTACH_H
#define DISCNICE_TOOL_ATTACH_H

int tool_attach(int argc, char **argv);

#endif
