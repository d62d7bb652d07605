"""Every cap is exact with the default options (issue #9 item 2).

cat of a cold file at caps off the rate tables' 1/5/20 MiB/s - 7.5MiB/s
(base 1024: 7,864,320 B/s) and 9M (base 1000: 9,000,000 B/s) - with the
default --feedback on reaches the cap by the kernel's count: the report's
actual_read_bytes (the supervisor's /proc/self/io growth over the job) over
its elapsed time is within RATE_BAND of the cap.

The shortfall these tests guard against came from reclaim on this VM
(kdamond takes pages the agent read in before the program reads them):
the program's read missed, the kernel's own readahead read megabytes
ahead, the supervisor's feedback charged them, and the agent charged them
again when its prefetch reached them (src/agent/io_read.c, owed_take;
with --feedback off the agent's charge is the only one and stays).
A plain cold run meets it only now and then, so the second test evicts
the file's pages during the run, as reclaim does, and also checks that the
class was charged no more than the kernel read: the agent's predicted
bytes plus the feedback's are compared with the kernel's count.
"""
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from pathlib import Path

from conftest import MiB, _cached_pages, mount_overlay

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from loopfs import LoopFs  # noqa: E402

# Loose enough for a shared 2-core VM, tight enough for the old 2-5 %.
RATE_BAND = (0.97, 1.03)
SECONDS = 4.0
COLD_FRACTION = 0.95
# What the class may be charged beyond the kernel's count: a piece read in
# while cachestat and the kernel's submission race.  Double counting was
# 0.5-1.5 MiB per 32 MiB under the eviction below.
OVERCHARGE_SLACK = 256 * 1024

CAPS = [("7.5MiB/s", 7864320), ("9M", 9000000)]


@pytest.fixture(scope="module", autouse=True)
def _calibrated(env):
    """The first job of a test session with no calibration file measures
    the disk first (discnice(1) FILES: 1 MiB read in the job's tree, in
    the job's own process with --exec): done here, before any job this
    module judges by its tree's read blocks, whatever order tests run in
    (alone, test_probe_backend_after_a_long_prefix_is_exact[exec] read
    17.0 of 16 MiB, 1.05x the cap)."""
    subprocess.run([str(env.discnice_bin), "run", "--exec", "--quiet", "--read-rate", "1MB/s",
                    "--", "true"], env=env.base_env, check=True, stdin=subprocess.DEVNULL)


def _cold_file(env, cap_bps, seconds=SECONDS):
    size = int(cap_bps * seconds) // MiB * MiB
    f = env.make_file(env.path(f"rate-exact/{size // MiB}M.txt"), size)
    env.drop_cache(f)
    return f, size


def _check_at_cap(r, cap_text, cap_bps, size, band=RATE_BAND):
    r.check_exit(0)
    rep = r.check_report()
    if rep["read_cap_bps"] != cap_bps:
        r.fail(f"{cap_text} parsed as {rep['read_cap_bps']} B/s, expected {cap_bps}")
    if rep["actual_read_bytes"] < COLD_FRACTION * size:
        r.fail("precondition: the file was not read from disk (was it cold?)")
    rate = rep["actual_read_bytes"] / rep["elapsed_s"]
    lo, hi = band
    if not lo * cap_bps <= rate <= hi * cap_bps:
        r.fail(f"{rate / MiB:.3f} MiB/s by the kernel's count = {rate / cap_bps:.4f} x the cap "
               f"{cap_text}, outside [{lo}, {hi}] (feedback charged "
               f"{rep.get('feedback_read_bytes', 0)} B, held {rep.get('stopped_s', 0):.2f} s)")
    return rep


@pytest.mark.parametrize("cap_text,cap_bps", CAPS, ids=[c[0] for c in CAPS])
def test_cold_cat_reaches_cap(env, cap_text, cap_bps):
    """cat of a cold file (~4 s at the cap), default feedback: the kernel's
    read bytes over the elapsed time are within [0.97, 1.03] x the cap."""
    f, size = _cold_file(env, cap_bps)
    r = env.run(["cat", f], extra_args=["--read-rate", cap_text], stdout=open(os.devnull, "wb"))
    _check_at_cap(r, cap_text, cap_bps, size)


@pytest.mark.parametrize("cap_text,cap_bps", CAPS, ids=[c[0] for c in CAPS])
def test_cat_under_reclaim_reaches_cap(env, cap_text, cap_bps):
    """The same cat while its file's pages are evicted every 1.5 s
    (POSIX_FADV_DONTNEED, as reclaim would): still within [0.97, 1.03] x
    the cap, and the class was charged (predicted + feedback) at most
    256 KiB more than the kernel read - nothing is paid for twice."""
    f, size = _cold_file(env, cap_bps)
    job = env.start(["cat", f], extra_args=["--read-rate", cap_text])
    fd = os.open(f, os.O_RDONLY)

    def evict():
        while job.proc.poll() is None:
            time.sleep(1.5)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

    t = threading.Thread(target=evict, daemon=True)
    t.start()
    try:
        r = job.finish()
    finally:
        t.join()
        os.close(fd)
    rep = _check_at_cap(r, cap_text, cap_bps, size)
    charged = rep["predicted_read_bytes"] + rep["feedback_read_bytes"]
    if charged > rep["actual_read_bytes"] + OVERCHARGE_SLACK:
        r.fail(f"charged {charged} B (predicted {rep['predicted_read_bytes']} + feedback "
               f"{rep['feedback_read_bytes']}) for {rep['actual_read_bytes']} B the kernel read: "
               "I/O paid for twice")


# -- many threads, one file -----------------------------------------------------------
#
# Threads reading slices of one file through one descriptor share the
# agent's model of it: a thread's plan reaches into the next slice (the
# kernel's windows here are 8 MiB), and a piece another thread took to
# read in, sleeping for its charge, looked missing to the next prediction
# and was charged again: 32 threads ran 14 % under the cap, 64 threads
# 12 %; two processes reading the file together, 26 % under
# (src/agent/pieces_in_hand.c).

