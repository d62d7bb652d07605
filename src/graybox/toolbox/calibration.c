/*
 * calibration.c - the calibration file's format (graybox-icl §5; see
 * calibration.h).  Pure: no I/O, no globals, no allocation.
 */
#include "graybox/toolbox/calibration.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define HEADER "discnice-calibration"

static const char *const value_names[CALIBRATION_N_VALUES] = {
	[CALIBRATION_SEQUENTIAL_READ_BPS] = "sequential_read_bps",
	[CALIBRATION_RANDOM_READ_NS] = "random_read_ns",
	[CALIBRATION_PROBE_HIT_NS] = "probe_hit_ns",
	[CALIBRATION_PROBE_MISS_NS] = "probe_miss_ns",
	[CALIBRATION_PROBE_THRESHOLD_NS] = "probe_threshold_ns",
	[CALIBRATION_PAGE_DISK_NS] = "page_disk_ns",
	[CALIBRATION_PAGE_MEMORY_NS] = "page_memory_ns",
	[CALIBRATION_PAGE_ALLOC_ZERO_NS] = "page_alloc_zero_ns",
	[CALIBRATION_PAGE_THRESHOLD_NS] = "page_threshold_ns",
	[CALIBRATION_TIMER_OVERHEAD_NS] = "timer_overhead_ns",
};

const char *calibration_value_name(enum calibration_value which)
{
	return (unsigned)which < CALIBRATION_N_VALUES ? value_names[which] : NULL;
}

static void copy_name(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src && *src ? src : "-");
}

void calibration_entry_init(struct calibration_entry *entry, enum calibration_scope scope,
			    uint32_t dev_major, uint32_t dev_minor, const char *device_name)
{
	memset(entry, 0, sizeof *entry);
	entry->scope = scope;
	if (scope == CALIBRATION_DEVICE) {
		entry->dev_major = dev_major;
		entry->dev_minor = dev_minor;
	}
	copy_name(entry->device_name, sizeof entry->device_name,
		  scope == CALIBRATION_DEVICE ? device_name : NULL);
	copy_name(entry->kernel, sizeof entry->kernel, NULL);
	copy_name(entry->boot_id, sizeof entry->boot_id, NULL);
}

/* ---- parsing ---------------------------------------------------------------- */

/* A cursor over one line (no NUL inside: bounded by `end`). */
struct line {
	const char *at, *end;
};

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* The next white-space separated word, or false at the end of the line. */
static bool next_word(struct line *line, const char **word, size_t *len)
{
	while (line->at < line->end && is_blank(*line->at))
		line->at++;
	if (line->at == line->end)
		return false;
	*word = line->at;
	while (line->at < line->end && !is_blank(*line->at))
		line->at++;
	*len = (size_t)(line->at - *word);
	return true;
}

static bool word_is(const char *word, size_t len, const char *want)
{
	return strlen(want) == len && memcmp(word, want, len) == 0;
}

/* A decimal integer that is the whole word and fits in uint64_t. */
static bool all_digits(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return len > 0;
}

/* Digits within 64 bits (false for anything else, or a larger number). */
static bool parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	if (!all_digits(s, len) || len > 20)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned digit = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - digit) / 10)
			return false;
		v = v * 10 + digit;
	}
	*out = v;
	return true;
}

