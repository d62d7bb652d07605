"""Regulation from outside the agent (issue #4 §1-2): the supervisor's
measured feedback holds the cap for I/O the hooks never see - mmap, a
statically linked Go program, a child that cleared its environment - and a
job is never left stopped, not even when the supervisor is SIGKILLed.
Judged by the kernel's /proc/PID/io (the report's actual_* fields)."""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import MiB

PYTHON = shutil.which("python3")
GO = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
CAP = 16 * MiB
SIZE = 32 * MiB
# Job-level bound, loose: exact rates are bench/'s business.
RATE_TOLERANCE = 1.10

MMAP_SCRIPT = r"""
import mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    total = 0
    for i in range(0, len(m), 4096):
        total += m[i]
print(total)
"""

GO_COPY = r"""package main

import (
	"io"
	"os"
)

func main() {
	in, err := os.Open(os.Args[1])
	if err != nil {
		panic(err)
	}
	out, err := os.Create(os.Args[2])
	if err != nil {
		panic(err)
	}
	if _, err := io.CopyBuffer(out, in, make([]byte, 1<<20)); err != nil {
		panic(err)
	}
	if err := out.Close(); err != nil {
		panic(err)
	}
}
"""


def _check_capped(r, size, cap=CAP):
    rep = r.check_report()
    if rep["actual_read_bytes"] < 0.9 * size:
        r.fail("precondition: the file was not read from disk (was it cold?)")
    rate = rep["actual_read_bytes"] / rep["elapsed_s"]
    if rate > RATE_TOLERANCE * cap:
        r.fail(f"{rate / MiB:.1f} MiB/s by the kernel's count > {RATE_TOLERANCE} x the cap")
    if rep["elapsed_s"] < 0.85 * size / cap:
        r.fail(f"elapsed {rep['elapsed_s']:.2f} s: the job was not slowed to the cap")
    return rep


@pytest.fixture(scope="module")
def big(env):
    return env.make_file(env.path("feedback/big.dat"), SIZE)


@pytest.fixture(scope="module")
def go_copy(env):
    if not GO:
        pytest.skip("needs Go to build a static program")
    d = env.path("feedback/gocopy")
    d.mkdir(parents=True, exist_ok=True)
    (d / "main.go").write_text(GO_COPY)
    (d / "go.mod").write_text("module gocopy\n\ngo 1.20\n")
    out = d / "gocopy"
    genv = dict(os.environ, CGO_ENABLED="0", GOCACHE=str(d / "cache"), GOFLAGS="-mod=mod")
    cp = subprocess.run([GO, "build", "-o", str(out), "."], cwd=d, env=genv,
                        capture_output=True, timeout=300)
    if cp.returncode != 0:
        pytest.skip(f"go build failed: {cp.stderr.decode(errors='replace')[-300:]}")
    return out


def test_mmap_read_held_by_feedback(env, big):
    """A program reading a file through mmap does no read() the agent could
    predict; with feedback (the default) the kernel-counted rate stays at
    the cap, with --feedback off it does not."""
    if not PYTHON:
        pytest.skip("needs python3")
    env.drop_cache(big)
    r = env.run([PYTHON, "-c", MMAP_SCRIPT, big], extra_args=["--read-rate", "16MiB/s"])
    r.check_exit(0)
    rep = _check_capped(r, SIZE)
    if rep["feedback_read_bytes"] < 0.5 * SIZE:
        r.fail("the mmap reads were not charged by feedback")
    env.drop_cache(big)
    off = env.run([PYTHON, "-c", MMAP_SCRIPT, big],
                  extra_args=["--read-rate", "16MiB/s", "--feedback", "off"])
    off.check_exit(0)
    if off.stdout != r.stdout:
        off.fail("different output with feedback off")
    rep_off = off.check_report()
    if rep_off["actual_read_bytes"] / rep_off["elapsed_s"] <= RATE_TOLERANCE * CAP:
        pytest.skip("the disk is too slow here to show mmap escaping without feedback")


def test_static_go_binary_regulated(env, big, go_copy):
    """A statically linked Go program (LD_PRELOAD does nothing) copying a
    cold file: byte-identical copy, and the kernel-counted read rate is held
    at the cap by feedback and duty cycling (ptrace holds)."""
    out = env.path("feedback/go.out")
    env.drop_cache(big)
    r = env.run([go_copy, big, out], extra_args=["--read-rate", "16MiB/s"])
    r.check_exit(0)
    r.check_file_equals(out, big.read_bytes())
    rep = _check_capped(r, SIZE)
    if rep["stops"] == 0:
        r.fail("the static program was never stopped")