def _check_slices_at_cap(env, threads, descriptors, feedback, band=RATE_BAND, cap=CAPS[1],
                         seconds=SECONDS):
    """slice_readers: threads pread disjoint slices of one cold file at 9M
    (128 KiB calls) through one descriptor ("shared") or one each
    ("own"): within band x the cap, and every slice read whole."""
    cap_text, cap_bps = cap
    f, size = _cold_file(env, cap_bps, seconds)
    r = env.run([env.program("slice_readers"), f, str(threads), "131072", descriptors],
                extra_args=["--read-rate", cap_text, "--feedback", feedback])
    _check_at_cap(r, cap_text, cap_bps, size, band)
    got = int(r.stdout.strip())
    if got != size // threads * threads:
        r.fail(f"the threads read {got} B of {size // threads * threads}")


@pytest.mark.parametrize("threads", [32, 64])
@pytest.mark.parametrize("feedback", ["on", "off"])
def test_threads_reading_slices_of_one_file_reach_cap(env, threads, feedback):
    """N threads pread disjoint slices of one cold file through one shared
    descriptor (128 KiB calls) at 9M: the kernel's read bytes over the
    elapsed time are within [0.97, 1.03] x the cap, with feedback on and
    off, and every slice is read whole."""
    _check_slices_at_cap(env, threads, "shared", feedback)


# Without feedback, a descriptor per thread: each thread's first read
# finds its slice's start cached (its neighbour's window reached it), so
# its model watches that run (src/agent/io_read.c, watch_run) and took
# every rise there - its neighbour's pieces, paid by the neighbour - for
# the kernel's window, and paid it again: 8 threads ran at 0.61-0.66x the
# cap.  Now a rise less the pieces others read in since the look
# (watch_look): 0.96-1.00x in 10 runs by hand.  The band is wider below
# than the others': 16 threads of this file ran 0.97-0.98x, and of a
# 256 MiB file at 16MiB/s 64 threads 0.91-0.92x then (0.97-1.00x since
# stop 58: test_many_descriptors_without_feedback_reach_cap below).  128
# threads, 272 KiB each, with feedback: on 64 slots of
# pieces in hand (segment v14) 0.74-0.99x in 3 runs by hand, on 256
# 0.99-1.00x (a piece taken with every slot in use is seen by no other
# plan; a taker that waited for a free slot instead, tried, did no
# better, so that is not the whole story).  Without feedback 128 threads
# ran at 0.45-0.90x until the records of pieces read in were 1024, not 128
# (segment v16: a plan waits behind every other taker's pieces, and 128
# records lasted about a second), and a look at the watch's span gathered
# them in parts of at most 64 (theirs_cached()): 0.997-0.998x by hand.
OWN_DESCRIPTORS_BAND = (0.94, 1.03)


@pytest.mark.parametrize("threads,feedback", [(8, "on"), (8, "off"), (128, "on"), (128, "off")])
def test_descriptors_reading_slices_of_one_file_reach_cap(env, threads, feedback):
    """8 or 128 threads, each with a descriptor of its own, pread adjacent
    slices of one cold file at 9M: within [0.94, 1.03] x the cap by the
    kernel's count, with feedback on and off, and every slice read
    whole."""
    _check_slices_at_cap(env, threads, "own", feedback, OWN_DESCRIPTORS_BAND)


# 128 threads reading 2 MiB slices hold 128 pieces of 1 MiB at once, 8 s
# of the cap: a reader waiting for its neighbour's piece gave up after 2 s
# and freed it, and the pre-read of the run after its slice counted that
# neighbour's pieces in hand as holes: read in and paid twice, 0.94-0.98x
# the cap (0.944, 0.937, 0.976, 0.945 by hand).  Now the wait lasts as
# long as the pieces in hand take to pay (in_hand_wait()), and the
# pre-read leaves those pieces to their holders (preread_repair()):
# 0.973-0.995x in 8 runs.  The rest is reclaim: pages read in and taken
# before their reader came are read and paid again.
def test_many_descriptors_reading_large_slices_reach_cap(env):
    """128 threads, a descriptor each, pread 2 MiB slices of one cold
    256 MiB file at 16MiB/s with feedback: within [0.96, 1.03] x the cap."""
    _check_slices_at_cap(env, 128, "own", "on", (0.96, 1.03), ("16MiB/s", 16 * MiB), 16.0)


# 64 threads reading 4 MiB slices without feedback: each thread's watch
# spans 16 MiB, four neighbours' slices, and took pages of their pieces
# read in before its last look, but cached only after it, for the
# kernel's window: 14-18 MiB of rises paid twice, 0.94-0.99x the cap
# (0.957, 0.970, 0.989, 0.940 by hand).  Now the look takes off the rise
# of their pieces' cached pages since the look, whenever read
# (watch_look()): 0.970-1.003x in 7 runs.
def test_many_descriptors_without_feedback_reach_cap(env):
    """64 threads, a descriptor each, pread 4 MiB slices of one cold
    256 MiB file at 16MiB/s without feedback: within [0.96, 1.03] x the
    cap."""
    _check_slices_at_cap(env, 64, "own", "off", (0.96, 1.03), ("16MiB/s", 16 * MiB), 16.0)


@pytest.mark.parametrize("feedback", ["on", "off"])
def test_two_processes_reading_one_file_together_reach_cap(env, feedback):
    """Two cats of one cold file, started together in one job at 9M: within
    [0.97, 1.03] x the cap by the kernel's count of the job's tree, with
    feedback on (each piece charged by its pages still missing) and off
    (by its plan's count, less the pages the other cat's pieces read in
    since: dn_segment.read_in)."""
    cap_text, cap_bps = CAPS[1]
    f, size = _cold_file(env, cap_bps)
    r = env.run(["sh", "-c", 'cat "$1" > /dev/null & cat "$1" > /dev/null; wait', "sh", f],
                extra_args=["--read-rate", cap_text, "--feedback", feedback])
    _check_at_cap(r, cap_text, cap_bps, size)


