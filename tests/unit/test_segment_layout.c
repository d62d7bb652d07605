/* Description: the agent/supervisor contract - segment layout is fixed-width, versioned and validated on attach. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/segment.h"
#include "policy/rate_window.h"
#include "unit.h"

/* The layout as shipped in version 16 (1 had no dn_run.stopped_ns; 2 kept a
 * 32-bit lock word holding a pid at offset 20, now `reserved`, and had no
 * 64-bit token lock at the end; 4 had no attach fields in dn_run; 5 no suspension of --policy manners;
 * 6 no network: no net_* counters, net_caps or net_window; 7 no scavenger;
 * 8 no paper event queue in dn_window and no window_policy; 9 no agent_loads counter;
 * 10 no dn_run.start_ticks; 11 no dn_run.interrupted_ns; 12 no pieces in hand;
 * 13 no pieces read in; 14 had 64 slots of pieces in hand, not 256; 15
 * had 128 records of pieces read in, not 1024).
 * Any change here must bump
 * DN_SEGMENT_VERSION: agents of another version then refuse the segment
 * instead of misreading it. */
_Static_assert(DN_SEGMENT_VERSION == 16, "layout changed: update the offsets below");
_Static_assert(offsetof(struct dn_segment, magic) == 0, "magic first");
_Static_assert(offsetof(struct dn_segment, version) == 8, "");
_Static_assert(offsetof(struct dn_segment, size) == 12, "");
_Static_assert(offsetof(struct dn_segment, owner_uid) == 16, "");
_Static_assert(offsetof(struct dn_segment, reserved) == 20, "");
_Static_assert(offsetof(struct dn_segment, probe_threshold_ns) == 32, "");
_Static_assert(offsetof(struct dn_segment, caps) == 64, "");
_Static_assert(offsetof(struct dn_segment, class_name) == 88, "");
_Static_assert(offsetof(struct dn_segment, trace_path) == 152, "");
_Static_assert(offsetof(struct dn_segment, counters) == 664, "");
_Static_assert(sizeof(struct dn_counters) == 15 * 8, "");
_Static_assert(offsetof(struct dn_counters, net_sent_bytes) == 10 * 8, "");
_Static_assert(offsetof(struct dn_counters, net_received_bytes) == 11 * 8, "");
_Static_assert(offsetof(struct dn_counters, net_slept_ns) == 12 * 8, "");
_Static_assert(offsetof(struct dn_counters, net_throttled_calls) == 13 * 8, "");
_Static_assert(offsetof(struct dn_counters, agent_loads) == 14 * 8, "");
_Static_assert(sizeof(struct dn_run) == 8 + 15 * 8 + 8 + 24 + 40 + 16, "");
_Static_assert(offsetof(struct dn_run, interrupted_ns) == 8 + 15 * 8 + 72, "");
_Static_assert(offsetof(struct dn_run, interrupted_sig) == 8 + 15 * 8 + 80, "");
_Static_assert(offsetof(struct dn_run, manners_write_ns_per_gib) == 8 + 15 * 8 + 56, "");
_Static_assert(offsetof(struct dn_run, start_ticks) == 8 + 15 * 8 + 64, "");
_Static_assert(offsetof(struct dn_run, suspend_until_ns) == 8 + 15 * 8 + 32, "");
_Static_assert(offsetof(struct dn_run, suspended_ns) == 8 + 15 * 8 + 40, "");
_Static_assert(offsetof(struct dn_run, stopped_ns) == 8 + 15 * 8, "");
_Static_assert(offsetof(struct dn_run, attached_pid) == 8 + 15 * 8 + 8, "");
_Static_assert(offsetof(struct dn_run, measured_read_bytes) == 8 + 15 * 8 + 16, "");
_Static_assert(offsetof(struct dn_run, measured_write_bytes) == 8 + 15 * 8 + 24, "");
_Static_assert(offsetof(struct dn_segment, window) % 8 == 0, "window aligned");
_Static_assert(sizeof(struct dn_paper_event) == 24, "");
_Static_assert(offsetof(struct dn_window, paper_span_ns) == 32 + 2 * 8 * DN_WINDOW_BUCKETS, "");
_Static_assert(offsetof(struct dn_window, paper_head) == 32 + 2 * 8 * DN_WINDOW_BUCKETS + 24, "");
_Static_assert(offsetof(struct dn_window, paper_events) == 32 + 2 * 8 * DN_WINDOW_BUCKETS + 32,
	       "");
