/*
 * io_read_internal.h - what the three parts of the read path share:
 * io_read.c (the call, the prediction, the cache detector's view),
 * io_read_watch.c (streams the model did not start) and
 * io_read_prefetch.c (a capped read paid by reading its windows in).
 * Every function here is called with the open file locked unless it says.
 */
#ifndef DISCNICE_AGENT_IO_READ_INTERNAL_H
#define DISCNICE_AGENT_IO_READ_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/io_internal.h"
#include "agent/open_file.h"

/* The page ranges the model says the kernel will read for one call. */
struct read_plan {
	unsigned ranges;
	struct { uint64_t first, end; } range[8];
};

/* io_read.c */
/* The detector answers exactly for this file (cachestat, mincore). */
bool detector_exact(const struct open_file *of);
/* detector_count() for page_spans_cover(); ctx is a struct view_ctx. */
uint64_t detector_cached(void *ctx, uint64_t first, uint64_t count);
/* The pages [first, first + count) will be cached by the end of the call. */
void view_mark_cached(void *ctx, uint64_t first, uint64_t count);
/* Predict a read of [pos, pos + n) and plan how it is paid (*pay). */
bool plan_read(int fd, struct open_file *of, uint64_t pos, uint64_t n, bool capped,
	       uint64_t *predicted, struct read_pay *pay);

/* io_read_watch.c */
void raise_model_high(struct open_file *of, uint64_t page);
/* Take over a stream met mid-way, from the end of its cached run. */
void adopt_stream(struct view_ctx *v, struct open_file *of, uint64_t pos);
/* Check the calls of a stream that met another's run until past page. */
void foreign_check_until(struct open_file *of, uint64_t page);
/* Begin watching a cached run of count pages from start. */
void watch_run(struct view_ctx *v, struct open_file *of, uint64_t start, uint64_t count);
bool meets_foreign_run(const struct open_file *of, uint64_t first, uint64_t prev);
void watch_window_gap(struct view_ctx *v, struct open_file *of, uint64_t old_high);
/* The pages of the kernel's own window the watch saw rise: charged. */
uint64_t watch_look(struct view_ctx *v, struct open_file *of, uint64_t pos);
/* The pages after a cached run to read in before the reader meets its
 * marker; preread_need(): how far by the time it reaches need_end. */
uint64_t preread_after_run(struct view_ctx *v, struct open_file *of);
uint64_t preread_need(const struct open_file *of, uint64_t need_end);
bool watch_due(struct open_file *of, uint64_t page);
void watch_note_model(const struct view_ctx *v, struct open_file *of);

/* io_read_prefetch.c */
/* Pages [lo, hi) are cached now: nothing owed there. */
void owed_forget(struct open_file *of, uint64_t lo, uint64_t hi);
/* Owe the plan's pages: read in by prefetch_until() as calls need them. */
void owe_plan(int fd, struct open_file *of, const struct read_plan *plan, uint64_t predicted);
/* of unlocked: read in what is owed below need_end, paced; ns slept. */
uint64_t prefetch_until(int fd, uint64_t need_first, uint64_t need_end, uint64_t *charged);
/* of unlocked: read in what reclaim took of the window after a cached run. */
uint64_t preread_repair(int fd, uint64_t *charged);

#endif
