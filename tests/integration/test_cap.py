"""The cap holds: jobs, their children and classes of jobs stay under it.

These are behavioural bounds, not speed measurements: the job-average rate
by the kernel's count may exceed the cap by at most RATE_SLACK (start-up,
the pro-rata oldest bucket, one piece in flight), and a capped job must
really have been slowed (at least MIN_SLOWDOWN of size/cap).  Exact rate
figures belong to bench/rate.py."""
import sys
import time

import pytest

from conftest import MiB

RATE_SLACK = 1.10          # job-average rate <= 1.10 x cap
CLASS_RATE_SLACK = 1.15    # two concurrent jobs sharing one class budget
MIN_SLOWDOWN = 0.85        # elapsed >= 0.85 x size / cap
COLD_FRACTION = 0.9        # precondition: the kernel read at least this much


def _check_rate(r, byte_key, cap_bps, size, slack=RATE_SLACK):
    rep = r.check_report()
    moved, elapsed = rep[byte_key], rep["elapsed_s"]
    if moved < COLD_FRACTION * size:
        r.fail(f"precondition: kernel {byte_key} = {moved} < {COLD_FRACTION} x {size} "
               "(file not cold / not written?)")
    if elapsed <= 0:
        r.fail("elapsed_s is not positive")
    rate = moved / elapsed
    if rate > slack * cap_bps:
        r.fail(f"kernel-counted rate {rate / MiB:.2f} MiB/s > {slack} x cap "
               f"{cap_bps / MiB:.2f} MiB/s")
    if elapsed < MIN_SLOWDOWN * size / cap_bps:
        r.fail(f"elapsed {elapsed:.2f} s < {MIN_SLOWDOWN} x size/cap = "
               f"{MIN_SLOWDOWN * size / cap_bps:.2f} s: the job was not slowed")


def test_read_cap_holds(env):
    """cat of a cold 40 MiB file at --read-rate 20MiB/s: the kernel's read
    bytes over the elapsed time stay within 1.10 x the cap, and the job
    took at least 0.85 x size/cap."""
    size, cap = 40 * MiB, 20 * MiB
    f = env.make_file(env.path("cap/read40.txt"), size)
    env.drop_cache(f)
    r = env.run(["sh", "-c", 'cat "$1" >/dev/null', "sh", f],
                extra_args=["--read-rate", "20MiB/s"])
    r.check_exit(0)
    _check_rate(r, "actual_read_bytes", cap, size)


def _cold_read_ratio(r, size, cap_bps):
    """The kernel-counted read rate of a finished run of a cold file of
    `size`, as a multiple of the cap, and its report."""
    r.check_exit(0)
    rep = r.check_report()
    moved, elapsed = rep["actual_read_bytes"], rep["elapsed_s"]
    if moved < COLD_FRACTION * size:
        r.fail(f"precondition: kernel read_bytes {moved} < {COLD_FRACTION} x {size}")
    return moved / elapsed / cap_bps, rep


@pytest.mark.parametrize("cap_text,cap_bps", [("7.5MiB/s", 7.5 * MiB), ("9M", 9e6)])
def test_odd_cap_is_reached_with_feedback(env, cap_text, cap_bps):
    """Issue #9 item 2: cat of a cold file at a cap the rate tables do not
    use, with the default --feedback on, runs at the cap - not 2-6 % under
    it, as it did when the supervisor charged readahead the agent had yet
    to predict, and the agent charged it again.  Bounds 0.95..1.05 by the
    kernel's count (the bench's sweep holds +-3 %)."""
    size = int(5 * cap_bps) // MiB * MiB
    f = env.make_file(env.path(f"cap/odd-{size}.dat"), size)
    env.drop_cache(f)
    r = env.run(["cat", f], extra_args=["--read-rate", cap_text])
    ratio, rep = _cold_read_ratio(r, size, cap_bps)
    if not 0.95 <= ratio <= 1.05:
        r.fail(f"kernel-counted rate {ratio:.3f} x the cap {cap_text} (feedback charged "
               f"{rep['feedback_read_bytes'] / MiB:.1f} MiB)")


