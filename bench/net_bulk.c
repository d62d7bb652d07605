/*
 * net_bulk - the two ends of a bulk TCP or UDP transfer for bench/net_trickle.py.
 *
 * The regulated job is one end (send, fetch, udp-send), run under discnice
 * or trickle; the other end (sink, source, udp-sink) runs plain in the
 * bench and is the oracle: it counts the bytes it received, or times the
 * bytes the job received, with its own clock (CLOCK_MONOTONIC).  Written in
 * C so that the oracle is never the bottleneck of a loopback transfer at
 * several GB/s (the overhead runs) and the job's per-call cost is the
 * kernel's plus the interposer's, not an interpreter's.
 *
 *   send HOST PORT BYTES CHUNK        connect, send() BYTES in CHUNK calls, close
 *   fetch HOST PORT CHUNK             connect, recv() CHUNK at a time until EOF;
 *                                     prints "BYTES"
 *   sink HOST CONNS                   listen on HOST (port printed on line 1), accept
 *                                     CONNS connections one after another, read each
 *                                     to EOF; prints "BYTES FIRST_READ SECONDS" where
 *                                     SECONDS runs from the first byte to the last
 *   source HOST BYTES CHUNK           listen (port printed), accept one, send BYTES,
 *                                     shut down writing and wait for the peer's EOF:
 *                                     the peer has read everything; prints
 *                                     "BYTES SECONDS" from accept to the peer's close
 *   udp-sink HOST                     bind (port printed), read datagrams until an
 *                                     empty one or 5 s of silence; prints like sink
 *   udp-send HOST PORT BYTES SIZE     BYTES in datagrams of SIZE, then an empty one
 *   send-threads HOST PORT BYTES CHUNK N   N threads, a connection each, BYTES/N each
 *   send-fork HOST PORT BYTES CHUNK N      the same from N forked children
 *   send-epoll HOST PORT BYTES CHUNK  a non-blocking socket, send() until EAGAIN,
 *                                     then epoll_wait(EPOLLOUT)
 *   serve-epoll HOST                  listen (port printed), accept one, read it
 *                                     non-blocking under edge-triggered epoll to EOF;
 *                                     prints "BYTES"
 *
 * Sockets are made with socket(AF_*, SOCK_STREAM, 0), no SOCK_CLOEXEC or
 * SOCK_NONBLOCK in the type: trickle recognises only that exact type.
 *
 * HOST is a numeric IPv4 or IPv6 address.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "net_bulk: %s: %s\n", what, strerror(errno));
	exit(1);
}

static struct addrinfo *resolve(const char *host, const char *port, int type)
{
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE,
				 .ai_socktype = type};
	struct addrinfo *ai;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		fprintf(stderr, "net_bulk: %s: %s\n", host, gai_strerror(rc));
		exit(2);
	}
	return ai;
}

static int open_connected(const char *host, const char *port, int type)
{
	struct addrinfo *ai = resolve(host, port, type);
	int fd = socket(ai->ai_family, ai->ai_socktype, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		die("connect");
	freeaddrinfo(ai);
	return fd;
}

/* Bind to HOST on any free port and print the port (the bench reads it). */
static int open_bound(const char *host, int type)
{
	struct addrinfo *ai = resolve(host, "0", type);
	int fd = socket(ai->ai_family, ai->ai_socktype, 0);
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		die("bind");
	freeaddrinfo(ai);
	if (type == SOCK_STREAM && listen(fd, 64) < 0)
		die("listen");
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	getsockname(fd, (struct sockaddr *)&ss, &len);
	unsigned port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
						 : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	printf("%u\n", port);
	fflush(stdout);
	return fd;
}

static char *buffer(size_t n)
{
	char *b = malloc(n);
	if (!b)
		die("malloc");
	for (size_t i = 0; i < n; i++)
		b[i] = (char)(i * 131u + 7u);
	return b;
}

static void send_all(int fd, long long left, size_t chunk)
{
	char *b = buffer(chunk);
	while (left > 0) {
		ssize_t n = send(fd, b, left < (long long)chunk ? (size_t)left : chunk, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("send");
		}
		left -= n;
	}
	free(b);
}

struct sender {
	const char *host, *port;
	long long bytes;
	size_t chunk;
};

