/* Description: the calibration file's format (graybox-icl §5) - a round trip of machine and device entries, comments and unknown keys skipped, a later entry replacing an earlier one, staleness by age, clock and kernel, and malformed input (no header, newer version, bad numbers, junk, too many entries) refused with its line. */
#include <errno.h>
#include <string.h>

#include "graybox/toolbox/calibration.h"
#include "unit.h"

static struct calibration cal, again;   /* big: not on the stack */
static char text[16384];

static void test_round_trip(void)
{
	struct calibration_entry machine, disk;
	cal.count = 0;
	calibration_entry_init(&machine, CALIBRATION_MACHINE, 7, 7, "ignored");
	CHECK(strcmp(machine.device_name, "-") == 0 && machine.dev_major == 0);
	machine.measured = 1795000000;
	strcpy(machine.kernel, "6.18.0-test");
	strcpy(machine.boot_id, "0d8e7b1c-aaaa-bbbb-cccc-0123456789ab");
	machine.value[CALIBRATION_PAGE_MEMORY_NS] = 30;
	machine.value[CALIBRATION_PAGE_ALLOC_ZERO_NS] = 700;
	machine.value[CALIBRATION_PAGE_THRESHOLD_NS] = 14071;
	CHECK(calibration_put(&cal, &machine) == 0);

	calibration_entry_init(&disk, CALIBRATION_DEVICE, 254, 1, "vda1");
	disk.measured = 1795000100;
	strcpy(disk.kernel, "6.18.0-test");
	disk.quick = true;
	disk.value[CALIBRATION_PROBE_THRESHOLD_NS] = 7503;
	disk.value[CALIBRATION_SEQUENTIAL_READ_BPS] = UINT64_MAX;   /* the extreme survives */
	CHECK(calibration_put(&cal, &disk) == 0);
	CHECK_EQ_U64(cal.count, 2);

	int n = calibration_format(&cal, text, sizeof text);
	CHECK(n > 0 && (size_t)n == strlen(text));
	printf("%s", text);
	CHECK(strstr(text, "\ndiscnice-calibration 1\n") != NULL);
	CHECK(strstr(text, "\nmachine measured=1795000000 kernel=6.18.0-test "
			   "boot=0d8e7b1c-aaaa-bbbb-cccc-0123456789ab quick=0 "
			   "page_memory_ns=30 page_alloc_zero_ns=700 page_threshold_ns=14071\n"));
	CHECK(strstr(text, "\ndevice 254:1 vda1 measured=1795000100 kernel=6.18.0-test boot=- "
			   "quick=1 sequential_read_bps=18446744073709551615 "
			   "probe_threshold_ns=7503\n"));

	unsigned bad = 99;
	CHECK(calibration_parse(text, (size_t)n, &again, &bad) == 0);
	CHECK_EQ_U64(bad, 0);
	CHECK_EQ_U64(again.count, 2);
	CHECK(memcmp(&again.entries[0], &cal.entries[0], sizeof machine) == 0);
	CHECK(memcmp(&again.entries[1], &cal.entries[1], sizeof disk) == 0);

	/* Too small a buffer: -ENOSPC, for every size up to the text's. */
	for (int size = 0; size <= n; size += 7)
		CHECK(calibration_format(&cal, text, (size_t)size) == -ENOSPC);
	CHECK(calibration_format(&cal, text, (size_t)n + 1) == n);

	/* Names with white space cannot be written. */
	strcpy(cal.entries[1].device_name, "my disk");
	CHECK(calibration_format(&cal, text, sizeof text) == -EINVAL);
}

