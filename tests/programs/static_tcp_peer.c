/* Description: a statically linked TCP peer (LD_PRELOAD cannot reach it): connects to PORT on 127.0.0.1 (or the IPv4 ADDRESS given) and either sends BYTES with write() in 64 KiB pieces, or receives until EOF (logging "SECONDS BYTES", CLOCK_MONOTONIC, to LOG after every 64 KiB when given); prints the bytes it moved. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 4 || argc > 6 || (strcmp(argv[1], "send") && strcmp(argv[1], "recv"))) {
		fprintf(stderr, "usage: %s send|recv PORT BYTES [ADDRESS [LOG]]\n", argv[0]);
		return 2;
	}
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	FILE *log = argc == 6 ? fopen(argv[5], "w") : NULL;
	if (argc == 6 && !log) {
		perror(argv[5]);
		return 1;
	}
	if (argc >= 5 && inet_pton(AF_INET, argv[4], &to.sin_addr) != 1) {
		fprintf(stderr, "%s: not an IPv4 address\n", argv[4]);
		return 2;
	}
	if (s < 0 || connect(s, (struct sockaddr *)&to, sizeof to) < 0) {
		perror("connect");
		return 1;
	}
	static char buf[64 * 1024];
	unsigned long long want = strtoull(argv[3], NULL, 10), moved = 0;
	if (!strcmp(argv[1], "send")) {
		memset(buf, 'x', sizeof buf);
		while (moved < want) {
			size_t n = want - moved < sizeof buf ? (size_t)(want - moved) : sizeof buf;
			ssize_t r = write(s, buf, n);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0) {
				perror("write");
				return 1;
			}
			moved += (unsigned long long)r;
		}
		shutdown(s, SHUT_WR);
		/* Wait for the receiver's close: every byte arrived. */
		while (read(s, buf, sizeof buf) > 0)
			;
	} else {
		for (;;) {
			ssize_t r = read(s, buf, sizeof buf);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0) {
				perror("read");
				return 1;
			}
			if (r == 0)
				break;
			unsigned long long before = moved;
			moved += (unsigned long long)r;
			if (log && moved / 65536 != before / 65536) {
				struct timespec now;
				clock_gettime(CLOCK_MONOTONIC, &now);
				fprintf(log, "%lld.%09ld %llu\n", (long long)now.tv_sec, now.tv_nsec, moved);
			}
		}
		if (log)
			fclose(log);
	}
	printf("%llu\n", moved);
	return 0;
}
