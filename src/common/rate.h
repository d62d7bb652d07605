/*
 * rate.h - parsing and printing of byte rates and sizes.
 *
 * Accepted: a decimal number, optionally with a fraction, then an optional
 * unit K, M, G or T (case-insensitive), an optional "i" for powers of 1024,
 * an optional "B", and for rates an optional "/s":
 *     500k = 500,000 B/s    5M = 5,000,000 B/s    5MiB/s = 5,242,880 B/s
 * "inf" or "unlimited" means no cap (returned as 0).
 * Functions return 0 or -EINVAL (malformed, negative, zero) / -EDOM (not
 * zero, but less than one byte: "0.5") / -ERANGE (overflows 64 bits) /
 * -EILSEQ (a rate in bits: a lowercase "b", "bit" or "bps" unit - 10Mb/s
 * taken as bytes would be 8 times the cap meant); they never touch errno.
 */
#ifndef DISCNICE_RATE_H
#define DISCNICE_RATE_H

#include <stddef.h>
#include <stdint.h>

int rate_parse(const char *text, uint64_t *bytes_per_sec);
/* What to tell a user of a cap rate_parse() refused (rc < 0). */
const char *rate_error(int rc);

int size_parse(const char *text, uint64_t *bytes);
/* Human form with binary units, e.g. "4.77 MiB". */
void size_format(char *buf, size_t len, double bytes);
/* The base a cap was most likely written in: 1024 when binary units give
 * it exactly to two decimals (5MiB/s: 5.00 MiB), else 1000 when decimal
 * units do (5M: 5.00 MB, not 4.77 MiB), else 1024. */
unsigned cap_base(uint64_t bytes);
/* The cap in that base, e.g. "5.00 MB". */
void cap_format(char *buf, size_t len, uint64_t bytes);
/* size_format() in the given base (1000: kB, MB, ...; else binary). */
void size_format_base(char *buf, size_t len, double bytes, unsigned base);

#endif