# -- a file whose start another reader cached -----------------------------------------
#
# `head`, file(1), a thumbnailer or an interrupted earlier run leave the
# first pages of a file cached, with the kernel's PG_readahead marker in
# them.  The job's read crossing that marker made the kernel read a window
# from the end of the cached run by itself and stay a window ahead of the
# agent's model for the rest of the file, every window found cached: no
# prediction at all, and under --exec (no supervisor) a 16 MB/s cap ran at
# 300-500 MB/s (src/agent/io_read.c, watch_look).  Judged by the kernel:
# the blocks the job's process tree read (wait4's ru_inblock) over the
# time from start to its last disk read (_disk_seconds()).

PEEKED_CAP = 12 * 1000 * 1000
PEEKED_SIZE = 48 * MiB


def _peeked_file(env, name, prefix, raw=False):
    """The 48 MiB file name, cold, then its first prefix bytes read by
    another process: through Python's buffer (8 KiB reads), or raw, in one
    read(2) as head -c does."""
    f = env.path(f"rate-exact/peeked-{name}.dat")
    if not f.exists():
        env.make_file(f, PEEKED_SIZE)
    env.drop_cache(f)
    with open(f, "rb", buffering=0 if raw else -1) as fh:
        fh.read(prefix)
    return f


@pytest.mark.parametrize("dest", ["/dev/null", "other-fs"])
def test_cp_after_a_failed_copy_file_range_is_held_at_the_cap(env, dest):
    """GNU cp first tries copy_file_range(), which fails to /dev/null
    (EINVAL) or to another file system (EXDEV), then reads the source
    from the same offset.  The model took the failed call's window for
    read and predicted ~nothing after it: 3.25 of 143 MiB, the job at
    its disk's speed but for feedback (a new-user pass).  With --feedback
    off the model alone must hold the cap, by the kernel's count."""
    cap_text, cap_bps = CAPS[1]
    f, size = _cold_file(env, cap_bps)
    if dest == "/dev/null":
        target = "/dev/null"
    else:
        shm = Path("/dev/shm")
        if not shm.is_dir() or os.stat(shm).st_dev == os.stat(env.scratch).st_dev:
            pytest.skip("no /dev/shm on a file system of its own")
        target = str(shm / f"discnice-test-cp-{os.getpid()}")
    try:
        r = env.run(["cp", f, target], extra_args=["--read-rate", cap_text, "--feedback", "off"])
        rep = _check_at_cap(r, cap_text, cap_bps, size)
    finally:
        if target != "/dev/null":
            Path(target).unlink(missing_ok=True)
    # The chunk the failed copy's prefetch read in was charged again at the
    # fallback's first read, taken for another reader's run: 1 MiB over
    # 34 MiB in every run, the job 2.9-3.1 % under the cap, inside a 3 %
    # band here until a loaded CI run fell outside it.
    if abs(rep["predicted_read_bytes"] - rep["actual_read_bytes"]) > OVERCHARGE_SLACK:
        r.fail(f"predicted {rep['predicted_read_bytes']} B, the kernel read "
               f"{rep['actual_read_bytes']} B")


@pytest.mark.parametrize("copier", ["cp", "cat"])
def test_copy_reaches_the_disk_smoothly_at_the_cap(env, copier):
    """cp, and cat into a file (coreutils copies both with one
    copy_file_range() for the whole file), of a cold 16 MiB file at 4 MB/s
    with the default options.  The agent charged the source's readahead
    windows whole, and the kernel read them at once: cp's
    POSIX_FADV_SEQUENTIAL makes them 16 MiB, 16-18 MiB in a quarter of a
    second at 4 MB/s (a new-user pass); and cp's first copy, paid after it
    worked, was charged again by the supervisor's feedback, the job 3-4 %
    under the cap.  Now the windows are read in by the agent, paced, as for
    read(2) (io_read.c io_copy_read_plan()), and I/O paid after it was made
    is counted at once (throttle.c throttle_charge_done()).  By the kernel:
    the tree's read_bytes every 20 ms, no 1-s window over 1.3x the cap (the
    agent before: 2.0-2.1x); the rate by its block count within 3 %; the
    copy byte-identical.  (A preadv() reader, paced the same way since
    c94a565, is not judged here: in 3 of 27 runs the kernel read an 8 MiB
    window of its own early in the job, a cause not found yet.)"""
    cap = 4 * 1000 * 1000
    # The disk was measured before the module's first job (_calibrated).
    src = env.make_file(env.path(f"rate-exact/copy-{copier}.src"), 16 * MiB)
    dst = env.path(f"rate-exact/copy-{copier}.dst")
    dst.unlink(missing_ok=True)
    env.drop_cache(src)
    job = {"cp": ["cp", str(src), str(dst)],
           "cat": ["sh", "-c", f'cat "{src}" > "{dst}"']}[copier]
    samples = []

    def sample(supervisor, stop):
        high = 0
        while not stop.is_set():
            high = max(high, _tree_read_bytes(supervisor))
            samples.append((time.monotonic(), high))
            time.sleep(0.02)

    wall, disk = _run_inblock(env, ["--quiet", "--read-rate", "4MB/s", "--"] + job,
                              while_running=sample)
    try:
        if disk < 15 * MiB:
            pytest.fail(f"precondition: only {disk / MiB:.1f} MiB read from disk (was it cold?)")
        with open(src, "rb") as a, open(dst, "rb") as b:
            assert a.read() == b.read(), "the copy differs from its source"
        worst = _worst_second(samples)
        assert worst <= 1.3 * cap, (f"{worst / MiB:.1f} MiB read from disk within one second, "
                                    f"{worst / cap:.2f} x the cap of 4 MB/s")
        if not 0.97 * cap <= disk / wall <= 1.03 * cap:
            pytest.fail(f"{disk / MiB:.1f} MiB from disk in {wall:.2f} s = {disk / wall / cap:.3f} x "
                        "the cap of 4 MB/s")
    finally:
        dst.unlink(missing_ok=True)


