/*
 * state_format.c - the state file's text format (state_format.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <math.h> /* isfinite only: a macro, no libm */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manners/state_format.h"

void manners_state_capture(struct manners_saved_phase *saved, const struct manners_phase *phase)
{
	memset(saved, 0, sizeof *saved);
	saved->index = phase->index;
	saved->count = phase->count;
	saved->samples = phase->calib.samples;
	if (phase->count == 1) {
		saved->rate = phase->calib.rate;
		return;
	}
	saved->regress_samples = phase->regress.samples;
	for (int i = 0; i < phase->count; i++) {
		saved->y[i] = phase->regress.y[i];
		for (int j = 0; j < phase->count; j++)
			saved->x[i][j] = phase->regress.x[i][j];
	}
}

int manners_state_restore(struct manners_phase *phase, const struct manners_saved_phase *saved)
{
	if (phase == NULL || saved == NULL || phase->index != saved->index ||
	    phase->count != saved->count)
		return -EINVAL;
	phase->calib.samples = saved->samples;
	if (saved->count == 1) {
		phase->calib.rate = saved->rate;
		return 0;
	}
	phase->regress.samples = saved->regress_samples;
	for (int i = 0; i < saved->count; i++) {
		phase->regress.y[i] = saved->y[i];
		for (int j = 0; j < saved->count; j++)
			phase->regress.x[i][j] = saved->x[i][j];
	}
	phase->regress.solved = 0;
	return 0;
}

int manners_state_valid(const struct manners_saved_phase *p)
{
	if (p->count < 1 || p->count > MANNERS_REGRESS_MAX)
		return 0;
	if (!isfinite(p->rate) || p->rate < 0.0)
		return 0;
	for (int i = 0; i < p->count; i++) {
		if (!isfinite(p->y[i]) || p->y[i] < 0.0 || !isfinite(p->x[i][i]) || p->x[i][i] < 0.0)
			return 0;
		for (int j = 0; j < p->count; j++)
			if (!isfinite(p->x[i][j]))
				return 0;
	}
	return 1;
}

/* Appends to buf at *used, as snprintf; -ENOSPC when it does not fit. */
static int append(char *buf, size_t size, size_t *used, const char *format, ...)
	__attribute__((format(printf, 4, 5)));

static int append(char *buf, size_t size, size_t *used, const char *format, ...)
{
	va_list args;
	va_start(args, format);
	int n = vsnprintf(buf + *used, size - *used, format, args);
	va_end(args);
	if (n < 0 || (size_t)n >= size - *used)
		return -ENOSPC;
	*used += (size_t)n;
	return 0;
}

