/*
 * tool_exec.c - PATH search and the static/setuid check (see tool_exec.h).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tool/tool_exec.h"
#include "tool/tool_msg.h"

static int check_candidate(const char *path, int *err)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		*err = errno;
		return EXIT_NOT_FOUND;
	}
	if (S_ISDIR(st.st_mode)) {
		*err = EISDIR;
		return EXIT_CANNOT_EXEC;
	}
	if (access(path, X_OK) != 0) {
		*err = errno;
		return EXIT_CANNOT_EXEC;
	}
	return 0;
}

int program_find(const char *name, char *buf, size_t len, int *err)
{
	if (!*name) {
		*err = ENOENT;
		return EXIT_NOT_FOUND;
	}
	if (strchr(name, '/')) {
		snprintf(buf, len, "%s", name);
		return check_candidate(buf, err);
	}
	/* execvp's search: PATH, or glibc's default when PATH is unset. */
	const char *path = getenv("PATH");
	if (!path)
		path = "/bin:/usr/bin";
	int result = EXIT_NOT_FOUND;
	*err = ENOENT;
	for (const char *p = path;; p = strchr(p, ':') + 1) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		snprintf(buf, len, "%.*s%s%s", (int)n, p, n ? "/" : "", name);
		int e, rc = check_candidate(buf, &e);
		if (rc == 0)
			return 0;
		if (rc == EXIT_CANNOT_EXEC && result == EXIT_NOT_FOUND) {
			/* Remember it, as execvp reports EACCES when it found
			 * something it could not run and nothing better. */
			result = rc;
			*err = e;
		}
		if (!end)
			break;
	}
	return result;
}

/* ELF: static when no program header is PT_INTERP. */
static enum program_reach elf_reach(int fd)
{
	unsigned char ident[EI_NIDENT];
	if (pread(fd, ident, sizeof ident, 0) != (ssize_t)sizeof ident ||
	    memcmp(ident, ELFMAG, SELFMAG) != 0)
		return PROGRAM_UNKNOWN;
	uint64_t phoff;
	unsigned phnum, phentsize;
	if (ident[EI_CLASS] == ELFCLASS64) {
		Elf64_Ehdr eh;
		if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh)
			return PROGRAM_UNKNOWN;
		phoff = eh.e_phoff, phnum = eh.e_phnum, phentsize = eh.e_phentsize;
	} else if (ident[EI_CLASS] == ELFCLASS32) {
		Elf32_Ehdr eh;
		if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh)
			return PROGRAM_UNKNOWN;
		phoff = eh.e_phoff, phnum = eh.e_phnum, phentsize = eh.e_phentsize;
	} else {
		return PROGRAM_UNKNOWN;
	}
	for (unsigned i = 0; i < phnum && i < 4096; i++) {
		uint32_t type;
		if (pread(fd, &type, sizeof type, (off_t)(phoff + (uint64_t)i * phentsize)) !=
		    (ssize_t)sizeof type)
			return PROGRAM_UNKNOWN;
		if (type == PT_INTERP)
			return ident[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)
				       ? PROGRAM_PRELOADABLE : PROGRAM_OTHER_CLASS;
	}
	return PROGRAM_STATIC;
}

enum program_reach program_reach(const char *path, char *why, size_t len)
{
	char interp[PATH_MAX];
	snprintf(why, len, "%s", path);
	for (int depth = 0; depth < 2; depth++) {
		struct stat st;
		int fd = open(why, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return PROGRAM_UNKNOWN;
		if (fstat(fd, &st) != 0) {
			close(fd);
			return PROGRAM_UNKNOWN;
		}
		/* The loader runs setuid/setgid programs in secure mode
		 * (AT_SECURE) and then ignores LD_PRELOAD paths with '/'. */
		if (((st.st_mode & S_ISUID) && st.st_uid != geteuid()) ||
		    ((st.st_mode & S_ISGID) && st.st_gid != getegid())) {
			close(fd);
			return PROGRAM_SECURE;
		}
		char head[PATH_MAX];
		ssize_t n = pread(fd, head, sizeof head - 1, 0);
		if (n >= 2 && head[0] == '#' && head[1] == '!') {
			close(fd);
			head[n] = '\0';
			char *p = head + 2;
			while (*p == ' ' || *p == '\t')
				p++;
			size_t k = strcspn(p, " \t\n");
			p[k] = '\0';
			snprintf(interp, sizeof interp, "%s", p);
			snprintf(why, len, "%s", interp);
			continue;
		}
		enum program_reach reach = elf_reach(fd);
		close(fd);
		return reach;
	}
	return PROGRAM_UNKNOWN;
}

char **program_sh_argv(const char *path, char *const argv[])
{
	size_t n = 0;
	while (argv[n])
		n++;
	char **sh_argv = calloc(n + 2, sizeof *sh_argv);
	if (!sh_argv)
		return NULL;
	sh_argv[0] = "/bin/sh";
	sh_argv[1] = (char *)path;
	for (size_t i = 1; i < n; i++)
		sh_argv[i + 1] = argv[i];
	return sh_argv;
}

int program_exec(const char *path, char *const argv[])
{
	execv(path, argv);
	int e = errno;
	char **sh_argv;
	if (e == ENOEXEC && (sh_argv = program_sh_argv(path, argv))) {
		execv("/bin/sh", sh_argv);
		e = errno;
		free(sh_argv);
	}
	return e;
}
