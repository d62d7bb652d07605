"""Kept targets of `discnice benice` and `discnice run --policy manners`
(issue #10: "Targets persist across restarts, per program, under
$XDG_STATE_HOME, with a documented format.  A corrupt or foreign state file
is ignored with one warning and rewritten"; src/tool/tool_targets.h).

Each test has its own XDG_STATE_HOME.  The oracles:
  - the state file itself, parsed here by the format manners(3) documents
    (header, "metric" line, "phase INDEX COUNT SAMPLES RATE ..."), against
    the rate the job really made progress at (it knows its own rate);
  - the job's own clock: a job that sleeps in short steps sees a gap in its
    loop when it is stopped (benice's SIGSTOP) or held at an I/O call (the
    agent's suspension).  A job that runs at a fifth of the rate it ran
    at before is suspended early only if the earlier run's target was
    loaded: calibrated afresh, its slow rate is its target, and it is
    never judged poor;
  - exit status and stderr lines (exactly one warning for a bad file).
The reports' target_restored / restored_samples fields are checked to agree.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from loopfs import HDD, LoopFs  # noqa: E402

# A job that makes RATE units of progress per second of its own running
# time, in 10 ms steps: the counter file (rewritten every 50 ms) for benice,
# or 4 KiB pwrite()s for run --policy manners (RATE in KiB/s).  At the end
# it writes JSON to OUT: its longest gap between two steps, when the first
# gap of over 0.5 s began (s from its start; null: none), and the rate it
# made while running.
# argv: MODE(counter|write) PATH SECONDS RATE OUT
RATE_JOB = r"""
import json, os, sys, time
mode, path, seconds, rate, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
step = 0.01
start = time.monotonic()
last = start
last_write = 0.0
longest, first_stop_at, count, gaps = 0.0, None, 0.0, 0.0
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if mode == "write" else None
block = b"x" * 4096
owed = 0.0
while time.monotonic() - start < seconds:
    time.sleep(step)
    now = time.monotonic()
    gap = now - last
    longest = max(longest, gap)
    if gap > 0.5 and first_stop_at is None:
        first_stop_at = last - start
    if gap > 0.2:
        gaps += gap
    last = now
    # Progress for a step's worth of running time, not the wall clock's:
    # a stopped job does not catch up afterwards.
    owed += rate * min(gap, 2 * step)
    if mode == "write":
        while owed >= 4:
            os.pwrite(fd, block, 0)
            owed -= 4
            count += 4
    else:
        count += owed
        owed = 0.0
        if now - last_write > 0.05:
            with open(path + ".tmp", "w") as f:
                f.write("%d\n" % count)
            os.replace(path + ".tmp", path)
            last_write = now
ran = time.monotonic() - start - gaps
with open(out, "w") as f:
    json.dump({"longest_gap": longest, "first_stop_at": first_stop_at, "rate": count / ran}, f)
