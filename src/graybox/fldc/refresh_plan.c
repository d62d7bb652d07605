/*
 * refresh_plan.c - the order, the journal's text and the recovery decision
 * of `discnice refresh` (see refresh_plan.h).  Pure: no I/O, no globals.
 */
#include "graybox/fldc/refresh_plan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const order_names[] = {
	[REFRESH_ORDER_SMALLEST] = "smallest",
	[REFRESH_ORDER_LARGEST] = "largest",
	[REFRESH_ORDER_NAME] = "name",
	[REFRESH_ORDER_INODE] = "inode",
	[REFRESH_ORDER_MTIME] = "mtime",
};
#define N_ORDERS (sizeof order_names / sizeof order_names[0])

int refresh_order_parse(const char *name)
{
	for (size_t i = 0; i < N_ORDERS; i++)
		if (strcmp(name, order_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *refresh_order_name(enum refresh_order order)
{
	return (size_t)order < N_ORDERS ? order_names[order] : "?";
}

/* ---- the order ----------------------------------------------------------- */

static int compare_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

/* qsort(3) takes no context (the order) and is not stable; a merge sort of
 * our own is both.  (Ties are broken by name anyway, so the plan is the
 * same whatever order readdir gave.) */
static int compare_entries(const struct refresh_plan_entry *a, const struct refresh_plan_entry *b,
			   enum refresh_order order)
{
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1; /* files, then symlinks, then dirs */
	int c = 0;
	if (a->kind == REFRESH_KIND_FILE) {
		switch (order) {
		case REFRESH_ORDER_SMALLEST: c = compare_u64(a->size, b->size); break;
		case REFRESH_ORDER_LARGEST: c = compare_u64(b->size, a->size); break;
		case REFRESH_ORDER_NAME: break;
		case REFRESH_ORDER_INODE: c = compare_u64(a->ino, b->ino); break;
		case REFRESH_ORDER_MTIME:
			c = a->mtime_ns < b->mtime_ns ? -1 : a->mtime_ns > b->mtime_ns;
			break;
		}
	}
	if (c == 0)
		c = strcmp(a->name, b->name);
	return c;
}

static void merge_sort(struct refresh_plan_entry *e, struct refresh_plan_entry *tmp, size_t n,
		       enum refresh_order order)
{
	if (n < 2)
		return;
	size_t half = n / 2;
	merge_sort(e, tmp, half, order);
	merge_sort(e + half, tmp, n - half, order);
	size_t i = 0, j = half, k = 0;
	while (i < half && j < n)
		tmp[k++] = compare_entries(&e[j], &e[i], order) < 0 ? e[j++] : e[i++];
	while (i < half)
		tmp[k++] = e[i++];
	while (j < n)
		tmp[k++] = e[j++];
	memcpy(e, tmp, n * sizeof *e);
}

void refresh_plan_sort(struct refresh_plan_entry *entries, size_t n, enum refresh_order order)
{
	if (n < 2)
		return;
	struct refresh_plan_entry small[64];
	struct refresh_plan_entry *tmp = n <= 64 ? small : malloc(n * sizeof *tmp);
	if (tmp) {
		merge_sort(entries, tmp, n, order);
		if (tmp != small)
			free(tmp);
		return;
	}
	/* No memory for the merge: an insertion sort, in place (same order). */
	for (size_t i = 1; i < n; i++) {
		struct refresh_plan_entry x = entries[i];
		size_t j = i;
		while (j > 0 && compare_entries(&x, &entries[j - 1], order) < 0) {
			entries[j] = entries[j - 1];
			j--;
		}
		entries[j] = x;
	}
}

/* ---- the journal --------------------------------------------------------- */

#define JOURNAL_MAGIC "discnice-refresh 1\n"

static const char *const phase_names[] = {
	[REFRESH_PHASE_COPYING] = "copying",
	[REFRESH_PHASE_COPIED] = "copied",
	[REFRESH_PHASE_EXCHANGED] = "exchanged",
};
#define N_PHASES (sizeof phase_names / sizeof phase_names[0])

const char *refresh_phase_name(enum refresh_phase phase)
{
	return (size_t)phase < N_PHASES ? phase_names[phase] : "?";
}

int refresh_journal_format(const struct refresh_journal *j, char *buf, size_t len)
{
	char hex[2 * REFRESH_NAME_MAX + 1];
	size_t name_len = strnlen(j->name, sizeof j->name);
	if (name_len == 0 || name_len > REFRESH_NAME_MAX)
		return -EINVAL;
	for (size_t i = 0; i < name_len; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)j->name[i]);
	int n = snprintf(buf, len,
			 JOURNAL_MAGIC
			 "phase %s\n"
			 "order %s\n"
			 "name %s\n"
			 "dev %" PRIu64 "\n"
			 "old_ino %" PRIu64 "\n"
			 "new_ino %" PRIu64 "\n"
			 "pid %" PRId64 "\n",
			 refresh_phase_name(j->phase), refresh_order_name(j->order), hex, j->dev,
			 j->old_ino, j->new_ino, j->pid);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return n;
}

static int parse_u64(const char *s, uint64_t *out)
{
	if (*s < '0' || *s > '9')
		return -EINVAL;
	uint64_t v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int refresh_journal_parse(const char *text, size_t len, struct refresh_journal *j)
{
	size_t magic = sizeof JOURNAL_MAGIC - 1;
	if (len < magic || memcmp(text, JOURNAL_MAGIC, magic) != 0)
		return -EINVAL;
	memset(j, 0, sizeof *j);
	enum { K_PHASE, K_ORDER, K_NAME, K_DEV, K_OLD, K_NEW, K_PID, N_KEYS };
	static const char *const keys[N_KEYS] = { "phase", "order", "name", "dev",
						  "old_ino", "new_ino", "pid" };
	bool seen[N_KEYS] = { false };
	size_t pos = magic;
	while (pos < len) {
		const char *line = text + pos;
		const char *nl = memchr(line, '\n', len - pos);
		if (!nl)
			return -EINVAL; /* every line ends with '\n': a cut file is bad */
		size_t line_len = (size_t)(nl - line);
		pos += line_len + 1;
		char copy[2 * REFRESH_NAME_MAX + 32];
		if (line_len >= sizeof copy)
			return -EINVAL;
		memcpy(copy, line, line_len);
		copy[line_len] = '\0';
		char *space = strchr(copy, ' ');
		if (!space || memchr(copy, '\0', line_len))
			return -EINVAL;
		*space = '\0';
		const char *value = space + 1;
		int k = -1;
		for (int i = 0; i < N_KEYS; i++)
			if (strcmp(copy, keys[i]) == 0)
				k = i;
		if (k < 0 || seen[k])
			return -EINVAL;
		seen[k] = true;
		uint64_t v;
		switch (k) {
		case K_PHASE: {
			int phase = -1;
			for (size_t i = 0; i < N_PHASES; i++)
				if (strcmp(value, phase_names[i]) == 0)
					phase = (int)i;
			if (phase < 0)
				return -EINVAL;
			j->phase = (enum refresh_phase)phase;
			break;
		}
		case K_ORDER: {
			int order = refresh_order_parse(value);
			if (order < 0)
				return -EINVAL;
			j->order = (enum refresh_order)order;
			break;
		}
		case K_NAME: {
			size_t hex_len = strlen(value);
			if (hex_len == 0 || hex_len % 2 || hex_len / 2 > REFRESH_NAME_MAX)
				return -EINVAL;
			for (size_t i = 0; i < hex_len / 2; i++) {
				int hi = hex_digit(value[2 * i]), lo = hex_digit(value[2 * i + 1]);
				int byte = hi * 16 + lo;
				if (hi < 0 || lo < 0 || byte == 0 || byte == '/')
					return -EINVAL;
				j->name[i] = (char)byte;
			}
			j->name[hex_len / 2] = '\0';
			if (strcmp(j->name, ".") == 0 || strcmp(j->name, "..") == 0)
				return -EINVAL;
			break;
		}
		case K_PID:
			if (value[0] == '-') {
				if (parse_u64(value + 1, &v) < 0 || v > (uint64_t)INT64_MAX)
					return -EINVAL;
				j->pid = -(int64_t)v;
			} else {
				if (parse_u64(value, &v) < 0 || v > (uint64_t)INT64_MAX)
					return -EINVAL;
				j->pid = (int64_t)v;
			}
			break;
		default:
			if (parse_u64(value, &v) < 0)
				return -EINVAL;
			if (k == K_DEV)
				j->dev = v;
			else if (k == K_OLD)
				j->old_ino = v;
			else
				j->new_ino = v;
			break;
		}
	}
	for (int i = 0; i < N_KEYS; i++)
		if (!seen[i])
			return -EINVAL;
	if (j->old_ino == 0 || (j->phase != REFRESH_PHASE_COPYING && j->new_ino == 0))
		return -EINVAL; /* the copy's i-number is journalled with "copied" */
	return 0;
}

/* ---- recovery ------------------------------------------------------------ */

enum refresh_recovery refresh_recovery_decide(enum refresh_phase phase, enum refresh_found at_name,
					      enum refresh_found at_copy)
{
	if (at_copy == REFRESH_FOUND_NOT_DIR)
		return REFRESH_RECOVER_REFUSE;
	switch (phase) {
	case REFRESH_PHASE_COPYING:
		/* The exchange comes only after "copied" is on disk. */
		if (at_name == REFRESH_FOUND_OLD && at_copy != REFRESH_FOUND_OLD)
			return REFRESH_RECOVER_UNDO;
		return REFRESH_RECOVER_REFUSE;
	case REFRESH_PHASE_COPIED:
		if (at_name == REFRESH_FOUND_OLD &&
		    (at_copy == REFRESH_FOUND_NOTHING || at_copy == REFRESH_FOUND_NEW))
			return REFRESH_RECOVER_UNDO;
		if (at_name == REFRESH_FOUND_NEW &&
		    (at_copy == REFRESH_FOUND_OLD || at_copy == REFRESH_FOUND_NOTHING))
			return REFRESH_RECOVER_FINISH;
		return REFRESH_RECOVER_REFUSE;
	case REFRESH_PHASE_EXCHANGED:
		if (at_name == REFRESH_FOUND_NEW &&
		    (at_copy == REFRESH_FOUND_OLD || at_copy == REFRESH_FOUND_NOTHING))
			return REFRESH_RECOVER_FINISH;
		return REFRESH_RECOVER_REFUSE;
	}
	return REFRESH_RECOVER_REFUSE;
}
