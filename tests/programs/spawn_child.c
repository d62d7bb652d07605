/* Description: children that share the parent's memory (vfork, clone CLONE_VM) redirect and close fds before exec (issue #8 item 3). */
/*
 * Usage: spawn_child MODE FILE COUNT
 * Opens FILE (a disk file) and reads a little of it, then COUNT times
 * starts /bin/true the MODE way, the child first doing what Python's
 * subprocess and shells do between fork and exec: dup2(FILE, 0),
 * dup2(FILE, 1), close every fd from 3 (close_range) - in the child only.
 *   vfork        vfork(), child: dup2, dup2, close_range, execv
 *   vfork-exit   vfork(), child: dup2, dup2, close_range, _exit
 *   clone-vm     clone(CLONE_VM | CLONE_VFORK), child function does the same
 *   posix_spawn  posix_spawn with adddup2 file actions
 *   fork         fork(), for comparison
 * Then, as the parent, with its own stdin and stdout (pipes):
 *   - prints how many fds it has open, before and after the spawns;
 *   - reads stdin once with read(0, buf, 1 MiB) and prints what came back
 *     (the writer puts 65536 bytes there and waits for our answer);
 *   - writes 8 MiB to stdout in 64 KiB pieces and prints, on stderr, the
 *     seconds it took.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static int file_fd;
static char *const true_argv[] = { "/bin/true", NULL };

static int count_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n - 1; /* the directory's own fd */
}

static void child_redirect(void)
{
	dup2(file_fd, 0);
	dup2(file_fd, 1);
	close_range(3, ~0u, 0);
}

static int clone_child(void *arg)
{
	(void)arg;
	child_redirect();
	execv(true_argv[0], true_argv);
	_exit(127);
}

static pid_t spawn(const char *mode)
{
	pid_t pid = -1;
	if (!strcmp(mode, "vfork") || !strcmp(mode, "vfork-exit")) {
		pid = vfork();
		if (pid == 0) {
			child_redirect();
			if (!strcmp(mode, "vfork"))
				execv(true_argv[0], true_argv);
			_exit(0);
		}
	} else if (!strcmp(mode, "fork")) {
		pid = fork();
		if (pid == 0) {
			child_redirect();
			execv(true_argv[0], true_argv);
			_exit(127);
		}
	} else if (!strcmp(mode, "clone-vm")) {
		static char stack[256 * 1024] __attribute__((aligned(16)));
		pid = clone(clone_child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
	} else if (!strcmp(mode, "posix_spawn")) {
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, file_fd, 0);
		posix_spawn_file_actions_adddup2(&fa, file_fd, 1);
		if (posix_spawn(&pid, true_argv[0], &fa, NULL, true_argv, environ) != 0)
			pid = -1;
		posix_spawn_file_actions_destroy(&fa);
	}
	return pid;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: spawn_child MODE FILE COUNT\n");
		return 2;
	}
	file_fd = open(argv[2], O_RDONLY);
	if (file_fd < 0) {
		perror(argv[2]);
		return 1;
	}
	static char buf[1 << 20];
	if (read(file_fd, buf, 4096) < 0)
		return 1;
	int before = count_fds();
	for (int i = 0; i < atoi(argv[3]); i++) {
		pid_t pid = spawn(argv[1]);
		int status;
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			fprintf(stderr, "spawn %d failed\n", i);
			return 1;
		}
	}
	printf("fds before %d after %d\n", before, count_fds());
	fflush(stdout);
	ssize_t got = read(0, buf, sizeof buf);
	printf("read from stdin %zd\n", got);
	fflush(stdout);
	memset(buf, 'x', 1 << 16);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < 128; i++)
		if (write(1, buf, 1 << 16) != 1 << 16)
			return 1;
	clock_gettime(CLOCK_MONOTONIC, &b);
	fprintf(stderr, "stdout 8 MiB in %.2f s\n",
		(double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
	return 0;
}
