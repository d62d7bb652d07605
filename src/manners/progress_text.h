/*
 * progress_text.h - reading the progress an unmodified program reports as
 * text (`discnice benice --progress file:PATH` and `cmd:COMMAND`, MS
 * Manners §7.2's "standard reporting interface").
 *
 * The text holds one number, or several separated by white space: several
 * metrics that progress concurrently (§4.4), whose target durations the
 * controller adds (eq. 8).  Each number is a cumulative count, >= 0 and
 * finite (decimal or with an exponent, as strtod(3) reads it, but no
 * "inf", "nan" or hexadecimal); the regulator takes the difference between
 * two readings.  Anything else - an empty text, a word, a negative number,
 * more numbers than fit - is refused as a whole: a half-read sample would
 * be a wrong one.
 *
 * Plain C: no I/O; the caller reads the file or runs the command.
 */
#ifndef DISCNICE_MANNERS_PROGRESS_TEXT_H
#define DISCNICE_MANNERS_PROGRESS_TEXT_H

#include <stddef.h>

/*
 * Parses text (NUL-terminated) into values[0 .. max).  Returns the count of
 * numbers (>= 1), or -EINVAL when the text is not 1 .. max such numbers
 * (values is then unspecified).
 */
int manners_progress_parse(const char *text, double *values, int max);

/*
 * The progress between two readings of count metrics: delta[k] = now[k] -
 * before[k].  0, or -ERANGE when some metric went down (a counter reset or
 * a rewritten file: the caller skips the sample), -EINVAL for bad values.
 */
int manners_progress_delta(const double *before, const double *now, int count, double *delta);

#endif
