/*
 * tool_gbp.h - `discnice gbp`: files (or one file's chunks) in the order
 * that reads them fastest (graybox-icl §4.1.2, §4.2.4).
 */
#ifndef DISCNICE_TOOL_GBP_H
#define DISCNICE_TOOL_GBP_H

int tool_gbp(int argc, char **argv);

#endif
