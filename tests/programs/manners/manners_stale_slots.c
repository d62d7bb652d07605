/*
 * manners_stale_slots.c - the turn table full of slots in use by owners
 * no thread can be (pid 0: a table written by something else, or torn),
 * then a testpoint: it must get a slot, not -ENOSPC for as long as the
 * file lives (multiplex.c reclaim_dead()).
 *
 *   MANNERS_SHARE_FILE=FILE manners_stale_slots FILE
 *
 * Prints the second testpoint's return value.
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "discnice/manners.h"
#include "manners/library/multiplex.h"

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	double one = 1.0;
	manners_testpoint(0, 1, &one); /* makes the table */
	manners_leave();
	int fd = open(argv[1], O_RDWR);
	if (fd < 0)
		return 1;
	struct manners_share *share = mmap(NULL, sizeof *share, PROT_READ | PROT_WRITE, MAP_SHARED,
					   fd, 0);
	if (share == MAP_FAILED)
		return 1;
	for (unsigned i = 0; i < MANNERS_SHARE_THREADS; i++) {
		share->owners[i].pid = 0;
		share->owners[i].tid = 12345;
		share->threads[i].state = MANNERS_SHARE_WAITING;
	}
	printf("%d\n", manners_testpoint(0, 1, &one));
	return 0;
}