_Static_assert(DN_PAPER_EVENTS == 100, "rate-windows 3.2: a 100-element array");
_Static_assert(sizeof(struct dn_window) == 32 + 2 * 8 * DN_WINDOW_BUCKETS + 32 + 24 * 100, "");
_Static_assert(offsetof(struct dn_segment, window) == 664 + 15 * 8 + 32 * (8 + 15 * 8 + 8 + 24 + 40 + 16),
	       "");
_Static_assert(offsetof(struct dn_segment, net_caps) ==
		       offsetof(struct dn_segment, window) + sizeof(struct dn_window),
	       "the network's caps follow the disk's window");
_Static_assert(offsetof(struct dn_segment, net_window) ==
		       offsetof(struct dn_segment, net_caps) + sizeof(struct dn_caps),
	       "");
_Static_assert(offsetof(struct dn_segment, scavenger) ==
		       offsetof(struct dn_segment, net_window) + sizeof(struct dn_window),
	       "the scavenger follows the network's window");
_Static_assert(sizeof(struct dn_scavenger) == 9 * 8, "");
_Static_assert(offsetof(struct dn_segment, window_policy) ==
		       offsetof(struct dn_segment, scavenger) + sizeof(struct dn_scavenger),
	       "the window policy follows the scavenger");
_Static_assert(offsetof(struct dn_segment, lock) ==
		       offsetof(struct dn_segment, window_policy) + 8,
	       "the lock follows the window policy");
_Static_assert(offsetof(struct dn_segment, in_hand_used) == offsetof(struct dn_segment, lock) + 8,
	       "the pieces in hand follow the lock");
_Static_assert(sizeof(struct dn_piece_in_hand) == 7 * 8, "");
_Static_assert(DN_PIECES_IN_HAND == 256 && DN_PIECES_READ_IN == 1024, "");
_Static_assert(offsetof(struct dn_segment, in_hand) == offsetof(struct dn_segment, lock) + 16, "");
_Static_assert(offsetof(struct dn_segment, read_in_next) ==
		       offsetof(struct dn_segment, in_hand) + DN_PIECES_IN_HAND * sizeof(struct dn_piece_in_hand),
	       "the pieces read in follow the pieces in hand");
_Static_assert(sizeof(struct dn_piece_read_in) == 7 * 8, "");
_Static_assert(offsetof(struct dn_segment, read_in) == offsetof(struct dn_segment, read_in_next) + 8, "");
_Static_assert(sizeof(struct dn_segment) ==
		       offsetof(struct dn_segment, read_in) + DN_PIECES_READ_IN * sizeof(struct dn_piece_read_in),
	       "no tail padding");

static char dir[256];

static struct dn_segment make_init(void)
{
	struct dn_segment s;
	memset(&s, 0, sizeof s);
	s.magic = DN_SEGMENT_MAGIC;
	s.version = DN_SEGMENT_VERSION;
	s.size = sizeof s;
	s.owner_uid = (uint32_t)getuid();
	s.predict_mask = DN_PREDICT_ALL;
	rate_window_init(&s.window, 1000000000ull, 1);
	rate_window_init(&s.net_window, 1000000000ull, 1);
	return s;
}

/* Write raw bytes as a "segment" and try to attach to it. */
static int attach_bytes(const void *bytes, size_t len, mode_t mode)
{
	char path[300];
	snprintf(path, sizeof path, "%s/seg", dir);
	unlink(path);
	int fd = open(path, O_CREAT | O_WRONLY | O_EXCL, mode);
	CHECK(fd >= 0);
	CHECK(fchmod(fd, mode) == 0);
	CHECK(write(fd, bytes, len) == (ssize_t)len);
	close(fd);
	struct dn_segment *seg = NULL;
	errno = 1234;
	int rc = segment_attach_path(path, &seg);
	CHECK(errno == 1234); /* library code leaves errno alone */
	if (rc == 0)
		munmap(seg, sizeof *seg);
	unlink(path);
	return rc;
}