static bool parse_u32(const char *s, size_t len, uint32_t *out)
{
	uint64_t v;
	if (!parse_u64(s, len, &v) || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

/* A name into a fixed buffer: non-empty, must fit. */
static bool parse_name(const char *s, size_t len, char *dst, size_t size)
{
	if (len == 0 || len >= size)
		return false;
	memcpy(dst, s, len);
	dst[len] = '\0';
	return true;
}

/* "MAJOR:MINOR" */
static bool parse_device(const char *s, size_t len, uint32_t *major, uint32_t *minor)
{
	const char *colon = memchr(s, ':', len);
	if (!colon)
		return false;
	size_t left = (size_t)(colon - s);
	return parse_u32(s, left, major) && parse_u32(colon + 1, len - left - 1, minor);
}

static bool parse_pair(struct calibration_entry *entry, const char *word, size_t len)
{
	const char *eq = memchr(word, '=', len);
	if (!eq || eq == word)
		return false;
	size_t key_len = (size_t)(eq - word);
	const char *value = eq + 1;
	size_t value_len = len - key_len - 1;
	uint64_t number;

	if (word_is(word, key_len, "measured")) {
		if (!parse_u64(value, value_len, &number) || number > INT64_MAX)
			return false;
		entry->measured = (int64_t)number;
		return true;
	}
	if (word_is(word, key_len, "kernel"))
		return parse_name(value, value_len, entry->kernel, sizeof entry->kernel);
	if (word_is(word, key_len, "boot"))
		return parse_name(value, value_len, entry->boot_id, sizeof entry->boot_id);
	if (word_is(word, key_len, "quick")) {
		if (!parse_u64(value, value_len, &number) || number > 1)
			return false;
		entry->quick = number == 1;
		return true;
	}
	for (unsigned i = 0; i < CALIBRATION_N_VALUES; i++)
		if (word_is(word, key_len, value_names[i]))
			return parse_u64(value, value_len, &entry->value[i]);
	/* Unknown key: a newer discnice's, within the same version.  Its
	 * value still has to be a word. */
	return value_len > 0;
}

static int parse_entry(struct line *line, const char *kind, size_t kind_len,
		       struct calibration_entry *entry)
{
	const char *word;
	size_t len;

	if (word_is(kind, kind_len, "machine")) {
		calibration_entry_init(entry, CALIBRATION_MACHINE, 0, 0, NULL);
	} else if (word_is(kind, kind_len, "device")) {
		uint32_t major, minor;
		char name[sizeof entry->device_name];
		if (!next_word(line, &word, &len) || !parse_device(word, len, &major, &minor))
			return -EBADMSG;
		if (!next_word(line, &word, &len) || !parse_name(word, len, name, sizeof name))
			return -EBADMSG;
		calibration_entry_init(entry, CALIBRATION_DEVICE, major, minor, name);
	} else {
		return -EBADMSG;
	}
	while (next_word(line, &word, &len))
		if (!parse_pair(entry, word, len))
			return -EBADMSG;
	return 0;
}

int calibration_parse(const char *text, size_t len, struct calibration *out, unsigned *bad_line)
{
	const char *at = text, *end = text + len;
	unsigned number = 0;
	bool header = false;

	out->count = 0;
	if (bad_line)
		*bad_line = 0;
	while (at < end) {
		const char *eol = memchr(at, '\n', (size_t)(end - at));
		struct line line = { at, eol ? eol : end };
		const char *word;
		size_t word_len;
		int rc = 0;

		at = eol ? eol + 1 : end;
		number++;
		if (memchr(line.at, '\0', (size_t)(line.end - line.at))) {
			rc = -EBADMSG;          /* binary junk */
		} else if (!next_word(&line, &word, &word_len) || *word == '#') {
			continue;
		} else if (!header) {
			uint64_t version;
			const char *v;
			size_t v_len;
			const char *after;
			size_t after_len;
			bool named = word_is(word, word_len, HEADER) &&
				     next_word(&line, &v, &v_len) &&
				     !next_word(&line, &after, &after_len);
			if (named && all_digits(v, v_len) && !parse_u64(v, v_len, &version))
				rc = -EPROTONOSUPPORT;  /* a version past 2^64: newer still */
			else if (!named || !parse_u64(v, v_len, &version) || version == 0)
				rc = -EBADMSG;
			else if (version > CALIBRATION_VERSION)
				rc = -EPROTONOSUPPORT;
			else
				header = true;
		} else {
			struct calibration_entry entry;
			rc = parse_entry(&line, word, word_len, &entry);
			if (rc == 0)
				rc = calibration_put(out, &entry);
		}
		if (rc < 0) {
			if (bad_line)
				*bad_line = number;
			out->count = 0;
			return rc;
		}
	}
	if (!header) {
		if (bad_line)
			*bad_line = number ? number : 1;
		return -EBADMSG;
	}
	return 0;
}

/* ---- formatting -------------------------------------------------------------- */

struct writer {
	char *buf;
	size_t size, used;
	bool full;
};

static void put(struct writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct writer *w, const char *fmt, ...)
{
	va_list ap;
	if (w->full)
		return;
	va_start(ap, fmt);
	int n = vsnprintf(w->buf + w->used, w->size - w->used, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= w->size - w->used)
		w->full = true;
	else
		w->used += (size_t)n;
}

static bool plain_name(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (is_blank(*s) || *s == '\n' || *s == '=')
			return false;
	return true;
}

int calibration_format(const struct calibration *cal, char *buf, size_t size)
{
	struct writer w = { buf, size, 0, size == 0 };

	put(&w, "# discnice calibration: what the gray toolbox measured (discnice(1), FILES).\n"
		"# Written by 'discnice calibrate'; read by discnice run, gbp and gb_alloc.\n"
		"%s %d\n", HEADER, CALIBRATION_VERSION);
	for (unsigned i = 0; i < cal->count; i++) {
		const struct calibration_entry *e = &cal->entries[i];
		if (!plain_name(e->kernel) || !plain_name(e->boot_id) ||
		    (e->scope == CALIBRATION_DEVICE && !plain_name(e->device_name)))
			return -EINVAL;
		if (e->scope == CALIBRATION_MACHINE)
			put(&w, "machine");
		else
			put(&w, "device %u:%u %s", e->dev_major, e->dev_minor, e->device_name);
		put(&w, " measured=%lld kernel=%s boot=%s quick=%d", (long long)e->measured,
		    e->kernel, e->boot_id, e->quick ? 1 : 0);
		for (unsigned v = 0; v < CALIBRATION_N_VALUES; v++)
			if (e->value[v])
				put(&w, " %s=%llu", value_names[v], (unsigned long long)e->value[v]);
		put(&w, "\n");
	}
	return w.full ? -ENOSPC : (int)w.used;
}

/* ---- lookup ------------------------------------------------------------------ */

static bool same_place(const struct calibration_entry *e, enum calibration_scope scope,
		       uint32_t dev_major, uint32_t dev_minor)
{
	return e->scope == scope && (scope == CALIBRATION_MACHINE ||
				     (e->dev_major == dev_major && e->dev_minor == dev_minor));
}

const struct calibration_entry *calibration_find(const struct calibration *cal,
						 enum calibration_scope scope, uint32_t dev_major,
						 uint32_t dev_minor)
{
	for (unsigned i = 0; i < cal->count; i++)
		if (same_place(&cal->entries[i], scope, dev_major, dev_minor))
			return &cal->entries[i];
	return NULL;
}

int calibration_put(struct calibration *cal, const struct calibration_entry *entry)
{
	for (unsigned i = 0; i < cal->count; i++)
		if (same_place(&cal->entries[i], entry->scope, entry->dev_major, entry->dev_minor)) {
			cal->entries[i] = *entry;
			return 0;
		}
	if (cal->count < CALIBRATION_MAX_ENTRIES) {
		cal->entries[cal->count++] = *entry;
		return 0;
	}
	/* Full: the oldest entry makes room (a file with more, written by
	 * hand or by another program, keeps its newest). */
	unsigned oldest = 0;
	for (unsigned i = 1; i < cal->count; i++)
		if (cal->entries[i].measured < cal->entries[oldest].measured)
			oldest = i;
	cal->entries[oldest] = *entry;
	return 0;
}

bool calibration_entry_fresh(const struct calibration_entry *entry, int64_t now,
			     const char *kernel)
{
	if (entry->measured <= 0 || now - entry->measured > CALIBRATION_MAX_AGE_S ||
	    entry->measured - now > 24 * 3600)
		return false;
	return kernel && strcmp(entry->kernel, kernel) == 0;
}