def test_cleared_environment_regulated(env, big):
    """A child that drops LD_PRELOAD (env -i) escapes the agent; its reads
    are still held at the cap by the supervisor.  (The job is a pipeline
    through gzip, as backups are: a lone cat that reads 32 MiB in 30 ms is
    done before any regulator looking in from outside has stopped it.)"""
    env.drop_cache(big)
    r = env.run(["sh", "-c", 'exec env -i /bin/sh -c \'cat "$1" | gzip -1 > /dev/null\' sh "$1"',
                 "sh", big], extra_args=["--read-rate", "8MiB/s"])
    r.check_exit(0)
    _check_capped(r, SIZE, cap=8 * MiB)


def _job_pids(supervisor):
    pids = []
    try:
        for tid in os.listdir(f"/proc/{supervisor}/task"):
            with open(f"/proc/{supervisor}/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return pids


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_supervisor_sigkill_leaves_nothing_stopped(env, big, go_copy):
    """SIGKILL the supervisor while it is duty-cycling a static job: the
    kernel detaches a dead tracer's ptrace holds (and the guard continues
    any process held with SIGSTOP), so the job finishes."""
    env.drop_cache(big)
    out = env.path("feedback/go-killed.out")
    job = env.start([go_copy, big, out], extra_args=["--read-rate", "4MiB/s"])
    supervisor = job.proc.pid
    # Wait until the job has been stopped at least once.
    deadline = time.monotonic() + 10
    stopped = False
    kids = []
    while time.monotonic() < deadline and not stopped:
        kids = [p for p in _job_pids(supervisor)]
        # t: held in a ptrace stop (tool_hold.c); T: SIGSTOP, where
        # ptrace is refused.
        stopped = any(_state(p) in ("T", "t") for p in kids)
        time.sleep(0.005)
    if not stopped:
        os.killpg(supervisor, signal.SIGKILL)
        pytest.skip("never caught the job stopped (machine too slow or too fast)")
    job_pids = [p for p in kids if _state(p) is not None]
    os.kill(supervisor, signal.SIGKILL)
    job.proc.wait()
    # Within a second nothing of the job may stay stopped.
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        left = [p for p in job_pids if _state(p) in ("T", "t")]
        if not left:
            break
        time.sleep(0.02)
    states = {p: _state(p) for p in job_pids}
    for p in job_pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if any(s in ("T", "t") for s in states.values()):
        pytest.fail(f"processes left stopped after the supervisor died: {states}")


# A reader that wants about 40 MiB/s: 1 MiB every 25 ms, for `seconds`.
PACED_READER = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    if not os.read(fd, 1 << 20):
        os.lseek(fd, 0, 0)
    time.sleep(0.025)
"""


def _read_bytes(pid):
    io = Path(f"/proc/{pid}/io").read_text()
    return int(io.split("read_bytes: ")[1].split()[0])


def _disk_read_bytes():
    """Bytes read from the machine's disks, per the block layer (loop,
    device-mapper, zram and ram devices left out: their reads are counted
    again below them, or are not a disk's)."""
    total = 0
    for dev in Path("/sys/block").iterdir():
        if dev.name.startswith(("loop", "dm-", "zram", "ram")):
            continue
        try:
            total += int((dev / "stat").read_text().split()[2]) * 512
        except (OSError, IndexError, ValueError):
            pass
    return total


def _others_read_bytes(supervisor):
    """read_bytes of every process not below `supervisor` (root sees all):
    what the yield policy takes for a foreground."""
    below, total = {supervisor}, 0
    procs = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                procs[int(d.name)] = (ppid, _read_bytes(int(d.name)))
            except (OSError, IndexError, ValueError):
                pass
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _) in procs.items():
            if ppid in below and pid not in below:
                below.add(pid)
                changed = True
    return sum(rb for pid, (_, rb) in procs.items() if pid not in below)


def test_yield_policy_follows_a_foreground(env, big):
    """--policy yield with a foreground that starts and stops: the job reads
    freely while alone, drops to its cap while another process reads, and
    runs free again once the foreground has been gone a while (hysteresis,
    1 s).  The oracle is the job's read_bytes in /proc/PID/io; the bounds
    are loose (the targets are bench/yield.py's to measure).  "Alone" is a
    precondition the machine must grant: when some other process read more
    than the policy's threshold meanwhile (a leftover of an earlier test, a
    neighbour on a shared machine), the run says nothing and is tried again."""
    for attempt in range(3):
        verdict = _yield_once(env, big)
        if verdict != "not alone":
            return
    pytest.skip("another process kept reading the disk during every try: the job was never alone")


