/*
 * tool_net_feedback.c - measured feedback for the network (see
 * tool_net_feedback.h).  The disk's feedback in tool_regulate.c, with the
 * kernel's per-socket TCP counts in place of /proc/PID/io and the agent's
 * socket counters in place of its predictions:
 *
 *   owed = kernel - agent - fed, never twice (feedback_settle);
 *   given back when the agent counted late, up to what was fed: first
 *   from the unpaid debt, then what was paid within the window's span;
 *   paid into the class's network window (dn_segment.net_window) in pieces
 *   of a quarter of its budget, as the window accepts them;
 *   a debt the window cannot take yet makes the regulator hold the job
 *   (tool_regulate.c stop_job: the same holds as for the disk).
 *
 * What the kernel counts is what the program moved through the socket
 * (tool_sock_diag.c: written = sent once + not yet sent, read = received
 * - still queued), the same quantity the agent counts, so an agent-visible
 * job owes nothing.  The agent counts a send when it charges it, before
 * the call, and a receive as soon as the call returns (io_net.c): its
 * count leads the kernel's, except for the instant between a receive's
 * copy and its count, which the give-back undoes.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/segment.h"
#include "policy/policy.h"
#include "policy/socket_ledger.h"
#include "tool/tool_msg.h"
#include "tool/tool_net_feedback.h"
#include "tool/tool_sock_diag.h"

/* Sockets followed at once; more are not seen (said in the man page). */
#define MAX_SOCKETS 4096
#define PAID_RING 16
/* A dump walks the kernel's whole TCP hash tables (tool_sock_diag.h): at
 * most one per DUMP_GAP_NS for sockets new to us, and a socket that was
 * not TCP-and-connected at a dump (a Unix or UDP socket, one not yet
 * connected) is asked about again after RECHECK_NS. */
#define DUMP_GAP_NS (50 * 1000 * 1000ull)
#define RECHECK_NS (1000 * 1000 * 1000ull)

/* What we know of a socket inode the job holds. */
struct known_socket {
	uint64_t inode;
	bool tcp;                      /* else: not a connected TCP socket */
	uint64_t checked_ns;           /* when a dump last said so         */
	struct sock_diag_place place;  /* tcp: where to look it up         */
};

struct net_feedback {
	struct dn_segment *seg;
	int slot;
	int diag_fd;                 /* NETLINK_SOCK_DIAG                  */
	bool warned;                 /* a failed dump was told once        */
	bool rebase;                 /* the next measure starts the books  */
	struct socket_ledger ledger;
	struct socket_count *sample; /* this tick's sockets                */
	uint64_t *inodes;            /* this tick's socket inodes, sorted  */
	struct known_socket *known, *next_known; /* by inode; next: scratch */
	size_t nknown;
	struct sock_diag_place *places; /* scratch for dumps and lookups   */
	uint64_t *lookup_inodes;
	struct socket_count *lookup_counts;
	bool *lookup_found;
	uint64_t last_dump_ns;
	bool dumped_once;
	/* Ledger and agent totals when the books (re)started. */
	uint64_t base_written, base_read, base_received, base_agent_sent, base_agent_received;
	/* Receives are counted as they arrive from now on (see
	 * net_feedback_measure()). */
	bool receives_unseen;
	uint64_t fed_sent, fed_received;     /* charged beyond the agent    */
	uint64_t debt_sent, debt_received;   /* owed, not yet in the window */
	uint64_t back_sent, back_received;   /* to take back from the window */
	/* Debt paid lately, newest at paid_head (what a give-back may take
	 * back while the window still holds it), as tool_regulate.c. */
	struct { uint64_t at_ns, sent, received; } paid[PAID_RING];
	unsigned paid_head;
	uint64_t total_fed_sent, total_fed_received; /* for the report */
};