def _loop_fs_or_skip(fstype, purpose):
    """Skip unless a fstype image can be made on a loop device."""
    why = LoopFs.unavailable()
    if why:
        pytest.skip(f"{purpose} is made on a loop device: {why}")
    if not shutil.which(f"mkfs.{fstype}"):
        pytest.skip(f"needs mkfs.{fstype} ({'xfsprogs' if fstype == 'xfs' else 'btrfs-progs'})")


def test_copy_the_file_system_clones_reads_nothing(env):
    """copy_file_range() on XFS with reflink (mkfs.xfs's default; also
    btrfs, bcachefs, ZFS) clones the extents and reads no data.  Predicted
    and read in by prefetch as a splice would be, `cat src > dst` of a cold
    48 MiB file at 4 MB/s read the whole file from disk, paced, for nothing
    (by hand: 48 MiB in 12.6 s; before prefetch it slept 12.6 s without
    reading).  There the copy is measured, not predicted (io_copy.c
    copy_begin(), graybox/device.h copy_splices).  Oracle: an XFS image on a loop device of its
    own, its /sys/block/loopN/stat read count over the job, and the job's
    wall time; the copy byte-identical."""
    _loop_fs_or_skip("xfs", "a cloning file system")
    with LoopFs(size_mib=512, tag="test-clone", fstype="xfs") as fs:
        src, dst = fs.path("src.dat"), fs.path("dst.dat")
        with open(src, "wb") as f:
            for _ in range(48):
                f.write(os.urandom(MiB))
        fs.drop_cache()
        before = fs.read_bytes()
        t0 = time.monotonic()
        subprocess.run([str(env.discnice_bin), "run", "--quiet", "--read-rate", "4MB/s",
                        "--feedback", "off", "--", "sh", "-c", f'cat "{src}" > "{dst}"'],
                       env=env.base_env, check=True, stdin=subprocess.DEVNULL, timeout=120)
        wall, read = time.monotonic() - t0, fs.read_bytes() - before
        with open(src, "rb") as a, open(dst, "rb") as b:
            assert a.read() == b.read(), "the copy differs from its source"
        assert read < 4 * MiB, f"{read / MiB:.1f} MiB read from the disk for a clone"
        assert wall < 6, f"the clone of 48 MiB took {wall:.1f} s at 4 MB/s (12 s if read)"


@pytest.mark.parametrize("fstype", ["xfs", "btrfs"])
def test_clone_under_a_write_cap_is_not_charged_for_writes(env, fstype):
    """`cat src > dst` (coreutils copies with copy_file_range()) clones
    on XFS (reflink) and btrfs: the copy dirties no page.  The agent
    predicted the destination's writes all the same, and under
    --write-rate 8MB/s a copy of 48 MiB slept 6 s for writes nobody made
    (a new-user pass, once btrfs files were predicted; cp itself clones
    with the FICLONE ioctl, which the agent leaves alone).  Now a copy that
    may clone is measured on both ends: the thread's read and write
    blocks around the call (io_copy.c).  Oracle: the loop device's write
    count (under 4 MiB: metadata), the wall time (a clone: well under the
    6 s a charge would cost), the copy byte-identical."""
    _loop_fs_or_skip(fstype, "a cloning file system")
    with LoopFs(size_mib=512, tag=f"test-clone-w-{fstype}", fstype=fstype) as fs:
        src, dst = fs.path("src.dat"), fs.path("dst.dat")
        data = os.urandom(48 * MiB)
        with open(src, "wb") as f:
            f.write(data)
        subprocess.run(["sync", "-f", src], check=True)
        before = fs.written_bytes()
        t0 = time.monotonic()
        subprocess.run([str(env.discnice_bin), "run", "--quiet", "--write-rate", "8MB/s",
                        "--feedback", "off", "--", "sh", "-c", f'cat "{src}" > "{dst}"'],
                       env=env.base_env, check=True, stdin=subprocess.DEVNULL, timeout=120)
        wall = time.monotonic() - t0
        subprocess.run(["sync", "-f", dst], check=True)
        written = fs.written_bytes() - before
        with open(dst, "rb") as f:
            assert f.read() == data, "the copy differs from its source"
        assert written < 4 * MiB, f"{written / MiB:.1f} MiB written to the disk for a clone"
        assert wall < 3, f"the clone of 48 MiB took {wall:.1f} s at 8 MB/s (6 s if charged)"