def test_write_cap_holds(env):
    """dd writing a new 32 MiB file at --write-rate 16MiB/s: the kernel's
    (net) write bytes over the elapsed time stay within 1.10 x the cap, and
    the job took at least 0.85 x size/cap."""
    size, cap = 32 * MiB, 16 * MiB
    out = env.path("cap/write32.bin")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    r = env.run(["dd", "if=/dev/zero", f"of={out}", "bs=1M", "count=32", "status=none"],
                extra_args=["--write-rate", "16MiB/s"])
    r.check_exit(0)
    _check_rate(r, "actual_write_bytes", cap, size)
    if out.stat().st_size != size:
        r.fail(f"dd wrote {out.stat().st_size} bytes, expected {size}")
    out.unlink()


def test_total_cap_holds(env):
    """--rate caps reads plus writes together: copying a cold 16 MiB file
    with dd at --rate 16MiB/s moves 32 MiB of kernel-counted disk I/O no
    faster than 1.10 x the cap."""
    size, cap = 16 * MiB, 16 * MiB
    src = env.make_file(env.path("cap/copy16.txt"), size)
    out = env.path("cap/copy16.out")
    if out.exists():
        out.unlink()
    env.drop_cache(src)
    r = env.run(["dd", f"if={src}", f"of={out}", "bs=1M", "status=none"], rate="16MiB/s")
    r.check_exit(0)
    rep = r.check_report()
    moved = rep["actual_read_bytes"] + rep["actual_write_bytes"]
    if moved < COLD_FRACTION * 2 * size:
        r.fail(f"precondition: kernel counted {moved} bytes, expected about {2 * size}")
    if moved / rep["elapsed_s"] > RATE_SLACK * cap:
        r.fail(f"reads+writes {moved / rep['elapsed_s'] / MiB:.2f} MiB/s > "
               f"{RATE_SLACK} x {cap / MiB:.0f} MiB/s")
    if rep["elapsed_s"] < MIN_SLOWDOWN * 2 * size / cap:
        r.fail("the copy was not slowed to the total cap")
    r.check_file_equals(out, src.read_bytes())


def test_class_shares_budget(env):
    """Two concurrent `discnice run --class T --read-rate 10MiB/s` jobs,
    each reading its own cold 20 MiB file, share one budget: their summed
    kernel-counted reads over the wall time of the pair stay within
    1.15 x 10 MiB/s (separate budgets would give twice the cap)."""
    size, cap = 20 * MiB, 10 * MiB
    files = [env.make_file(env.path(f"class/in{i}.txt"), size) for i in range(2)]
    for f in files:
        env.drop_cache(f)
    cls = env.class_name("share")
    t0 = time.monotonic()
    jobs = [env.start(["sh", "-c", 'cat "$1" >/dev/null', "sh", f],
                      extra_args=["--class", cls, "--read-rate", "10MiB/s"]) for f in files]
    results = [j.finish() for j in jobs]
    wall = time.monotonic() - t0
    for r in results:
        r.check_exit(0)
        r.check_report()
    total = sum(r.report["actual_read_bytes"] for r in results)
    if total < COLD_FRACTION * 2 * size:
        results[0].fail(f"precondition: the pair read {total} bytes from disk, "
                        f"expected about {2 * size}")
    # The jobs really overlapped (else the test proves nothing about sharing).
    overlap = min(r.end for r in results) - max(r.start for r in results)
    if overlap < 0.5:
        results[0].fail(f"the two jobs overlapped only {overlap:.2f} s")
    rate = total / wall
    if rate > CLASS_RATE_SLACK * cap:
        results[0].fail(f"the class moved {rate / MiB:.2f} MiB/s > {CLASS_RATE_SLACK} x "
                        f"{cap / MiB:.0f} MiB/s: the jobs did not share one budget\n"
                        f"--- second job ---\n{results[1].dump()}")


