/*
 * calibration_file.c - the calibration file on disk (see
 * calibration_file.h; the format is calibration.c's).
 */
#include "graybox/toolbox/calibration_file.h"
#include "graybox/toolbox/microbench.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* 32 entries of ~400 bytes each, with room. */
#define FILE_MAX_BYTES 65536

static int path_join(char *buf, size_t size, const char *a, const char *b)
{
	int n = snprintf(buf, size, "%s%s", a, b);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* $XDG_STATE_HOME/discnice, or $HOME/.local/state/discnice.  *existing
 * (if given) is the length of the part that must exist already: none of
 * XDG_STATE_HOME (the spec: created where missing), all of HOME (a daemon
 * run with HOME=/nonexistent must not create it). */
static int state_dir(char *buf, size_t size, size_t *existing)
{
	if (existing)
		*existing = 0;
	const char *state = getenv("XDG_STATE_HOME");
	if (state && state[0] == '/')   /* the spec: relative paths are invalid */
		return path_join(buf, size, state, "/discnice");
	const char *home = getenv("HOME");
	char pw_buf[16384]; /* ERANGE (a large NSS entry): as no entry */
	struct passwd pw, *found = NULL;
	if (!home || home[0] != '/') {
		/* getpwuid_r: the library's callers may be threaded. */
		if (getpwuid_r(geteuid(), &pw, pw_buf, sizeof pw_buf, &found) != 0)
			found = NULL;
		home = found ? found->pw_dir : NULL;
	}
	if (!home || home[0] != '/')
		return -ENOENT;
	if (existing)
		*existing = strlen(home);
	return path_join(buf, size, home, "/.local/state/discnice");
}

int calibration_file_path(char *buf, size_t size)
{
	int saved = errno;
	char dir[4096];
	int rc = state_dir(dir, sizeof dir, NULL);
	if (rc == 0)
		rc = path_join(buf, size, dir, "/calibration");
	errno = saved;
	return rc;
}

/* mkdir -p for the state directory, 0700, below its first `existing`
 * bytes, which must be there already (-ENOENT, else). */
static int make_dirs(const char *dir, size_t existing)
{
	char path[4096];
	if (path_join(path, sizeof path, dir, "") < 0)
		return -ENAMETOOLONG;
	if (existing) {
		struct stat st;
		path[existing] = '\0';
		if (stat(path, &st) < 0)
			return -errno;
		if (!S_ISDIR(st.st_mode))
			return -ENOTDIR;
		path[existing] = '/';
	}
	for (char *slash = strchr(path + (existing ? existing : 1), '/');;
	     slash = strchr(slash + 1, '/')) {
		if (slash)
			*slash = '\0';
		if (mkdir(path, 0700) == 0)
			chmod(path, 0700); /* whatever the umask: 0277 made it 0500 */
		else if (errno != EEXIST)
			return -errno;
		if (!slash)
			return 0;
		*slash = '/';
	}
}

int calibration_file_load(struct calibration *out, unsigned *bad_line)
{
	int saved = errno;
	char path[4096];
	char *text = NULL;
	int fd = -1, rc;

	out->count = 0;
	if (bad_line)
		*bad_line = 0;
	if ((rc = calibration_file_path(path, sizeof path)) < 0)
		goto out;
	/* O_NONBLOCK: a FIFO put in its place must not hang every reader
	 * (the agent's hosts among them); only a regular file is read. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		goto out;
	}
	text = malloc(FILE_MAX_BYTES);
	if (!text) {
		rc = -ENOMEM;
		goto out;
	}
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fd, text + len, FILE_MAX_BYTES - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == FILE_MAX_BYTES) {
			rc = -EFBIG;
			goto out;
		}
	}
	rc = calibration_parse(text, len, out, bad_line);
out:
	if (fd >= 0)
		close(fd);
	free(text);
	errno = saved;
	return rc;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int calibration_file_save(const struct calibration *cal)
{
	int saved = errno;
	char dir[4096], path[4096], tmp[4200] = "";
	char *text = malloc(FILE_MAX_BYTES);
	int fd = -1, rc;

	if (!text) {
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = calibration_format(cal, text, FILE_MAX_BYTES)) < 0)
		goto out;
	size_t len = (size_t)rc;
	if (!microbench_file_fits(len)) {
		rc = -EFBIG;
		goto out;
	}
	size_t existing;
	if ((rc = state_dir(dir, sizeof dir, &existing)) < 0 || (rc = make_dirs(dir, existing)) < 0 ||
	    (rc = path_join(path, sizeof path, dir, "/calibration")) < 0)
		goto out;
	/* The temporary name is this thread's alone (pid and tid: threads
	 * of one process calibrate at once), in the same directory so that
	 * rename() replaces the file in one step. */
	snprintf(tmp, sizeof tmp, "%s.%d.%d.tmp", path, (int)getpid(), (int)gettid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	/* Readable by its owner whatever the umask (0377 made it 0000). */
	(void)fchmod(fd, 0600);
	if ((rc = write_all(fd, text, len)) < 0)
		goto out;
	/* Data on disk before the name points at it: after a crash the
	 * file is the old one or the new one, never empty. */
	if (fsync(fd) < 0) {
		rc = -errno;
		goto out;
	}
	if (close(fd) < 0) {
		fd = -1;
		rc = -errno;
		goto out;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		rc = -errno;
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (rc < 0 && tmp[0])
		unlink(tmp);
	free(text);
	errno = saved;
	return rc;
}

bool calibration_file_replaceable(int loaded)
{
	/* A newer discnice's file (-EPROTONOSUPPORT): this one cannot read
	 * its entries and must not replace them with its own format.  One
	 * that cannot be read (EACCES, EFBIG, EIO) may hold anything, a
	 * newer discnice's entries too: never replaced unseen. */
	return loaded >= 0 || loaded == -ENOENT || loaded == -EBADMSG || loaded == -EINVAL;
}

static int file_put(const struct calibration_entry *entry, bool replace_malformed)
{
	struct calibration *cal = malloc(sizeof *cal);
	if (!cal)
		return -ENOMEM;
	int loaded = calibration_file_load(cal, NULL);
	if (!calibration_file_replaceable(loaded) ||
	    (!replace_malformed && loaded < 0 && loaded != -ENOENT)) {
		free(cal);
		return loaded;
	}
	if (loaded < 0)
		cal->count = 0;   /* missing, malformed, or no regular file: afresh */
	int rc = calibration_put(cal, entry);
	if (rc == 0)
		rc = calibration_file_save(cal);
	free(cal);
	return rc;
}

int calibration_file_store(const struct calibration_entry *entry)
{
	return file_put(entry, true);
}

int calibration_file_keep(const struct calibration_entry *entry)
{
	return file_put(entry, false);
}

void calibration_file_kernel(char *buf, size_t size)
{
	struct utsname u;
	snprintf(buf, size, "%s", uname(&u) == 0 ? u.release : "-");
}

int calibration_file_lookup(enum calibration_scope scope, uint32_t dev_major, uint32_t dev_minor,
			    struct calibration_entry *out)
{
	struct calibration *cal = malloc(sizeof *cal);
	char kernel[65];
	if (!cal)
		return -ENOMEM;
	int rc = calibration_file_load(cal, NULL);
	if (rc == 0) {
		const struct calibration_entry *e = calibration_find(cal, scope, dev_major, dev_minor);
		if (!e) {
			rc = -ENOENT;
		} else {
			*out = *e;
			calibration_file_kernel(kernel, sizeof kernel);
			if (!calibration_entry_fresh(e, (int64_t)time(NULL), kernel))
				rc = -ESTALE;
		}
	}
	free(cal);
	return rc;
}

void calibration_file_stamp(struct calibration_entry *entry)
{
	int saved = errno;
	entry->measured = (int64_t)time(NULL);
	calibration_file_kernel(entry->kernel, sizeof entry->kernel);
	snprintf(entry->boot_id, sizeof entry->boot_id, "-");
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char buf[sizeof entry->boot_id];
		ssize_t n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			buf[strcspn(buf, "\n \t")] = '\0';
			if (buf[0])
				snprintf(entry->boot_id, sizeof entry->boot_id, "%s", buf);
		}
	}
	errno = saved;
}

int calibration_file_device(const char *path, uint32_t *dev_major, uint32_t *dev_minor,
			    char *name, size_t name_size)
{
	int saved = errno;
	struct stat st;
	char link[64], target[4096];
	if (stat(path, &st) < 0) {
		int rc = -errno;
		errno = saved;
		return rc;
	}
	*dev_major = major(st.st_dev);
	*dev_minor = minor(st.st_dev);
	snprintf(name, name_size, "-");
	snprintf(link, sizeof link, "/sys/dev/block/%u:%u", *dev_major, *dev_minor);
	ssize_t n = readlink(link, target, sizeof target - 1);
	if (n > 0) {
		target[n] = '\0';
		const char *base = strrchr(target, '/');
		base = base ? base + 1 : target;
		if (*base && strlen(base) < name_size && !strpbrk(base, " \t\n="))
			snprintf(name, name_size, "%s", base);
	}
	errno = saved;
	return 0;
}