@pytest.mark.parametrize("direction", ["read", "write"])
def test_btrfs_file_reaches_the_disk_smoothly_at_the_cap(env, direction):
    """A btrfs file's st_dev is an anonymous device with no
    /sys/dev/block entry, so the agent took it for no disk at all and
    predicted nothing: under --feedback off no cap held (a cold 96 MiB cat
    at 8 MB/s in 0.1 s), and with feedback the disk saw bursts of 4.2x
    the cap in one second for reads and the whole write at the end, 8.4x
    (a new-user pass).  Now the file's bdi (btrfs-N, found through
    BTRFS_IOC_FS_INFO and /sys/fs/btrfs/FSID/bdi) gives the model its
    readahead window (graybox/device.c).  48 MiB at 8 MB/s with
    --feedback off, so the model alone holds it.  Oracle: a btrfs image on
    a loop device of its own, its /sys/block/loopN/stat sampled every
    0.1 s: no 1-s window over 1.3x the cap, and the job's bytes at the
    disk's count within 5 % of the cap over the job's time; the data
    byte-identical."""
    _loop_fs_or_skip("btrfs", "a btrfs image")
    cap, size = 8 * 1000 * 1000, 48 * MiB
    data = os.urandom(size)
    with LoopFs(size_mib=512, tag="test-btrfs", fstype="btrfs") as fs:
        src, dst = fs.path("src.dat"), fs.path("dst.dat")
        count = fs.read_bytes if direction == "read" else fs.written_bytes
        if direction == "read":
            with open(src, "wb") as f:
                f.write(data)
            subprocess.run(["sync", "-f", src], check=True)
            fs.drop_cache()
            job = ["--read-rate", "8MB/s", "--", "cat", src]
        else:
            src = env.path("rate-exact/btrfs-write.src")
            src.parent.mkdir(parents=True, exist_ok=True)
            src.write_bytes(data)           # in the cache: only the writes count
            job = ["--write-rate", "8MB/s", "--", "dd", f"if={src}", f"of={dst}", "bs=1M",
                   "status=none"]
        base, wall, samples = _run_sampled(env, job, count)
        if direction == "write":
            subprocess.run(["sync", "-f", dst], check=True)
            with open(dst, "rb") as f:
                assert f.read() == data, "the copy differs from its source"
            during = samples[-1][1] - base
            moved = count() - base              # the last chunk's writeback ends after
        else:
            during = moved = count() - base
        print(f"{direction}: {during / MiB:.2f} MiB at the disk during the job, "
              f"{moved / MiB:.2f} in all, {wall:.2f} s")
        if during < 0.9 * size:
            pytest.fail(f"only {during / MiB:.1f} of {size / MiB:.0f} MiB reached the disk "
                        "during the job")
        _check_smooth_at_cap(samples, moved, wall, cap, direction)


@pytest.mark.parametrize("direction", ("read", "write"))
def test_overlayfs_file_is_held_at_the_cap(env, direction):
    """A file seen through overlayfs (a container's root) has an anonymous
    st_dev, so the agent took it for no disk: under --feedback off a cold
    40 MB cat at 8 MB/s took 0.03 s (a new-user pass).  Its pages are the
    file beneath's, on that file system's disk; the agent now finds that
    disk among the mounts of the same size (graybox/device.c), and reads
    the cache with mincore, since cachestat of an overlay file sees
    nothing.  Writes are held as they are dirtied; paced writeback does not
    apply (sync_file_range() of an overlay file starts nothing).  Oracle:
    an ext4 image on a loop device of its own under the overlay, its
    /sys/block/loopN/stat; reads: no 1-s window over 1.3x the cap and the
    rate within 5 %; writes: all of them on the disk after a sync, at no
    more than 1.05x the cap over the job's time."""
    _loop_fs_or_skip("ext4", "the disk beneath an overlay")
    cap, size = 8 * 1000 * 1000, 40 * MiB
    data = os.urandom(size)
    with LoopFs(size_mib=512, tag="test-overlay", fstype="ext4") as fs:
        layers = {n: Path(fs.path(n)) for n in ("lower", "upper", "work", "merged")}
        for d in layers.values():
            d.mkdir()
        if direction == "read":
            # Cold before the overlay is mounted: drop_cache() remounts.
            (layers["lower"] / "src.dat").write_bytes(data)
            fs.drop_cache()
        mount_overlay(layers)
        try:
            merged = layers["merged"]
            if direction == "read":
                job = ["--read-rate", "8MB/s", "--", "cat", str(merged / "src.dat")]
                count = fs.read_bytes
            else:
                src = env.path("rate-exact/overlay-write.src")
                src.parent.mkdir(parents=True, exist_ok=True)
                src.write_bytes(data)
                job = ["--write-rate", "8MB/s", "--", "dd", f"if={src}",
                       f"of={merged / 'dst.dat'}", "bs=1M", "status=none"]
                count = fs.written_bytes
            base, wall, samples = _run_sampled(env, job, count)
            if direction == "write":
                subprocess.run(["sync", "-f", str(merged / "dst.dat")], check=True)
                assert (merged / "dst.dat").read_bytes() == data, "the copy differs"
                moved = count() - base
                print(f"write: {moved / MiB:.2f} MiB at the disk, {wall:.2f} s")
                assert moved >= 0.95 * size, f"only {moved / MiB:.1f} MiB reached the disk"
                if size / wall > 1.05 * cap:
                    pytest.fail(f"{size / MiB:.0f} MiB written through the overlay in "
                                f"{wall:.2f} s = {size / wall / cap:.2f} x the cap of 8 MB/s")
                return
            moved = count() - base
            print(f"read: {moved / MiB:.2f} MiB at the disk, {wall:.2f} s")
            if moved < 0.9 * size:
                pytest.fail(f"only {moved / MiB:.1f} of {size / MiB:.0f} MiB came from the disk")
            _check_smooth_at_cap(samples, moved, wall, cap, "read")
        finally:
            subprocess.run(["umount", str(layers["merged"])], capture_output=True)


def _run_sampled(env, job, count):
    """`discnice run --quiet --feedback off JOB` to its end, with count()
    (a loop device's bytes) sampled every 0.1 s meanwhile: (the count
    before, wall seconds, [(time, count)])."""
    samples = []

    def sample(supervisor, stop):
        while not stop.is_set():
            samples.append((time.monotonic(), count()))
            time.sleep(0.1)

    base = count()
    wall, _ = _run_inblock(env, ["--quiet", "--feedback", "off"] + job, while_running=sample)
    return base, wall, samples


def _check_smooth_at_cap(samples, moved, wall, cap, what):
    """No 1-s window at the disk over 1.3x the cap, and the job's bytes at
    the disk within 5 % of the cap over its time."""
    worst = _worst_second(samples)
    assert worst <= 1.3 * cap, (f"{worst / MiB:.1f} MiB {what} at the disk within one "
                                f"second, {worst / cap:.2f} x the cap of {cap / 1e6:g} MB/s")
    if not 0.95 * cap <= moved / wall <= 1.05 * cap:
        pytest.fail(f"{moved / MiB:.1f} MiB at the disk in {wall:.2f} s = "
                    f"{moved / wall / cap:.3f} x the cap of {cap / 1e6:g} MB/s")


