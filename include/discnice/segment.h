/*
 * segment.h - the contract between `discnice run` (the supervisor) and
 * libdiscnice.so (the agent inside every process of a job).
 *
 * One class = one shared-memory segment, a file of mode 0600 under
 * $XDG_RUNTIME_DIR/discnice/ (or /dev/shm/discnice-UID/).  Every process of
 * every job in the class maps it and polices its I/O against the one rate
 * window inside (DiscNice §5.1: "the disk I/O issued by the child process is
 * charged to the parent").
 *
 * Rules for this file (see tests/unit/test_segment_layout.c):
 *   - fixed-width types only, no pointers, no libc structs (pthread_mutex_t
 *     differs between libcs and would make the layout a lie);
 *   - every change of layout bumps DN_SEGMENT_VERSION;
 *   - the agent validates magic, version, size and owner before trusting a
 *     byte of it, and passes the job through unregulated if anything is off.
 */
#ifndef DISCNICE_SEGMENT_H
#define DISCNICE_SEGMENT_H

#include <stdint.h>

#define DN_SEGMENT_MAGIC   UINT64_C(0x31454349434e5344) /* "DSNCICE1" little-endian */
#define DN_SEGMENT_VERSION 16u

/* Environment variable through which the supervisor hands the agent its segment. */
#define DN_ENV_SEGMENT "DISCNICE_SEGMENT"
/* Which run slot (index into dn_segment.runs) this job charges its counters to. */
#define DN_ENV_RUN_SLOT "DISCNICE_RUN_SLOT"

/* Rate window (policy/rate_window.c): the ring of buckets covering the window
 * of N seconds; the oldest bucket counts pro rata, so the granularity costs
 * little accuracy (at most half a bucket per window), only memory. */
#define DN_WINDOW_BUCKETS 128u
/* The rate-windows paper's own window (version 9; policy/paper_window.c):
 * "a circular queue, implemented via a 100-element array" of the last I/O
 * events, none older than 5 seconds (§3.2). */
#define DN_PAPER_EVENTS 100u
#define DN_MAX_RUNS       32u
#define DN_CLASS_NAME_MAX 64u
#define DN_PATH_MAX       512u

/* Bits of dn_segment.predict_mask (Table 5 of the DiscNice paper). */
#define DN_PREDICT_CACHE     1u /* cache detector (§4.2)                 */
#define DN_PREDICT_READAHEAD 2u /* read-size predictor (§4.3, §5.4)      */
#define DN_PREDICT_WRITE     4u /* write-size predictor (§4.4, §5.2)     */
#define DN_PREDICT_ALL       7u

enum dn_cache_backend {
	DN_CACHE_AUTO = 0,
	DN_CACHE_PROBE = 1,     /* timed one-byte reads (§4.2)        */
	DN_CACHE_CACHESTAT = 2, /* cachestat(2), Linux >= 6.5, exact  */
	DN_CACHE_MINCORE = 3,   /* mmap + mincore(2), exact           */
};

/* Caps in bytes per second; 0 means no cap.  The class has two sets (the
 * rate-windows paper §3.2 keeps "two kernel window structures, one for file
 * I/O and one for network I/O"): dn_segment.caps for the disk, and, from
 * version 7, dn_segment.net_caps for sockets, where read_bps caps what the
 * job receives, write_bps what it sends, total_bps both together. */
struct dn_caps {
	uint64_t read_bps;
	uint64_t write_bps;
	uint64_t total_bps;
};

/*
 * The sliding rate window (rate-windows paper §3.2, DiscNice §5.3).
 * bucket_ns = span_ns / (DN_WINDOW_BUCKETS - 1), rounded up (a window whose
 * start falls inside a bucket touches one bucket more than span/bucket);
 * only policy/rate_window.c computes it.  The bucket k places before head
 * covers [(head - k) * bucket_ns, (head - k + 1) * bucket_ns).  Bytes are
 * signed because cancelled delayed writes are refunded (§4.4).
 */
struct dn_window {
	uint64_t span_ns;    /* N: how far back the window looks            */
	uint64_t bucket_ns;  /* see above                                    */
	uint64_t origin_ns;  /* the window never reaches back before this    */
	uint64_t head;       /* absolute index (t / bucket_ns) of newest     */
	int64_t read_bytes[DN_WINDOW_BUCKETS];
	int64_t write_bytes[DN_WINDOW_BUCKETS];
	/* Version 9: the paper's event queue (policy/paper_window.c), used
	 * by the class's delays only under --window-policy paper; the
	 * buckets above are charged under either policy (they feed ls, top,
	 * the feedback and the slack).  Slot paper_head holds the newest
	 * event; the paper_count newest slots are live. */
	uint64_t paper_span_ns;      /* events older than this drop (5 s)     */
	uint64_t paper_min_sleep_ns; /* a delay below this becomes 0          */
	uint64_t paper_max_sleep_ns; /* pieces of cap x this keep sleeps under */
	uint32_t paper_head;
	uint32_t paper_count;
	struct dn_paper_event {
		uint64_t start_ns;   /* when the operation was let go          */
		int64_t read_bytes;  /* refunds take from the newest, never < 0 */
		int64_t write_bytes;
	} paper_events[DN_PAPER_EVENTS];
};

