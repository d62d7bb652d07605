/* tool_refresh.h - `discnice refresh` (tool_refresh.c): directory refresh,
 * graybox-icl §4.2.1 (FLDC), crash-safe. */
#ifndef DISCNICE_TOOL_REFRESH_H
#define DISCNICE_TOOL_REFRESH_H

int tool_refresh(int argc, char **argv);

#endif
