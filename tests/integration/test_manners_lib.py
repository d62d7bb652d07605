"""libmanners, the MS Manners testpoint library (issue #10 §1; manners(3)).

The programs under tests/programs/manners/ are linked with build/libmanners.so
and run as real processes.  They are judged by what the test can see for
itself (CONVENTIONS lesson 8), not by the library's own report:

* time-multiplex isolation (§4.5): the intervals each thread ran, logged by
  the program with CLOCK_MONOTONIC between the return of one testpoint and
  the next call, must not overlap - across threads and across processes;
  a control run with sharing off shows the same check does see overlaps;
* the hung threshold (§7.1): the other threads' logged intervals go on while
  one thread sleeps past it;
* persistence (§7.1): the state file's own text;
* regulation (§4): the kernel's CPU time (/proc/PID/stat utime + stime) of a
  regulated CPU-bound loop beside an unregulated hog on the same CPU, and of
  the same loop with regulation off as the control.

Every run gets its own turn table (MANNERS_SHARE_FILE) and state directory,
so tests do not take turns with each other or with the user's jobs.
Timing assertions are loose: they check behaviour, not speed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import cpu_pressure  # noqa: E402  (the quick polls' rise: /proc/pressure/cpu)
import disk_rival  # noqa: E402  (the disk rise: a second reader of the disk)

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DISCNICE_BUILD") or REPO / "build")
PROGRAMS = BUILD / "tests" / "programs" / "manners"
WORKER = PROGRAMS / "manners_worker"
LIBRARY = BUILD / "libmanners.so.0"


@pytest.fixture(autouse=True)
def _built():
    for path in (WORKER, PROGRAMS / "manners_errors", LIBRARY):
        if not path.exists():
            pytest.fail(f"{path} not built (run `make all programs`)", pytrace=False)


@pytest.fixture
def menv(tmp_path):
    """Environment of a regulated run: private turn table and state dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MANNERS_")}
    env.update(MANNERS_SHARE_FILE=str(tmp_path / "share"),
               MANNERS_STATE_DIR=str(tmp_path / "state"))
    return env


