/* Description: socket calls an agent may delay - an epoll_pwait2 loop over a non-blocking sender, and blocking sends and receives with SO_SNDTIMEO / SO_RCVTIMEO (issue #12 item 4). */
/*
 * Usage: net_timeo MODE PORT ARG
 *   epoll2 PORT BYTES       connect to 127.0.0.1:PORT, non-blocking, and send
 *                           BYTES of the pattern below in sends
 *                           of 256 KiB, waiting in epoll_pwait2 (EPOLLOUT,
 *                           timeout 5 s) on EAGAIN; prints "CALLS WAITS"
 *   epoll2-inf PORT BYTES   the same with a NULL timeout (no limit)
 *   epoll2-mask PORT BYTES  the same (5 s) under a SIGALRM every 30 ms that
 *                           epoll_pwait2's sigmask blocks: the wait can
 *                           never end with EINTR; prints "CALLS WAITS EINTR"
 *   sndtimeo PORT MS        connect, set SO_SNDTIMEO to MS and send 16 KiB
 *                           blocking sends of the stream for 3 s; prints
 *                           "SENT FULL SHORT EAGAIN MAX_CALL_MS"
 *   sndtimeo-sig PORT MS    the same under a SIGALRM every 30 ms (handler
 *                           with SA_RESTART): -1/EINTR is then a result too,
 *                           counted with the EAGAINs
 *   rcvtimeo PORT MS        connect, set SO_RCVTIMEO to MS and receive with
 *                           blocking recv of 16 KiB until EOF; prints
 *                           "RECEIVED EAGAIN MAX_CALL_MS"; exit 1 if a byte
 *                           is not the pattern's
 *   rcvtimeo-waitall PORT MS  the same with MSG_WAITALL
 * The pattern: byte i of a connection is (i * 7 + i / 251) mod 256.
 * A call that returns -1 with an errno other than EAGAIN ends the program
 * with exit 1 (EINTR too: no signal is sent to it).
 */
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static unsigned char stream_byte(uint64_t i)
{
	return (unsigned char)((i * 7 + i / 251) & 0xff);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int connect_to(int port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
		perror("connect");
		exit(1);
	}
	return s;
}

static void set_timeout(int s, int option, long ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	if (setsockopt(s, SOL_SOCKET, option, &tv, sizeof tv) != 0) {
		perror("setsockopt");
		exit(1);
	}
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* SIGALRM every 30 ms, restarting what the kernel restarts. */
static void start_alarms(void)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	struct itimerval every = { { 0, 30000 }, { 0, 30000 } };
	if (sigaction(SIGALRM, &sa, NULL) != 0 || setitimer(ITIMER_REAL, &every, NULL) != 0) {
		perror("alarm");
		exit(1);
	}
}

static int fcntl_nonblock(int s)
{
	int fl = fcntl(s, F_GETFL);
	return fl < 0 ? -1 : fcntl(s, F_SETFL, fl | O_NONBLOCK);
}

static int epoll_sender(int port, uint64_t bytes, const struct timespec *timeout, bool masked)
{
	unsigned char *data = malloc(bytes ? bytes : 1);
	for (uint64_t i = 0; i < bytes; i++)
		data[i] = stream_byte(i);
	int s = connect_to(port);
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLOUT, .data.fd = s };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) != 0 ||
	    fcntl_nonblock(s) != 0) {
		perror("epoll");
		return 1;
	}
	unsigned long calls = 0, waits = 0, interrupted = 0;
	uint64_t done = 0;
	sigset_t during, *mask = NULL;
	if (masked) {
		sigemptyset(&during);
		sigaddset(&during, SIGALRM);
		mask = &during;
		start_alarms();
	}
	while (done < bytes) {
		size_t n = bytes - done < (256u << 10) ? bytes - done : 256u << 10;
		ssize_t r = send(s, data + done, n, 0);
		if (r >= 0) {
			calls++;
			done += (uint64_t)r;
			continue;
		}
		if (errno != EAGAIN) {
			perror("send");
			return 1;
		}
		waits++;
		struct epoll_event got;
		if (epoll_pwait2(ep, &got, 1, timeout, mask) >= 0)
			continue;
		if (errno != EINTR) {
			perror("epoll_pwait2");
			return 1;
		}
		interrupted++;
	}
	close(s);
	if (masked)
		printf("%lu %lu %lu\n", calls, waits, interrupted);
	else
		printf("%lu %lu\n", calls, waits);
	return 0;
}

