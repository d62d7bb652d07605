/* Description: a blocking send the peer resets mid-way, and one on a socket with an error queue: the kernel's results. */
/*
 * Usage: net_reset write|recv|timestamps
 * A child accepts on loopback and reads 1 MB; the parent, with SIGPIPE at
 * its default action, writes 10 MB in one write().
 *   write: the child then closes with SO_LINGER 0 (a reset); the parent
 *     writes again.  Prints "first: partial" and "second: ECONNRESET", exit
 *     0, as without discnice.  Under a send cap the write is cut into
 *     pieces; a piece that met the reset took the socket's error, and the
 *     second write got EPIPE and SIGPIPE: killed, exit 141.
 *   recv: the child writes "BYE" before its reset; the parent then reads:
 *     "BYE", then ECONNRESET - queued data comes before the error.
 *   timestamps: SO_TIMESTAMPING (TX software) on the parent's socket, whose
 *     error queue then holds a timestamp after each send (EPOLLERR); the
 *     child reads everything: the write returns all 10 MB.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/net_tstamp.h>
#include <stdbool.h>
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

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "write";
	bool reads_all = strcmp(mode, "timestamps") == 0;
	int listener = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof addr;
	/* Buffers of a fixed 256 KiB (the kernel doubles it), not autotuned:
	 * loopback's can grow to tcp_wmem's and tcp_rmem's maxima (4 and 32
	 * MiB on this project's VM), and in one unregulated run in CI the 9 MB
	 * the child never reads all fit, so the first write returned all of it. */
	int buffer = 256 * 1024;
	if (listener >= 0)
		setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
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
		while (reads_all || got < READ_BEFORE_RESET) {
			ssize_t r = read(c, b, sizeof b);
			if (r <= 0)
				break;
			got += (size_t)r;
		}
		if (reads_all)
			_exit(0);
		if (strcmp(mode, "recv") == 0) {
			if (write(c, "BYE", 3) != 3)
				_exit(1);
			usleep(300000); /* the sender's pieces meet the reset */
		}
		struct linger reset = { 1, 0 };
		setsockopt(c, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
		close(c);
		_exit(0);
	}
	close(listener);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (!reads_all)
		setsockopt(s, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
	if (connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) {
		perror("connect");
		return 1;
	}
	if (reads_all) {
		int on = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
		if (setsockopt(s, SOL_SOCKET, SO_TIMESTAMPING, &on, sizeof on) != 0) {
			perror("SO_TIMESTAMPING");
			return 1;
		}
	}
	char *buf = calloc(1, TOTAL);
	ssize_t first = write(s, buf, TOTAL);
	int first_err = errno;
	if (reads_all) {
		printf("write: %s\n", first == TOTAL ? "all" : first < 0 ? err_name(first_err)
									: "short");
		close(s);
		waitpid(child, NULL, 0);
		return 0;
	}
	if (first > 0)
		printf("first: partial %s\n", first < TOTAL ? "yes" : "no (all of it)");
	else
		printf("first: %s\n", err_name(first_err));
	fflush(stdout);
	/* The reset has come by now (the child has exited). */
	waitpid(child, NULL, 0);
	errno = 0;
	if (strcmp(mode, "recv") == 0) {
		char got[8] = { 0 };
		ssize_t n = recv(s, got, sizeof got - 1, 0);
		printf("recv: %s\n", n < 0 ? err_name(errno) : got);
		errno = 0;
		n = recv(s, got, sizeof got - 1, 0);
		printf("recv: %s\n", n < 0 ? err_name(errno) : n == 0 ? "end" : got);
		return 0;
	}
	ssize_t second = write(s, buf, 4096);
	printf("second: %s\n", second < 0 ? err_name(errno) : "written");
	return 0;
}