struct net_feedback *net_feedback_new(struct dn_segment *seg, int run_slot)
{
	struct net_feedback *nf = calloc(1, sizeof *nf);
	struct socket_count *memory = calloc(MAX_SOCKETS, sizeof *memory);
	bool allocated = false;
	if (nf) {
		nf->sample = calloc(MAX_SOCKETS, sizeof *nf->sample);
		nf->inodes = calloc(MAX_SOCKETS, sizeof *nf->inodes);
		nf->known = calloc(MAX_SOCKETS, sizeof *nf->known);
		nf->next_known = calloc(MAX_SOCKETS, sizeof *nf->next_known);
		nf->places = calloc(MAX_SOCKETS, sizeof *nf->places);
		nf->lookup_inodes = calloc(MAX_SOCKETS, sizeof *nf->lookup_inodes);
		nf->lookup_counts = calloc(MAX_SOCKETS, sizeof *nf->lookup_counts);
		nf->lookup_found = calloc(MAX_SOCKETS, sizeof *nf->lookup_found);
		allocated = memory && nf->sample && nf->inodes && nf->known && nf->next_known &&
			    nf->places && nf->lookup_inodes && nf->lookup_counts && nf->lookup_found;
	}
	int fd = allocated ? sock_diag_open() : -ENOMEM;
	if (fd < 0) {
		if (fd != -ENOMEM)
			warnf("cannot read the kernel's socket counts (sock_diag: %s): the job's "
			      "network is policed by its agent alone", strerror(-fd));
		if (nf) {
			nf->ledger.known = memory;
			nf->diag_fd = -1;
		}
		net_feedback_free(nf);
		if (!nf)
			free(memory);
		return NULL;
	}
	nf->seg = seg;
	nf->slot = run_slot;
	nf->diag_fd = fd;
	socket_ledger_init(&nf->ledger, memory, MAX_SOCKETS);
	return nf;
}

void net_feedback_free(struct net_feedback *nf)
{
	if (!nf)
		return;
	if (nf->diag_fd >= 0)
		close(nf->diag_fd);
	free(nf->ledger.known);
	free(nf->sample);
	free(nf->inodes);
	free(nf->known);
	free(nf->next_known);
	free(nf->places);
	free(nf->lookup_inodes);
	free(nf->lookup_counts);
	free(nf->lookup_found);
	free(nf);
}

bool net_feedback_capped(const struct net_feedback *nf)
{
	if (!nf)
		return false;
	struct dn_caps caps = segment_net_caps_now(nf->seg);
	return (caps.read_bps | caps.write_bps | caps.total_bps) != 0;
}

static void forget_debts(struct net_feedback *nf)
{
	nf->fed_sent = nf->fed_received = 0;
	nf->debt_sent = nf->debt_received = 0;
	nf->back_sent = nf->back_received = 0;
}

void net_feedback_uncapped(struct net_feedback *nf)
{
	if (!nf)
		return;
	forget_debts(nf);
	nf->rebase = true;
}

/* The network window's budget for receives (cap x span, the smaller of
 * the receive and total caps), at least 256 KiB. */
static uint64_t receive_budget(const struct net_feedback *nf)
{
	struct dn_caps caps = segment_net_caps_now(nf->seg);
	struct dn_caps receives = { caps.read_bps, 0, caps.total_bps };
	uint64_t cap = caps_smallest(&receives);
	unsigned __int128 budget = (unsigned __int128)cap * nf->seg->net_window.span_ns / 1000000000u;
	return budget < (256u << 10) ? 256u << 10 : budget > UINT64_MAX ? UINT64_MAX : (uint64_t)budget;
}

