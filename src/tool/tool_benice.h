/* tool_benice.h - `discnice benice` (tool_benice.c): MS Manners' external
 * regulator (§7.2). */
#ifndef DISCNICE_TOOL_BENICE_H
#define DISCNICE_TOOL_BENICE_H

int tool_benice(int argc, char **argv);

#endif
