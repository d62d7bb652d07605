/* Description: connects to HOST PORT over TCP and sends 64 KiB blocks of a fixed pattern as fast as it can for SECONDS, then prints the bytes sent; starts sending within a millisecond of exec (a Python sender takes ~50 ms to start), which is what a sample taken early in a job sees. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s HOST PORT SECONDS\n", argv[0]);
		return 2;
	}
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1)
		return fprintf(stderr, "bad HOST %s\n", argv[1]), 2;
	double seconds = atof(argv[3]);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
		return perror("connect"), 1;
	static char block[65536];
	for (size_t i = 0; i < sizeof block; i++)
		block[i] = (char)('a' + i % 26);
	unsigned long long sent = 0;
	double end = now() + seconds;
	while (now() < end) {
		ssize_t n = send(fd, block, sizeof block, 0);
		if (n < 0)
			return perror("send"), 1;
		sent += (unsigned long long)n;
	}
	close(fd);
	printf("%llu\n", sent);
	return 0;
}