static void *sender_thread(void *arg)
{
	struct sender *s = arg;
	int fd = open_connected(s->host, s->port, SOCK_STREAM);
	send_all(fd, s->bytes, s->chunk);
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: see the top of bench/net_bulk.c\n");
		return 2;
	}
	const char *mode = argv[1];
	if (!strcmp(mode, "send") && argc == 6) {
		long long left = atoll(argv[4]);
		size_t chunk = (size_t)atol(argv[5]);
		char *b = buffer(chunk);
		int fd = open_connected(argv[2], argv[3], SOCK_STREAM);
		while (left > 0) {
			ssize_t n = send(fd, b, left < (long long)chunk ? (size_t)left : chunk, 0);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				die("send");
			}
			left -= n;
		}
		close(fd);
		return 0;
	}
	if (!strcmp(mode, "fetch") && argc == 5) {
		size_t chunk = (size_t)atol(argv[4]);
		char *b = buffer(chunk);
		int fd = open_connected(argv[2], argv[3], SOCK_STREAM);
		long long total = 0;
		for (;;) {
			ssize_t n = recv(fd, b, chunk, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				die("recv");
			if (n == 0)
				break;
			total += n;
		}
		close(fd);
		printf("%lld\n", total);
		return 0;
	}
	if (!strcmp(mode, "sink") && argc == 4) {
		int ls = open_bound(argv[2], SOCK_STREAM);
		int conns = atoi(argv[3]);
		char *b = buffer(1 << 20);
		long long total = 0, first_read = -1;
		double first = 0, last = 0;
		for (int i = 0; i < conns; i++) {
			int fd = accept(ls, NULL, NULL);
			if (fd < 0)
				die("accept");
			for (;;) {
				ssize_t n = recv(fd, b, 1 << 20, 0);
				if (n < 0 && errno == EINTR)
					continue;
				if (n <= 0)
					break;
				last = now();
				if (first_read < 0) {
					first = last;
					first_read = n;
				}
				total += n;
			}
			close(fd);
		}
		printf("%lld %lld %.6f\n", total, first_read, last - first);
		return 0;
	}
	if (!strcmp(mode, "source") && argc == 5) {
		int ls = open_bound(argv[2], SOCK_STREAM);
		long long left = atoll(argv[3]), sent = 0;
		size_t chunk = (size_t)atol(argv[4]);
		char *b = buffer(chunk);
		int fd = accept(ls, NULL, NULL);
		if (fd < 0)
			die("accept");
		double t0 = now();
		while (left > 0) {
			ssize_t n = send(fd, b, left < (long long)chunk ? (size_t)left : chunk, 0);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				die("send");
			}
			left -= n;
			sent += n;
		}
		shutdown(fd, SHUT_WR);
		while (recv(fd, b, chunk, 0) > 0) /* the peer's EOF: it read all */
			;
		printf("%lld %.6f\n", sent, now() - t0);
		return 0;
	}
	if (!strcmp(mode, "udp-sink") && argc == 3) {
		int fd = open_bound(argv[2], SOCK_DGRAM);
		int rcvbuf = 8 << 20;
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
		struct timeval tv = {.tv_sec = 5};
		char *b = buffer(65536);
		long long total = 0, first_read = -1;
		double first = 0, last = 0;
		for (;;) {
			ssize_t n = recv(fd, b, 65536, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			last = now();
			if (first_read < 0) {
				first = last;
				first_read = n;
				/* silence after the first datagram ends the count */
				setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
			}
			total += n;
		}
		printf("%lld %lld %.6f\n", total, first_read, last - first);
		return 0;
	}
	if (!strcmp(mode, "udp-send") && argc == 6) {
		long long left = atoll(argv[4]);
		size_t size = (size_t)atol(argv[5]);
		char *b = buffer(size);
		int fd = open_connected(argv[2], argv[3], SOCK_DGRAM);
		while (left > 0) {
			size_t n = left < (long long)size ? (size_t)left : size;
			if (send(fd, b, n, 0) < 0) {
				if (errno == EINTR || errno == ENOBUFS || errno == ECONNREFUSED)
					continue;
				die("send");
			}
			left -= (long long)n;
		}
		for (int i = 0; i < 3; i++) /* the end mark; a lost one is covered by the timeout */
			send(fd, b, 0, 0);
		close(fd);
		return 0;
	}
	if ((!strcmp(mode, "send-threads") || !strcmp(mode, "send-fork")) && argc == 7) {
		int n = atoi(argv[6]);
		struct sender s = {argv[2], argv[3], atoll(argv[4]) / n, (size_t)atol(argv[5])};
		pthread_t t[64];
		if (n < 1 || n > 64)
			return 2;
		for (int i = 0; i < n; i++) {
			if (mode[5] == 't') {
				if (pthread_create(&t[i], NULL, sender_thread, &s))
					die("pthread_create");
			} else if (fork() == 0) {
				sender_thread(&s);
				_exit(0);
			}
		}
		int failed = 0;
		for (int i = 0; i < n; i++) {
			if (mode[5] == 't') {
				pthread_join(t[i], NULL);
			} else {
				int status;
				wait(&status);
				failed |= status != 0;
			}
		}
		return failed;
	}
	if (!strcmp(mode, "send-epoll") && argc == 6) {
		long long left = atoll(argv[4]);
		size_t chunk = (size_t)atol(argv[5]);
		char *b = buffer(chunk);
		int fd = open_connected(argv[2], argv[3], SOCK_STREAM);
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		int ep = epoll_create1(0);
		struct epoll_event ev = {.events = EPOLLOUT, .data.fd = fd};
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
		long long waits = 0;
		while (left > 0) {
			ssize_t n = send(fd, b, left < (long long)chunk ? (size_t)left : chunk, 0);
			if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
				waits++;
				epoll_wait(ep, &ev, 1, 5000);
				continue;
			}
			if (n < 0)
				die("send");
			left -= n;
		}
		close(fd);
		fprintf(stderr, "net_bulk: %lld waits\n", waits);
		return 0;
	}
	if (!strcmp(mode, "serve-epoll") && argc == 3) {
		int ls = open_bound(argv[2], SOCK_STREAM);
		int fd = accept(ls, NULL, NULL);
		if (fd < 0)
			die("accept");
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		int ep = epoll_create1(0);
		struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = fd};
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
		char *b = buffer(1 << 20);
		long long total = 0;
		for (int done = 0; !done;) {
			epoll_wait(ep, &ev, 1, 5000);
			for (;;) { /* edge-triggered: read until the kernel says EAGAIN */
				ssize_t n = recv(fd, b, 1 << 20, 0);
				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0 && errno == EAGAIN)
					break;
				if (n <= 0) {
					done = 1;
					break;
				}
				total += n;
			}
		}
		close(fd);
		printf("%lld\n", total);
		return 0;
	}
	fprintf(stderr, "net_bulk: bad arguments (see bench/net_bulk.c)\n");
	return 2;
}
