/*
 * calibration.h - the calibration file's format (graybox-icl §5: "all of
 * our microbenchmarks report performance numbers ... in a common format
 * kept in persistent storage; each microbenchmark then only needs to be
 * run once").  Pure: text in, struct out, and back; the file's place and
 * its atomic update are in calibration_file.c.
 *
 * The text (documented in discnice(1), FILES):
 *
 *   # comment lines and blank lines are ignored
 *   discnice-calibration 1
 *   machine measured=1795000000 kernel=6.18.0 boot=UUID quick=0 page_memory_ns=30 ...
 *   device 254:1 vda1 measured=1795000000 kernel=6.18.0 boot=UUID quick=0 probe_threshold_ns=7503 ...
 *
 * The first other line names the format and its version; a larger version
 * is refused (-EPROTONOSUPPORT), so an old discnice never misreads a newer
 * file.  Then one line per entry: "machine" (what does not depend on a
 * disk), or "device MAJOR:MINOR NAME" (st_dev of the measured directory's
 * filesystem; NAME as /sys/dev/block calls it, "-" if none), then
 * key=value words.  measured is the Unix time of the measurement, kernel
 * the `uname -r` and boot the boot_id then, quick 1 for a layer's quick
 * self-measurement rather than `discnice calibrate`.  Values are decimal
 * integers (ns, or bytes/s); a key this version does not know is skipped,
 * so a newer discnice may add some within version 1.  A value never
 * measured is absent (0 in the struct).
 */
#ifndef DISCNICE_TOOLBOX_CALIBRATION_H
#define DISCNICE_TOOLBOX_CALIBRATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CALIBRATION_VERSION     1
#define CALIBRATION_MAX_ENTRIES 32
/* An entry older than this is stale: disks are replaced, VMs migrate, and
 * a month of running costs one re-measurement. */
#define CALIBRATION_MAX_AGE_S   (30 * 24 * 3600)

enum calibration_scope {
	CALIBRATION_MACHINE,
	CALIBRATION_DEVICE,
};

/* The measured values, one key each (calibration_value_name()). */
enum calibration_value {
	/* device */
	CALIBRATION_SEQUENTIAL_READ_BPS,  /* cold sequential read, bytes/s       */
	CALIBRATION_RANDOM_READ_NS,       /* cold random 4 KiB pread, median     */
	CALIBRATION_PROBE_HIT_NS,         /* cached one-byte read, median        */
	CALIBRATION_PROBE_MISS_NS,        /* uncached one-byte read, median      */
	CALIBRATION_PROBE_THRESHOLD_NS,   /* FCCD's hit/miss boundary            */
	/* both: a major fault reading one page of this device (machine: of
	 * the disk `discnice calibrate` ran on, standing in for swap) */
	CALIBRATION_PAGE_DISK_NS,
	/* machine */
	CALIBRATION_PAGE_MEMORY_NS,       /* write to a resident page, median    */
	CALIBRATION_PAGE_ALLOC_ZERO_NS,   /* first write to a fresh page, median */
	CALIBRATION_PAGE_THRESHOLD_NS,    /* MAC's in-memory/out-of-memory boundary */
	CALIBRATION_TIMER_OVERHEAD_NS,    /* two back-to-back timer reads        */
	CALIBRATION_N_VALUES
};

struct calibration_entry {
	enum calibration_scope scope;
	uint32_t dev_major, dev_minor;    /* CALIBRATION_DEVICE only             */
	char device_name[32];             /* "-" when unknown; no white space    */
	int64_t measured;                 /* Unix time, seconds                  */
	char kernel[65];                  /* uname -r; "-" when unknown          */
	char boot_id[40];                 /* /proc/sys/kernel/random/boot_id     */
	bool quick;
	uint64_t value[CALIBRATION_N_VALUES];
};

struct calibration {
	unsigned count;
	struct calibration_entry entries[CALIBRATION_MAX_ENTRIES];
};

/* The key of a value ("probe_threshold_ns"), NULL out of range. */
const char *calibration_value_name(enum calibration_value which);

/* An empty entry of that scope (names "-"). */
void calibration_entry_init(struct calibration_entry *entry, enum calibration_scope scope,
			    uint32_t dev_major, uint32_t dev_minor, const char *device_name);

/* Parse `len` bytes of text.  Returns 0, or -EBADMSG (malformed: no
 * header, a bad entry line or value; *bad_line, if given, is its 1-based
 * number) or -EPROTONOSUPPORT (a newer version).  A later entry for the
 * same machine or device replaces an earlier one; past
 * CALIBRATION_MAX_ENTRIES, the newest are kept (calibration_put()). */
int calibration_parse(const char *text, size_t len, struct calibration *out, unsigned *bad_line);

/* Write the text into buf (NUL-terminated).  Returns its length, or
 * -ENOSPC if size is too small, -EINVAL if a name holds white space. */
int calibration_format(const struct calibration *cal, char *buf, size_t size);

/* The entry of that scope (and device), or NULL. */
const struct calibration_entry *calibration_find(const struct calibration *cal,
						 enum calibration_scope scope, uint32_t dev_major,
						 uint32_t dev_minor);

/* Add the entry, replacing the one of the same scope (and device); in a
 * full table, the oldest (by `measured`).  Returns 0. */
int calibration_put(struct calibration *cal, const struct calibration_entry *entry);

/* Is the entry still good at `now` (Unix time) on a kernel `kernel`?
 * Stale when older than CALIBRATION_MAX_AGE_S, dated more than a day in
 * the future (a clock set back), or measured under another kernel release
 * (the code paths timed are the kernel's).  A reboot alone does not make
 * it stale: the hardware is the same. */
bool calibration_entry_fresh(const struct calibration_entry *entry, int64_t now,
			     const char *kernel);

#endif
