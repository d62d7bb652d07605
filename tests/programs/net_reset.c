/* Description: a blocking send the peer resets mid-way: a partial count, then ECONNRESET, no SIGPIPE. */
/*
 * Usage: net_reset
 * A child accepts on loopback, reads 1 MB, and closes with SO_LINGER 0 (a
 * reset).  The parent, with SIGPIPE at its default action, writes 10 MB
 * in one write(), then writes again.  Prints "first: partial" (or its
 * error) and "second: " with errno's name.  Without discnice: a partial
 * count, then ECONNRESET, exit 0.  Under a send cap the write is cut into
 * pieces; a piece that met the reset took the socket's error, and the
 * second write got EPIPE and SIGPIPE: killed, exit 141.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOTAL 10000000
#define READ_BEFORE_RESET 1000000

static const char *err_name(int e)
{
	switch (e) {
	case ECONNRESET: return "ECONNRESET";
	case EPIPE: return "EPIPE";
	default: return strerror(e);
	}
}

int main(void)
{
	int listener = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof addr;
	if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 ||
	    getsockname(listener, (struct sockaddr *)&addr, &len) != 0 || listen(listener, 1) != 0) {
		perror("listen");
		return 1;
	}
	pid_t child = fork();
	if (child == 0) {
		int c = accept(listener, NULL, NULL);
		static char b[65536];
		size_t got = 0;
		while (got < READ_BEFORE_RESET) {
			ssize_t r = read(c, b, sizeof b);
			if (r <= 0)
				break;
			got += (size_t)r;
		}
		struct linger reset = { 1, 0 };
		setsockopt(c, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
		close(c);
		_exit(0);
	}
	close(listener);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) {
		perror("connect");
		return 1;
	}
	char *buf = calloc(1, TOTAL);
	ssize_t first = write(s, buf, TOTAL);
	int first_err = errno;
	if (first > 0)
		printf("first: partial %s\n", first < TOTAL ? "yes" : "no (all of it)");
	else
		printf("first: %s\n", err_name(first_err));
	fflush(stdout);
	/* The reset has come by now (the child has exited). */
	waitpid(child, NULL, 0);
	errno = 0;
	ssize_t second = write(s, buf, 4096);
	printf("second: %s\n", second < 0 ? err_name(errno) : "written");
	return 0;
}
