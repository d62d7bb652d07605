/* Description: a TCP sender whose sends the agent never sees: connects to 127.0.0.1:PORT and sends BYTES with io_uring (IORING_OP_SEND, raw system calls, one 64 KiB send in flight, waiting in io_uring_enter); prints the bytes sent; exits 77 when io_uring is unavailable (ENOSYS, or EPERM under kernel.io_uring_disabled). */
#include <errno.h>
#include <arpa/inet.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s PORT BYTES\n", argv[0]);
		return 2;
	}
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s < 0 || connect(s, (void *)&to, sizeof to)) {
		perror("connect");
		return 1;
	}
	long long left = atoll(argv[2]);
	struct io_uring_params p; memset(&p, 0, sizeof p);
	int fd = syscall(__NR_io_uring_setup, 4, &p);
	if (fd < 0) {
		perror("io_uring_setup");
		return errno == ENOSYS || errno == EPERM ? 77 : 1;
	}
	char *sq = mmap(0, p.sq_off.array + p.sq_entries * 4, PROT_READ | PROT_WRITE, MAP_SHARED, fd, IORING_OFF_SQ_RING);
	char *cq = mmap(0, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe), PROT_READ | PROT_WRITE, MAP_SHARED, fd, IORING_OFF_CQ_RING);
	struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof *sqes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, IORING_OFF_SQES);
	unsigned *sq_tail = (unsigned *)(sq + p.sq_off.tail), *sq_array = (unsigned *)(sq + p.sq_off.array);
	unsigned *cq_head = (unsigned *)(cq + p.cq_off.head), *cq_tail = (unsigned *)(cq + p.cq_off.tail);
	struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	static char buf[65536]; memset(buf, 'u', sizeof buf);
	long long sent = 0;
	while (sent < left) {
		unsigned t = *sq_tail, i = t & (p.sq_entries - 1);
		memset(&sqes[i], 0, sizeof sqes[i]);
		sqes[i].opcode = IORING_OP_SEND; sqes[i].fd = s; sqes[i].addr = (unsigned long)buf;
		sqes[i].len = (unsigned)(left - sent < (long long)sizeof buf ? left - sent : (long long)sizeof buf);
		sq_array[i] = i;
		__atomic_store_n(sq_tail, t + 1, __ATOMIC_RELEASE);
		/* Submit it and wait for its completion: the thread sleeps
		 * in io_uring_enter while the kernel sends. */
		if (syscall(__NR_io_uring_enter, fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) {
			perror("io_uring_enter");
			return 1;
		}
		unsigned h = *cq_head;
		while (h != __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE)) {
			int res = cqes[h & (p.cq_entries - 1)].res;
			if (res < 0) {
				fprintf(stderr, "send: %s\n", strerror(-res));
				return 1;
			}
			sent += res;
			h++;
		}
		__atomic_store_n(cq_head, h, __ATOMIC_RELEASE);
	}
	close(s);
	printf("%lld\n", sent);
	return 0;
}
