/*
 * net_delay.c - the scavenger's eyes: the queueing delay the job's own TCP
 * connections see, fed to the class's controller (src/policy/scavenger.c,
 * segment.h dn_scavenger; issue #12 item 6, RFC 6817's idea at user level).
 *
 * The kernel keeps, per TCP socket, a smoothed RTT (tcpi_rtt, µs; gain
 * 1/8 per ACK, tcp_rtt_estimator()) and the least RTT of the last
 * tcp_min_rtt_wlen seconds (tcpi_min_rtt, µs; 300 s by default,
 * tcp_update_rtt_min()).  Their difference is the queue that built up on
 * the path since the quietest moment: LEDBAT's queuing_delay = current -
 * base delay, read from the sender's own ACK clock, with no cooperation
 * from the receiver and no root.  TCP_INFO is a getsockopt any program
 * may make on its own sockets.
 *
 * Cost: after a stream send, one relaxed load decides; at most one
 * getsockopt per SCAVENGER_INTERVAL_NS for the whole class (a per-thread
 * clock first, then the class's last update), and the class lock only
 * around the controller's few multiplications.
 *
 * Limits: only what the job sends through hooked calls on stream sockets
 * is paced and measured; a socket that is not TCP (SCTP, AF_UNIX under
 * --net-unix) answers TCP_INFO with an error and is skipped; UDP (QUIC,
 * µTP, games) is not covered; a connection's first RTT samples come with
 * its first ACKs, so a flow shorter than a few round trips is paced at the
 * rate the class already had; a connection opened while the link is
 * already queued takes that queue for its base (LEDBAT's latecomer
 * problem, RFC 6817 §4.4) until the queue drains once.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <linux/tcp.h>
#include <netinet/in.h>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/segment.h"
#include "policy/scavenger.h"

static __thread uint64_t thread_sampled_ns __attribute__((tls_model("initial-exec")));

void net_delay_after_send(int fd, uint64_t sent)
{
	struct dn_segment *seg = agent.seg;
	if (!seg || !__atomic_load_n(&seg->scavenger.target_ns, __ATOMIC_RELAXED))
		return;
	if (sent)
		segment_count(&seg->scavenger.sent_bytes, sent);
	uint64_t now = clock_now_ns();
	if (now - thread_sampled_ns < SCAVENGER_INTERVAL_NS ||
	    now - __atomic_load_n(&seg->scavenger.updated_ns, __ATOMIC_RELAXED) < SCAVENGER_INTERVAL_NS)
		return;
	thread_sampled_ns = now;
	int saved = errno;
	struct tcp_info info = { 0 };
	socklen_t len = sizeof info;
	int rc = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len);
	errno = saved;
	/* tcpi_min_rtt came with Linux 4.6; an older kernel's shorter answer
	 * leaves it 0, and no sample is taken. */
	if (rc != 0 || len < offsetof(struct tcp_info, tcpi_min_rtt) + sizeof info.tcpi_min_rtt ||
	    !info.tcpi_rtt || !info.tcpi_min_rtt)
		return;
	uint64_t token = segment_lock(seg);
	scavenger_sample(&seg->scavenger, now, (uint64_t)info.tcpi_rtt * 1000,
			 (uint64_t)info.tcpi_min_rtt * 1000);
	segment_unlock(seg, token);
}