def run(args, env, timeout=60):
    r = subprocess.run([str(a) for a in args], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{args} exited {r.returncode}\nstdout:\n{r.stdout[-3000:]}\n" \
                              f"stderr:\n{r.stderr[-3000:]}"
    return r


def intervals(stdout: str):
    """[(start, end, (pid, thread))] from the worker's `interval` lines."""
    out = []
    for line in stdout.splitlines():
        f = line.split()
        if f and f[0] == "interval":
            out.append((int(f[3]), int(f[4]), (int(f[1]), int(f[2]))))
    return sorted(out)


def overlaps(spans):
    """Pairs of intervals of different threads that overlap in time."""
    bad = []
    latest = None  # the interval reaching furthest so far
    for span in spans:
        if latest is not None and span[0] < latest[1] and span[2] != latest[2]:
            bad.append((latest, span))
        if latest is None or span[1] > latest[1]:
            latest = span
    return bad


def stats_lines(stdout: str):
    """{thread: {key: int}} from the worker's `stats` lines."""
    out = {}
    for line in stdout.splitlines():
        f = line.split()
        if f and f[0] == "stats":
            out[int(f[1])] = {k: int(v) for k, v in (x.split("=") for x in f[2:])}
    return out


def test_threads_take_turns(menv):
    """(a) Four regulated threads of one process: one runs at a time (§4.5)."""
    r = run([WORKER, "--threads", 4, "--seconds", 2, "--work-ms", 5], menv)
    spans = intervals(r.stdout)
    threads = {who for _, _, who in spans}
    assert len(threads) == 4, f"only {threads} ran"
    assert not overlaps(spans), overlaps(spans)[:3]
    # Decay-usage sharing: nobody starved (loose: each at least a tenth).
    ran = {who: sum(e - s for s, e, w in spans if w == who) for who in threads}
    assert min(ran.values()) > 0.1 * max(ran.values()), ran
    assert "manners:" not in r.stderr, r.stderr


def _two_processes(env, seconds=3):
    procs = [subprocess.Popen([str(WORKER), "--threads", "2", "--seconds", str(seconds),
                               "--work-ms", "5"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    return [intervals(out) for out, _ in outs], [err for _, err in outs]


def test_processes_take_turns(menv, tmp_path):
    """(b) Two processes of two threads each share one turn table: one thread
    of the four runs at a time, and both processes get to run."""
    per_process, errs = _two_processes(menv)
    assert all(per_process), "a process never ran"
    spans = sorted(per_process[0] + per_process[1])
    assert len({who[0] for _, _, who in spans}) == 2
    assert not overlaps(spans), overlaps(spans)[:3]
    assert not any("manners:" in e for e in errs), errs
    st = os.stat(tmp_path / "share")
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()


def test_processes_overlap_without_sharing(menv):
    """Control for (b): with share_file none each process takes turns only
    among its own threads, and the same check does find overlaps."""
    menv["MANNERS_SHARE_FILE"] = "none"
    per_process, _ = _two_processes(menv, seconds=2)
    for spans in per_process:
        assert not overlaps(spans)
    assert overlaps(sorted(per_process[0] + per_process[1]))


def test_hung_thread_does_not_stop_the_others(menv):
    """(c) Thread 0 sleeps 3 s inside one interval, past a 0.5 s hung
    threshold: the others go on meanwhile (§7.1), and its measurement is
    discarded when it comes back."""
    menv["MANNERS_HUNG"] = "0.5"
    r = run([WORKER, "--threads", 3, "--seconds", 5, "--work-ms", 5, "--hang", "0:3"], menv)
    spans = intervals(r.stdout)
    hang = [s for s in spans if s[2][1] == 0 and s[1] - s[0] > 2_500_000_000]
    assert len(hang) == 1, "thread 0 did not hang once"
    h_start, h_end, _ = hang[0]
    others = [s for s in spans if s[2][1] != 0 and h_start <= s[0] < h_end]
    ran = sum(min(e, h_end) - s for s, e, _ in others)
    # Without the threshold they would run nothing for 3 s; with it they run
    # from ~0.5 s on (loose: at least a second of the 3).
    assert ran > 1_000_000_000, f"others ran {ran / 1e9:.2f} s during the hang"
    # Apart from the hung interval, still one thread at a time.
    assert not overlaps([s for s in spans if s is not hang[0]])
    assert stats_lines(r.stdout)[0]["discarded"] >= 1


def test_bad_input_returns_documented_codes(menv):
    """(d) Every documented -errno (manners.h), errno untouched, and the
    program goes on."""
    menv["MANNERS_PERSIST"] = "0"
    r = run([PROGRAMS / "manners_errors"], menv)
    assert r.stdout.strip().endswith("ok"), r.stdout
    assert r.stderr == "", r.stderr


def test_bad_environment_warns_once_and_keeps_default(menv):
    menv.update(MANNERS_ALPHA="lots", MANNERS_HUNG="-3", MANNERS_PERSIST="0")
    r = run([WORKER, "--threads", 2, "--seconds", 0.5], menv)
    lines = [l for l in r.stderr.splitlines() if l.startswith("manners: ")]
    assert len(lines) == 2, r.stderr
    assert "MANNERS_ALPHA=lots" in lines[0] + lines[1]
    assert not overlaps(intervals(r.stdout))


def _state_files(menv):
    return sorted(Path(menv["MANNERS_STATE_DIR"]).glob("manners_worker-*.targets"))


def _phases(path: Path):
    lines = path.read_text().splitlines()
    assert lines[0] == "discnice-manners-targets 1", lines[:1]
    return {int(f[1]): f for f in (l.split() for l in lines[1:]) if f and f[0] == "phase"}


def test_state_persists_across_runs(menv):
    """(e) Targets are written at exit and loaded by the next run of the same
    program, which then starts calibrated (no bootstrap, §7.1)."""
    menv.update(MANNERS_BOOTSTRAP="5", MANNERS_INTERVAL="0.02", MANNERS_PROBATION="0")
    run([WORKER, "--threads", 1, "--seconds", 1, "--work-ms", 10], menv)
    files = _state_files(menv)
    assert len(files) == 1, files
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    first = _phases(files[0])
    assert 0 in first and int(first[0][3]) >= 5, first  # SAMPLES >= bootstrap
    rate = float(first[0][4])
    assert 50 < rate < 200, rate  # one unit per ~10 ms of sleep, in units/s

    r = run([WORKER, "--threads", 1, "--seconds", 1, "--work-ms", 10], menv)
    assert _state_files(menv) == files
    second = _phases(files[0])
    assert int(second[0][3]) > int(first[0][3])  # calibration went on from there
    assert stats_lines(r.stdout)[0]["loaded_phases"] == 1
    assert "manners:" not in r.stderr, r.stderr


def _file_before_exit(env, seconds):
    """Runs the worker for `seconds`; when the state file first appeared,
    in seconds from the start, or None if only at (or after) its exit."""
    p = subprocess.Popen([str(WORKER), "--threads", "1", "--seconds", str(seconds),
                          "--work-ms", "10"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    t0, seen = time.monotonic(), None
    try:
        while p.poll() is None:
            if seen is None and _state_files(env):
                seen = time.monotonic() - t0
            time.sleep(0.02)
    finally:
        err = p.communicate(timeout=30)[1]
    assert p.returncode == 0, err
    return seen


def test_state_is_saved_while_running(menv):
    """Targets are saved every save_interval, not only at exit (a job that
    is killed keeps what it learnt up to its last save): with an interval
    of 1 s the file appears while the worker still runs; with the default
    of 60 s, only at its exit."""
    menv.update(MANNERS_BOOTSTRAP="5", MANNERS_INTERVAL="0.02", MANNERS_PROBATION="0")
    menv["MANNERS_SAVE_INTERVAL"] = "1"
    seen = _file_before_exit(menv, 3)
    assert seen is not None and seen < 2.8, seen
    for f in _state_files(menv):
        f.unlink()
    del menv["MANNERS_SAVE_INTERVAL"]
    assert _file_before_exit(menv, 2) is None
    assert len(_state_files(menv)) == 1  # written at exit


def test_corrupt_state_file_warns_once_and_is_rewritten(menv):
    menv.update(MANNERS_BOOTSTRAP="5", MANNERS_INTERVAL="0.02", MANNERS_PROBATION="0")
    run([WORKER, "--threads", 1, "--seconds", 0.5], menv)
    path = _state_files(menv)[0]
    path.write_bytes(b"discnice-manners-targets 1\nphase 0 1 five 1.0 0 0 0\n\x00\xff")
    r = run([WORKER, "--threads", 2, "--seconds", 0.5], menv)
    warnings = [l for l in r.stderr.splitlines() if l.startswith("manners: ")]
    assert len(warnings) == 1 and str(path) in warnings[0], r.stderr
    assert _phases(path)  # rewritten, valid
    r = run([WORKER, "--threads", 1, "--seconds", 0.3], menv)
    assert r.stderr == "", r.stderr
    # Another version's file: the same one warning.
    path.write_text("discnice-manners-targets 99\n")
    r = run([WORKER, "--threads", 1, "--seconds", 0.3], menv)
    assert len([l for l in r.stderr.splitlines() if l.startswith("manners: ")]) == 1, r.stderr
    assert path.read_text().startswith("discnice-manners-targets 1\n")


def test_unreadable_state_file_warns_once(menv, tmp_path):
    """A state path that cannot be read - here a directory where the file
    would be, or a path through a regular file - is not a corrupt file to
    rewrite: one warning that says so, not 'it will be rewritten' and then
    'cannot write' at every save."""
    menv.update(MANNERS_BOOTSTRAP="5", MANNERS_INTERVAL="0.02", MANNERS_PROBATION="0")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    for env in ({"MANNERS_STATE_DIR": str(blocker)},
                {"MANNERS_STATE_FILE": str(tmp_path)}):
        r = run([WORKER, "--threads", 1, "--seconds", 0.3], {**menv, **env})
        warnings = [l for l in r.stderr.splitlines() if l.startswith("manners: ")]
        assert len(warnings) == 1 and "cannot read" in warnings[0] \
            and "not be kept" in warnings[0], r.stderr
    assert blocker.read_text() == "not a directory\n"


def test_fifo_state_file_never_waits(menv, tmp_path):
    """A FIFO where the state file goes hung the first testpoint for good,
    in open() waiting for a writer - under the library's lock, so every
    thread's.  Now: one warning that says what it is, and the job runs."""
    menv.update(MANNERS_BOOTSTRAP="5", MANNERS_INTERVAL="0.02", MANNERS_PROBATION="0")
    fifo = tmp_path / "targets.fifo"
    os.mkfifo(fifo)
    r = run([WORKER, "--threads", 2, "--seconds", 0.3], {**menv, "MANNERS_STATE_FILE": str(fifo)},
            timeout=30)
    warnings = [l for l in r.stderr.splitlines() if l.startswith("manners: ")]
    assert len(warnings) == 1 and "not a regular file" in warnings[0], r.stderr


def test_unwritable_state_warns_once(menv):
    """A state directory that cannot be made (in /proc/sys: not even root
    can) with a short save_interval: one 'cannot write' line, not one at
    every save (ten in ten testpoints before)."""
    menv.update(MANNERS_BOOTSTRAP="5", MANNERS_INTERVAL="0.02", MANNERS_PROBATION="0",
                MANNERS_SAVE_INTERVAL="0.05", MANNERS_STATE_DIR="/proc/sys/discnice-test")
    r = run([WORKER, "--threads", 1, "--seconds", 0.6], menv)
    warnings = [l for l in r.stderr.splitlines() if l.startswith("manners: ")]
    assert len(warnings) == 1 and "cannot write" in warnings[0] \
        and "not be kept" in warnings[0], r.stderr


def test_environment_pairs_in_any_order(menv):
    """Settings checked against a partner (alpha < beta, suspend_initial <=
    suspend_limit) were taken in the table's order, each against its
    partner's default: MANNERS_ALPHA=0.3 MANNERS_BETA=0.5 warned 'ignoring
    MANNERS_ALPHA=0.3' and kept 0.05.  Both pairs are taken now; an
    inconsistent pair still gets its one line."""
    menv.update(MANNERS_BOOTSTRAP="5", MANNERS_INTERVAL="0.02", MANNERS_PROBATION="0")
    good = {"MANNERS_ALPHA": "0.3", "MANNERS_BETA": "0.5",
            "MANNERS_SUSPEND_INITIAL": "700", "MANNERS_SUSPEND_LIMIT": "1000"}
    r = run([WORKER, "--threads", 1, "--seconds", 0.2], {**menv, **good})
    assert not [l for l in r.stderr.splitlines() if l.startswith("manners: ")], r.stderr
    r = run([WORKER, "--threads", 1, "--seconds", 0.2],
            {**menv, "MANNERS_ALPHA": "0.6", "MANNERS_BETA": "0.5"})
    warnings = [l for l in r.stderr.splitlines() if l.startswith("manners: ")]
    assert len(warnings) == 1 and "MANNERS_ALPHA=0.6" in warnings[0], r.stderr


def _venv_python():
    python = BUILD / "venv" / "bin" / "python"
    return python if python.exists() else Path(sys.executable)


def test_python_binding_and_example(menv, tmp_path):
    """(f) The ctypes module, found through MANNERS_LIBRARY: the example
    checksummer gives the right digests, and errors raise with their errno."""
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    expected = {}
    for i, size in enumerate((0, 1, 3 << 20, 12345)):
        p = tree / ("sub" if i % 2 else "") / f"f{i}"
        data = os.urandom(size)
        p.write_bytes(data)
        expected[str(p)] = hashlib.sha256(data).hexdigest()
    # interval 0: every testpoint is processed, so targets are learnt and kept.
    menv.update(MANNERS_LIBRARY=str(LIBRARY), PYTHONPATH=str(REPO / "python"),
                MANNERS_INTERVAL="0", MANNERS_PROBATION="0")
    r = run([_venv_python(), REPO / "examples/manners/checksum_files.py", tree], menv)
    got = {path: digest for digest, path in (l.split("  ", 1) for l in r.stdout.splitlines())}
    assert got == expected
    # The state file is named after the script, not the interpreter, and
    # holds the one phase with its two metrics (bytes, files).
    files = list(Path(menv["MANNERS_STATE_DIR"]).glob("*.targets"))
    assert [f.name.split("-")[0] for f in files] == ["checksum_files.py"], files
    assert _phases(files[0])[0][2] == "2"

    code = """
import errno, discnice_manners as m
for bad in ([-1.0], [float('nan')], [], [1.0] * 9):
    try:
        m.testpoint(0, bad)
    except m.MannersError as e:
        assert e.errno == errno.EINVAL, e
    else:
        raise SystemExit('no error for %r' % (bad,))
m.testpoint(1, [1.0, 2.0])
try:
    m.testpoint(1, [1.0])
except OSError as e:
    assert e.errno == errno.EINVAL
else:
    raise SystemExit('count change accepted')
try:
    m.config_set('no_such', 1)
except m.MannersError as e:
    assert e.errno == errno.ENOENT
m.config_set('hung', 2.5)
assert m.config_get('hung') == '2.5'
# Wrong types raise before the library is called: a str or bytes is not
# metrics per character, an index that does not fit a C int is not cut to
# its low bits, a name is a str without NUL (ctypes would end it there).
def raises(kind, call, *args):
    try:
        call(*args)
    except kind:
        pass
    else:
        raise SystemExit('no %s for %s%r' % (kind.__name__, call.__name__, args))
raises(TypeError, m.testpoint, 0, "12")
raises(TypeError, m.testpoint, 0, b"12")
raises(TypeError, m.testpoint, 0, ["1"])
raises(TypeError, m.testpoint, 0.5, [1.0])
raises(OverflowError, m.testpoint, 2**32, [1.0])
raises(OverflowError, m.testpoint, -2**31 - 1, [1.0])
raises(OverflowError, m.set_priority, 2**32 + 3)
raises(TypeError, m.config_set, None, 1)
raises(TypeError, m.config_get, None)
raises(ValueError, m.config_set, 'hung\\0x', 1)
raises(ValueError, m.config_set, 'hung', '3\\0x')
raises(ValueError, m.config_get, 'hung\\0x')
assert m.config_get('hung') == '2.5'
# A bool is 1 or 0 (str(True) is "True", which the library refuses); bytes
# and paths are passed as they are, str as os.fsencode() encodes it, so a
# name os.listdir() gave with undecodable bytes round-trips.
m.config_set('enable', True)
assert m.config_get('enable') == '1', m.config_get('enable')
m.config_set('hung', b'3.5')
assert m.config_get('hung') == '3.5'
import pathlib
odd = '/nonexistent/st\\udcffte'
m.config_set('state_dir', pathlib.PurePosixPath(odd))
assert m.config_get('state_dir') == odd, ascii(m.config_get('state_dir'))
raises(TypeError, m.config_set, 'hung', [2.5])
# Any real number: a Fraction (numbers.Real, no float) was a TypeError.
import fractions
m.config_set('hung', fractions.Fraction(7, 2))
assert m.config_get('hung') == '3.5', m.config_get('hung')
raises(ValueError, m.config_set, 'hung', b'3\\0x')
s = m.stats()
assert s.testpoints == 1, s.as_dict()
m.set_priority(3)
s = m.stats()
assert s.size == 160 and s.priority == 3 and s.testpoints == 1, s.as_dict()
m.leave()
print('ok')
"""
    r = run([_venv_python(), "-c", code], menv)
    assert r.stdout.strip() == "ok"

    # A script read from standard input has no name: its state file is the
    # interpreter's, as under -c, not one named "-" after the directory.
    state = tmp_path / "stdin-state"
    menv.update(MANNERS_STATE_DIR=str(state))
    p = subprocess.run([_venv_python(), "-"], input=b"import time, discnice_manners as m\n"
                       b"for _ in range(5):\n    m.testpoint(0, [1.0]); time.sleep(0.01)\n"
                       b"m.save()\n", env=menv, capture_output=True,
                       timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    names = [f.name for f in state.glob("*.targets")]
    assert len(names) == 1 and names[0].startswith("python"), names


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_worker(env, seconds: float, regulated: bool = True) -> subprocess.Popen:
    """The worker's CPU-bound loop on CPU 0 for `seconds`, returned once it
    says its bootstrap is over (when regulated) and is still running."""
    worker = subprocess.Popen(["taskset", "-c", "0", str(WORKER), "--cpu", "--threads", "1",
                               "--seconds", str(seconds)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if regulated:
        for line in worker.stdout:  # the worker exits (EOF) if it never comes
            if line.startswith("regulating"):
                break
    assert worker.poll() is None, worker.stderr.read()
    return worker


def _share_beside_hog(env, settle: float, window: float, regulated: bool = True) -> float:
    """The loop's fraction of CPU 0 over `window` seconds beside a hog
    started `settle` seconds earlier, once the loop says its bootstrap is
    over (when regulated) and it ran alone for a second."""
    worker = _cpu_worker(env, settle + window + 6, regulated)
    hog = None
    try:
        time.sleep(1.0)  # calibrated: a moment of running alone
        hog = subprocess.Popen(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"])
        time.sleep(settle)
        w0, h0 = _cpu_seconds(worker.pid), _cpu_seconds(hog.pid)
        time.sleep(window)
        w1, h1 = _cpu_seconds(worker.pid), _cpu_seconds(hog.pid)
        return (w1 - w0) / max(1e-9, (w1 - w0) + (h1 - h0))
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        worker.kill()
        worker.communicate()


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_regulation_backs_off_under_contention(menv):
    """(g) A CPU-bound regulated loop on CPU 0, calibrated alone, then an
    unregulated hog on the same CPU: the loop's share of the CPU falls well
    below the half a fair scheduler gives it, which the same loop with
    regulation off does get (the control)."""
    menv.update(MANNERS_BOOTSTRAP="30", MANNERS_PROBATION="0", MANNERS_INTERVAL="0.05",
                MANNERS_SUSPEND_INITIAL="0.5", MANNERS_SUSPEND_LIMIT="4", MANNERS_PERSIST="0")
    regulated = _share_beside_hog(menv, settle=1.0, window=6.0)
    control = _share_beside_hog(dict(menv, MANNERS_ENABLE="0"), settle=0.5, window=3.0,
                                regulated=False)
    print(f"CPU share beside the hog: regulated {regulated:.1%}, control {control:.1%}")
    assert control > 0.35, f"control: the loop alone got only {control:.0%} beside the hog"
    assert regulated < 0.30, f"regulated loop kept {regulated:.0%} of the CPU (control {control:.0%})"


def _stats_beside_hog(env, hog_s: float = 2.0) -> tuple[dict, bool]:
    """Thread 0's stats of a CPU-bound loop on CPU 0 beside a hog started
    on CPU 0 a second after its bootstrap, for hog_s seconds; and whether
    the machine's CPU pressure was low just before the hog."""
    worker = _cpu_worker(env, hog_s + 8)
    hog = None
    try:
        time.sleep(0.7)
        quiet_before = cpu_pressure.share(0.3) < cpu_pressure.QUIET_BEFORE
        hog = subprocess.Popen(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"])
        time.sleep(hog_s)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    return stats_lines(out)[0], quiet_before


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_busy_interval_beside_a_cpu_rival(menv):
    """The quick polls (MANNERS_BUSY_INTERVAL, manners(3)): beside a hog on
    its CPU a loop's testpoints are processed at the busy interval, started
    by the rise of /proc/pressure/cpu where the kernel has it; with the
    setting 0, never."""
    menv.update(MANNERS_BOOTSTRAP="30", MANNERS_PROBATION="0", MANNERS_SUSPEND_INITIAL="0.5",
                MANNERS_SUSPEND_LIMIT="2", MANNERS_PERSIST="0")
    s, quiet_before = _stats_beside_hog(menv)
    assert s["busy_processed"] >= 1, s
    if cpu_pressure.readable() and quiet_before:
        assert s["pressure_rises"] >= 1, s
    off, _ = _stats_beside_hog(dict(menv, MANNERS_BUSY_INTERVAL="0"))
    assert off["busy_processed"] == 0 and off["pressure_rises"] == 0, off


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
@pytest.mark.parametrize("quiet", ["1", "0"])
def test_quiet_machine_ends_a_suspension(menv, quiet):
    """MANNERS_QUIET (manners(3)): a CPU-bound loop on CPU 0 beside a hog
    on its CPU for 2 s is suspended for MANNERS_SUSPEND_INITIAL = 10 s.
    On, the machine goes quiet when the hog is killed and the suspension
    ends about a second later: the loop's CPU time, from /proc/PID/stat,
    grows again within 4 s.  Off, it sits the suspension out."""
    menv.update(MANNERS_BOOTSTRAP="30", MANNERS_PROBATION="0", MANNERS_PERSIST="0",
                MANNERS_SUSPEND_INITIAL="10", MANNERS_SUSPEND_LIMIT="20", MANNERS_QUIET=quiet)
    worker = _cpu_worker(menv, 16)
    hog = None
    try:
        time.sleep(0.5)
        hog = subprocess.Popen(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"])
        time.sleep(2.0)
        before = _cpu_seconds(worker.pid)
        time.sleep(0.5)
        stopped = _cpu_seconds(worker.pid) - before  # suspended: nothing
        hog.kill()
        hog.wait()
        gone = time.monotonic()
        resumed = None
        last = _cpu_seconds(worker.pid)
        while time.monotonic() - gone < 6.0:
            time.sleep(0.1)
            now = _cpu_seconds(worker.pid)
            if now - last >= 0.05:
                resumed = time.monotonic() - gone
                break
            last = now
    finally:
        if hog is not None and hog.poll() is None:
            hog.kill()
            hog.wait()
        worker.kill()
        out, err = worker.communicate()
    assert stopped < 0.05, f"the loop ran {stopped:.2f} s of CPU beside the hog: not suspended"
    if quiet == "1":
        assert resumed is not None and resumed < 4.0, f"resumed {resumed} s after the hog ended"
    else:
        assert resumed is None, f"resumed {resumed:.1f} s after the hog ended, inside 10 s"


# A job that reads a file O_DIRECT (the disk moves every byte) with a
# testpoint per MiB through the binding, for argv[2] seconds; at the end its
# manners_stats() as JSON.
DIRECT_READER_TESTPOINTS = """
import json, mmap, os, sys, time
import discnice_manners as m
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 1 << 20)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    if os.readv(fd, [buf]) <= 0:
        os.lseek(fd, 0, 0)
    m.testpoint(0, [1.0])
print(json.dumps(m.stats().as_dict()))
"""


@pytest.mark.parametrize("rise", ["1", "0"])
def test_disk_rise_begins_a_new_sample(env, menv, rise):
    """MANNERS_DISK_RISE (manners(3)): a job reading the disk alone for 3 s,
    then a rival reading it too for 3 s, its bytes counted by the kernel.
    On, the library sees the others' bytes rise (/proc/diskstats less
    /proc/self/io's) and counts a rise; off, none.  The sooner suspension
    is bench/manners.py's to measure."""
    src = env.make_file(env.path("lib-rise-job.dat"), 128 * disk_rival.MiB)
    disk_rival.prepare(env, "lib-rise-rival.dat")
    menv.update(MANNERS_LIBRARY=str(LIBRARY), PYTHONPATH=str(REPO / "python"),
                MANNERS_PERSIST="0", MANNERS_BOOTSTRAP="20", MANNERS_PROBATION="0",
                MANNERS_DISK_RISE=rise,
                # Short suspensions: the rise is what is tested, and a
                # suspension as long as the rival's 3 s would hide it.
                MANNERS_SUSPEND_INITIAL="0.2", MANNERS_SUSPEND_LIMIT="0.5")
    job = subprocess.Popen([str(_venv_python()), "-c", DIRECT_READER_TESTPOINTS, str(src), "8"],
                           env=menv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        rival = disk_rival.read(env, "lib-rise-rival.dat", 3)
        out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, err
    disk_rival.check(rival)
    s = json.loads(out)
    if rise == "1":
        assert s["disk_rises"] >= 1, s
    else:
        assert s["disk_rises"] == 0, s


@pytest.mark.parametrize("share", ["file", "none"])
def test_fork_child_takes_turns_as_a_new_process(menv, share):
    """After fork() (while another thread takes turns) the child regulates
    itself as a process of its own: no deadlock, no descriptor left open by
    the library; with the shared table, parent and child still take turns."""
    menv["MANNERS_PERSIST"] = "0"
    if share == "none":
        menv["MANNERS_SHARE_FILE"] = "none"
    r = run([PROGRAMS / "manners_fork", 1], menv, timeout=30)
    assert "child exit 0" in r.stdout and "child fds 0" in r.stdout, r.stdout[-500:]
    spans = intervals(r.stdout)
    assert len({who[0] for _, _, who in spans}) == 2, "parent or child never ran"
    if share == "file":
        assert not overlaps(spans), overlaps(spans)[:3]
    assert "manners:" not in r.stderr, r.stderr


def test_install_prefix(tmp_path, menv):
    """`make install PREFIX=...`: header, libraries, manners.pc, the man page,
    and a Python module the prefix's python3 imports without MANNERS_LIBRARY."""
    if shutil.which("make") is None or shutil.which("pkg-config") is None:
        pytest.skip("needs make and pkg-config")
    prefix = tmp_path / "prefix"
    r = subprocess.run(["make", "-s", "-C", str(REPO), f"BUILD={BUILD}", f"PREFIX={prefix}",
                        "install-manners"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for rel in ("include/discnice/manners.h", "lib/libmanners.so.0", "lib/libmanners.so",
                "lib/libmanners.a", "lib/pkgconfig/manners.pc", "share/man/man3/manners.3"):
        assert (prefix / rel).exists(), rel
    pc_env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "manners"], env=pc_env,
                           capture_output=True, text=True, check=True).stdout.split()
    assert f"-I{prefix}/include" in flags and "-lmanners" in flags
    # The C example, built against the installed library with pkg-config.
    binary = tmp_path / "checksum_files"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-o", str(binary),
                    str(REPO / "examples/manners/checksum_files.c"), *flags,
                    f"-Wl,-rpath,{prefix}/lib"], check=True, timeout=60)
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a").write_bytes(b"abc")
    r = run([binary, tmp_path / "tree"], menv)
    assert r.stdout == f"e71fa2190541574b  {tmp_path}/tree/a\n"  # FNV-1a 64 of "abc"
    # The Python module, where the prefix's python3 looks (Debian layout).
    site = list(prefix.glob("lib/python3*/dist-packages/discnice_manners.py"))
    assert len(site) == 1, list(prefix.rglob("*.py"))
    env = {k: v for k, v in menv.items() if k != "MANNERS_LIBRARY"}
    env["PYTHONPATH"] = str(site[0].parent)
    r = run([_venv_python(), "-c", "import discnice_manners as m; m.testpoint(0, [1.0]); "
             "print(m._lib._name)"], env)
    assert r.stdout.strip() == f"{prefix}/lib/libmanners.so.0"


def test_killed_process_slot_is_reclaimed(menv):
    """A process killed (SIGKILL) while its thread runs holds up the others
    only until its slot is found dead - well before the hung threshold (set
    to 60 s here, so that only reclaiming can explain the others running)."""
    menv["MANNERS_HUNG"] = "60"
    menv["MANNERS_PERSIST"] = "0"
    victim = subprocess.Popen([str(WORKER), "--threads", "1", "--seconds", "60",
                               "--work-ms", "20"], env=menv, stdout=subprocess.PIPE, text=True)
    try:
        for line in victim.stdout:  # it runs: it holds the turn (alone, it always does)
            if line.startswith("interval"):
                break
        victim.kill()
        victim.wait()
    finally:
        if victim.poll() is None:
            victim.kill()
    start = time.monotonic()
    r = run([WORKER, "--threads", 2, "--seconds", 1, "--work-ms", 5], menv, timeout=30)
    assert time.monotonic() - start < 10
    assert len({who for _, _, who in intervals(r.stdout)}) == 2


def test_lock_holder_death_does_not_block_others(menv):
    """A process that dies holding the turn table's lock (robust mutex) does
    not stop the next one."""
    menv["MANNERS_PERSIST"] = "0"
    run([WORKER, "--threads", 1, "--seconds", 0.2], menv)  # makes the table
    r = run([PROGRAMS / "manners_die_locked"], menv)
    assert r.stdout.strip() in ("locked 0", "locked 130"), r.stdout  # 130: EOWNERDEAD
    r = run([WORKER, "--threads", 2, "--seconds", 0.5], menv, timeout=20)
    assert len({who for _, _, who in intervals(r.stdout)}) == 2
    assert not overlaps(intervals(r.stdout))


def test_python_threads_take_turns(menv):
    """Python threads regulated through the binding take turns too: ctypes
    lets go of the GIL while a thread waits in its testpoint."""
    menv.update(MANNERS_LIBRARY=str(LIBRARY), PYTHONPATH=str(REPO / "python"),
                MANNERS_PERSIST="0")
    code = """
import threading, time, discnice_manners as m
spans = []
def work(i):
    end = time.monotonic() + 1.5
    while True:
        m.testpoint(i, [1.0])
        start = time.monotonic_ns()
        if time.monotonic() > end:
            break
        time.sleep(0.004)
        spans.append((start, time.monotonic_ns(), i))
    m.leave()
threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
for t in threads: t.start()
for t in threads: t.join()
for s, e, i in spans: print('interval', 0, i, s, e)
"""
    r = run([_venv_python(), "-c", code], menv)
    spans = intervals(r.stdout)
    assert len({who for _, _, who in spans}) == 3
    assert not overlaps(spans), overlaps(spans)[:3]


CTRL_C_JOB = """
import os, signal, sys, time, discnice_manners as m
start = time.monotonic()
try:
    while True:
        slow = time.monotonic() - start > 1.0
        time.sleep(0.02)
        m.testpoint(0, [1.0 if slow else 100.0])
except KeyboardInterrupt:
    s = m.stats()
    print(f"interrupted {time.monotonic() - start:.2f} suspended {s.suspended_ns / 1e9:.2f}",
          flush=True)
"""


def test_ctrl_c_during_a_suspension(menv):
    """A Python job suspended for 8 s, Ctrl-C (SIGINT) 1 s into it: Python
    raises KeyboardInterrupt only when the library's call returns, and
    the library waited out the suspension (9.1 s before the signal was
    seen).  Now the wait ends at a signal that has a handler without
    SA_RESTART, as sleep(3) would: interrupted within a second."""
    menv.update(MANNERS_LIBRARY=str(LIBRARY), PYTHONPATH=str(REPO / "python"),
                MANNERS_PERSIST="0", MANNERS_BOOTSTRAP="3", MANNERS_PROBATION="0",
                MANNERS_QUIET="0", MANNERS_SUSPEND_INITIAL="8")
    p = subprocess.Popen([sys.executable, "-c", CTRL_C_JOB], env=menv, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        # Wait for the job to be suspended: its state file is off, so
        # look at the kernel: a thread asleep in futex_wait for long.
        deadline = time.monotonic() + 20
        since = None
        while time.monotonic() < deadline:
            wchan = Path(f"/proc/{p.pid}/wchan").read_text()
            since = (since or time.monotonic()) if "futex" in wchan else None
            if since and time.monotonic() - since > 1.0:
                break
            time.sleep(0.05)
        assert since, "the job was never suspended"
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert out.startswith("interrupted"), (out, err)
    assert float(out.split()[3]) > 0, out  # it was suspended
    assert took < 2.0, f"KeyboardInterrupt {took:.2f} s after SIGINT ({out.strip()})"


DISABLED_THEN_ENABLED = """
import discnice_manners as m
for i in range(70):                 # more than MANNERS_PHASES_MAX indexes
    m.testpoint(i, [1.0])
m.config_set("enable", 1)
m.testpoint(0, [1.0])
print(m.stats().loaded_phases, flush=True)
"""


def test_disabled_testpoints_only_check_their_arguments(menv, tmp_path):
    """enable=0: testpoints check their arguments and nothing else, as the
    header says.  They made phases: the 65th index got -ENOSPC, and a
    phase first used while disabled never loaded its kept target once
    enabled (full bootstrap and probation, then its target overwritten)."""
    state = tmp_path / "kept.targets"
    menv.update(MANNERS_BOOTSTRAP="5", MANNERS_INTERVAL="0.02", MANNERS_PROBATION="0",
                MANNERS_STATE_FILE=str(state))
    run([WORKER, "--threads", 1, "--seconds", 1, "--work-ms", 10], menv)
    assert 0 in _phases(state)
    menv.update(MANNERS_LIBRARY=str(LIBRARY), PYTHONPATH=str(REPO / "python"), MANNERS_ENABLE="0")
    r = run([_venv_python(), "-c", DISABLED_THEN_ENABLED], menv)
    assert r.stdout.strip() == "1", (r.stdout, r.stderr)


def test_slots_no_thread_can_own_are_reclaimed(menv, tmp_path):
    """A turn table whose every slot is in use by an owner no thread can
    be (pid 0: written by something else, or torn): such slots were never
    reclaimed, and every testpoint got -ENOSPC for as long as the file
    lived.  They are freed as a dead thread's are."""
    share = tmp_path / "stale.share"
    r = run([PROGRAMS / "manners_stale_slots", share], {**menv, "MANNERS_SHARE_FILE": str(share)})
    assert r.stdout.strip() == "0", (r.stdout, r.stderr)


HUGE_PROGRESS = """
import errno, time, discnice_manners as m
refused = 0
for i in range(12):
    try:
        m.testpoint(0, [1e300, 1e300])
    except m.MannersError as e:
        refused += e.errno == errno.EINVAL
    m.testpoint(2, [m.PROGRESS_MAX, m.PROGRESS_MAX])
    m.testpoint(1, [1.0])
    time.sleep(0.03)
print(refused)
"""


def test_progress_past_the_limit_is_refused_and_the_others_are_kept(menv, tmp_path):
    """Progress of 1e300 a testpoint overflowed the regression's sums: the
    phase stopped regulating without a word, and (before that was mended)
    every save failed ('cannot write ...: Invalid argument'), the other
    phases' targets with it.  Values above MANNERS_PROGRESS_MAX (2^53) are
    refused now, -EINVAL as documented, and nothing is recorded; a phase at
    the limit, with two metrics (the regression's squares), is calibrated
    and kept with the others."""
    state = tmp_path / "huge.targets"
    menv.update(MANNERS_LIBRARY=str(LIBRARY), PYTHONPATH=str(REPO / "python"),
                MANNERS_BOOTSTRAP="3", MANNERS_INTERVAL="0.02", MANNERS_PROBATION="0",
                MANNERS_STATE_FILE=str(state))
    r = run([_venv_python(), "-c", HUGE_PROGRESS], menv)
    assert "manners:" not in r.stderr, r.stderr
    assert r.stdout.strip() == "12", r.stdout
    phases = _phases(state)
    assert 1 in phases and 2 in phases and 0 not in phases, state.read_text()


PERIODIC_SIGNAL_JOB = """
import ctypes, signal, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.manners_testpoint.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
signal.signal(signal.SIGALRM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)      # a timer's signal, every 50 ms
start, longest, codes = time.monotonic(), 0.0, set()
while time.monotonic() - start < 5:
    slow = time.monotonic() - start > 1.0
    time.sleep(0.02)
    t0 = time.monotonic()
    codes.add(lib.manners_testpoint(0, 1, (ctypes.c_double * 1)(1.0 if slow else 100.0)))
    longest = max(longest, time.monotonic() - t0)
# The timer stops before the end: Python's finalization puts SIGALRM back to
# SIG_DFL (_PySignal_Fini) while the timer still runs, and a tick in the few
# ms before exit_group() killed the job (exit -14) - phase-locked to the
# suspension's end, in 4 of 12 runs of some timings.
signal.setitimer(signal.ITIMER_REAL, 0)
print(round(longest, 2), sorted(codes), flush=True)
"""


def test_a_timers_signal_does_not_end_a_suspension(menv):
    """A C caller (ctypes, not the binding) with a timer's handler firing
    every 50 ms: by default a suspension goes on through signals - a timed
    futex wait is never restarted, SA_RESTART or not, and ending it at
    every caught signal let any periodic signal undo the regulation."""
    menv.update(MANNERS_PERSIST="0", MANNERS_BOOTSTRAP="3", MANNERS_PROBATION="0",
                MANNERS_QUIET="0", MANNERS_SUSPEND_INITIAL="3")
    r = run([sys.executable, "-c", PERIODIC_SIGNAL_JOB, LIBRARY], menv)
    longest, codes = r.stdout.split(" ", 1)
    assert float(longest) >= 2.5, f"the longest testpoint took {longest} s (codes {codes})"
    assert codes.strip() == "[0]", codes


def test_a_plug_in_host_that_unloads_the_library_is_not_crashed(menv):
    """A host that loads libmanners with dlopen() (a plug-in), makes a
    testpoint in a thread and unloads it: the thread's pthread key
    destructor was the library's code, gone when the thread exited -
    SIGSEGV.  The library is linked -z nodelete now: dlclose() leaves it
    mapped (tests/programs/manners_dlclose.c)."""
    prog = BUILD / "tests" / "programs" / "manners_dlclose"
    if not prog.is_file():
        pytest.fail(f"{prog} not built (run `make programs`)", pytrace=False)
    r = subprocess.run([str(prog), str(LIBRARY)], env=menv, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    assert r.stdout == "dlclose 0, thread ended\n"