/* Counters, updated with relaxed atomic adds by every process. */
struct dn_counters {
	uint64_t file_read_bytes;       /* bytes the job asked to read from disk files */
	uint64_t file_write_bytes;      /* bytes the job asked to write to disk files  */
	uint64_t predicted_read_bytes;  /* gray-box estimate of disk reads             */
	uint64_t predicted_write_bytes; /* newly dirtied bytes                         */
	uint64_t cancelled_write_bytes; /* dirty bytes truncated or unlinked           */
	uint64_t slept_ns;              /* time spent in throttle sleeps               */
	uint64_t throttled_calls;       /* calls that slept at least once              */
	uint64_t mmapped_bytes;         /* file bytes mapped (accounted, not predicted) */
	uint64_t dir_read_bytes;        /* directory blocks charged after slow reads    */
	uint64_t trace_lost_lines;      /* --trace lines a short or failed write lost   */
	/* Sockets (version 7, src/agent/io_net.c): bytes that crossed the
	 * job's policed sockets, counted after the call, and the time the
	 * agent slept for the network window. */
	uint64_t net_sent_bytes;
	uint64_t net_received_bytes;
	uint64_t net_slept_ns;
	uint64_t net_throttled_calls;   /* socket calls that slept at least once */
	/* Version 10: programs of the job the agent started in (its
	 * constructor attached to the class; a fork is the same program).
	 * 0 after a job whose program could load it means the loader did not
	 * (src/tool/tool_run.c, agent_absent). */
	uint64_t agent_loads;
};

/* One `discnice run` or `discnice attach` in the class.  Only its
 * supervisor writes state, stopped_ns and the attach fields
 * (tool_regulate.c); `discnice ls` and `top` read them. */
/*
 * The network's scavenger mode (version 8; `--net-policy scavenger`,
 * src/policy/scavenger.c): a send rate the class's TCP sockets may use,
 * found by a LEDBAT-like controller (RFC 6817) from the queueing delay the
 * job's own connections see (TCP_INFO: tcpi_rtt - tcpi_min_rtt).  The agent
 * folds rate_bps into the network window's send cap (src/agent/throttle.c)
 * and feeds samples under the class lock (src/agent/io_net.c).
 */
struct dn_scavenger {
	uint64_t target_ns;      /* queueing delay the class may add; 0 = off */
	uint64_t rate_bps;       /* the send rate allowed now                 */
	uint64_t updated_ns;     /* CLOCK_MONOTONIC of the last update, 0 none */
	uint64_t next_cut_ns;    /* no multiplicative decrease before this    */
	uint64_t sent_bytes;     /* stream bytes the class sent (relaxed adds) */
	uint64_t sent_at_update; /* sent_bytes at the last update             */
	uint64_t delay_ns;       /* queueing delay of the last sample         */
	uint64_t samples;        /* samples taken                             */
	uint64_t decreases;      /* multiplicative decreases so far           */
};

struct dn_run {
	uint32_t pid;      /* supervisor pid, 0 = free slot */
	uint32_t state;    /* DN_RUN_*                      */
	struct dn_counters counters;
	uint64_t stopped_ns; /* time the job was held (tool_hold.c), up to the last release */
	/* `discnice attach` (version 5), 0 for a run.  No agent counts for an
	 * attached process, so its supervisor publishes the kernel's count
	 * (/proc/PID/io of every process it regulates, since attaching) at
	 * every tick, for `top`. */
	uint32_t attached_pid;       /* the first process it was given    */
	uint32_t attached_processes; /* processes it regulates now        */
	uint64_t measured_read_bytes;
	uint64_t measured_write_bytes;
	/* --policy manners (version 6; MS Manners §4.1, src/tool/tool_manners.c):
	 * the supervisor's controller suspends the job until this time
	 * (CLOCK_MONOTONIC ns), 0 for none; every process of the job waits at
	 * its next hooked I/O call (src/agent/suspension.c), a well-defined
	 * point, never inside a lock it holds for the program (§3's priority
	 * inversion).  suspended_ns: the suspensions ordered so far, for top. */
	uint64_t suspend_until_ns;
	uint64_t suspended_ns;
	/* Its calibrated target, the costs of the regression (§4.4): ns per
	 * GiB read and per GiB written, 0 while there is none. */
	uint64_t manners_read_ns_per_gib;
	uint64_t manners_write_ns_per_gib;
	/* Version 11: the supervisor's start time, /proc/PID/stat starttime
	 * (clock ticks after boot), written with pid when the slot is
	 * claimed; 0 if it could not be read.  A pid is reused, the pair is
	 * not: a slot whose pid now names another process holds a dead
	 * supervisor (src/common/segment.c, segment_run_alive). */
	uint64_t start_ticks;
	/* Version 12: when an INT, TERM or QUIT last reached the
	 * supervisor (CLOCK_MONOTONIC ns, 0 never), and which.  The user asked
	 * the job to stop: a read of its held in our throttle sleep when its
	 * handler for that signal ran ends there, as an interruptible call
	 * would (src/agent/throttle.c, cut_wanted). */
	uint64_t interrupted_ns;
	uint32_t interrupted_sig;
	uint32_t reserved2;
};