int main(void)
{
	snprintf(dir, sizeof dir, "/tmp/discnice-layout-%d", (int)getpid());
	CHECK(mkdir(dir, 0700) == 0);
	static struct dn_segment s;
	s = make_init();
	CHECK(segment_validate(&s) == 0);

	CHECK(attach_bytes(&s, sizeof s, 0600) == 0);

	/* Corrupt or foreign segments are refused, never trusted. */
	CHECK(attach_bytes(&s, sizeof s, 0644) == -EPERM);   /* readable by others */
	CHECK(attach_bytes(&s, sizeof s - 8, 0600) == -EPROTO); /* truncated */
	static struct dn_segment bad;
	bad = s;
	bad.magic ^= 1;
	CHECK(attach_bytes(&bad, sizeof bad, 0600) == -EPROTO);
	bad = s;
	bad.version = DN_SEGMENT_VERSION + 1;
	CHECK(attach_bytes(&bad, sizeof bad, 0600) == -EPROTONOSUPPORT);
	/* Another version's class of another size (a job started before an
	 * upgrade) is named as such, not as corrupt. */
	bad.version = DN_SEGMENT_VERSION - 1;
	CHECK(attach_bytes(&bad, sizeof bad - 256, 0600) == -EPROTONOSUPPORT);
	bad = s;
	bad.window.bucket_ns = 0;
	CHECK(attach_bytes(&bad, sizeof bad, 0600) == -EPROTO);
	bad = s;
	bad.net_window.bucket_ns = 0;
	CHECK(attach_bytes(&bad, sizeof bad, 0600) == -EPROTO);
	bad = s;
	bad.window_policy = DN_WINDOW_POLICY_PAPER + 1;
	CHECK(attach_bytes(&bad, sizeof bad, 0600) == -EPROTO);
	bad = s;
	bad.window_policy = DN_WINDOW_POLICY_PAPER;
	CHECK(attach_bytes(&bad, sizeof bad, 0600) == 0);
	bad = s;
	bad.predict_mask = 0x80;
	CHECK(attach_bytes(&bad, sizeof bad, 0600) == -EPROTO);
	bad = s;
	bad.owner_uid = (uint32_t)getuid() + 1;
	CHECK(attach_bytes(&bad, sizeof bad, 0600) == -EPERM);
	memset(&bad, 0xa5, sizeof bad);
	CHECK(attach_bytes(&bad, sizeof bad, 0600) == -EPROTO);

	/* Class names that could escape the directory are refused. */
	char path[512];
	CHECK(segment_path(path, sizeof path, "../x") == -EINVAL);
	CHECK(segment_path(path, sizeof path, ".hidden") == -EINVAL);
	CHECK(segment_path(path, sizeof path, "") == -EINVAL);
	CHECK(segment_path(path, sizeof path, "a b") == -EINVAL);

	/* Create, join, detach: the last one out removes the file. */
	char name[64];
	snprintf(name, sizeof name, "layout-test-%d", (int)getpid());
	struct dn_segment *a, *b;
	int created;
	CHECK(segment_open_or_create(name, &s, &a, &created) == 0 && created == 1);
	CHECK(segment_open_or_create(name, &s, &b, &created) == 0 && created == 0);
	CHECK(a->attached_runs == 2);
	int slot = segment_claim_run(a, (uint32_t)getpid());
	CHECK(slot >= 0);
	CHECK(a->runs[slot].start_ticks > 0 && segment_run_alive(&a->runs[slot]));
	/* Our pid with another start time: a supervisor that died and whose
	 * pid this process took.  Dead, and its slot is the next claim's. */
	a->runs[slot].start_ticks += 1;
	CHECK(!segment_run_alive(&a->runs[slot]));
	CHECK(segment_claim_run(a, (uint32_t)getpid()) == slot);
	CHECK(segment_run_alive(&a->runs[slot]));
	/* The dead one never detached: its count went with its slot.  It
	 * was us, who still detach below. */
	CHECK(a->attached_runs == 1);
	a->attached_runs = 2;
	/* A supervisor that exited and is not reaped yet (a zombie) is dead. */
	pid_t zombie = fork();
	if (zombie == 0)
		_exit(0);
	siginfo_t info;
	CHECK(zombie > 0 && waitid(P_PID, (id_t)zombie, &info, WEXITED | WNOWAIT) == 0);
	int zslot = segment_claim_run(a, (uint32_t)zombie);
	CHECK(zslot >= 0 && zslot != slot && a->runs[zslot].pid == (uint32_t)zombie);
	CHECK(!segment_run_alive(&a->runs[zslot]));
	CHECK(waitpid(zombie, NULL, 0) == zombie);
	CHECK(!segment_run_alive(&a->runs[zslot]));
	segment_release_run(a, zslot);
	CHECK(segment_path(path, sizeof path, name) == 0);
	struct stat st;
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
	segment_release_run(a, slot);
	segment_detach(a, name);
	CHECK(stat(path, &st) == 0);
	segment_detach(b, name);
	CHECK(stat(path, &st) != 0 && errno == ENOENT);

	rmdir(dir);
	return 0;
}