def _yield_once(env, big):
    bg = env.make_file(env.path("feedback/yield-bg.dat"), 256 * MiB)
    fg = env.make_file(env.path("feedback/yield-fg.dat"), 128 * MiB)
    env.drop_cache(bg)
    env.drop_cache(fg)
    # Others' reads from before the job starts: a reader then holds the
    # job at its cap for the policy's 1 s of hysteresis.
    others_start = _others_read_bytes(-1) if os.geteuid() == 0 else None
    # 7.5 s: the watches below take 4.8 s and the foreground's start-up;
    # a job gone before the last one ends leaves it too few samples.
    job = env.start([PYTHON, "-c", PACED_READER, bg, "7.5"],
                    extra_args=["--policy", "yield", "--read-rate", "1MiB/s"])
    pid = None
    for _ in range(400):
        kids = Path(f"/proc/{job.proc.pid}/task/{job.proc.pid}/children").read_text().split()
        pid = next((int(k) for k in kids
                    if b"python" in Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")[0]), None)
        if pid:
            break
        time.sleep(0.005)
    assert pid, "no job process"
    samples = []

    def watch(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                samples.append((time.monotonic(), _read_bytes(pid)))
            except (FileNotFoundError, ProcessLookupError):
                break  # the job has ended: judge what was seen
            time.sleep(0.02)

    def rate(t0, t1):
        pts = [s for s in samples if t0 <= s[0] <= t1]
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    watch(1.0)
    alone_end = time.monotonic()
    others_alone = (_others_read_bytes(job.proc.pid) - others_start) if others_start is not None else 0
    fg_start = time.monotonic()
    fg_proc = subprocess.Popen([PYTHON, "-c", PACED_READER, fg, "1.2"])
    watch(1.2)
    fg_proc.wait()
    fg_end = time.monotonic()
    disk_after, job_after = _disk_read_bytes(), samples[-1][1]
    watch(2.6)
    # Whatever else read the disk meanwhile (short-lived processes too,
    # which a /proc walk misses): a foreground, to the policy.
    others_after = (_disk_read_bytes() - disk_after) - (samples[-1][1] - job_after)
    r = job.finish()
    r.check_exit(0)
    rep = r.check_report()
    before = rate(alone_end - 0.8, alone_end)
    during = rate(fg_start + 0.5, fg_end)
    after = rate(fg_end + 1.4, samples[-1][0])
    if before < 10 * MiB:
        if others_alone > 1 * MiB:  # the policy's --yield-above default, over 1 s
            return "not alone"
        r.fail(f"alone, the job read {before / MiB:.1f} MiB/s: not free")
    # The reader reads 1 MiB at a time and `during` spans 0.7 s: one read
    # more or less in it is 1.4 MiB/s, so "at its cap" is judged as at most
    # two reads beyond it (free, the job reads >= 10 MiB/s).
    if during > 3.5 * MiB:
        r.fail(f"beside the foreground the job read {during / MiB:.1f} MiB/s: not at its 1 MiB/s cap")
    # Free again is judged against what the cap allows, not against the
    # disk's speed alone: over the ~1.2 s judged, the job at its cap reads at
    # most 1 MiB/s plus two 1 MiB reads (2.7 MiB/s); free, it reads whatever
    # a cold disk gives (seen in CI: 9.4 MiB/s over 0.6 s, after >= 10 before).
    if after < 5 * MiB:
        # Others' reads anywhere in the 2.6 s watched can hold the job through
        # the judged last 1.2 s: 1 MiB over a second is the policy's
        # --yield-above, and its 1 s of hysteresis follows.  Seen in CI
        # beside a build: 0.9 MiB meanwhile, the job rightly still at 1.1 MiB/s.
        if others_after > 0.5 * MiB:  # the policy may have been right to stay at the cap
            return "not alone"
        r.fail(f"after the foreground the job read {after / MiB:.1f} MiB/s: not set free again "
               f"(others read {others_after / MiB:.1f} MiB meanwhile)")
    if rep["policy"] != "yield" or rep["yield_switches"] < 2:
        r.fail(f"expected 2+ switches (to the cap and back), got {rep['yield_switches']}")
    return "ok"