static void test_lookup_and_replace(void)
{
	const char *in =
		"# hand-written\n"
		"\n"
		"   discnice-calibration 1\n"
		"machine measured=100 kernel=k1 boot=b quick=0 page_threshold_ns=5000 "
		"future_key=whatever\n"
		"device 8:1 sda1 measured=200 kernel=k1 boot=b quick=0 probe_threshold_ns=1\n"
		"device 8:2 sda2 measured=300 kernel=k1 boot=b quick=0 probe_threshold_ns=2\n"
		"device 8:1 sda1 measured=400 kernel=k1 boot=b quick=1 probe_threshold_ns=3\r\n"
		"\t# an indented comment\n"
		"machine";                      /* no final newline; no values */
	CHECK(calibration_parse(in, strlen(in), &cal, NULL) == 0);
	CHECK_EQ_U64(cal.count, 3);
	const struct calibration_entry *e = calibration_find(&cal, CALIBRATION_DEVICE, 8, 1);
	CHECK(e && e->measured == 400 && e->quick && e->value[CALIBRATION_PROBE_THRESHOLD_NS] == 3);
	e = calibration_find(&cal, CALIBRATION_DEVICE, 8, 2);
	CHECK(e && e->value[CALIBRATION_PROBE_THRESHOLD_NS] == 2);
	CHECK(calibration_find(&cal, CALIBRATION_DEVICE, 8, 3) == NULL);
	e = calibration_find(&cal, CALIBRATION_MACHINE, 0, 0);
	/* The last "machine" line replaced the first: nothing measured. */
	CHECK(e && e->measured == 0 && e->value[CALIBRATION_PAGE_THRESHOLD_NS] == 0);
	CHECK(strcmp(e->kernel, "-") == 0);
	/* The device numbers do not matter for the machine. */
	CHECK(calibration_find(&cal, CALIBRATION_MACHINE, 8, 1) == e);

	/* Full. */
	struct calibration_entry extra;
	cal.count = 0;
	for (unsigned i = 0; i < CALIBRATION_MAX_ENTRIES; i++) {
		calibration_entry_init(&extra, CALIBRATION_DEVICE, 1, i, "x");
		CHECK(calibration_put(&cal, &extra) == 0);
	}
	cal.entries[7].measured = -1;   /* the oldest */
	calibration_entry_init(&extra, CALIBRATION_DEVICE, 2, 0, "x");
	CHECK(calibration_put(&cal, &extra) == 0);
	CHECK_EQ_U64(cal.count, CALIBRATION_MAX_ENTRIES);
	CHECK(calibration_find(&cal, CALIBRATION_DEVICE, 2, 0) == &cal.entries[7]);
	CHECK(calibration_find(&cal, CALIBRATION_DEVICE, 1, 7) == NULL);
	calibration_entry_init(&extra, CALIBRATION_DEVICE, 1, 5, "y");   /* replacing still works */
	CHECK(calibration_put(&cal, &extra) == 0);
	CHECK(strcmp(calibration_find(&cal, CALIBRATION_DEVICE, 1, 5)->device_name, "y") == 0);
}

static void test_fresh(void)
{
	struct calibration_entry e;
	calibration_entry_init(&e, CALIBRATION_MACHINE, 0, 0, NULL);
	strcpy(e.kernel, "6.18.0");
	const int64_t t = 1795000000;
	e.measured = t;
	CHECK(calibration_entry_fresh(&e, t, "6.18.0"));
	CHECK(calibration_entry_fresh(&e, t + CALIBRATION_MAX_AGE_S, "6.18.0"));
	CHECK(!calibration_entry_fresh(&e, t + CALIBRATION_MAX_AGE_S + 1, "6.18.0"));
	CHECK(calibration_entry_fresh(&e, t - 3600, "6.18.0"));      /* clock a bit behind */
	CHECK(!calibration_entry_fresh(&e, t - 2 * 24 * 3600, "6.18.0"));
	CHECK(!calibration_entry_fresh(&e, t, "6.19.0"));             /* another kernel */
	CHECK(!calibration_entry_fresh(&e, t, NULL));
	e.measured = 0;                                                /* never measured */
	CHECK(!calibration_entry_fresh(&e, t, "6.18.0"));
}

static void expect_bad(const char *in, int rc, unsigned line)
{
	unsigned bad = 0;
	cal.count = 5;
	int got = calibration_parse(in, strlen(in), &cal, &bad);
	if (got != rc || bad != line) {
		fprintf(stderr, "input %s: rc %d line %u, want rc %d line %u\n", in, got, bad, rc,
			line);
		exit(1);
	}
	CHECK_EQ_U64(cal.count, 0);     /* nothing half-parsed is left */
}

