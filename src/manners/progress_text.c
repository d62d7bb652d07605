/*
 * progress_text.c - numbers from a program's progress text (see
 * progress_text.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "manners/progress_text.h"

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Only what a counter looks like: digits, a point, an exponent. */
static int is_number_char(char c)
{
	return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
}

int manners_progress_parse(const char *text, double *values, int max)
{
	if (text == NULL || values == NULL || max < 1)
		return -EINVAL;
	int count = 0;
	const char *p = text;
	for (;;) {
		while (is_space(*p))
			p++;
		if (*p == '\0')
			break;
		/* strtod() would also take "inf", "nan", "0x1p3" and leading
		 * spaces: check the word's characters first. */
		const char *end = p;
		while (*end && !is_space(*end))
			if (!is_number_char(*end++))
				return -EINVAL;
		char *stop;
		double v = strtod(p, &stop);
		if (stop != end || !isfinite(v) || v < 0.0 || count == max)
			return -EINVAL;
		values[count++] = v;
		p = end;
	}
	return count > 0 ? count : -EINVAL;
}

int manners_progress_delta(const double *before, const double *now, int count, double *delta)
{
	if (before == NULL || now == NULL || delta == NULL || count < 1)
		return -EINVAL;
	for (int k = 0; k < count; k++)
		if (!(now[k] >= before[k]))
			return -ERANGE;
	for (int k = 0; k < count; k++)
		delta[k] = now[k] - before[k];
	return 0;
}