static const struct known_socket *known_find(const struct net_feedback *nf, uint64_t inode)
{
	size_t lo = 0, hi = nf->nknown;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (nf->known[mid].inode == inode)
			return &nf->known[mid];
		if (nf->known[mid].inode < inode)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void known_swap(struct net_feedback *nf, size_t n)
{
	struct known_socket *t = nf->known;
	nf->known = nf->next_known;
	nf->next_known = t;
	nf->nknown = n;
}

static void warn_once(struct net_feedback *nf, int err)
{
	if (!nf->warned)
		warnf("reading the kernel's socket counts failed (sock_diag: %s): bytes the "
		      "agent does not see go uncounted meanwhile", strerror(-err));
	nf->warned = true;
}

/* A dump: the counts of every TCP socket among the job's inodes, and what
 * each inode is, from now on.  How many sockets went into the sample, or
 * -errno. */
static int sample_by_dump(struct net_feedback *nf, size_t ninodes, uint64_t now)
{
	int found = sock_diag_tcp_dump(nf->diag_fd, nf->inodes, ninodes, nf->sample, nf->places,
				       MAX_SOCKETS);
	if (found < 0)
		return found;
	nf->last_dump_ns = now;
	nf->dumped_once = true;
	/* The dump's order is the kernel's: find each inode's place. */
	for (size_t i = 0; i < ninodes; i++) {
		struct known_socket *k = &nf->next_known[i];
		*k = (struct known_socket){ .inode = nf->inodes[i], .checked_ns = now };
		for (int j = 0; j < found; j++)
			if (nf->sample[j].inode == nf->inodes[i]) {
				k->tcp = true;
				k->place = nf->places[j];
				break;
			}
	}
	known_swap(nf, ninodes);
	return found;
}

/* Lookups of the TCP sockets known among the job's inodes; the others are
 * left for a later dump.  How many went into the sample, or -errno. */
static int sample_by_lookup(struct net_feedback *nf, size_t ninodes, uint64_t now)
{
	size_t asked = 0, kept = 0;
	for (size_t i = 0; i < ninodes; i++) {
		const struct known_socket *k = known_find(nf, nf->inodes[i]);
		if (!k)
			continue;
		nf->next_known[kept++] = *k;
		if (k->tcp) {
			nf->places[asked] = k->place;
			nf->lookup_inodes[asked++] = k->inode;
		}
	}
	int rc = sock_diag_tcp_lookup(nf->diag_fd, nf->places, nf->lookup_inodes, asked,
				      nf->lookup_counts, nf->lookup_found);
	if (rc < 0)
		return rc;
	int found = 0;
	for (size_t i = 0; i < asked; i++)
		if (nf->lookup_found[i])
			nf->sample[found++] = nf->lookup_counts[i];
	/* Those not found closed (or were reset): not TCP-and-connected any
	 * more, as far as the next dump is concerned. */
	for (size_t i = 0, a = 0; i < kept; i++)
		if (nf->next_known[i].tcp) {
			if (!nf->lookup_found[a]) {
				nf->next_known[i].tcp = false;
				nf->next_known[i].checked_ns = now;
			}
			a++;
		}
	known_swap(nf, kept);
	return found;
}

bool net_feedback_measure(struct net_feedback *nf, const pid_t *pids, unsigned n, uint64_t now)
{
	if (!nf)
		return false;
	size_t ninodes = sock_diag_job_inodes(pids, n, nf->inodes, MAX_SOCKETS);
	/* A dump when an inode is new to us, or was not a connected TCP
	 * socket a while ago; lookups otherwise. */
	bool want_dump = false;
	for (size_t i = 0; i < ninodes && !want_dump; i++) {
		const struct known_socket *k = known_find(nf, nf->inodes[i]);
		want_dump = !k || (!k->tcp && now - k->checked_ns >= RECHECK_NS);
	}
	int found;
	if (want_dump && (!nf->dumped_once || now - nf->last_dump_ns >= DUMP_GAP_NS))
		found = sample_by_dump(nf, ninodes, now);
	else
		found = sample_by_lookup(nf, ninodes, now);
	if (found < 0) {
		warn_once(nf, found);
		return false;
	}
	socket_ledger_sample(&nf->ledger, nf->sample, (size_t)found);
	const struct dn_counters *c = &nf->seg->runs[nf->slot].counters;
	uint64_t agent_sent = segment_read_counter(&c->net_sent_bytes);
	uint64_t agent_received = segment_read_counter(&c->net_received_bytes);
	if (nf->rebase) {
		/* A cap came (back): what the job did meanwhile is not owed. */
		nf->rebase = false;
		nf->base_written = nf->ledger.written;
		nf->base_read = nf->ledger.read;
		nf->base_received = nf->ledger.received;
		nf->receives_unseen = false;
		nf->base_agent_sent = agent_sent;
		nf->base_agent_received = agent_received;
		forget_debts(nf);
	}
	uint64_t actual_w = nf->ledger.written - nf->base_written;
	uint64_t actual_r = nf->ledger.read - nf->base_read;
	uint64_t seen_w = agent_sent > nf->base_agent_sent ? agent_sent - nf->base_agent_sent : 0;
	uint64_t seen_r = agent_received > nf->base_agent_received
				  ? agent_received - nf->base_agent_received : 0;
	/*
	 * Receives are compared as read() took them, what the agent counts:
	 * a receiver it sees owes nothing.  But a receiver it does not see
	 * reads its whole receive queue - megabytes, autotuned - the moment a
	 * hold lets it go, and often closes before the next tick: those
	 * bytes would be lost (a static receiver of 16 MiB over a 100 Mbit/s
	 * link at 1 MiB/s read its last 9 MiB so, uncharged, in 6.7 s).  So
	 * once the reads the agent did not count (whether fed back already
	 * or not: a receiver reading at link speed owes less than that per
	 * tick) pass a quarter of the window's
	 * budget - more than the instant between a receive's copy and its
	 * count can explain (one piece, an eighth) - receives are counted as
	 * they arrive (bytes_received) for the rest of the books, and a held
	 * receiver's queue is paid for while it waits.  The cost: a receiver
	 * the agent sees in the same job is charged its queue early too
	 * (charged at arrival, a visible receiver ran 5 % under its cap).
	 */
	if (!nf->receives_unseen && actual_r > seen_r + receive_budget(nf) / 4)
		nf->receives_unseen = true;
	if (nf->receives_unseen)
		actual_r = nf->ledger.received - nf->base_received;
	uint64_t owe_w, back_w, owe_r, back_r;
	feedback_settle(actual_w, seen_w, &nf->fed_sent, &owe_w, &back_w);
	feedback_settle(actual_r, seen_r, &nf->fed_received, &owe_r, &back_r);
	nf->debt_sent += owe_w;
	nf->debt_received += owe_r;
	nf->total_fed_sent += owe_w;
	nf->total_fed_received += owe_r;
	nf->total_fed_sent -= back_w < nf->total_fed_sent ? back_w : nf->total_fed_sent;
	nf->total_fed_received -= back_r < nf->total_fed_received ? back_r : nf->total_fed_received;
	/* Given back: the unpaid debt first, the rest from the window. */
	uint64_t unpaid_w = back_w < nf->debt_sent ? back_w : nf->debt_sent;
	uint64_t unpaid_r = back_r < nf->debt_received ? back_r : nf->debt_received;
	nf->debt_sent -= unpaid_w;
	nf->debt_received -= unpaid_r;
	nf->back_sent += back_w - unpaid_w;
	nf->back_received += back_r - unpaid_r;
	return owe_w || owe_r;
}

static void note_paid(struct net_feedback *nf, uint64_t now, uint64_t sent, uint64_t received)
{
	if (nf->paid[nf->paid_head].at_ns != now) {
		nf->paid_head = (nf->paid_head + 1) % PAID_RING;
		nf->paid[nf->paid_head].sent = nf->paid[nf->paid_head].received = 0;
	}
	nf->paid[nf->paid_head].at_ns = now;
	nf->paid[nf->paid_head].sent += sent;
	nf->paid[nf->paid_head].received += received;
}

/* Take back what is to be given back from debt paid within the window's
 * span, newest first; the rest the window has forgotten already (a refund
 * of it would hand the job budget it never lost). */
static void give_back(struct net_feedback *nf, uint64_t now, const struct dn_caps *caps)
{
	uint64_t span = nf->seg->net_window.span_ns, sent = 0, received = 0;
	for (unsigned k = 0; k < PAID_RING && (nf->back_sent || nf->back_received); k++) {
		unsigned i = (nf->paid_head + PAID_RING - k) % PAID_RING;
		if (!nf->paid[i].at_ns || now - nf->paid[i].at_ns >= span)
			break;
		uint64_t s = nf->back_sent < nf->paid[i].sent ? nf->back_sent : nf->paid[i].sent;
		uint64_t r = nf->back_received < nf->paid[i].received ? nf->back_received
								     : nf->paid[i].received;
		nf->paid[i].sent -= s;
		nf->paid[i].received -= r;
		nf->back_sent -= s;
		nf->back_received -= r;
		sent += s;
		received += r;
	}
	nf->back_sent = nf->back_received = 0;
	if (sent || received)
		policy_of(nf->seg)->charge(&nf->seg->net_window, caps, now, -(int64_t)received,
					   -(int64_t)sent);
}

uint64_t net_feedback_pay(struct net_feedback *nf, uint64_t now)
{
	if (!nf)
		return 0;
	struct dn_caps caps = segment_net_caps_now(nf->seg);
	if (nf->back_sent || nf->back_received)
		give_back(nf, now, &caps);
	/* Pieces of a quarter of the window's budget, as the agent's
	 * (throttle.c): the window cannot take more than R*N at once. */
	uint64_t cap = caps_smallest(&caps), piece = UINT64_MAX;
	if (cap) {
		unsigned __int128 p = (unsigned __int128)cap * nf->seg->net_window.span_ns /
				      1000000000u / 4;
		piece = p < 4096 ? 4096 : p > UINT64_MAX ? UINT64_MAX : (uint64_t)p;
	}
	const struct policy *policy = policy_of(nf->seg); /* --window-policy */
	while (nf->debt_sent || nf->debt_received) {
		uint64_t r = nf->debt_received < piece ? nf->debt_received : piece;
		uint64_t w = nf->debt_sent < piece - r ? nf->debt_sent : piece - r;
		uint64_t late = policy->delay(&nf->seg->net_window, &caps, now, r, w);
		if (late)
			return late;
		policy->charge(&nf->seg->net_window, &caps, now, (int64_t)r, (int64_t)w);
		note_paid(nf, now, w, r);
		nf->debt_received -= r;
		nf->debt_sent -= w;
	}
	return 0;
}

bool net_feedback_owes(const struct net_feedback *nf)
{
	return nf && (nf->debt_sent || nf->debt_received);
}

void net_feedback_totals(const struct net_feedback *nf, uint64_t *sent, uint64_t *received)
{
	*sent = nf ? nf->total_fed_sent : 0;
	*received = nf ? nf->total_fed_received : 0;
}