static void test_malformed(void)
{
	expect_bad("", -EBADMSG, 1);
	expect_bad("# only a comment\n\n", -EBADMSG, 2);
	expect_bad("machine measured=1\n", -EBADMSG, 1);                 /* no header */
	expect_bad("discnice-calibration\n", -EBADMSG, 1);
	expect_bad("discnice-calibration one\n", -EBADMSG, 1);
	expect_bad("discnice-calibration 0\n", -EBADMSG, 1);
	expect_bad("discnice-calibration 1 extra\n", -EBADMSG, 1);
	expect_bad("discnice-calibrations 1\n", -EBADMSG, 1);
	expect_bad("# x\ndiscnice-calibration 2\nmachine\n", -EPROTONOSUPPORT, 2);
	/* A version past 2^64 is newer still, not malformed (which would
	 * have the file replaced). */
	expect_bad("discnice-calibration 18446744073709551616\n", -EPROTONOSUPPORT, 1);
	expect_bad("discnice-calibration 99999999999999999999999\n", -EPROTONOSUPPORT, 1);
	expect_bad("discnice-calibration 1x\n", -EBADMSG, 1);
	expect_bad("discnice-calibration 1\ndisk 8:1 sda\n", -EBADMSG, 2);   /* unknown kind */
	expect_bad("discnice-calibration 1\ndevice\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\ndevice 8 sda\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\ndevice 8:x sda\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\ndevice 8:1\n", -EBADMSG, 2);     /* no name */
	expect_bad("discnice-calibration 1\ndevice 4294967296:1 sda\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\nmachine page_memory_ns=-5\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\nmachine page_memory_ns=12ns\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\nmachine page_memory_ns=\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\nmachine page_memory_ns=18446744073709551616\n",
		   -EBADMSG, 2);                                           /* 2^64 */
	expect_bad("discnice-calibration 1\nmachine measured=9223372036854775808\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\nmachine quick=2\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\nmachine =5\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\nmachine lonely\n", -EBADMSG, 2);
	expect_bad("discnice-calibration 1\nmachine unknown=\n", -EBADMSG, 2);
	char long_kernel[200] = "discnice-calibration 1\nmachine kernel=";
	memset(long_kernel + strlen(long_kernel), 'k', 100);
	expect_bad(long_kernel, -EBADMSG, 2);
	/* A NUL inside the text. */
	static const char junk[] = "discnice-calibration 1\nmach\0ine\n";
	unsigned bad = 0;
	CHECK(calibration_parse(junk, sizeof junk - 1, &cal, &bad) == -EBADMSG && bad == 2);

	/* One entry too many: the newest are kept (the file was unusable,
	 * for every program, until moved away by hand). */
	char *at = text;
	at += sprintf(at, "discnice-calibration 1\n");
	for (unsigned i = 0; i <= CALIBRATION_MAX_ENTRIES; i++)
		at += sprintf(at, "device 9:%u d%u measured=%u\n", i, i, 1000 + i);
	bad = 0;
	CHECK(calibration_parse(text, strlen(text), &cal, &bad) == 0 && bad == 0);
	CHECK_EQ_U64(cal.count, CALIBRATION_MAX_ENTRIES);
	CHECK(calibration_find(&cal, CALIBRATION_DEVICE, 9, 0) == NULL);
	CHECK(calibration_find(&cal, CALIBRATION_DEVICE, 9, CALIBRATION_MAX_ENTRIES) != NULL);
}

int main(void)
{
	test_round_trip();
	test_lookup_and_replace();
	test_fresh();
	test_malformed();
	CHECK(strcmp(calibration_value_name(CALIBRATION_PROBE_THRESHOLD_NS), "probe_threshold_ns") == 0);
	CHECK(calibration_value_name(CALIBRATION_N_VALUES) == NULL);
	return 0;
}
