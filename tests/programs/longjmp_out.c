/* Description: a SIGALRM handler leaves a send() or read() by siglongjmp(), as a timeout does; then the program goes on (closes the socket; reads the rest of the file). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static sigjmp_buf timeout;

static void on_alarm(int sig)
{
	(void)sig;
	siglongjmp(timeout, 1);
}

static void alarm_in(long ms)
{
	struct itimerval it = { { 0, 0 }, { ms / 1000, (ms % 1000) * 1000 } };
	setitimer(ITIMER_REAL, &it, NULL);
}

/* The peer reads until EOF; "eof", or "hung" after 5 s without a byte. */
static void peer(int listener)
{
	int c = accept(listener, NULL, NULL);
	char buf[65536];
	for (;;) {
		struct pollfd p = { c, POLLIN, 0 };
		if (poll(&p, 1, 5000) <= 0) {
			printf("hung\n");
			fflush(stdout);
			_exit(0);
		}
		ssize_t n = read(c, buf, sizeof buf);
		if (n <= 0) {
			printf("%s\n", n == 0 ? "eof" : "error");
			fflush(stdout);
			_exit(0);
		}
	}
}

static int net(void)
{
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) != 0)
		return 1;
	fflush(stdout);
	pid_t child = fork();
	if (child == 0)
		peer(l);
	close(l);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(s, (struct sockaddr *)&a, sizeof a) != 0)
		return 1;
	size_t size = 4u << 20;
	char *buf = calloc(1, size);
	alarm_in(500);
	if (sigsetjmp(timeout, 1) == 0)
		for (size_t done = 0; done < size;) {
			ssize_t n = send(s, buf + done, size - done, 0);
			if (n <= 0)
				break;
			done += (size_t)n;
		}
	alarm_in(0);
	close(s); /* the peer must see the end of the stream now */
	int status;
	waitpid(child, &status, 0);
	free(buf);
	return 0;
}

static int disk(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 1;
	static char buf[1 << 20];
	volatile size_t total = 0;
	alarm_in(300);
	if (sigsetjmp(timeout, 1) == 0)
		for (;;) {
			ssize_t n = read(fd, buf, sizeof buf);
			if (n <= 0)
				break;
			total += (size_t)n;
		}
	alarm_in(0);
	for (;;) { /* the rest, after the jump */
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0)
			break;
		total += (size_t)n;
	}
	close(fd);
	printf("read to the end\n");
	return 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	if (argc == 2 && strcmp(argv[1], "net") == 0)
		return net();
	if (argc == 3 && strcmp(argv[1], "disk") == 0)
		return disk(argv[2]);
	fprintf(stderr, "usage: longjmp_out net | disk FILE\n");
	return 2;
}
