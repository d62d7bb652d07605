/*
 * socket_ledger.c - the supervisor's books of a job's TCP traffic (see
 * socket_ledger.h).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "policy/socket_ledger.h"

void socket_ledger_init(struct socket_ledger *ledger, struct socket_count *memory,
			size_t capacity)
{
	memset(ledger, 0, sizeof *ledger);
	ledger->known = memory;
	ledger->capacity = capacity;
}

static int by_inode(const void *a, const void *b)
{
	uint64_t x = ((const struct socket_count *)a)->inode;
	uint64_t y = ((const struct socket_count *)b)->inode;
	return x < y ? -1 : x > y;
}

/* The growth of a count: new since the last sample (was == NULL) or
 * smaller than before (a new socket under a reused inode) brings all of
 * it. */
static uint64_t growth(uint64_t now, const uint64_t *was)
{
	if (!was || now < *was)
		return now;
	return now - *was;
}

void socket_ledger_sample(struct socket_ledger *ledger, struct socket_count *now, size_t n)
{
	if (n > ledger->capacity)
		n = ledger->capacity;
	if (n > 1)
		qsort(now, n, sizeof *now, by_inode);
	/* Merge with the last sample (both sorted), dropping duplicates of
	 * `now` (a shared socket: the same counts, read twice). */
	size_t k = 0, kept = 0;
	for (size_t i = 0; i < n; i++) {
		if (kept && now[kept - 1].inode == now[i].inode)
			continue;
		while (k < ledger->count && ledger->known[k].inode < now[i].inode)
			k++;
		const struct socket_count *was =
			k < ledger->count && ledger->known[k].inode == now[i].inode
				? &ledger->known[k] : NULL;
		ledger->written += growth(now[i].written, was ? &was->written : NULL);
		ledger->read += growth(now[i].read, was ? &was->read : NULL);
		ledger->received += growth(now[i].received, was ? &was->received : NULL);
		ledger->retrans += growth(now[i].retrans, was ? &was->retrans : NULL);
		now[kept++] = now[i];
	}
	if (kept)
		memcpy(ledger->known, now, kept * sizeof *now);
	ledger->count = kept;
}

void feedback_settle(uint64_t actual, uint64_t agent, uint64_t *fed, uint64_t *owe,
		     uint64_t *back)
{
	*owe = actual > agent + *fed ? actual - agent - *fed : 0;
	*fed += *owe;
	*back = agent + *fed > actual ? agent + *fed - actual : 0;
	if (*back > *fed)
		*back = *fed;
	*fed -= *back;
}
