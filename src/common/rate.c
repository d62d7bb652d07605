/*
 * rate.c - rates and sizes as people write them (see rate.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/rate.h"

/* Parse "<digits>[.<digits>]<unit>" into bytes, exactly in integers:
 * 1.5M is 1,500,000 without a detour through binary floating point. */
static int quantity_parse(const char *text, uint64_t *out, int allow_per_second)
{
	const char *p = text;
	unsigned __int128 whole = 0, frac = 0, frac_scale = 1;
	int digits = 0;
	bool dropped = false; /* a non-zero digit past the 18th after the point */

	if (!text)
		return -EINVAL;
	while (*p >= '0' && *p <= '9') {
		whole = whole * 10 + (unsigned)(*p++ - '0');
		if (whole > UINT64_MAX)
			return -ERANGE;
		digits++;
	}
	if (*p == '.') {
		p++;
		while (*p >= '0' && *p <= '9') {
			if (frac_scale < (unsigned __int128)1000000000000000000u) {
				frac = frac * 10 + (unsigned)(*p - '0');
				frac_scale *= 10;
			} else if (*p != '0') {
				dropped = true;
			}
			p++;
			digits++;
		}
	}
	if (!digits)
		return -EINVAL;

	unsigned __int128 multiplier = 1;
	const char *units = "kmgtpe"; /* to exa, as sizes are printed (size_format) */
	const char *u = *p ? strchr(units, *p | 0x20) : NULL;
	if (u && *p) {
		int power = (int)(u - units) + 1;
		p++;
		unsigned base = 1000;
		if (*p == 'i') {
			base = 1024;
			p++;
		}
		for (int i = 0; i < power; i++)
			multiplier *= base;
	}
	/* A rate in bits (10Mb/s, 10Mbit/s, 10Mbps), as networks are sold:
	 * taken as bytes it would be 8 times the cap meant.  Refused, with
	 * its own error, so that the message can say so. */
	/* Only a lower-case b means bits (10Mbps); 10MBps is bytes, as
	 * discnice(1) RATES says. */
	if (allow_per_second && (*p == 'b' || strncasecmp(p, "bit", 3) == 0))
		return -EILSEQ;
	bool byte_unit = *p == 'B' || *p == 'b';
	if (byte_unit)
		p++;
	if (allow_per_second && (strcmp(p, "/s") == 0 || (byte_unit && strcmp(p, "ps") == 0)))
		p += 2;
	if (*p)
		return -EINVAL;

	unsigned __int128 total = whole * multiplier + frac * multiplier / frac_scale;
	if (total > UINT64_MAX)
		return -ERANGE;
	/* A rate may fall between bytes (7.7MiB/s: rounded down); a size may
	 * not: --record-size 2.9 is not 2 bytes, and 1.1KiB is no whole one. */
	if (!allow_per_second && (frac * multiplier % frac_scale != 0 || dropped))
		return -EDOM;
	if (total == 0)
		return whole || frac ? -EDOM : -EINVAL;
	*out = (uint64_t)total;
	return 0;
}

int rate_parse(const char *text, uint64_t *bytes_per_sec)
{
	if (text && (strcasecmp(text, "inf") == 0 || strcasecmp(text, "unlimited") == 0)) {
		*bytes_per_sec = 0;
		return 0;
	}
	return quantity_parse(text, bytes_per_sec, 1);
}

const char *rate_error(int rc)
{
	switch (rc) {
	case -ERANGE:
		return "too large for a rate";
	case -EDOM:
		return "less than 1 B/s, the smallest rate";
	case -EILSEQ:
		return "a rate in bits? discnice caps bytes per second (B): 8Mb/s is 1MB/s";
	default:
		return "not a rate (expected e.g. 5M, 5MiB/s, 500k or inf; zero and negative "
		       "rates are not allowed)";
	}
}

int size_parse(const char *text, uint64_t *bytes)
{
	return quantity_parse(text, bytes, 0);
}

/* Is bytes, in the largest unit of base it reaches, a whole number of
 * hundredths? */
static bool exact_in(uint64_t bytes, uint64_t base)
{
	unsigned __int128 unit = 1;
	while (unit * base <= bytes && unit * base <= (unsigned __int128)1 << 62)
		unit *= base;
	return (unsigned __int128)bytes * 100 % unit == 0;
}

unsigned cap_base(uint64_t bytes)
{
	return !exact_in(bytes, 1024) && exact_in(bytes, 1000) ? 1000 : 1024;
}

void cap_format(char *buf, size_t len, uint64_t bytes)
{
	size_format_base(buf, len, (double)bytes, cap_base(bytes));
}

void size_format_base(char *buf, size_t len, double bytes, unsigned base)
{
	/* "1023.99 KiB" is the widest below PiB: 11 characters. */
	static const char *const binary[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	static const char *const decimal[] = { "B", "kB", "MB", "GB", "TB", "PB", "EB" };
	const char *const *unit = base == 1000 ? decimal : binary;
	double step = base == 1000 ? 1000 : 1024;
	unsigned i = 0;
	double v = bytes < 0 ? -bytes : bytes;
	while (v >= step && i < 6) {
		v /= step;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%s%.0f B", bytes < 0 ? "-" : "", v);
	else
		snprintf(buf, len, "%s%.2f %s", bytes < 0 ? "-" : "", v, unit[i]);
}

void size_format(char *buf, size_t len, double bytes)
{
	size_format_base(buf, len, bytes, 1024);
}