#define DN_RUN_STOPPED 1u /* the supervisor holds the job stopped right now */
/* The supervisor's measured feedback charges this run's I/O the agent did
 * not predict (--feedback on): set before the job starts, kept for the
 * run.  The agent then leaves to it the pages the kernel read by itself
 * (src/agent/io_read.c, owed_take). */
#define DN_RUN_FEEDBACK 2u
/* Slack (issue #9 item 3): no cap binds - the window of every cap set,
 * with the feedback's count of what the kernel did, holds at most an
 * eighth of a budget of at least DN_SLACK_MIN_BUDGET bytes.  Set and
 * cleared by the supervisor at its ticks, only under feedback.  Meanwhile
 * the agent leaves the files it has not classified to the kernel (no
 * fstat, no cache question, no model, no writeback pacing: as with no
 * cap) and the feedback charges every byte they cost; from the tick a
 * window fills to a quarter, the agent classifies them at their next
 * call, as it does when a cap comes (src/tool/tool_regulate.c
 * update_slack, src/agent/agent.h agent_enter_fd). */
#define DN_RUN_SLACK 4u
#define DN_SLACK_MIN_BUDGET (UINT64_C(256) << 20)
/* `discnice benice` (MS Manners §7.2, src/tool/tool_benice.c): the run
 * regulates its job by progress, not by caps.  Its DN_RUN_STOPPED means
 * "suspended by benice" (SIGSTOP of the whole tree, §4.1), stopped_ns the
 * time suspended so far; DN_RUN_JOB_STOPPED that someone else stopped the
 * job (job control, kill -STOP), which benice leaves alone.  attached_pid
 * names the job (the command's pid, or the first --pid), and the measured
 * fields carry the kernel's count of its disk bytes, as for an attach.
 * Bits of `state` only: the layout is unchanged. */
#define DN_RUN_BENICE      8u
#define DN_RUN_JOB_STOPPED 16u

/* Version 13: a prefetch piece in hand (src/agent/pieces_in_hand.c).
 * Under a read cap the agent reads the model's windows in itself, a piece
 * at a time, sleeping for each piece's charge first; meanwhile the piece's
 * pages are neither cached nor owed, and another thread's or process's
 * prediction would count them again.  Pages [first, end) of file (dev,
 * ino), taken at since_ns (CLOCK_MONOTONIC; 0: the slot is free) by thread
 * tid of process pid from the owed ranges of its open file `owner` (an
 * opaque id, that process's own).  Under the class lock.  Version 15: 256
 * slots, not 64: 128 threads with a descriptor each ran 0.74-0.99x the cap
 * on 64 (0.28-0.35x without feedback), 0.99-1.00x on 256.  Why is not all
 * known: a piece taken with every slot in use is seen by no other plan,
 * but a taker that waited for a free slot did no better. */
#define DN_PIECES_IN_HAND 256u
struct dn_piece_in_hand {
	uint64_t dev, ino;
	uint64_t first, end;    /* pages */
	uint64_t since_ns;
	uint64_t owner;
	int32_t pid, tid;
};

/* Version 14: prefetch pieces read in lately, a ring (read_in_next is the
 * slot written next).  With --feedback off a piece is charged by its
 * plan's count, and another open file of the same pages (a process of its
 * own, a descriptor per thread) counted them missing too: pages
 * [first, end) of file (dev, ino), all missing when taken from the owed
 * ranges of open file `owner` of process pid, were read in after read_ns
 * (CLOCK_MONOTONIC, taken just before the readahead(2); 0: never written)
 * and paid there.  Under the class lock.  Version 16: 1024 records, not
 * 128 - a plan waits for its pieces behind every other taker's, and 128
 * threads with a descriptor each wrote 128 records in about a second, so
 * a piece planned before that found none of the pieces read in since,
 * and paid for them again (0.68-0.90x a 9M cap without feedback). */
