/* Description: the supervisor's TCP books (issue #12 item 5): per-socket growth by inode across samples (new, grown, closed, shared, reused inode, over capacity) and the feedback's owe/give-back rule against the agent's count. */
#include "unit.h"
#include "policy/socket_ledger.h"

static void ledger_growth(void)
{
	struct socket_count memory[4];
	struct socket_ledger l;
	socket_ledger_init(&l, memory, 4);
	CHECK_EQ_U64(l.written, 0);

	/* Two sockets appear: their whole counts are new. */
	struct socket_count s1[] = { { 20, 1000, 5, 5, 0, 0, 0 }, { 10, 300, 7000, 7000, 0, 0, 0 } };
	socket_ledger_sample(&l, s1, 2);
	CHECK_EQ_U64(l.written, 1300);
	CHECK_EQ_U64(l.read, 7005);
	CHECK_EQ_U64(l.count, 2);
	CHECK_EQ_U64(l.known[0].inode, 10); /* kept sorted */

	/* They grow; one is shared by two processes (listed twice). */
	struct socket_count s2[] = { { 10, 400, 9000, 9000, 0, 0, 0 }, { 20, 1500, 5, 5, 0, 0, 0 }, { 10, 400, 9000, 9000, 0, 0, 0 } };
	socket_ledger_sample(&l, s2, 3);
	CHECK_EQ_U64(l.written, 1300 + 100 + 500);
	CHECK_EQ_U64(l.read, 7005 + 2000);
	CHECK_EQ_U64(l.count, 2);

	/* Socket 20 closes (not listed): nothing taken back; a new one, 30,
	 * brings all it has. */
	struct socket_count s3[] = { { 30, 50, 60, 60, 0, 0, 0 }, { 10, 400, 9100, 9100, 0, 0, 0 } };
	socket_ledger_sample(&l, s3, 2);
	CHECK_EQ_U64(l.written, 1900 + 50);
	CHECK_EQ_U64(l.read, 9005 + 100 + 60);

	/* 20 again, but smaller than it was: a new socket under the old
	 * inode; it counts from zero even though the ledger had forgotten
	 * it anyway.  And 10 reused with a smaller count: new as well. */
	struct socket_count s4[] = { { 20, 8, 9, 9, 0, 0, 0 }, { 10, 1, 2, 2, 0, 0, 0 }, { 30, 50, 60, 60, 0, 0, 0 } };
	socket_ledger_sample(&l, s4, 3);
	CHECK_EQ_U64(l.written, 1950 + 8 + 1);
	CHECK_EQ_U64(l.read, 9165 + 9 + 2);

	/* No sockets: nothing changes but the last sample. */
	socket_ledger_sample(&l, NULL, 0);
	CHECK_EQ_U64(l.count, 0);
	CHECK_EQ_U64(l.written, 1959);
	CHECK_EQ_U64(l.read, 9176);
}

static void ledger_received(void)
{
	struct socket_count memory[2];
	struct socket_ledger l;
	socket_ledger_init(&l, memory, 2);
	/* Arrived counts grow apart from read ones (the queue in between). */
	struct socket_count a[] = { { 5, 0, 100, 900, 0, 0, 0 } };
	socket_ledger_sample(&l, a, 1);
	struct socket_count b[] = { { 5, 0, 950, 1000, 0, 0, 0 } };
	socket_ledger_sample(&l, b, 1);
	CHECK_EQ_U64(l.read, 950);
	CHECK_EQ_U64(l.received, 1000);
}

static void ledger_capacity(void)
{
	struct socket_count memory[2];
	struct socket_ledger l;
	socket_ledger_init(&l, memory, 2);
	/* Only the first `capacity` of the list are kept and counted. */
	struct socket_count s[] = { { 1, 10, 0, 0, 0, 0, 0 }, { 2, 20, 0, 0, 0, 0, 0 }, { 3, 40, 0, 0, 0, 0, 0 } };
	socket_ledger_sample(&l, s, 3);
	CHECK_EQ_U64(l.count, 2);
	CHECK_EQ_U64(l.written, 30);
	struct socket_count t[] = { { 1, 15, 0, 0, 0, 0, 0 }, { 2, 20, 0, 0, 0, 0, 0 } };
	socket_ledger_sample(&l, t, 2);
	CHECK_EQ_U64(l.written, 35);
}

static void settle(void)
{
	uint64_t fed = 0, owe, back;
	/* The agent saw all of it: nothing owed. */
	feedback_settle(1000, 1000, &fed, &owe, &back);
	CHECK_EQ_U64(owe, 0);
	CHECK_EQ_U64(back, 0);
	/* The agent leads (it counts a send when it charges it): nothing. */
	feedback_settle(1000, 1500, &fed, &owe, &back);
	CHECK_EQ_U64(owe + back + fed, 0);
	/* A static program: the kernel's count alone grows. */
	feedback_settle(5000, 1500, &fed, &owe, &back);
	CHECK_EQ_U64(owe, 3500);
	CHECK_EQ_U64(fed, 3500);
	/* Never twice. */
	feedback_settle(5000, 1500, &fed, &owe, &back);
	CHECK_EQ_U64(owe, 0);
	CHECK_EQ_U64(back, 0);
	feedback_settle(6000, 1500, &fed, &owe, &back);
	CHECK_EQ_U64(owe, 1000);
	CHECK_EQ_U64(fed, 4500);
	/* The agent counts late what we charged (a receive counted after the
	 * kernel copied it): given back, the window holds it once. */
	feedback_settle(6000, 2500, &fed, &owe, &back);
	CHECK_EQ_U64(owe, 0);
	CHECK_EQ_U64(back, 1000);
	CHECK_EQ_U64(fed, 3500);
	/* Never more than was fed (the agent counted UDP the kernel's TCP
	 * books do not hold). */
	feedback_settle(6000, 100000, &fed, &owe, &back);
	CHECK_EQ_U64(back, 3500);
	CHECK_EQ_U64(fed, 0);
	feedback_settle(6000, 100000, &fed, &owe, &back);
	CHECK_EQ_U64(owe + back + fed, 0);
}

/* Retransmitted bytes are a count like the others (the yield policy adds
 * them to the job's wire bytes); the queues are not counted at all. */
static void ledger_retrans(void)
{
	struct socket_count memory[4];
	struct socket_ledger l;
	socket_ledger_init(&l, memory, 4);
	struct socket_count a[] = { { 7, 1000, 0, 0, 500, 0, 100 } };
	socket_ledger_sample(&l, a, 1);
	CHECK_EQ_U64(l.retrans, 100);
	struct socket_count b[] = { { 7, 3000, 0, 0, 20, 0, 250 } };
	socket_ledger_sample(&l, b, 1);
	CHECK_EQ_U64(l.retrans, 250);
	CHECK_EQ_U64(l.written, 3000);
	/* 7 closes, 9 appears with 40 resent already: all of it is new. */
	struct socket_count c[] = { { 9, 64, 0, 0, 0, 0, 40 } };
	socket_ledger_sample(&l, c, 1);
	CHECK_EQ_U64(l.retrans, 290);
}

int main(void)
{
	ledger_growth();
	ledger_retrans();
	ledger_capacity();
	ledger_received();
	settle();
	return 0;
}