"""

FAST, SLOW = 20000.0, 4000.0        # counter units per second: a fifth
WRITE_FAST, WRITE_SLOW = 2048.0, 400.0  # KiB/s
# Short calibration, no probation (probation's duty cycle would stop the job
# too), and a stricter sign test than the default, so that a job running at
# its own target is not judged poor by noise within a test (alpha 0.01: 7
# testpoints below target in a row).
BENICE_ARGS = ["--quiet", "--bootstrap", "8", "--probation", "0", "--alpha", "0.01",
               "--poll-min", "0.25"]
# A suspension stops the job for --suspend-initial (1 s) at least, and the
# gap between the two 10 ms steps around it contains all of it: a gap of
# 1 s or more is a suspension, a shorter one the machine's own stall (a
# clean-clone CI run saw a 0.72 s stall with no suspension at all).
STOPPED = 1.0


@pytest.fixture
def state(env, request):
    """A private XDG_STATE_HOME and XDG_RUNTIME_DIR; the script."""
    d = env.fresh_dir("mstate-" + request.node.name.replace("[", "-").replace("]", ""))
    (d / "rt").mkdir(mode=0o700)
    (d / "job.py").write_text(RATE_JOB)
    extra = {"XDG_STATE_HOME": str(d / "state"), "XDG_RUNTIME_DIR": str(d / "rt")}
    return d, extra


def _benice(env, d, extra, args, mode_rate_seconds, tag, timeout=60, umask=None):
    """benice ARGS -- python3 job.py counter ...: (process, job's result, report)."""
    rate, seconds = mode_rate_seconds
    counter, out, report = d / f"count-{tag}", d / f"job-{tag}.json", d / f"report-{tag}.json"
    argv = [str(env.discnice_bin), "benice", *args, "--report", str(report),
            "--progress", f"file:{counter}", "--", "python3", str(d / "job.py"), "counter",
            str(counter), str(seconds), str(rate), str(out)]
    p = subprocess.run(argv, env={**env.base_env, **extra}, cwd=d, capture_output=True,
                       timeout=timeout,
                       preexec_fn=None if umask is None else lambda: os.umask(umask))
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0, f"{' '.join(argv)}\nexit {p.returncode}\n{err}"
    return p, json.loads(out.read_text()), json.loads(report.read_text())


def _parse_state(path):
    """The file by manners(3) FILES: {metric, phases: {index: (count, samples,
    rate)}}; fails on anything else."""
    lines = Path(path).read_text().split("\n")
    assert lines[0] == "discnice-manners-targets 1", lines[0]
    assert lines[-1] == "", "the last line is not terminated"
    metric, phases = None, {}
    for line in lines[1:-1]:
        if not line or line.startswith("#"):
            continue
        words = line.split(" ")
        if words[0] == "metric":
            assert metric is None and len(words) == 2, line
            metric = words[1]
            continue
        assert words[0] == "phase", line
        index, count, samples = int(words[1]), int(words[2]), int(words[3])
        assert len(words) == 6 + count * count + count, line
        phases[index] = (count, samples, float(words[4]))
    return metric, phases


def _state_files(extra):
    d = Path(extra["XDG_STATE_HOME"]) / "discnice" / "manners"
    return sorted(d.glob("*.targets")) if d.is_dir() else []


# -- benice -------------------------------------------------------------------

def test_benice_keeps_target_and_second_run_skips_bootstrap(env, state):
    """Run 1 calibrates and saves its target (the job's own rate); run 2 of
    the same program starts from it: every testpoint is judged (no
    bootstrap), and the file now averages both runs' testpoints."""
    d, extra = state
    _, job1, r1 = _benice(env, d, extra, BENICE_ARGS, (FAST, 4), "1")
    files = _state_files(extra)
    assert len(files) == 1, files
    python = os.path.realpath(subprocess.run(["sh", "-c", "command -v python3"],
                                             capture_output=True, text=True).stdout.strip())
    assert files[0].name.startswith(os.path.basename(python) + "-"), files[0].name
    assert files[0].name.endswith(".benice-file.targets"), files[0].name
    metric, phases = _parse_state(files[0])
    assert metric == "benice-file"
    count, samples1, rate = phases[0]
    assert count == 1 and samples1 >= 8
    # The target is the rate the job made (it knows it), within noise.
    assert 0.6 * job1["rate"] <= rate <= 1.4 * job1["rate"], (rate, job1)
    assert r1["target_restored"] is False and r1["state_file"] == str(files[0])

    _, job2, r2 = _benice(env, d, extra, BENICE_ARGS, (FAST, 3), "2")
    assert r2["target_restored"] is True and r2["restored_samples"] == samples1, r2
    # Bootstrap skipped: every testpoint was compared with the target.
    assert r2["testpoints"] > 0 and r2["compared"] == r2["testpoints"], r2
    _, phases = _parse_state(files[0])
    assert samples1 < phases[0][1] <= samples1 + r2["testpoints"], (phases, r2)
    # At its target, the job was not stopped.
    assert job2["longest_gap"] < STOPPED, job2


@pytest.mark.parametrize("umask", [0o277, 0o777], ids=["0277", "0777"])
def test_state_directories_and_file_are_private_and_usable_whatever_the_umask(env, state, umask):
    """Under umask 0277 the directories made 0500 refused the state file
    (EACCES but to root), and under 0777 the file was made 0000: the next
    start could not read its target.  Each is 0700 and 0600 now."""
    import stat
    d, extra = state
    _benice(env, d, extra, BENICE_ARGS, (FAST, 2), "1", umask=umask)
    files = _state_files(extra)
    assert len(files) == 1, files
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    for dir_ in (files[0].parent, files[0].parent.parent):
        assert stat.S_IMODE(dir_.stat().st_mode) == 0o700, dir_
    _, _, r2 = _benice(env, d, extra, BENICE_ARGS, (FAST, 1), "2", umask=umask)
    assert r2["target_restored"] is True, r2


def test_benice_slow_job_alone_is_forgiven(env, state):
    """The same slower run with the look back on (--quiet-after, the
    default): the job slows itself and nobody else uses the machine, so
    its poor judgments are the sign test's false alarms, not contention -
    judged (judged_poor, forgiven) but never suspended.  The machine must
    be quiet for that: a run beside somebody's load (this VM's host, a
    build) is tried again, three times in all."""
    d, extra = state
    _benice(env, d, extra, BENICE_ARGS, (FAST, 4), "fast")
    _forgiven_in_3_tries(lambda attempt: _benice(env, d, extra, BENICE_ARGS, (SLOW, 6),
                                                 f"slow{attempt}")[1:])


def _forgiven_in_3_tries(slow_run):
    """slow_run(attempt) -> (job, report) of a slower run with a restored
    target: judged poor and forgiven, never suspended, in one of 3 tries
    (the look back needs a quiet machine, which a shared one is not always)."""
    tries = []
    for attempt in range(3):
        job, report = slow_run(attempt)
        assert report["target_restored"] is True, report
        tries.append((job["longest_gap"], {k: report[k] for k in
                                            ("judged_poor", "forgiven", "suspensions",
                                             "busy_polls", "pressure_rises")}))
        if report["forgiven"] >= 1 and report["suspensions"] == 0 and \
                job["longest_gap"] < STOPPED:
            break
    else:
        raise AssertionError(f"suspended, or never judged poor, in 3 tries: {tries}")
    assert report["judged_poor"] >= report["forgiven"] >= 1, report


def test_benice_slow_job_beside_a_throttled_disk_reader_is_suspended(env, state):
    """The look back must see a disk busy by its traffic, not only by its
    busy time (quiet.h).  The slower run of the tests above, beside a
    foreground that reads an emulated 50 MB/s disk (a loop device under the
    blkio throttle: every request is served at once by the host's cache, so
    the device shows 1-3 % busy while it is saturated), is judged poor and
    suspended: the foreground was there to contend with.  Judged by busy
    time alone, the machine looked quiet and the poor judgments were
    forgiven (benice beside jdupes in bench/manners.py: 10 of 12).  The
    oracle: the job's own clock (a gap of STOPPED or more)."""
    why = LoopFs.unavailable(throttle=True)
    if why:
        pytest.skip(why)
    d, extra = state
    _benice(env, d, extra, BENICE_ARGS, (FAST, 4), "fast")
    with LoopFs(size_mib=256, tag="test-quiet", throttle=HDD) as fs:
        data = fs.path("fg.dat")
        with fs.rules(read_bps=0, write_bps=0, read_iops=0, write_iops=0):
            subprocess.run(["dd", "if=/dev/zero", f"of={data}", "bs=1M", "count=128",
                            "conv=fsync", "status=none"], check=True)
        # The foreground: reads the file through the page cache, evicted
        # before each pass (dd iflag=nocache count=0), again and again for
        # longer than the job runs.  Buffered, as tar's reads are: O_DIRECT
        # reads keep the devices busier (8 % here), which busy time alone
        # would have seen.
        reader = subprocess.Popen(
            ["sh", "-c", f"while :; do dd if={data} iflag=nocache count=0 status=none && "
                         f"dd if={data} of=/dev/null bs=1M status=none || exit 1; done"],
            start_new_session=True)
        try:
            time.sleep(1.0)
            before = fs.read_bytes()
            _, job, report = _benice(env, d, extra, BENICE_ARGS, (SLOW, 6), "slow")
            moved = fs.read_bytes() - before
        finally:
            os.killpg(reader.pid, 9)
            reader.wait()
    # The foreground did read from the disk meanwhile (the loop device's
    # own count), at the emulated speed.
    assert moved > 6 * 20 * 2**20, moved
    assert report["target_restored"] is True, report
    assert report["judged_poor"] >= 1 and report["suspensions"] >= 1, report
    assert report["forgiven"] < report["judged_poor"], report
    assert job["longest_gap"] >= STOPPED, (job, report)


# A job of many short processes, as make is: for SECONDS, a shell starts
# one short CPU-bound process after another (each reaped by the shell).
BURNER = ('end=$(($(date +%s) + {seconds})); while [ "$(date +%s)" -lt "$end" ]; do '
          'sh -c \'i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done\'; done')


def test_benice_slow_make_like_job_alone_is_forgiven(env, state):
    """The look back counts a job's CPU time with what its processes
    reaped (tool_jobtree.c): a job of many short processes, each gone a
    moment later, is its own CPU, not somebody else's.  The slower run of
    the test above, beside a shell in the same tree that starts short
    CPU-bound processes one after another (about one CPU), is judged poor
    and forgiven, never suspended - counted live processes only, the
    machine looked busy by that CPU, and the job was suspended."""
    d, extra = state

    def run(rate, seconds, tag, burner):
        counter, out, report = d / f"count-{tag}", d / f"job-{tag}.json", d / f"report-{tag}.json"
        job = f'python3 {d / "job.py"} counter {counter} {seconds} {rate} {out}'
        script = f"({BURNER.format(seconds=seconds)}) & {job}; wait" if burner else job
        p = subprocess.run([str(env.discnice_bin), "benice", *BENICE_ARGS, "--report", str(report),
                            "--progress", f"file:{counter}", "--state-file", str(d / "make.targets"),
                            "--", "sh", "-c", script], env={**env.base_env, **extra}, cwd=d,
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr.decode(errors="replace")
        return json.loads(out.read_text()), json.loads(report.read_text())

    run(FAST, 4, "fast", False)
    _forgiven_in_3_tries(lambda attempt: run(SLOW, 6, f"slow{attempt}", True))


def test_benice_restored_target_judges_a_slower_run(env, state):
    """A run at a fifth of the kept target's rate is suspended within its
    first seconds - before a bootstrap of its own could have ended and
    been judged - while the same run calibrated afresh (--persist off)
    is not stopped that early: its first 8 testpoints (2 s) only
    calibrate, and then it is its own target."""
    d, extra = state
    # The job slows itself (it sleeps), on a machine nobody else uses: with
    # the look back (--quiet-after, on by default) that is no contention,
    # and rightly not suspended.  Here it stands for contention, so the
    # paper's rule judges it.
    paper = [*BENICE_ARGS, "--quiet-after", "0"]
    _benice(env, d, extra, paper, (FAST, 4), "fast")
    _, job, report = _benice(env, d, extra, paper, (SLOW, 6), "slow")
    assert report["target_restored"] is True, report
    assert job["longest_gap"] >= STOPPED, (job, report)
    # 8 bootstrap testpoints take 2 s, 7 judgments 1.75 s more: stopped
    # sooner than a fresh calibration could even have judged.
    assert job["first_stop_at"] < 3.5, (job, report)

    _, fresh_job, fresh = _benice(env, d, extra, [*paper, "--persist", "off"], (SLOW, 6),
                                  "fresh")
    assert fresh["target_restored"] is False and fresh["state_file"] is None, fresh
    # 2 s of bootstrap and 7 testpoints (1.75 s) below target at the least.
    assert fresh_job["first_stop_at"] is None or fresh_job["first_stop_at"] > 3.5, fresh_job


def test_benice_metric_kinds_keep_separate_targets(env, state):
    """A target in counter units is never loaded for --progress io (bytes):
    each kind has its own file, named and marked with its metric."""
    d, extra = state
    _benice(env, d, extra, BENICE_ARGS, (FAST, 3), "file")
    report_path = d / "report-io.json"
    p = subprocess.run([str(env.discnice_bin), "benice", *BENICE_ARGS, "--report", str(report_path),
                        "--", "python3", "-c",
                        "import time\nfor i in range(30):\n"
                        "    open('/dev/null','w').write('x'*100000); time.sleep(0.1)"],
                       env={**env.base_env, **extra}, cwd=d, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    report = json.loads(report_path.read_text())
    assert report["target_restored"] is False, report
    files = _state_files(extra)
    assert [f.name.rsplit(".", 2)[1] for f in files] == ["benice-file", "benice-io"], files
    assert {_parse_state(f)[0] for f in files} == {"benice-file", "benice-io"}


BAD_FILES = {
    "garbage": b"hello, world\n",
    "empty": b"",
    "binary": bytes(range(256)),
    "other-version": b"discnice-manners-targets 9\nmetric benice-file\n",
    "truncated": b"discnice-manners-targets 1\nmetric benice-file\nphase 0 1 12 2000",
    "other-metric": b"discnice-manners-targets 1\nmetric benice-io\nphase 0 1 12 2000 0 0 0\n",
    "library-file": b"discnice-manners-targets 1\nphase 0 1 12 2000 0 0 0\n",
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_benice_bad_state_file_warns_once_and_is_rewritten(env, state, kind):
    """A corrupt or foreign file: exactly one warning line naming it, the
    job runs to its end as usual, nothing is loaded from it, and it is
    rewritten as a valid file of this metric."""
    d, extra = state
    _benice(env, d, extra, BENICE_ARGS, (FAST, 2), "first")
    [path] = _state_files(extra)
    path.write_bytes(BAD_FILES[kind])
    p, job, report = _benice(env, d, extra, BENICE_ARGS, (FAST, 3), "bad")
    lines = [l for l in p.stderr.decode(errors="replace").splitlines() if l.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("discnice: ") and str(path) in lines[0], lines
    assert report["target_restored"] is False, report
    assert job["rate"] > 0
    metric, phases = _parse_state(path)
    assert metric == "benice-file" and phases[0][0] == 1
    # Only this run's testpoints: nothing was taken from the bad file.
    assert 0 < phases[0][1] <= report["testpoints"], (phases, report)


def test_benice_unusable_state_never_stops_the_job(env, state):
    """Nothing can be read or saved - XDG_STATE_HOME is a regular file: one
    warning, the job runs, benice exits with its status."""
    d, extra = state
    blocker = d / "not-a-directory"
    blocker.write_text("x")
    extra = {**extra, "XDG_STATE_HOME": str(blocker)}
    p, job, report = _benice(env, d, extra, BENICE_ARGS, (FAST, 3), "x")
    lines = [l for l in p.stderr.decode(errors="replace").splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("discnice: ") and "not be kept" in lines[0], lines
    assert job["rate"] > 0 and report["testpoints"] > 0


@pytest.mark.parametrize("where,says", [("proc/sys/discnice-test.targets", "cannot write there"),
                                        ("no-such-dir/targets", "cannot write there")])
def test_benice_state_file_that_cannot_be_written_is_refused(env, state, where, says):
    """--state-file names a file that can never be saved (in /proc/sys, or
    in a directory that does not exist): as for --report, one line and exit
    2 before the job starts.  Before: the job ran and the target was lost
    with a warning (/proc), or the missing directories were made, 0700."""
    d, extra = state
    path = Path("/" + where) if where.startswith("proc/") else d / where
    marker = d / f"started-{path.parent.name}"
    p = subprocess.run([str(env.discnice_bin), "benice", *BENICE_ARGS, "--state-file", str(path),
                        "--", "touch", str(marker)], env={**env.base_env, **extra}, cwd=d,
                       capture_output=True, timeout=30)
    lines = [l for l in p.stderr.decode(errors="replace").splitlines()
             if l.strip() and not l.startswith("Try ")]
    assert p.returncode == 2 and len(lines) == 1 and says in lines[0], lines
    assert not marker.exists(), "the job was started"
    assert not path.parent.exists() or where.startswith("proc/"), "a directory was made"


def test_benice_state_file_option(env, state):
    """--state-file FILE: the target is kept there, and read from there."""
    d, extra = state
    path = d / "my.targets"
    args = [*BENICE_ARGS, "--state-file", str(path)]
    _benice(env, d, extra, args, (FAST, 3), "1")
    assert _parse_state(path)[0] == "benice-file"
    assert _state_files(extra) == []
    _, _, r2 = _benice(env, d, extra, args, (FAST, 2), "2")
    assert r2["target_restored"] is True and r2["state_file"] == str(path)


# -- run --policy manners ------------------------------------------------------

# A longer bootstrap than benice's: the default sign test (5 testpoints
# below target are poor) on two regressed metrics, calibrated on 8
# testpoints, now and then judges a job at its own rate poor right after;
# with 16 a fresh run cannot be judged before 4 s of running time.
RUN_ARGS = ["--policy", "manners", "--manners-bootstrap", "16", "--manners-quiet", "0"]


def _run(env, d, extra, rate, seconds, tag, args=()):
    out, data, report = d / f"job-{tag}.json", d / f"data-{tag}", d / f"report-{tag}.json"
    argv = [str(env.discnice_bin), "run", "--quiet", *RUN_ARGS, *args, "--report", str(report),
            "--", "python3", str(d / "job.py"), "write", str(data), str(seconds), str(rate),
            str(out)]
    p = subprocess.run(argv, env={**env.base_env, **extra}, cwd=d, capture_output=True,
                       timeout=90)
    assert p.returncode == 0, f"{' '.join(argv)}\nexit {p.returncode}\n{p.stderr.decode()}"
    return p, json.loads(out.read_text()), json.loads(report.read_text())


def test_run_manners_keeps_target_and_judges_a_slower_run(env, state):
    """run --policy manners saves its two-metric target (MiB read, MiB
    written) per program; the next run starts from it and a run at a fifth
    of the rate is held at its writes early on, before the same run
    calibrated afresh (--manners-persist off) could even be judged."""
    d, extra = state
    _, _, r1 = _run(env, d, extra, WRITE_FAST, 6, "fast")
    [path] = _state_files(extra)
    assert path.name.endswith(".run-manners.targets"), path
    metric, phases = _parse_state(path)
    assert metric == "run-manners" and phases[0][0] == 2, phases
    samples1 = phases[0][1]
    assert samples1 >= 16 and r1["manners_target_restored"] is False
    assert r1["manners_state_file"] == str(path)

    _, job, r2 = _run(env, d, extra, WRITE_SLOW, 6, "slow")
    assert r2["manners_target_restored"] is True and r2["manners_restored_samples"] == samples1
    assert job["longest_gap"] >= STOPPED, (job, r2)
    assert job["first_stop_at"] < 3.0, (job, r2)
    assert _parse_state(path)[1][0][1] > samples1

    _, fresh_job, fresh = _run(env, d, extra, WRITE_SLOW, 6, "fresh",
                               ["--manners-persist", "off"])
    assert fresh["manners_target_restored"] is False and fresh["manners_state_file"] is None
    # 4 s of bootstrap and 5 testpoints below target at the least.
    assert fresh_job["first_stop_at"] is None or fresh_job["first_stop_at"] > 4.0, fresh_job


def test_run_manners_slow_job_alone_is_forgiven(env, state):
    """The slower run under --manners-quiet 1 (the default): the job slows
    itself and nobody else uses the machine, so its poor judgments are
    forgiven (manners_forgiven) and it is never held; three tries, as for
    benice, since a run beside somebody's load is rightly held."""
    d, extra = state
    _run(env, d, extra, WRITE_FAST, 6, "fast")
    quiet = ["--manners-quiet", "1"]  # after RUN_ARGS' 0: the last one holds
    tries = []
    for attempt in range(3):
        _, job, r = _run(env, d, extra, WRITE_SLOW, 6, f"slow{attempt}", quiet)
        assert r["manners_target_restored"] is True, r
        tries.append((job["longest_gap"], {k: r[k] for k in ("manners_judged_poor",
                                                              "manners_forgiven",
                                                              "manners_suspended_s")}))
        if r["manners_forgiven"] >= 1 and r["manners_suspended_s"] == 0 and \
                job["longest_gap"] < STOPPED:
            break
    else:
        raise AssertionError(f"held, or never judged poor, in 3 tries: {tries}")


def test_run_manners_corrupt_state_warns_once(env, state):
    """A corrupt file under run --policy manners: one warning, the job
    runs, the file is rewritten valid."""
    d, extra = state
    _run(env, d, extra, WRITE_FAST, 2, "first")
    [path] = _state_files(extra)
    path.write_bytes(b"discnice-manners-targets 1\nphase zero\n")
    p, job, report = _run(env, d, extra, WRITE_FAST, 3, "bad")
    lines = [l for l in p.stderr.decode(errors="replace").splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("discnice: ") and str(path) in lines[0], lines
    assert report["manners_target_restored"] is False
    metric, phases = _parse_state(path)
    assert metric == "run-manners" and phases[0][0] == 2


def test_benice_pid_and_command_share_the_programs_target(env, state):
    """The program is the executable with links resolved: a target kept by
    `benice -- sh ...` is loaded by `benice --pid` of a running sh (whose
    /proc/PID/exe is the shell itself, not the sh link)."""
    d, extra = state
    loop = "for i in $(seq 1 %d); do head -c 200000 /dev/zero; sleep 0.1; done > /dev/null"
    r1 = d / "report-cmd.json"
    p = subprocess.run([str(env.discnice_bin), "benice", *BENICE_ARGS, "--report", str(r1), "--",
                        "sh", "-c", loop % 25], env={**env.base_env, **extra}, cwd=d,
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    [path] = _state_files(extra)
    assert path.name.startswith(os.path.basename(os.path.realpath("/bin/sh")) + "-"), path
    job = subprocess.Popen(["sh", "-c", loop % 25], env={**env.base_env, **extra},
                           start_new_session=True)
    try:
        r2 = d / "report-pid.json"
        p = subprocess.run([str(env.discnice_bin), "benice", *BENICE_ARGS, "--report", str(r2),
                            "--pid", str(job.pid)], env={**env.base_env, **extra}, cwd=d,
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
    finally:
        job.kill()
        job.wait()
    report = json.loads(r2.read_text())
    assert report["state_file"] == str(path) and report["target_restored"] is True, report
