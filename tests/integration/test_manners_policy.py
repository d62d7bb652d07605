"""`discnice run --policy manners` (issue #10 §3): MS Manners inside the agent.

The job's progress is its own file I/O; the supervisor's controller
suspends it at its next hooked call when that progress drops below the
rate it calibrated.  The oracle is the kernel: the job's rchar in
/proc/PID/io stops growing
while it is suspended and grows again when it is let go.  The contention is
a CPU hog pinned, with the job, to one CPU (taskset): a reader of a cached
file then makes half its progress, which the sign test judges poor.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import cpu_pressure  # noqa: E402  (the quick polls' rise: /proc/pressure/cpu)
import disk_rival  # noqa: E402  (the disk rise: a second reader of the disk)

MiB = 1 << 20


def _children(pid):
    try:
        return [int(c) for c in
                Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _rchar(pid):
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _longest_stall(pid, seconds, step=0.05):
    """Sample the job's rchar for `seconds`: the longest time it did not
    grow, and the bytes it read meanwhile."""
    first = last = _rchar(pid)
    since = time.monotonic()
    longest = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(step)
        now = _rchar(pid)
        if now is None:
            break
        if now != last:
            last = now
            since = time.monotonic()
        longest = max(longest, time.monotonic() - since)
    return longest, (last or 0) - (first or 0)


def _start(env, src, extra=()):
    """The job: one process pinned to CPU 0 that reads a cached file for
    ever.  Not a shell that runs cat after cat: beside it, on Linux
    6.18.44, the hog (a session, so a scheduler autogroup, of its own) sat
    runnable and never ran for 8 s in two runs of three (its
    /proc/PID/sched: 31 ms run in all), so that there was no contention to
    find."""
    cmd = ["taskset", "-c", "0", sys.executable, "-c",
           f"while True:\n with open({str(src)!r}, 'rb', buffering=0) as f:\n"
           "  while f.read(1 << 20): pass"]
    # --manners-persist off: each test calibrates afresh, whatever the
    # tests before it kept for taskset (test_manners_state.py tests keeping).
    job = env.start(cmd, extra_args=["--policy", "manners", "--manners-bootstrap", "12",
                                     "--manners-limit", "4", "--manners-persist", "off", *extra],
                    stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = _children(job.proc.pid)
        if kids:
            return job, kids[0]
        time.sleep(0.05)
    job.proc.kill()
    pytest.fail("the job did not start")


class _Hog:
    """A CPU hog pinned to CPU 0 for at most `seconds`, in a process group
    of its own: kill() ends the group, never leaving the spinning shell
    behind (killing `timeout` alone would orphan it)."""

    def __init__(self, seconds):
        self.proc = subprocess.Popen(["taskset", "-c", "0", "timeout", str(seconds), "sh", "-c",
                                      "while :; do :; done"], start_new_session=True)

    def poll(self):
        return self.proc.poll()

    def wait(self):
        return self.proc.wait()

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _hog(seconds):
    return _Hog(seconds)


def _wait_ordered(env, job, seconds, timeout):
    """Until the run's suspensions ordered so far (`discnice ls --json`,
    suspended_s) reach `seconds` and it is suspended now; False after
    `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ls = env.discnice(["ls", "--json"])
        for c in json.loads(ls.stdout or b"[]"):
            for r in c.get("runs", []):
                if (r.get("pid") == job.proc.pid and r.get("suspended") and
                        r.get("suspended_s", 0) >= seconds):
                    return True
        time.sleep(0.1)
    return False


@pytest.fixture
def cached_file(env):
    src = env.make_file(env.path("manners-src"), 16 * MiB)
    env.warm(src)
    return src


def _need_taskset():
    if subprocess.run(["taskset", "-c", "0", "true"]).returncode != 0:
        pytest.skip("taskset cannot pin to CPU 0 here")


def test_manners_suspends_under_contention_and_resumes(env, cached_file):
    """Alone the job reads at full speed and is not suspended; beside a CPU
    hog on its CPU its progress halves, it is judged poor and suspended (its
    rchar stops for a second or more, `ls --json` says suspended); when the
    hog ends it reads again within the suspension limit."""
    _need_taskset()
    job, pid = _start(env, cached_file)
    try:
        time.sleep(5)  # bootstrap: 12 testpoints of 250 ms, and a few judgments
        alone_stall, alone_bytes = _longest_stall(pid, 2)
        assert alone_bytes > 64 * MiB, f"alone the job read only {alone_bytes} bytes in 2 s"
        quiet_before = cpu_pressure.share(0.3) < cpu_pressure.QUIET_BEFORE
        hog = _hog(9)
        seen_suspended = False
        longest = 0.0
        end = time.monotonic() + 8
        while time.monotonic() < end:
            stall, _ = _longest_stall(pid, 1)
            longest = max(longest, stall)
            ls = env.discnice(["ls", "--json"])
            for c in json.loads(ls.stdout or b"[]"):
                for r in c.get("runs", []):
                    if r.get("pid") == job.proc.pid and r.get("suspended"):
                        seen_suspended = True
        hog.wait()
        assert longest >= 0.9, \
            f"beside a CPU hog the job never stopped reading for a second (longest {longest:.2f} s)"
        assert seen_suspended, "discnice ls --json never showed the run suspended"
        # Contention over: within the limit (4 s) plus a testpoint it reads
        # again (how fast is not judged: other load on the machine may
        # still slow it and be judged poor too).
        time.sleep(5)
        _, after = _longest_stall(pid, 5)
        assert after > 0, "after the hog the job did not read for 5 s"
    finally:
        job.proc.send_signal(signal.SIGTERM)
        r = job.finish(timeout=30)
    if r.report is None:
        r.fail("no report")
    assert r.report["policy"] == "manners"
    assert r.report["manners_judged_poor"] >= 1, r.dump()
    assert r.report["manners_suspended_s"] >= 1, r.dump()
    assert r.report["manners_s_per_mib_read"] > 0, r.dump()
    # The hog took half of the job's CPU: the quick testpoints
    # (--manners-poll-busy) were on while it ran.
    assert r.report["manners_busy_testpoints"] >= 1, r.dump()
    # ... started by the rise of /proc/pressure/cpu as the hog began, where
    # the kernel has the file (the test machine's does).
    assert r.report["manners_cpu_pressure"] is cpu_pressure.readable(), r.dump()
    if r.report["manners_cpu_pressure"] and quiet_before:
        assert r.report["manners_pressure_rises"] >= 1, r.dump()
    # A rise (of CPU pressure, or of others' disk traffic) begins a new
    # sample, unless it finds the sample empty.
    assert 0 <= r.report["manners_new_samples"] <= (r.report["manners_pressure_rises"] +
                                                    r.report["manners_disk_rises"]), r.dump()


@pytest.mark.parametrize("rise", ["on", "off"])
def test_manners_disk_rise_begins_a_new_sample(env, rise):
    """--manners-disk-rise: a job reading the disk alone for 3 s, then a
    rival reading it too for 3 s (both O_DIRECT: the disk moves every byte,
    and the kernel counts the rival's).  On, the supervisor sees the
    others' bytes rise (/proc/diskstats less the job's own) and counts a
    rise; off, it looks for none.  That the first suspension then comes
    sooner is bench/manners.py's to measure (§9.2, disk).  Suspensions
    are kept short (--manners-limit 1), as in test_benice.py's and
    test_manners_lib.py's: a target from 4 testpoints on this VM's disk
    may judge the job poor before the rival comes, and suspensions of 2-4 s
    then hide the rival's 3 s.  (A local CI run needed a rerun here; its
    report was not kept, so that this was the cause is by analogy with
    test_benice.py's, where it was seen.)"""
    src = env.make_file(env.path("rise-job.dat"), 128 * MiB)
    disk_rival.prepare(env, "rise-rival.dat")
    job = env.start([sys.executable, "-c", disk_rival.DIRECT_READER, str(src), "8"],
                    extra_args=["--policy", "manners", "--manners-bootstrap", "4",
                                "--manners-persist", "off", "--manners-limit", "1",
                                "--manners-disk-rise", rise],
                    stdout=subprocess.DEVNULL)
    try:
        time.sleep(3)
        rival = disk_rival.read(env, "rise-rival.dat", 3)
    finally:
        r = job.finish(timeout=60)
    r.check_exit(0)
    disk_rival.check(rival)
    if rise == "on":
        assert r.report["manners_disk_rises"] >= 1, r.dump()
    else:
        assert r.report["manners_disk_rises"] == 0, r.dump()
    assert 0 <= r.report["manners_new_samples"] <= (r.report["manners_pressure_rises"] +
                                                    r.report["manners_disk_rises"]), r.dump()


def test_manners_never_outlives_a_killed_supervisor(env, cached_file):
    """SIGKILL of discnice while the job is suspended: nobody would lift
    the suspension, and the job waited until it ran out - up to
    --manners-limit (60 s here, a week at most).  The agent looks for its
    supervisor at each re-read of the deadline (every 100 ms) and lets
    the job go on at once: it reads again within a second and a half."""
    _need_taskset()
    job, pid = _start(env, cached_file, ["--manners-suspend-initial", "30",
                                         "--manners-limit", "60"])
    hog = None
    try:
        time.sleep(5)
        hog = _hog(20)
        stalled = False
        end = time.monotonic() + 12
        while time.monotonic() < end and not stalled:
            before = _rchar(pid)
            time.sleep(0.3)
            stalled = _rchar(pid) == before
        if not stalled:
            pytest.skip("the job was not suspended beside the hog (see the test above)")
        os.kill(job.proc.pid, signal.SIGKILL)
        hog.kill()
        hog.wait()
        _, moved = _longest_stall(pid, 1.5)
        assert moved > 0, "1.5 s after discnice was killed the job still does not read"
    finally:
        if hog and hog.poll() is None:
            hog.kill()
        try:
            os.killpg(job.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        job.proc.wait()


def test_manners_output_unchanged_and_no_cap_needed(env, cached_file):
    """--policy manners needs no cap, and the job's output is the file's."""
    r = env.run(["cat", str(cached_file)], extra_args=["--policy", "manners"])
    r.check_exit(0)
    r.check_output_equals(cached_file.read_bytes())
    assert r.report["policy"] == "manners"
    # With a cap too: both hold (the cap is the rate window's as always).
    r = env.run(["cat", str(cached_file)], rate="inf", extra_args=["--policy", "manners"])
    r.check_exit(0)


def test_manners_without_a_cap_counts_but_predicts_nothing(env):
    """§9.3's idle overhead: with no cap, --policy manners counts the job's
    file bytes (its progress) and runs no disk model.  The kernel's count
    of system calls (strace, run as the job) for a stdio reader of a cached
    64 MiB file (sha1sum: fread, 32 KiB at a time) and for cat of it exceeds
    the unregulated count by the agent's start-up only: no lseek per stdio
    refill, no cachestat per read (2,000 and more each, before).  The bytes
    are still counted (the report's file_read_bytes against the file's
    size), and a cap given too still gets the model: its lseek per stdio
    refill shows (read(2) of a cached file costs the model no call)."""
    d = env.path("manners-count")
    src = env.make_file(d / "src", 64 * MiB)
    env.warm(src)
    run = [str(env.discnice_bin), "run", "-q", "--manners-persist", "off"]
    for what in ("sha1sum", "cat"):
        cmd = [what, "src"]
        plain = env.syscalls(cmd, d)
        counted = env.syscalls(cmd, d, run + ["--policy", "manners", "--"])
        assert counted - plain < 200, \
            f"{what} under --policy manners: {counted} system calls against {plain} unregulated"
        if what == "sha1sum":
            modelled = env.syscalls(cmd, d, run + ["--policy", "manners",
                                                   "--rate", "100MiB/s", "--"])
            assert modelled - plain > 1000, \
                f"{what} under manners and a cap: {modelled} against {plain}: the oracle is blind"
        r = env.run([what, str(src)], extra_args=["--policy", "manners",
                                                  "--manners-persist", "off"])
        r.check_exit(0)
        assert r.report["file_read_bytes"] >= 64 * MiB, \
            f"{what}: {r.report['file_read_bytes']} file bytes counted of {64 * MiB}"


@pytest.mark.parametrize("args, words", [
    (["--policy", "mannerz"], "expected cap, yield or manners"),
    (["--policy", "manners", "--manners-bootstrap", "0"], "number of testpoints"),
    (["--policy", "manners", "--manners-bootstrap", "-3"], "number of testpoints"),
    (["--policy", "manners", "--manners-limit", "0.5"], "number of seconds"),
    (["--policy", "manners", "--manners-probation", "-1"], "number of seconds"),
    (["--policy", "manners", "--manners-quiet", "x"], "number of seconds"),
    (["--policy", "manners", "--manners-poll-busy", "0.5"], "0.001 to 0.25 seconds"),
    (["--policy", "manners", "--manners-poll-busy", "-1"], "0.001 to 0.25 seconds"),
    (["--policy", "manners", "--manners-calibration", "fast"], "expected quick or paper"),
    (["--policy", "manners", "--manners-suspend-initial", "0"], "number of seconds"),
    (["--policy", "manners", "--manners-suspend-initial", "90"],
     "must not be above --manners-limit"),
    (["--policy", "manners", "--manners-persist", "no"], "expected on or off"),
    (["--policy", "manners", "--manners-state-file", ""], "empty file name"),
    (["--policy", "manners", "--manners-state-file", "/nonexistent-discnice/state"],
     "cannot write there"),
    (["--policy", "cap"], "no cap given"),
    # Before: "--net-yield-below must not be above --net-yield-above", a
    # value the user never gave.
    (["--policy", "yield", "--send-rate", "1M", "--net-yield-above", "10k"],
     "64.00 KiB/s, its default"),
    (["--policy", "yield", "--rate", "1M", "--yield-below", "2M"],
     "--yield-below (2.00 MB/s) must not be above"),
    # An option of a policy not in force did nothing, silently.
    (["--rate", "1M", "--manners-limit", "5"],
     "--manners-limit: only --policy manners uses it"),
    (["--policy", "yield", "--rate", "1M", "--manners-persist", "off"],
     "--manners-persist: only --policy manners uses it"),
    (["--rate", "1M", "--yield-above", "2M"], "--yield-above: only --policy yield uses it"),
    (["--policy", "manners", "--net-yield-below", "1k"],
     "--net-yield-below: only --policy yield uses it"),
])
def test_manners_bad_input(env, args, words):
    """Bad values: one line, exit 2, and the job is not started."""
    marker = env.path("manners-bad-marker")
    if marker.exists():
        marker.unlink()
    r = env.discnice(["run", *args, "--", "touch", str(marker)])
    if r.rc != 2:
        r.fail("expected exit 2")
    assert words in r.stderr.decode(), r.dump()
    assert not marker.exists(), "the job was started"
    assert not Path("/nonexistent-discnice").exists(), "a directory was made"


def _machine_busy_cpus(seconds=1.0):
    """CPUs' worth of busy time over `seconds`, from /proc/stat."""
    def busy():
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]
        return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    hz = os.sysconf("SC_CLK_TCK")
    b0 = busy()
    time.sleep(seconds)
    return (busy() - b0) / hz / seconds


def test_manners_quiet_machine_ends_a_suspension_early(env, cached_file):
    """Beyond the paper (§9.4's overshoot): with a 60 s suspension limit,
    the job, suspended beside a CPU hog that then stops, reads again within
    a few seconds, because the machine's counters show it quiet for 1 s
    (--manners-quiet, the default); with --manners-quiet 0 the same
    suspension runs on.  Needs an otherwise quiet machine."""
    _need_taskset()
    if _machine_busy_cpus() > 0.08:
        pytest.skip("the machine is busy with other work: no quiet to detect")
    for quiet, resume_within in (("1", 4.0), ("0", None)):
        job, pid = _start(env, cached_file, extra=["--manners-limit", "60",
                                                   "--manners-quiet", quiet])
        hog = None
        try:
            time.sleep(5)
            hog = _hog(30)
            # Poor judgments order suspensions of 1, 2, 4 s and then 8 s:
            # the hog stops once the 8 s one is ordered (1+2+4+8 = 15 s
            # ordered in all), so that a quiet machine has most of it left
            # to cut short.  (Stopped after a fixed 9 s, the 4 s suspension
            # could end by itself and prove nothing.)
            if not _wait_ordered(env, job, 15.0, 25.0):
                pytest.skip("beside the hog the job never reached an 8 s suspension")
            stalled_since = None
            end = time.monotonic() + 10
            while time.monotonic() < end:
                before = _rchar(pid)
                time.sleep(0.3)
                if _rchar(pid) == before:
                    stalled_since = time.monotonic()
                    break
            if stalled_since is None:
                pytest.skip("the job was not suspended beside the hog")
            hog.kill()
            hog.wait()
            stop = time.monotonic()
            resumed = None
            last = _rchar(pid)
            while time.monotonic() < stop + 7:
                time.sleep(0.1)
                now = _rchar(pid)
                if now != last:
                    resumed = time.monotonic() - stop
                    break
            if resume_within is not None and (resumed is None or resumed > resume_within):
                # The premise is a machine quiet but for our hog: other
                # work that started meanwhile (another suite, a build)
                # leaves no quiet to detect - that is not a failure.
                busy = _machine_busy_cpus()
                if busy > 0.08:
                    pytest.skip(f"the machine became busy with other work ({busy:.2f} CPUs): "
                                "no quiet to detect")
                pytest.fail(f"--manners-quiet {quiet}: read again {resumed} s after the hog "
                            f"stopped, on a machine {busy:.2f} CPUs busy")
        finally:
            if hog and hog.poll() is None:
                hog.kill()
            job.proc.send_signal(signal.SIGTERM)
            r = job.finish(timeout=90)
        if quiet == "1":
            assert r.report["manners_shortened"] >= 1, r.dump()
        else:
            assert r.report["manners_shortened"] == 0, r.dump()