int manners_state_metric_valid(const char *name)
{
	if (name == NULL)
		return 0;
	size_t n = strlen(name);
	if (n == 0 || n >= MANNERS_STATE_METRIC_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

int manners_state_format(const struct manners_saved_phase *phases, size_t count, char *buf,
			 size_t size)
{
	return manners_state_format_metric(NULL, phases, count, buf, size);
}

int manners_state_format_metric(const char *metric, const struct manners_saved_phase *phases,
				size_t count, char *buf, size_t size)
{
	if ((phases == NULL && count > 0) || buf == NULL || size == 0 || size > INT32_MAX)
		return -EINVAL;
	int has_metric = metric != NULL && metric[0] != '\0';
	if (has_metric && !manners_state_metric_valid(metric)) {
		buf[0] = '\0';
		return -EINVAL;
	}
	int saved_errno = errno;
	size_t used = 0;
	int rc = append(buf, size, &used, "%s %d\n# phase INDEX COUNT SAMPLES RATE "
			"REGRESS_SAMPLES X[COUNT*COUNT] Y[COUNT] (manners(3))\n",
			MANNERS_STATE_MAGIC, MANNERS_STATE_VERSION);
	if (rc == 0 && has_metric)
		rc = append(buf, size, &used, "metric %s\n", metric);
	for (size_t k = 0; rc == 0 && k < count; k++) {
		const struct manners_saved_phase *p = &phases[k];
		if (!manners_state_valid(p)) {
			rc = -EINVAL;
			break;
		}
		rc = append(buf, size, &used, "phase %" PRId32 " %" PRId32 " %" PRIu64 " %.17g %" PRIu64,
			    p->index, p->count, p->samples, p->rate, p->regress_samples);
		for (int i = 0; rc == 0 && i < p->count; i++)
			for (int j = 0; rc == 0 && j < p->count; j++)
				rc = append(buf, size, &used, " %.17g", p->x[i][j]);
		for (int i = 0; rc == 0 && i < p->count; i++)
			rc = append(buf, size, &used, " %.17g", p->y[i]);
		if (rc == 0)
			rc = append(buf, size, &used, "\n");
	}
	errno = saved_errno;
	if (rc < 0) {
		buf[0] = '\0';
		return rc;
	}
	return (int)used;
}

/* One token of the line [*at, end): a word of non-blank characters. */
static int next_token(const char **at, const char *end, char *token, size_t size)
{
	const char *p = *at;
	if (p >= end || *p != ' ')
		return -EBADMSG;
	p++;
	const char *start = p;
	while (p < end && *p != ' ')
		p++;
	size_t n = (size_t)(p - start);
	if (n == 0 || n >= size)
		return -EBADMSG;
	memcpy(token, start, n);
	token[n] = '\0';
	*at = p;
	return 0;
}

static int token_u64(const char **at, const char *end, uint64_t *out)
{
	char token[32];
	if (next_token(at, end, token, sizeof token) < 0 || token[0] < '0' || token[0] > '9')
		return -EBADMSG;
	char *stop;
	errno = 0;
	unsigned long long v = strtoull(token, &stop, 10);
	if (*stop != '\0' || errno != 0)
		return -EBADMSG;
	*out = (uint64_t)v;
	return 0;
}

static int token_i32(const char **at, const char *end, int32_t *out)
{
	char token[32];
	if (next_token(at, end, token, sizeof token) < 0)
		return -EBADMSG;
	char *stop;
	errno = 0;
	long v = strtol(token, &stop, 10);
	if (*stop != '\0' || errno != 0 || stop == token || v < INT32_MIN || v > INT32_MAX)
		return -EBADMSG;
	*out = (int32_t)v;
	return 0;
}

static int token_double(const char **at, const char *end, double *out)
{
	char token[64];
	if (next_token(at, end, token, sizeof token) < 0)
		return -EBADMSG;
	char *stop;
	errno = 0;
	double v = strtod(token, &stop);
	if (*stop != '\0' || stop == token || errno == ERANGE || !isfinite(v))
		return -EBADMSG;
	*out = v;
	return 0;
}

static int parse_phase(const char *line, const char *end, struct manners_saved_phase *p)
{
	static const char word[] = "phase";
	if ((size_t)(end - line) < sizeof word - 1 || memcmp(line, word, sizeof word - 1) != 0)
		return -EBADMSG;
	const char *at = line + sizeof word - 1;
	memset(p, 0, sizeof *p);
	if (token_i32(&at, end, &p->index) < 0 || token_i32(&at, end, &p->count) < 0 ||
	    p->count < 1 || p->count > MANNERS_REGRESS_MAX ||
	    token_u64(&at, end, &p->samples) < 0 || token_double(&at, end, &p->rate) < 0 ||
	    token_u64(&at, end, &p->regress_samples) < 0)
		return -EBADMSG;
	for (int i = 0; i < p->count; i++)
		for (int j = 0; j < p->count; j++)
			if (token_double(&at, end, &p->x[i][j]) < 0)
				return -EBADMSG;
	for (int i = 0; i < p->count; i++)
		if (token_double(&at, end, &p->y[i]) < 0)
			return -EBADMSG;
	if (at != end || !manners_state_valid(p))
		return -EBADMSG;
	return 0;
}

static int parse_header(const char *line, const char *end)
{
	size_t magic = strlen(MANNERS_STATE_MAGIC);
	if ((size_t)(end - line) <= magic + 1 || memcmp(line, MANNERS_STATE_MAGIC, magic) != 0 ||
	    line[magic] != ' ')
		return -EBADMSG;
	const char *at = line + magic;
	int32_t version;
	if (token_i32(&at, end, &version) < 0 || at != end)
		return -EBADMSG;
	return version == MANNERS_STATE_VERSION ? 0 : -EPROTONOSUPPORT;
}

/* 1 when the line is a "metric ..." line (its word, then a blank or its end). */
static int is_metric_line(const char *line, const char *end)
{
	static const char word[] = "metric";
	size_t n = (size_t)(end - line);
	return n >= sizeof word - 1 && memcmp(line, word, sizeof word - 1) == 0 &&
	       (n == sizeof word - 1 || line[sizeof word - 1] == ' ');
}

/* "metric NAME": 0 with NAME in name[MANNERS_STATE_METRIC_MAX], or -EBADMSG. */
static int parse_metric(const char *line, const char *end, char *name)
{
	const char *at = line + strlen("metric");
	if (next_token(&at, end, name, MANNERS_STATE_METRIC_MAX) < 0 || at != end ||
	    !manners_state_metric_valid(name))
		return -EBADMSG;
	return 0;
}

int manners_state_parse(const char *text, size_t length, struct manners_saved_phase *phases,
			size_t capacity, size_t *count)
{
	return manners_state_parse_metric(text, length, NULL, phases, capacity, count);
}

int manners_state_parse_metric(const char *text, size_t length, const char *metric,
			       struct manners_saved_phase *phases, size_t capacity, size_t *count)
{
	if (text == NULL || count == NULL || (phases == NULL && capacity > 0))
		return -EINVAL;
	int saved_errno = errno, rc = 0;
	size_t n = 0;
	char found[MANNERS_STATE_METRIC_MAX] = "";
	int metric_lines = 0;
	const char *at = text, *stop = text + length;
	for (int line_number = 0; at < stop && rc == 0; line_number++) {
		const char *end = memchr(at, '\n', (size_t)(stop - at));
		if (end == NULL) { /* the writer always ends its last line */
			rc = -EBADMSG;
			break;
		}
		if (memchr(at, '\0', (size_t)(end - at)) != NULL)
			rc = -EBADMSG;
		else if (line_number == 0)
			rc = parse_header(at, end);
		else if (end == at || at[0] == '#')
			; /* blank or comment */
		else if (is_metric_line(at, end))
			rc = ++metric_lines > 1 ? -EBADMSG : parse_metric(at, end, found);
		else if (n >= capacity)
			rc = -ENOSPC;
		else if ((rc = parse_phase(at, end, &phases[n])) == 0) {
			for (size_t k = 0; k < n; k++)
				if (phases[k].index == phases[n].index)
					rc = -EBADMSG;
			n++;
		}
		at = end + 1;
	}
	if (rc == 0 && length == 0)
		rc = -EBADMSG; /* no header */
	/* Well formed, but of another metric: not ours to load (a target in
	 * one unit is meaningless in another). */
	if (rc == 0 && strcmp(found, metric != NULL ? metric : "") != 0)
		rc = -EMEDIUMTYPE;
	errno = saved_errno;
	*count = rc == 0 ? n : 0;
	return rc;
}
