/*
 * Description: takes the lock of libmanners' per-user turn table
 * ($MANNERS_SHARE_FILE) and exits holding it, as a process killed inside
 * the library would; the next process must still get in (the lock is
 * robust: EOWNERDEAD).  The lock's place, offset 24, is the layout of
 * src/manners/library/multiplex.h (tests/unit/test_manners_share_layout.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(void)
{
	const char *path = getenv("MANNERS_SHARE_FILE");
	int fd = path ? open(path, O_RDWR | O_CLOEXEC) : -1;
	if (fd < 0) {
		perror("MANNERS_SHARE_FILE");
		return 1;
	}
	off_t size = lseek(fd, 0, SEEK_END);
	char *base = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	int rc = pthread_mutex_lock((pthread_mutex_t *)(void *)(base + 24));
	printf("locked %d\n", rc);
	fflush(stdout);
	_exit(0); /* holding it */
}