#define DN_PIECES_READ_IN 1024u
struct dn_piece_read_in {
	uint64_t dev, ino;
	uint64_t first, end;    /* pages */
	uint64_t read_ns;
	uint64_t owner;
	int32_t pid;
	uint32_t reserved; /* 0 */
};

struct dn_segment {
	uint64_t magic;
	uint32_t version;
	uint32_t size;          /* sizeof(struct dn_segment) of the writer    */
	uint32_t owner_uid;
	uint32_t reserved;      /* 0 (version 2 kept the lock word here)       */
	uint32_t predict_mask;  /* DN_PREDICT_*                               */
	uint32_t cache_backend; /* enum dn_cache_backend                      */
	uint64_t probe_threshold_ns; /* probe backend: hit/miss boundary    */
	uint64_t chunk_bytes;   /* largest piece a throttled call is cut into */
	uint64_t created_ns;    /* CLOCK_MONOTONIC                             */
	uint32_t attached_runs; /* supervisors using this class; last unlinks  */
	uint32_t flags;         /* DN_FLAG_*                                   */
	struct dn_caps caps;
	char class_name[DN_CLASS_NAME_MAX];
	char trace_path[DN_PATH_MAX]; /* "" = no trace                        */
	struct dn_counters counters;  /* processes of the class with no run slot;
				       * the class total is this plus all runs' */
	struct dn_run runs[DN_MAX_RUNS];
	struct dn_window window;
	/* The network (version 7; rate-windows §5): its own caps and window,
	 * independent of the disk's, charged by the agent's socket hooks
	 * (src/agent/io_net.c).  The supervisor's feedback and slack are
	 * about the disk and never touch these. */
	struct dn_caps net_caps;
	struct dn_window net_window;
	struct dn_scavenger scavenger; /* version 8 */
	/* Version 9: which rule the class's two windows police by
	 * (DN_WINDOW_POLICY_*; `discnice run --window-policy`), set at
	 * creation.  An agent that finds another value refuses the segment. */
	uint32_t window_policy;
	uint32_t reserved_9; /* 0 */
	/* The class lock (src/common/segment.c, segment_lock()): 0 when free,
	 * else its holder's token, pid << 32 | a sequence number of that
	 * process.  A token is never reused while the lock could still be
	 * held under it, so a waiter that sees one token for longer than
	 * DN_LOCK_BREAK_NS may take the lock over, and a holder whose lock
	 * was taken over releases nothing (unlock is a compare-and-swap of
	 * its own token). */
	uint64_t lock;
	uint32_t in_hand_used; /* slots taken: 0 lets a reader skip the lock */
	uint32_t reserved_13;  /* 0 */
	struct dn_piece_in_hand in_hand[DN_PIECES_IN_HAND];
	uint32_t read_in_next; /* version 14 */
	uint32_t read_in_used; /* records written: 0 lets a reader skip the lock */
	struct dn_piece_read_in read_in[DN_PIECES_READ_IN];
};

/* How long a waiter lets one holder keep the class lock before taking it
 * over: the critical sections are a policy computation of a few
 * microseconds that never sleeps (policy.h), so a holder still in it after
 * this long was stopped (SIGSTOP, a debugger, the supervisor's own hold),
 * killed, or its pid was reused - or preempted on a busy machine, which
 * the waiter tells by a thread of the holder's process that is running or
 * runnable; that holder is let finish, up to DN_LOCK_BREAK_BUSY_NS
 * (src/common/segment.c, segment_lock).  No process blocks its class
 * longer. */
#define DN_LOCK_BREAK_NS      20000000u   /* 20 ms */
#define DN_LOCK_BREAK_BUSY_NS 1000000000u /* 1 s   */

/* dn_segment.window_policy */
#define DN_WINDOW_POLICY_SLIDING 0u /* policy/rate_window.c (the default)   */
#define DN_WINDOW_POLICY_PAPER   1u /* policy/paper_window.c (rate-windows §3.2) */

#define DN_FLAG_VERBOSE         1u
#define DN_FLAG_YIELD_THROTTLED 2u /* --policy yield: held at the caps now */
/* --net-unix (version 7): AF_UNIX sockets count as network too.  Off by
 * default: they never leave the machine (X11, D-Bus, the journal, a
 * database's local socket), and slowing them slows the desktop, not a
 * link.  The creator's choice, read by each agent at start-up. */
#define DN_FLAG_NET_UNIX        4u
/* --policy yield on a class with network caps (bits only; version 8):
 * the network runs free now (its caps are YIELD_NET_FREE_BPS, tool_yield.h)
 * or is held at its caps (DN_FLAG_NET_YIELD_THROTTLED). */
#define DN_FLAG_NET_YIELD_FREE      8u
#define DN_FLAG_NET_YIELD_THROTTLED 16u

#endif
