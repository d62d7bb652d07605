/* Description: rate and size parsing - units, base 1000 vs 1024, and every malformed form is refused. */
#include <errno.h>
#include <string.h>

#include "common/rate.h"
#include "unit.h"

static void ok(const char *text, uint64_t want)
{
	uint64_t got = 0;
	int rc = rate_parse(text, &got);
	if (rc != 0 || got != want) {
		fprintf(stderr, "rate_parse(\"%s\") = %d, %" PRIu64 "; want %" PRIu64 "\n", text, rc,
			got, want);
		exit(1);
	}
}

static void bad(const char *text, int want_rc)
{
	uint64_t got = 12345;
	int rc = rate_parse(text, &got);
	if (rc != want_rc || got != 12345) {
		fprintf(stderr, "rate_parse(\"%s\") = %d (value %" PRIu64 "), want %d untouched\n",
			text, rc, got, want_rc);
		exit(1);
	}
}

int main(void)
{
	ok("5M", 5000000);
	ok("5MB", 5000000);
	ok("5MB/s", 5000000);
	ok("5MiB/s", 5u << 20);
	ok("5Mi", 5u << 20);
	ok("500k", 500000);
	ok("500K", 500000);
	ok("1.5M", 1500000);
	ok("0.5KiB", 512);
	/* Bits, as networks are sold: refused, not taken as 8x the bytes. */
	bad("10Mb/s", -EILSEQ);
	bad("10mb", -EILSEQ);
	bad("10Mbit/s", -EILSEQ);
	bad("10Mbps", -EILSEQ);
	bad("100kbit", -EILSEQ);
	ok("5mB/s", 5000000);
	/* Bps with a capital B is bytes per second (discnice(1) RATES). */
	ok("5MBps", 5000000);
	ok("5MiBps", 5u << 20);
	ok("800Bps", 800);
	bad("5Mps", -EINVAL);
	bad("5MBps/s", -EINVAL);
	ok("1G", 1000000000);
	ok("1GiB/s", 1u << 30);
	ok("2T", 2000000000000ull);
	ok("4096", 4096);
	ok("4096/s", 4096);
	ok("inf", 0);
	ok("unlimited", 0);

	bad("5Q", -EINVAL);
	bad("", -EINVAL);
	bad("-1", -EINVAL);
	bad("-5M", -EINVAL);
	bad("0", -EINVAL);
	bad("0M", -EINVAL);
	bad("M", -EINVAL);
	bad("5 M", -EINVAL);
	bad("5M/h", -EINVAL);
	bad("5Mi/", -EINVAL);
	bad("1e6", -EINVAL);
	bad("0.5", -EDOM);     /* a rate, but under one byte a second */
	bad("0.0001k", -EDOM);
	bad("99999999999999999999999", -ERANGE);
	bad("20000000T", -ERANGE);
	CHECK(rate_parse(NULL, &(uint64_t){ 0 }) == -EINVAL);

	uint64_t size = 0;
	CHECK(size_parse("256k", &size) == 0 && size == 256000);
	CHECK(size_parse("1MiB", &size) == 0 && size == 1u << 20);
	CHECK(size_parse("1MiB/s", &size) == -EINVAL);
	CHECK(size_parse("1.5KiB", &size) == 0 && size == 1536);
	CHECK(size_parse("1.5k", &size) == 0 && size == 1500);
	CHECK(size_parse("2.9", &size) == -EDOM);      /* no fraction of a byte */
	CHECK(size_parse("1.1KiB", &size) == -EDOM);   /* 1126.4 bytes */
	CHECK(size_parse("2.0", &size) == 0 && size == 2);
	CHECK(size_parse("1P", &size) == 0 && size == UINT64_C(1000000000000000));
	CHECK(size_parse("1EiB", &size) == 0 && size == UINT64_C(1) << 60);
	CHECK(size_parse("15.5EiB", &size) == 0 && size == UINT64_C(31) << 59);
	CHECK(size_parse("16EiB", &size) == -ERANGE);
	CHECK(size_parse("99999999999999999999", &size) == -ERANGE);
	CHECK(size_parse("1e3", &size) == -EINVAL);    /* no exponents */
	CHECK(size_parse("1.0000000000000000001", &size) == -EDOM); /* the 19th digit counts */
	CHECK(size_parse("1.0000000000000000000", &size) == 0 && size == 1);
	CHECK(rate_parse("7.7MiB/s", &size) == 0 && size == 8074035); /* rates round down */

	char buf[32];
	size_format(buf, sizeof buf, 5.0 * (1 << 20));
	CHECK(strcmp(buf, "5.00 MiB") == 0);
	size_format(buf, sizeof buf, 18446744073709551615.0);
	CHECK(strcmp(buf, "16.00 EiB") == 0);
	size_format(buf, sizeof buf, 17);
	CHECK(strcmp(buf, "17 B") == 0);

	/* A cap in the units its user wrote: binary where they give it to two
	 * decimals, else decimal where those do, else binary. */
	static const struct { const char *typed, *shown; unsigned base; } caps[] = {
		{ "5M", "5.00 MB", 1000 },         { "5MiB/s", "5.00 MiB", 1024 },
		{ "500k", "500.00 kB", 1000 },     { "1.5M", "1.50 MB", 1000 },
		{ "7.5MiB/s", "7.50 MiB", 1024 },  { "7.7MiB/s", "7.70 MiB", 1024 },
		{ "4096", "4.00 KiB", 1024 },      { "1000", "1000 B", 1024 },
		{ "1G", "1.00 GB", 1000 },         { "2TiB", "2.00 TiB", 1024 },
		{ "12345678", "11.77 MiB", 1024 }, { "1.25M", "1.25 MB", 1000 },
	};
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
		CHECK(rate_parse(caps[i].typed, &size) == 0);
		unsigned base = cap_base(size);
		cap_format(buf, sizeof buf, size);
		if (strcmp(buf, caps[i].shown) != 0 || base != caps[i].base) {
			fprintf(stderr, "cap_format(%s) = \"%s\" base %u; want \"%s\" base %u\n",
				caps[i].typed, buf, base, caps[i].shown, caps[i].base);
			return 1;
		}
	}
	size_format_base(buf, sizeof buf, 4990000, 1000);
	CHECK(strcmp(buf, "4.99 MB") == 0);
	return 0;
}