def _worst_second(samples):
    """The most a rising count grew within one second, from (time,
    count) samples."""
    worst, j = 0, 0
    for i in range(len(samples)):
        while samples[i][0] - samples[j][0] > 1.0:
            j += 1
        worst = max(worst, samples[i][1] - samples[j][1])
    return worst


def _run_inblock(env, args, while_running=None):
    """discnice run ARGS to its end: (wall seconds, bytes the kernel says
    the tree read from disk).  while_running(supervisor_pid, stop), if
    given, runs in a thread until the job has ended and stop is set."""
    t0 = time.monotonic()
    proc = subprocess.Popen([str(env.discnice_bin), "run", *args], cwd=env.scratch,
                            env=env.base_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    stop = threading.Event()
    watcher = threading.Thread(target=while_running, args=(proc.pid, stop)) if while_running else None
    if watcher:
        watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    stop.set()
    if watcher:
        watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    assert proc.returncode == 0, (args, proc.returncode, err)
    return wall, usage.ru_inblock * 512


def _disk_seconds(samples, t0, wall):
    """Seconds from t0 until the tree's read bytes, sampled as (monotonic
    time, count), reached their last value: the job's disk phase.  A reader
    that hashes what it read (md5sum) works on after its last disk read -
    0.07 s idle, 0.18 s beside two busy loops, 2-4 % of these jobs - and
    that CPU time is not the cap's to hold: judged over the whole wall
    time, md5sum after a 20 MB peek failed a 0.97 floor in 4 of 4 runs on
    a loaded machine, its disk reads ending exactly at size / cap.  The
    sample that first saw the last value bounds it from above (the wall
    time if that was the last sample, when the count may have grown after
    it)."""
    if not samples:
        return wall
    top = samples[-1][1]
    first = next(i for i, (_, b) in enumerate(samples) if b >= top)
    return wall if first == len(samples) - 1 else min(wall, samples[first][0] - t0)


def _check_rate(disk, wall, seconds, cap, low, high, what):
    """At most high x cap over the whole job (wall seconds: bytes the kernel
    read ahead early and the agent charged late average out, as the cap's
    window does), and at least low x cap over its disk phase (seconds,
    _disk_seconds(): the reader's CPU time after its last read is not a
    shortfall of the cap)."""
    if disk / wall > high * cap:
        pytest.fail(f"{disk / MiB:.1f} MiB from disk in {wall:.2f} s = {disk / wall / cap:.3f} x "
                    + what)
    if disk / seconds < low * cap:
        pytest.fail(f"{disk / MiB:.1f} MiB from disk in the {seconds:.2f} s to the last read "
                    f"(of {wall:.2f} s) = {disk / seconds / cap:.3f} x " + what)


def _run_disk_phase(env, args, while_running=None):
    """_run_inblock, with the tree's read bytes sampled every 20 ms: (wall
    seconds, disk bytes, seconds of the disk phase, _disk_seconds())."""
    samples, t0 = [], time.monotonic()

    def watch(pid, stop):
        other = threading.Thread(target=while_running, args=(pid, stop)) if while_running else None
        if other:
            other.start()
        high = 0
        while not stop.is_set():
            high = max(high, _tree_read_bytes(pid))
            samples.append((time.monotonic(), high))
            time.sleep(0.02)
        if other:
            other.join()

    wall, disk = _run_inblock(env, args, while_running=watch)
    return wall, disk, _disk_seconds(samples, t0, wall)


@pytest.mark.parametrize("reader,mode,prefix,backend", [
    ("cat", "--exec", 4096, "auto"),
    ("md5sum", "--exec", 4096, "auto"),
    ("md5sum", "--feedback=off", 4096, "auto"),
    ("cat", "--exec", 12 * 1000 * 1000, "auto"),
    ("cat", "--exec", 12 * 1000 * 1000, "probe"),
    ("md5sum", "--feedback=off", 12 * 1000 * 1000, "probe"),
    ("md5sum", "--exec", 4096, "probe"),
    ("cp", "--exec", 12 * 1000 * 1000, "probe"),
], ids=["cat-exec-4k", "md5sum-exec-4k", "md5sum-feedback-off-4k", "cat-exec-12M",
        "probe-cat-exec-12M", "probe-md5sum-feedback-off-12M", "probe-md5sum-exec-4k",
        "probe-cp-exec-12M"])
def test_file_whose_start_was_read_before_is_held_at_the_cap(env, reader, mode, prefix, backend):
    """A 48 MiB file of which another process read the first PREFIX bytes
    just before, read by cat (read(2)), md5sum (stdio) or cp (copy_file_range)
    at --read-rate 12M
    without the supervisor's feedback: from start to its last disk read
    the tree reads at most 1.03 x the cap by the kernel's block count (it used to be 25-40 x)
    and at least 0.90 x (the cached start is free).  With the timing-probe
    detector too - the one a user's files they cannot write get - which
    cannot watch the cached start and asks the kernel what each call read
    instead (io_read.c io_unseen_settle(); it ran at 6.7 x a 16M cap)."""
    f = _peeked_file(env, f"{reader}-{prefix}", prefix)
    cmd = [reader, str(f)] + ([str(env.path("rate-exact/peeked-copy.out"))] if reader == "cp" else [])
    wall, disk, seconds = _run_disk_phase(env, [mode, "--quiet", "--cache-backend", backend,
                                                "--read-rate", "12M", "--", *cmd])
    if disk < PEEKED_SIZE - prefix - 16 * MiB:
        pytest.fail(f"precondition: only {disk / MiB:.1f} MiB read from disk")
    _check_rate(disk, wall, seconds, PEEKED_CAP, 0.90, 1.03,
                f"the cap of 12 MB/s (after {prefix} bytes were read by another process)")


@pytest.mark.parametrize("reader,mode,runs", [
    ("cat", "--feedback=on", [(16, 12)]),
    ("md5sum", "--feedback=off", [(16, 12)]),
    ("cat", "--feedback=off", [(24, 8)]),
    ("cat", "--feedback=off", [(16, 1)]),
    ("cat", "--feedback=off", [(8, 6), (28, 6)]),
], ids=["cat-defaults", "md5sum-feedback-off", "cat-feedback-off-late", "cat-feedback-off-1M",
        "cat-feedback-off-two-runs"])
def test_file_read_in_the_middle_before_is_held_at_the_cap(env, reader, mode, runs):
    """The same when the other process read from the middle of the file
    (dd skip=, an interrupted copy): RUNS of (MiB from, MiB long).  The job
    streams cold onto the run it left, with its marker in it, which the
    agent now watches and reads past ahead of the reader, paced, as it does
    after a cached start (io_read.c meets_foreign_run()), and whose reads it
    checks for the kernel's own from then on (io_unseen_wanted()).  The old
    agent saw only a cached start: 40 of the kernel's 70 MiB predicted,
    1.2-2.5 x the cap without feedback."""
    f = env.path(f"rate-exact/middle-{reader}-{len(runs)}.dat")
    if not f.exists():
        env.make_file(f, PEEKED_SIZE)
    # The probe threshold, measured once per user and stored (about 1 MB
    # of disk reads of discnice's own, 3 % of this short job): not now.
    _run_inblock(env, ["--quiet", "--read-rate", "12M", "--", "true"])
    env.drop_cache(f)
    with open(f, "rb", buffering=0) as fh:
        for start, length in runs:
            fh.seek(start * MiB)
            left = length * MiB
            while left > 0:
                left -= len(fh.read(min(left, 128 * 1024)))
        cold = PEEKED_SIZE - _cached_pages(fh.fileno()) * 4096
    wall, disk, seconds = _run_disk_phase(env, [mode, "--quiet", "--read-rate", "12M", "--", reader,
                                                str(f)])
    if disk < 0.9 * cold or cold < PEEKED_SIZE / 4:
        pytest.fail(f"precondition: {disk / MiB:.1f} MiB read from disk of {cold / MiB:.1f} MiB "
                    "not cached before")
    _check_rate(disk, wall, seconds, PEEKED_CAP, 0.90, 1.03,
                f"the cap of 12 MB/s (after another process read {runs} MiB of it)")


@pytest.mark.parametrize("form", [["--exec"], ["--feedback=off"], []],
                         ids=["exec", "feedback-off", "defaults"])
def test_probe_backend_after_a_long_prefix_is_exact(env, form):
    """The timing-probe detector after another reader read the first 20 MB
    in 128 KiB reads (as head(1) does), cat at 6MB/s: within 3 % of the cap
    by the kernel's block count, in each form.  It ran 7 % under in the
    first two (the model's windows, partly cached, were charged whole: the
    prefetch now charges what readahead(2) really read, io_read.c
    prefetch_settle()) and 30 % under with the supervisor (a probe read()
    landed on the earlier reader's PG_readahead marker, the kernel read
    8 MiB for it, and the job paid it twice: probes now fault the page in,
    cache_detector.h by_fault)."""
    cap = 6 * 1000 * 1000
    f = env.path("rate-exact/peeked-long.dat")
    if not f.exists():
        env.make_file(f, 40 * MiB)
    env.drop_cache(f)
    with open(f, "rb", buffering=0) as fh:
        left = 20 * 1000 * 1000
        while left > 0:
            left -= len(fh.read(min(left, 128 * 1024)))
    wall, disk = _run_inblock(env, [*form, "--quiet", "--cache-backend", "probe",
                                    "--read-rate", "6MB/s", "--", "cat", str(f)])
    if disk < 8 * MiB:
        pytest.fail(f"precondition: only {disk / MiB:.1f} MiB read from disk")
    rate = disk / wall
    if not 0.97 * cap <= rate <= 1.03 * cap:
        pytest.fail(f"{disk / MiB:.1f} MiB from disk in {wall:.2f} s = {rate / cap:.3f} x the cap "
                    "of 6 MB/s (after another reader read the first 20 MB)")


def _count_trace_stops(supervisor, stop):
    """How many times the threads of the supervisor's job entered a ptrace
    stop (state t in /proc/PID/task/TID/stat: the supervisor's holds)
    until stop is set, looking every millisecond; a hold lasts a tick
    (5 ms) or more.  None if the job was never seen."""
    job = None
    while job is None and not stop.is_set():
        try:
            with open(f"/proc/{supervisor}/task/{supervisor}/children") as fh:
                kids = fh.read().split()
        except FileNotFoundError:
            return None
        job = int(kids[0]) if kids else None
        time.sleep(0.001)
    if job is None:
        return None
    stops, held = 0, set()
    while not stop.is_set():
        try:
            tids = os.listdir(f"/proc/{job}/task")
        except FileNotFoundError:
            break
        for tid in tids:
            try:
                with open(f"/proc/{job}/task/{tid}/stat") as fh:
                    state = fh.read().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if state == "t" and tid not in held:
                stops += 1
                held.add(tid)
            elif state != "t":
                held.discard(tid)
        time.sleep(0.001)
    return stops


def test_probe_backend_feedback_does_not_owe_twice(env):
    """md5sum (stdio, 32 KiB reads that hash between them) with the
    timing-probe detector and the supervisor's feedback, after another
    reader read the first 4 KiB, at 7.5MiB/s.  The agent counted each
    chunk's prediction before the sleep that paid for it, so its count led
    the kernel's for the whole sleep; a supervisor tick then gave back the
    600 KB feedback had charged for the kernel's own window, and owed it
    again once the kernel read the chunk - every chunk, as a debt the
    window could not take yet, which held the hashing job: 10-13 holds a
    run, 2.4-6.5 % under the cap in the bench (throttle.c
    count_prediction()).  By the kernel: the job's threads seen in a
    ptrace stop (the holds) at most 6 times, and the rate by its block
    count within 3 % of the cap."""
    cap = int(7.5 * MiB)
    f = _peeked_file(env, "md5sum-feedback", 4096, raw=True)
    counted = []
    wall, disk, seconds = _run_disk_phase(
        env, ["--quiet", "--cache-backend", "probe", "--read-rate", "7.5MiB/s", "--", "md5sum",
              str(f)],
        while_running=lambda pid, stop: counted.append(_count_trace_stops(pid, stop)))
    assert counted[0] is not None, "precondition: the job's process was not seen"
    if disk < PEEKED_SIZE - 16 * MiB:
        pytest.fail(f"precondition: only {disk / MiB:.1f} MiB read from disk")
    assert counted[0] <= 6, f"the job was held {counted[0]} times"
    _check_rate(disk, wall, seconds, cap, 0.97, 1.03,
                "the cap of 7.5 MiB/s (probe detector, feedback on, after a 4 KiB peek)")


def _tree_read_bytes(pid):
    """read_bytes (/proc/PID/io: the kernel's count at submission) of pid
    and its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/io") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("read_bytes:"))
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            pass
    return total


@pytest.mark.parametrize("reader,form,evict", [
    ("cat", ["--exec"], False),
    ("md5sum", [], False),
    ("cat", ["--feedback=off"], True),
], ids=["cat-exec", "md5sum-defaults", "cat-feedback-off-reclaimed"])
def test_file_whose_start_was_read_before_reaches_the_disk_smoothly(env, reader, form, evict):
    """After another reader read the first 20 MB in 128 KiB reads, its last
    readahead window's PG_readahead marker lies in the cached start.  The
    job's read crossing it made the kernel read a whole window (8-16 MiB)
    past the run at once: at 4 MB/s, 8.7 MB in the first second and none
    in the next (bench/rate_peeked.py).  Now the agent reads that window
    in itself, paced, before the job can reach the marker, so that the
    marker starts nothing (io_read.c preread_after_run()).  Judged by the
    job tree's read_bytes every 20 ms: no 1-s window from the start holds
    more than 1.5 x the cap.  evict: pages of what the agent read in are
    dropped while it still reads the rest, as reclaim does on this VM
    (a hole there lets the marker start a window from it: the agent reads
    the holes in again, paid, preread_repair()); and by the blocks the
    tree read over its wall time, within 3 % of the cap."""
    cap = 4 * 1000 * 1000
    f = env.path("rate-exact/peeked-smooth.dat")
    if not f.exists():
        env.make_file(f, 40 * MiB)
    # The disk was measured before the module's first job (_calibrated).
    env.drop_cache(f)
    with open(f, "rb", buffering=0) as fh:
        left = 20 * 1000 * 1000
        while left > 0:
            left -= len(fh.read(min(left, 128 * 1024)))
    fd = os.open(f, os.O_RDONLY)
    run_end = _cached_pages(fd)  # the cached start, in pages
    proc = subprocess.Popen([str(env.discnice_bin), "run", *form, "--quiet",
                             "--read-rate", "4MB/s", "--", reader, str(f)],
                            cwd=env.scratch, env=env.base_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    t0, samples, high, evicted = time.monotonic(), [], 0, False
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            now = time.monotonic() - t0
            if pid:
                break
            high = max(high, _tree_read_bytes(proc.pid))
            samples.append((now, high))
            if evict and not evicted and now > 2.5:
                # 2 MiB of what the agent has read in by now (10 MB at
                # the cap), 4 MiB past the run: within a window of the
                # marker, so that the window from the hole would reach
                # past what was read in.
                os.posix_fadvise(fd, run_end * 4096 + 4 * MiB, 2 * MiB, os.POSIX_FADV_DONTNEED)
                evicted = True
            time.sleep(0.02)
    finally:
        os.close(fd)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, err
    disk = usage.ru_inblock * 512
    if disk < 12 * MiB:
        pytest.fail(f"precondition: only {disk / MiB:.1f} MiB read from disk")
    # Whatever was read again is paid: the rate of the disk phase holds too.
    _check_rate(disk, now, _disk_seconds(samples, 0.0, now), cap, 0.97, 1.03, "the cap of 4 MB/s")
    wins = [0] * int(samples[-1][0])  # whole seconds only
    prev = 0
    for t, b in samples:
        if int(t) < len(wins):
            wins[int(t)] += b - prev
        prev = b
    worst = max(wins)
    if worst > 1.5 * cap:
        pytest.fail(f"{worst / 1e6:.1f} MB in one second at a 4 MB/s cap; MB per second: "
                    + " ".join(f"{w / 1e6:.1f}" for w in wins))


def test_file_whose_start_was_read_before_is_dropped_behind(env):
    """--cache drop on such a file: what the job brought in is dropped
    behind it; only the earlier reader's pages (the cached start and its
    readahead) stay.  Before, the whole file stayed."""
    f = _peeked_file(env, "drop", 4096)
    fd = os.open(f, os.O_RDONLY)
    try:
        before = _cached_pages(fd)
    finally:
        os.close(fd)
    _run_inblock(env, ["--quiet", "--cache", "drop", "--read-rate", "64M", "--", "cat", str(f)])
    fd = os.open(f, os.O_RDONLY)
    try:
        after = _cached_pages(fd)
    finally:
        os.close(fd)
    if after > before + 64:
        pytest.fail(f"{after} pages of {PEEKED_SIZE // 4096} cached after the job (before: {before})")