def test_children_regulated(env):
    """A job that forks (`sh -c 'cat a & cat b; wait'`) is regulated in all
    its processes: the kernel's reads of both children over the job's
    elapsed time stay within 1.10 x the cap."""
    size, cap = 10 * MiB, 10 * MiB
    a = env.make_file(env.path("fork/a.txt"), size)
    b = env.make_file(env.path("fork/b.txt"), size)
    env.drop_cache(a)
    env.drop_cache(b)
    r = env.run(["sh", "-c", 'cat "$1" >/dev/null & cat "$2" >/dev/null; wait', "sh", a, b],
                extra_args=["--read-rate", "10MiB/s"])
    r.check_exit(0)
    _check_rate(r, "actual_read_bytes", cap, 2 * size)


@pytest.mark.parametrize("threads", [4])
def test_threads_regulated(env, threads):
    """A multi-threaded job (python3 threads, each reading its own cold file)
    shares the cap across its threads: the kernel-counted rate stays within
    1.10 x the cap."""
    size, cap = 4 * MiB, 8 * MiB
    files = [env.make_file(env.path(f"threads/t{i}.txt"), size) for i in range(threads)]
    for f in files:
        env.drop_cache(f)
    script = ("import sys, threading\n"
              "def rd(p):\n"
              "    with open(p, 'rb', buffering=0) as f:\n"
              "        while f.read(65536): pass\n"
              "ts = [threading.Thread(target=rd, args=(p,)) for p in sys.argv[1:]]\n"
              "[t.start() for t in ts]; [t.join() for t in ts]\n")
    r = env.run(["python3", "-c", script] + files, extra_args=["--read-rate", "8MiB/s"])
    r.check_exit(0)
    _check_rate(r, "actual_read_bytes", cap, threads * size)


def test_the_agents_own_pages_are_not_the_jobs(env):
    """libdiscnice.so out of the page cache (a node's first job after a
    drop): the job's loader read its 1.1 MB, the kernel counted it as the
    job's, and feedback charged it at the cap - `run --rate 100k -- true`
    took 11 s.  The supervisor now reads the agent ahead itself: the
    kernel counts far less than the agent's size for the job."""
    agent = (env.build / "libdiscnice.so").resolve()
    size = agent.stat().st_size
    for _ in range(3):
        env.drop_cache(agent)
        r = env.run(["true"], rate="100k")
        r.check_exit(0)
        rep = r.check_report()
        if rep["actual_read_bytes"] < size // 4:
            return
    r.fail(f"the kernel counted {rep['actual_read_bytes']} B read for `true`, of an agent of "
           f"{size} B (a page of it still cached by a running job would explain one try)")


WILLNEED_THEN_READ = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
if sys.argv[2] == "fadvise":
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
else:
    import ctypes
    ctypes.CDLL(None, use_errno=True).readahead(fd, ctypes.c_int64(0), ctypes.c_size_t(1 << 40))
while os.read(fd, 1 << 20):
    pass
"""


@pytest.mark.parametrize("how", ["fadvise", "readahead"])
def test_a_willneed_hint_is_charged_for_what_the_kernel_reads(env, how):
    """POSIX_FADV_WILLNEED (or readahead(2)) on a whole cold file, then
    the file read: the kernel reads ahead only max(io_pages, ra_pages) for
    the hint, but the agent charged the whole file for it and again as it
    was read - 53 % under the cap.  The kernel-counted rate holds the cap."""
    size, cap = 48 * MiB, 12 * MiB
    f = env.make_file(env.path(f"cap/willneed-{how}.dat"), size)
    env.drop_cache(f)
    r = env.run([sys.executable, "-c", WILLNEED_THEN_READ, f, how],
                extra_args=["--read-rate", "12MiB/s"])
    ratio, _ = _cold_read_ratio(r, size, cap)
    if not 0.90 <= ratio <= 1.10:
        r.fail(f"kernel-counted rate {ratio:.3f} x the cap after a {how} hint")
