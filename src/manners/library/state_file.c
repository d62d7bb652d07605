/*
 * state_file.c - the file that keeps a program's targets across runs
 * (MS Manners §7.1); see state_file.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "manners/library/state_file.h"

/* 64 phases x 8 metrics: ~ 64 x 80 numbers of 25 characters. */
#define STATE_FILE_MAX (256u * 1024u)

uint64_t state_file_hash(const char *text)
{
	uint64_t hash = UINT64_C(0xcbf29ce484222325);
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		hash ^= *p;
		hash *= UINT64_C(0x100000001b3);
	}
	return hash;
}

int state_file_path(const struct manners_settings *settings, char *buf, size_t size)
{
	if (settings->state_file[0] != '\0') {
		int rc = snprintf(buf, size, "%s", settings->state_file);
		return rc < 0 || (size_t)rc >= size ? -ENAMETOOLONG : 0;
	}
	char program[MANNERS_SETTINGS_PATH_MAX];
	if (settings->program[0] != '\0') {
		snprintf(program, sizeof program, "%s", settings->program);
	} else {
		ssize_t n = readlink("/proc/self/exe", program, sizeof program - 1);
		if (n <= 0)
			snprintf(program, sizeof program, "unknown");
		else
			program[n] = '\0';
	}
	return state_file_path_for(settings->state_dir, program, NULL, buf, size);
}

int state_file_path_for(const char *state_dir, const char *program, const char *metric, char *buf,
			size_t size)
{
	int rc;
	int has_metric = metric != NULL && metric[0] != '\0';
	if (program == NULL || (has_metric && !manners_state_metric_valid(metric)))
		return -EINVAL;
	const char *name = strrchr(program, '/');
	name = name ? name + 1 : program;
	if (*name == '\0')
		name = "program";
	char dir[MANNERS_SETTINGS_PATH_MAX];
	const char *state_home = getenv("XDG_STATE_HOME");
	const char *home = getenv("HOME");
	if (state_dir != NULL && state_dir[0] != '\0')
		rc = snprintf(dir, sizeof dir, "%s", state_dir);
	else if (state_home != NULL && state_home[0] == '/')
		rc = snprintf(dir, sizeof dir, "%s/discnice/manners", state_home);
	else if (home != NULL && home[0] == '/')
		rc = snprintf(dir, sizeof dir, "%s/.local/state/discnice/manners", home);
	else
		return -ENOENT;
	if (rc < 0 || (size_t)rc >= sizeof dir)
		return -ENAMETOOLONG;
	rc = snprintf(buf, size, "%s/%.64s-%016llx%s%s.targets", dir, name,
		      (unsigned long long)state_file_hash(program), has_metric ? "." : "",
		      has_metric ? metric : "");
	return rc < 0 || (size_t)rc >= size ? -ENAMETOOLONG : 0;
}

int state_file_load(const char *path, struct manners_saved_phase *phases, size_t capacity,
		    size_t *count)
{
	return state_file_load_metric(path, NULL, phases, capacity, count);
}

int state_file_load_metric(const char *path, const char *metric,
			   struct manners_saved_phase *phases, size_t capacity, size_t *count)
{
	*count = 0;
	/* O_NONBLOCK, and only a regular file is read: a FIFO put in its
	 * place hung the first testpoint (under the library's lock, so every
	 * thread's), benice and run --policy manners. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	int kind = fstat(fd, &st) < 0 ? -errno : S_ISREG(st.st_mode) ? 0
					: S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	if (kind < 0) {
		close(fd);
		return kind;
	}
	char *text = malloc(STATE_FILE_MAX + 1);
	if (text == NULL) {
		close(fd);
		return -ENOMEM;
	}
	size_t length = 0;
	int rc = 0;
	for (;;) {
		ssize_t n = read(fd, text + length, STATE_FILE_MAX + 1 - length);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		length += (size_t)n;
		if (length > STATE_FILE_MAX) {
			rc = -EFBIG;
			break;
		}
	}
	close(fd);
	if (rc == 0)
		rc = manners_state_parse_metric(text, length, metric, phases, capacity, count);
	free(text);
	return rc;
}

/* mkdir of one directory of make_directories(): 0700 whatever the umask
 * (under 0277 it was 0500, and the state file could not be made in it). */
static int make_directory(const char *dir)
{
	if (mkdir(dir, 0700) == 0)
		chmod(dir, 0700);
	else if (errno != EEXIST)
		return -errno;
	return 0;
}

/* mkdir -p, mode 0700 for what it makes. */
static int make_directories(const char *path)
{
	char dir[MANNERS_SETTINGS_PATH_MAX + 64];
	if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
		return -ENAMETOOLONG;
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		int rc = make_directory(dir);
		if (rc < 0)
			return rc;
		*p = '/';
	}
	return make_directory(dir);
}

int state_file_save(const char *path, const struct manners_saved_phase *phases, size_t count)
{
	return state_file_save_metric(path, NULL, phases, count);
}

int state_file_save_metric(const char *path, const char *metric,
			   const struct manners_saved_phase *phases, size_t count)
{
	char directory[MANNERS_SETTINGS_PATH_MAX + 64], temporary[MANNERS_SETTINGS_PATH_MAX + 64];
	if (snprintf(directory, sizeof directory, "%s", path) >= (int)sizeof directory ||
	    snprintf(temporary, sizeof temporary, "%s.tmp.%d", path, (int)getpid()) >=
		    (int)sizeof temporary)
		return -ENAMETOOLONG;
	char *slash = strrchr(directory, '/');
	if (slash != NULL && slash != directory) {
		*slash = '\0';
		int rc = make_directories(directory);
		if (rc < 0)
			return rc;
	}
	char *text = malloc(STATE_FILE_MAX);
	if (text == NULL)
		return -ENOMEM;
	int length = manners_state_format_metric(metric, phases, count, text, STATE_FILE_MAX);
	if (length < 0) {
		free(text);
		return length;
	}
	int rc = 0;
	int fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = -errno;
		free(text);
		return rc;
	}
	/* Readable by its owner whatever the umask (0377 made it 0000, and
	 * the next start could not read its targets). */
	(void)fchmod(fd, 0600);
	for (size_t done = 0; done < (size_t)length;) {
		ssize_t n = write(fd, text + done, (size_t)length - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		done += (size_t)n;
	}
	free(text);
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(temporary, path) != 0)
		rc = -errno;
	if (rc < 0)
		unlink(temporary);
	return rc;
}
