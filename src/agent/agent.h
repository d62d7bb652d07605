/*
 * agent.h - the inside of libdiscnice.so (DiscNice §5.1, "libDiscNice").
 *
 * Layers, each in its own file:
 *   interpose.c   the only file that defines libc names; every wrapper has
 *                 one shape: guard, hand over to io_*.c, errno preserved.
 *   agent.c       once-only start-up, fork handling, the class segment,
 *                 the re-entry guard, the trace.
 *   open_file.c   per-fd table of open file descriptions we account for.
 *   io.c          the path of one call: predict (graybox/) -> ask the
 *                 policy (policy/) -> throttle -> the real call -> book.
 *   io_stdio.c    the same for glibc stdio, whose internal reads and
 *                 writes never pass through the exported read/write.
 *   throttle.c    sleeping until the policy says go; chunking.
 * Every function here is internal (hidden visibility); the exported set
 * is libdiscnice.map.
 */
#ifndef DISCNICE_AGENT_H
#define DISCNICE_AGENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "discnice/segment.h"

/* The agent's process-wide state. */
struct agent {
	struct dn_segment *seg;     /* NULL: pass everything through       */
	struct dn_run *run;         /* this job's counters, or NULL        */
	uint64_t chunk_bytes;       /* largest piece of one throttled call */
	uint32_t predict_mask;
	int trace_fd;               /* -1 = no trace                       */
	bool have_cachestat;
	uint64_t writeback_expire_ns; /* dirty_expire + dirty_writeback    */
	char seg_path[DN_PATH_MAX]; /* the class's file, for the last exit  */
};

extern struct agent agent;

/* The re-entry guard: true when this thread may run agent code now.  False
 * before start-up, when the agent is off, and inside the agent itself (a
 * libc call the agent makes must go straight to libc). */
bool agent_enter(void);
void agent_leave(void);

/* Set up once (constructor, or lazily from the first hooked call). */
void agent_init(void);

/* A class counter and this run's counter together. */
void agent_count(size_t field_offset, uint64_t value);
#define AGENT_COUNT(field, value) \
	agent_count(offsetof(struct dn_counters, field), (value))

/* One trace record, if --trace is on. */
void agent_trace(const char *op, uint64_t file_bytes, uint64_t predicted_bytes,
		 uint64_t delay_ns);

/* The throttle: charge predicted disk bytes to the class window, sleeping
 * first as long as the policy says, and count them as predicted
 * (throttle.c).  Returns ns slept. */
uint64_t throttle_charge(uint64_t read_bytes, uint64_t write_bytes);
/* Refund cancelled delayed writes (a negative charge, never a sleep). */
void throttle_refund(uint64_t write_bytes);
/* Largest piece one call may be cut into (chunking, throttle.c). */
uint64_t throttle_piece_bytes(void);

#endif