static int timed_sender(int port, long ms, bool signals)
{
	enum { CHUNK = 16 << 10 };
	int s = connect_to(port);
	set_timeout(s, SO_SNDTIMEO, ms);
	unsigned char buf[CHUNK];
	uint64_t sent = 0;
	unsigned long full = 0, shorts = 0, eagain = 0;
	double start = now_ms(), longest = 0;
	if (signals)
		start_alarms();
	while (now_ms() - start < 3000) {
		for (unsigned i = 0; i < CHUNK; i++)
			buf[i] = stream_byte(sent + i);
		double t = now_ms();
		ssize_t r = send(s, buf, CHUNK, 0);
		double took = now_ms() - t;
		longest = took > longest ? took : longest;
		if (r < 0 && errno != EAGAIN && !(signals && errno == EINTR)) {
			perror("send");
			return 1;
		}
		if (r < 0)
			eagain++;
		else if (r < CHUNK)
			shorts++;
		else
			full++;
		sent += r > 0 ? (uint64_t)r : 0;
	}
	close(s);
	printf("%llu %lu %lu %lu %.0f\n", (unsigned long long)sent, full, shorts, eagain, longest);
	return 0;
}

static int timed_receiver(int port, long ms, int flags)
{
	int s = connect_to(port);
	set_timeout(s, SO_RCVTIMEO, ms);
	unsigned char buf[16 << 10];
	uint64_t got = 0;
	unsigned long eagain = 0;
	double longest = 0;
	for (;;) {
		double t = now_ms();
		ssize_t r = recv(s, buf, sizeof buf, flags);
		double took = now_ms() - t;
		longest = took > longest ? took : longest;
		if (r < 0 && errno == EAGAIN) {
			eagain++;
			continue;
		}
		if (r < 0) {
			perror("recv");
			return 1;
		}
		if (r == 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != stream_byte(got + (uint64_t)i)) {
				fprintf(stderr, "byte %llu differs\n", (unsigned long long)(got + (uint64_t)i));
				return 1;
			}
		got += (uint64_t)r;
	}
	close(s);
	printf("%llu %lu %.0f\n", (unsigned long long)got, eagain, longest);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: net_timeo epoll2|epoll2-inf|epoll2-mask|sndtimeo|sndtimeo-sig|rcvtimeo|rcvtimeo-waitall PORT ARG\n");
		return 2;
	}
	int port = atoi(argv[2]);
	long arg = atol(argv[3]);
	struct timespec five = { 5, 0 };
	if (!strcmp(argv[1], "epoll2"))
		return epoll_sender(port, (uint64_t)arg, &five, false);
	if (!strcmp(argv[1], "epoll2-inf"))
		return epoll_sender(port, (uint64_t)arg, NULL, false);
	if (!strcmp(argv[1], "epoll2-mask"))
		return epoll_sender(port, (uint64_t)arg, &five, true);
	if (!strcmp(argv[1], "sndtimeo"))
		return timed_sender(port, arg, false);
	if (!strcmp(argv[1], "sndtimeo-sig"))
		return timed_sender(port, arg, true);
	if (!strcmp(argv[1], "rcvtimeo"))
		return timed_receiver(port, arg, 0);
	if (!strcmp(argv[1], "rcvtimeo-waitall"))
		return timed_receiver(port, arg, MSG_WAITALL);
	fprintf(stderr, "net_timeo: unknown mode %s\n", argv[1]);
	return 2;
}
