"""Integration tests for discnice: the real binary, real files, kernel oracles.

What these tests judge, and by what
-----------------------------------
Every test runs ``build/discnice run`` on unmodified programs (cat, dd,
gzip, sort, tar, grep, awk, python3) over real files on a real block-device
filesystem, and judges the result by oracles that do not come from the
agent (CONVENTIONS, lesson 8):

* the kernel's own I/O accounting: the report's ``actual_read_bytes`` and
  ``actual_write_bytes`` are the growth of the supervisor's
  ``/proc/self/io`` across the job (every reaped descendant's counts are
  added to its reaper), so they are the kernel's numbers, not the agent's;
* byte comparison of the job's output (stdout or the file it wrote) with an
  unregulated run of the same command, and equality of exit codes;
* wall-clock time measured by the test itself.

The agent's own counters (``predicted_*``) are only ever compared against
the kernel's numbers, never trusted alone.  Rate assertions are loose
behavioural bounds (``<= 1.10 x cap``, ``>= 0.85 x size/cap``); exact rate
figures belong to bench/.

Running
-------
``make integration`` builds, creates the venv and runs::

    DISCNICE_BUILD=$(abspath build) build/venv/bin/python -m pytest -q -ra tests/integration

Environment:

``DISCNICE_BUILD``     directory holding ``discnice`` and ``libdiscnice.so``
                       (default: ``<repo>/build``)
``DISCNICE_BIN``       the ``discnice`` binary to test (overrides the above)
``DISCNICE_AGENT``     the agent, if not beside the binary (passed through)
``DISCNICE_TEST_DIR``  scratch directory; must be on a filesystem backed by a
                       block device, since the oracles are disk I/O counts
                       (default: ``<repo>/build/scratch``).  The suite is
                       skipped, with the reason, on tmpfs/overlay and other
                       filesystems without a block device.
``DISCNICE_KEEP_SCRATCH=1``  keep the per-session scratch directory.

Cold files are made by ``fsync`` + ``posix_fadvise(POSIX_FADV_DONTNEED)``;
no root is needed.  Every subprocess has a timeout; the whole suite runs in
well under five minutes on a 2-core VM.

Helpers (the ``env`` fixture, an :class:`Env`): ``make_file``, ``make_tree``,
``drop_cache``, ``warm``, ``run`` (regulated, returns a :class:`RunResult`
with ``.rc .stdout .stderr .report`` and ``check_*`` methods that dump
stderr and the report on failure, as curl's tests/http do), ``run_plain``
(the same command without discnice) and ``discnice`` (raw invocation, for
CLI error tests).
"""
from __future__ import annotations

import binascii
import ctypes
import itertools
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import time
import warnings
from pathlib import Path

import pytest

_LIBC = ctypes.CDLL(None, use_errno=True)

REPO = Path(__file__).resolve().parents[2]

# Fields every report must carry (discnice(1), REPORT; src/tool/tool_report.c).
REPORT_FIELDS = (
    "elapsed_s", "slept_s", "file_read_bytes", "file_write_bytes",
    "predicted_read_bytes", "predicted_write_bytes",
    "actual_read_bytes", "actual_write_bytes", "exit_status", "supervisor_cpu_s",
)

RUN_TIMEOUT = 120          # seconds; no single job here should take 15
# Filesystems whose I/O is not block-device I/O counted in /proc/PID/io.
FILESYSTEMS_WITHOUT_DISK = {"tmpfs", "overlayfs", "overlay", "ramfs", "nfs", "9p", "virtiofs"}

MiB = 1 << 20
KiB = 1 << 10


def _fs_type(path: Path) -> str:
    try:
        out = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


@pytest.fixture
def shm_files(request):
    """make(n, size, mode=None): n files of size random bytes in a fresh
    directory on the tmpfs at /dev/shm (in memory: every page cached, no
    read counted), removed after the test; skipped where there is none."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK) and _fs_type(shm) == "tmpfs"):
        pytest.skip("no writable tmpfs at /dev/shm")
    d = shm / f"discnice-{request.node.name[:40]}-{os.getpid()}"
    d.mkdir(mode=0o755)

    def make(n=3, size=3 * MiB, mode=None):
        paths = []
        for i in range(n):
            p = d / f"m{i}"
            p.write_bytes(os.urandom(size))
            if mode is not None:
                os.chmod(p, mode)
            paths.append(p)
        return paths
    yield make
    shutil.rmtree(d, ignore_errors=True)


def _first_diff(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    step = 1 << 16
    for off in range(0, n, step):
        if a[off:off + step] != b[off:off + step]:
            for i in range(off, min(off + step, n)):
                if a[i] != b[i]:
                    return i
    return n


def _kill_group(proc):
    """SIGKILL the process group of a job we started (its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass



def mount_overlay(layers):
    """Mount an overlayfs of layers["lower"] and ["upper"] (work dir
    ["work"]) on layers["merged"], as root; skip the test with the mount's
    own words where this kernel or sandbox cannot.  The caller unmounts."""
    r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={layers['lower']},upperdir={layers['upper']},"
                        f"workdir={layers['work']}", str(layers["merged"])],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount an overlayfs here: {r.stderr.strip()}")


def _cached_pages(fd):
    """cachestat(2) (syscall 451): the file's pages in the page cache; 0
    where the kernel cannot say (then DONTNEED once is all we can do)."""
    rng = ctypes.create_string_buffer(struct.pack("QQ", 0, 0), 16)
    out = ctypes.create_string_buffer(40)
    if _LIBC.syscall(451, fd, rng, out, 0) != 0:
        return 0
    return struct.unpack("5Q", out.raw)[0]


class RunResult:
    """One finished process: exit code, output, and (for discnice runs) the report."""

    def __init__(self, args, rc, stdout, stderr, report_path=None, elapsed=0.0):
        self.args = list(args)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.elapsed = elapsed          # wall time measured by the test
        self.end = time.monotonic()     # the test's clock when it ended,
        self.start = self.end - elapsed  # and when it started
        self.report_path = report_path
        self.report = None
        self.report_error = None
        if report_path is not None:
            try:
                self.report = json.loads(Path(report_path).read_text())
            except (OSError, ValueError) as e:
                self.report_error = f"{type(e).__name__}: {e}"

    # -- diagnostics -------------------------------------------------------
    def dump(self) -> str:
        err = self.stderr.decode(errors="replace")
        if len(err) > 4000:
            err = "...\n" + err[-4000:]
        lines = [f"command: {' '.join(map(str, self.args))}",
                 f"exit: {self.rc}   wall: {self.elapsed:.2f} s",
                 f"stdout: {len(self.stdout)} bytes",
                 "stderr:", err or "  (empty)"]
        if self.report_path is not None:
            if self.report is not None:
                lines += ["report:", json.dumps(self.report, indent=2)]
            else:
                lines += [f"report {self.report_path}: {self.report_error}"]
        return "\n".join(lines)

    def fail(self, msg: str):
        pytest.fail(f"{msg}\n{self.dump()}", pytrace=False)

    # -- checks ------------------------------------------------------------
    def check_exit(self, expected: int):
        if self.rc != expected:
            self.fail(f"exit status {self.rc}, expected {expected}")
        if self.report is not None and self.report.get("exit_status") != expected:
            self.fail(f"report exit_status {self.report.get('exit_status')}, expected {expected}")

    def _compare(self, what: str, got: bytes, expected: bytes):
        if got != expected:
            off = _first_diff(got, expected)
            self.fail(f"{what} differs from the expected bytes: got {len(got)} bytes, "
                      f"expected {len(expected)}; first difference at offset {off}")

    def check_output_equals(self, expected: bytes):
        self._compare("stdout", self.stdout, expected)

    def check_file_equals(self, path, expected: bytes):
        try:
            got = Path(path).read_bytes()
        except OSError as e:
            self.fail(f"cannot read output file {path}: {e}")
        self._compare(f"output file {path}", got, expected)

    def check_report(self):
        """The report exists, parses, and has every required field, numeric."""
        if self.report is None:
            self.fail(f"no usable report at {self.report_path}")
        missing = [f for f in REPORT_FIELDS if f not in self.report]
        if missing:
            self.fail(f"report lacks fields {missing}")
        bad = [f for f in REPORT_FIELDS
               if not isinstance(self.report[f], (int, float)) or isinstance(self.report[f], bool)
               or self.report[f] < 0]
        if bad:
            self.fail(f"report fields not non-negative numbers: {bad}")
        return self.report

    def stderr_lines(self):
        return [l for l in self.stderr.decode(errors="replace").splitlines() if l.strip()]


class Job:
    """A discnice run started in the background (for concurrent jobs)."""

    def __init__(self, env: "Env", args, report_path, cwd, job_env, stdout):
        self.args = args
        self.report_path = report_path
        self.start = time.monotonic()
        self.proc = subprocess.Popen(args, cwd=cwd, env=job_env, stdout=stdout,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    def finish(self, timeout=RUN_TIMEOUT) -> RunResult:
        timed_out = False
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(self.proc)
            out, err = self.proc.communicate()
        if timed_out:
            RunResult(self.args, self.proc.returncode, out or b"", err or b"",
                      self.report_path, time.monotonic() - self.start).fail(
                f"timed out after {timeout} s (the job and discnice were killed)")
        return RunResult(self.args, self.proc.returncode, out or b"", err, self.report_path,
                         time.monotonic() - self.start)


class Env:
    """Where the binaries and the scratch disk are, and how to run jobs."""

    def __init__(self):
        build = Path(os.environ.get("DISCNICE_BUILD") or REPO / "build")
        self.build = build
        self.discnice_bin = Path(os.environ.get("DISCNICE_BIN") or build / "discnice")
        self.agent = Path(os.environ.get("DISCNICE_AGENT") or
                          self.discnice_bin.parent / "libdiscnice.so")
        if not self.discnice_bin.is_file() or not os.access(self.discnice_bin, os.X_OK):
            pytest.fail(f"discnice binary not found at {self.discnice_bin} "
                        "(run `make`, or set DISCNICE_BUILD / DISCNICE_BIN)", pytrace=False)
        if not self.agent.is_file():
            pytest.fail(f"agent not found at {self.agent} (run `make`, or set DISCNICE_AGENT)",
                        pytrace=False)
        if not Path("/proc/self/io").exists():
            pytest.skip("kernel without task I/O accounting (/proc/self/io): no oracle")

        base = Path(os.environ.get("DISCNICE_TEST_DIR") or REPO / "build" / "scratch")
        base.mkdir(parents=True, exist_ok=True)
        st = os.stat(base)
        fstype = _fs_type(base)
        dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        if fstype in FILESYSTEMS_WITHOUT_DISK or not Path(f"/sys/dev/block/{dev}").exists():
            pytest.skip(f"scratch dir {base} is on {fstype} (st_dev {dev}) with no block "
                        "device in /sys/dev/block: the kernel's disk I/O counters would read "
                        "0; set DISCNICE_TEST_DIR to a directory on a real disk")
        self.fstype = fstype
        self.scratch = base / f"itest-{os.getpid()}"
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir()
        self._seq = itertools.count()
        self.session_tag = f"it{os.getpid()}"

        # One clean environment for every job: no inherited discnice
        # settings (they are option defaults), a fixed locale for sort/grep.
        self.base_env = {k: v for k, v in os.environ.items()
                         if not k.startswith("DISCNICE_") and k != "LD_PRELOAD"}
        if os.environ.get("DISCNICE_AGENT"):
            self.base_env["DISCNICE_AGENT"] = os.environ["DISCNICE_AGENT"]
        self.base_env["LC_ALL"] = "C"
        self.base_env["TMPDIR"] = str(self.scratch)
        # The calibration file (discnice(1) FILES) and any other per-user
        # state go to the scratch directory, never the user's home.
        self.base_env["XDG_STATE_HOME"] = str(self.scratch / "state")

    def cleanup(self):
        if not os.environ.get("DISCNICE_KEEP_SCRATCH"):
            shutil.rmtree(self.scratch, ignore_errors=True)

    # -- files -------------------------------------------------------------
    def path(self, name: str) -> Path:
        return self.scratch / name

    def fresh_dir(self, name: str, mode=0o700) -> Path:
        """The directory scratch/name, made afresh: a rerun
        (pytest-rerunfailures, .ci/run) finds the first attempt's there."""
        d = self.path(name)
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(mode=mode, parents=True)
        return d

    def make_file(self, path, size: int, seed=None) -> Path:
        """Write `size` bytes of random hex text in 64-byte lines, fsync it.

        Text, so that sort/grep/awk have lines; random, so that nothing
        compresses to nothing and no two files share pages."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = random.Random(seed if seed is not None else str(path))
        block_lines = 16384                       # 1 MiB of 64-byte lines
        with open(path, "wb") as f:
            left = size
            while left > 0:
                hexed = binascii.hexlify(rng.randbytes(32 * block_lines))
                block = b"".join(hexed[i:i + 63] + b"\n"
                                 for i in range(0, len(hexed), 64))
                f.write(block[:left])
                left -= min(left, len(block))
            f.flush()
            os.fsync(f.fileno())
        return path

    def make_tree(self, root, files: int, size_each: int) -> Path:
        root = Path(root)
        for i in range(files):
            sub = root / f"d{i % 4}"
            self.make_file(sub / f"f{i:02d}.txt", size_each)
        return root

    def _files(self, path):
        path = Path(path)
        if path.is_dir():
            return sorted(p for p in path.rglob("*") if p.is_file())
        return [path]

    def drop_cache(self, path):
        """Make a file (or every file of a tree) cold: fsync, then DONTNEED,
        again until cachestat(2) finds no page left (pages still under a
        reader's readahead I/O, or on a per-CPU LRU batch, survive a first
        DONTNEED; a test that needs a cold file then read it warm).  Pages
        that outlive 2 s of tries are named in a warning, which pytest's
        summary shows: a test that then fails on a warm read says why."""
        for p in self._files(path):
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                for _ in range(40):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    left = _cached_pages(fd)
                    if not left:
                        break
                    time.sleep(0.05)
                else:
                    warnings.warn(f"drop_cache: {p}: {left} pages still cached after 2 s of "
                                  f"fsync + POSIX_FADV_DONTNEED", stacklevel=2)
            finally:
                os.close(fd)

    @staticmethod
    def refaulted_bytes():
        """The kernel's count of file pages read again soon after reclaim
        took them (/proc/vmstat workingset_refault_file), in bytes: the
        evidence that a job's extra disk reads were re-reads of evicted
        pages, which no prediction of the job's own I/O can foresee."""
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("workingset_refault_file "):
                    return int(line.split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return 0

    def warm(self, path):
        """Bring a file (or tree) into the page cache by reading it."""
        for p in self._files(path):
            with open(p, "rb", buffering=0) as f:
                while f.read(1 << 20):
                    pass

    # -- processes ---------------------------------------------------------
    def _env(self, extra=None):
        e = dict(self.base_env)
        if extra:
            e.update(extra)
        return e

    def discnice(self, args, cwd=None, env=None, timeout=RUN_TIMEOUT, stdin=None) -> RunResult:
        """Run the discnice binary with exactly these arguments."""
        argv = [str(self.discnice_bin)] + [str(a) for a in args]
        return self._run(argv, cwd, env, timeout)

    def _run(self, argv, cwd=None, env=None, timeout=RUN_TIMEOUT, report_path=None,
             stdout=subprocess.PIPE) -> RunResult:
        t0 = time.monotonic()
        # Own process group: on a timeout the whole job goes, not only
        # discnice (killing discnice alone would orphan a spinning job).
        p = subprocess.Popen(argv, cwd=cwd or self.scratch, env=self._env(env),
                             stdout=stdout, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        timed_out = False
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(p)
            out, err = p.communicate()
        r = RunResult(argv, p.returncode, out or b"", err or b"", report_path,
                      time.monotonic() - t0)
        if timed_out:
            r.fail(f"timed out after {timeout} s (the job and discnice were killed)")
        return r

    def _run_argv(self, cmd, rate, extra_args, report):
        report_path = None
        argv = [str(self.discnice_bin), "run", "--quiet"]
        if report:
            report_path = self.scratch / f"report-{next(self._seq)}.json"
            argv += ["--report", str(report_path)]
        if rate is not None:
            argv += ["--rate", str(rate)]
        argv += [str(a) for a in extra_args] + ["--"] + [str(c) for c in cmd]
        return argv, report_path

    def run(self, cmd, rate=None, extra_args=(), report=True, cwd=None, env=None,
            timeout=RUN_TIMEOUT, stdout=subprocess.PIPE) -> RunResult:
        """`discnice run --quiet --report R [--rate RATE] EXTRA -- CMD`."""
        argv, report_path = self._run_argv(cmd, rate, extra_args, report)
        return self._run(argv, cwd, env, timeout, report_path, stdout)

    def start(self, cmd, rate=None, extra_args=(), report=True, cwd=None, env=None,
              stdout=subprocess.DEVNULL) -> Job:
        """Like run(), in the background; call .finish() on the result."""
        argv, report_path = self._run_argv(cmd, rate, extra_args, report)
        return Job(self, argv, report_path, cwd or self.scratch, self._env(env), stdout)

    def run_plain(self, cmd, cwd=None, env=None, timeout=RUN_TIMEOUT) -> RunResult:
        """The same command, unregulated: the reference for byte comparison."""
        return self._run([str(c) for c in cmd], cwd, env, timeout)

    def syscalls(self, argv, cwd=None, under=()) -> int:
        """The kernel's count of system calls of argv and all its
        descendants, by strace -f -c, with strace run as the job of `under`
        (a discnice command line) when given: the count is then the job's
        own, agent included, and not the supervisor's, whose idle ticks
        (~30/s) grow with a slow machine."""
        if shutil.which("strace") is None:
            pytest.skip("needs strace")
        out = Path(cwd or self.scratch) / f"strace-{next(self._seq)}.out"
        subprocess.run([*under, "strace", "-f", "-c", "-o", str(out), *argv],
                       cwd=cwd or self.scratch, env=self._env(), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        total = [l for l in out.read_text().splitlines() if l.rstrip().endswith("total")]
        out.unlink()
        return int(total[-1].split()[3])  # % time, seconds, usecs/call, calls

    def program(self, name: str) -> Path:
        """A test program from tests/programs/, built by `make programs`."""
        path = self.build / "tests" / "programs" / name
        if not path.is_file():
            pytest.fail(f"test program {path} not built (run `make programs`)", pytrace=False)
        return path

    def class_name(self, what: str) -> str:
        return f"{self.session_tag}-{what}"


@pytest.fixture(scope="session")
def env():
    e = Env()
    yield e
    e.cleanup()


# The programs jobs run, besides the project's own.  Their libraries that
# nothing else keeps mapped are found through ldd once.
_JOB_TOOLS = ("cat", "dd", "grep", "tar", "cp", "sh", "bash", "setpriv", "rsync",
              "sort", "find", "gzip", "cmp", "sync", "python3")


def _tool_files(env):
    files = [env.discnice_bin, env.agent]
    for tool in _JOB_TOOLS:
        p = shutil.which(tool)
        if p:
            files.append(Path(os.path.realpath(p)))
    libs = set()
    for f in files:
        try:
            out = subprocess.run(["ldd", str(f)], capture_output=True, text=True,
                                 timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines():
            parts = line.split("=>")
            lib = (parts[1] if len(parts) > 1 else parts[0]).split("(")[0].strip()
            if lib.startswith("/"):
                libs.add(Path(os.path.realpath(lib)))
    return files + sorted(libs)


@pytest.fixture(autouse=True)
def _binaries_resident(request):
    """Touch every page of the binaries jobs run before each test.

    This VM's host runs DAMON (kdamond, action pageout, unmapped file pages
    idle for >= 12 aggregations of 5 s): a program no process has mapped for a
    minute loses its page cache, and the next job then reads it back from disk
    inside the I/O the tests count (CI once failed that way: one page over a
    bound of one page per probe).  A read marks each page accessed
    (folio_mark_accessed clears the idle flag DAMON set), so it stays."""
    if "env" not in request.fixturenames:
        yield
        return
    e = request.getfixturevalue("env")
    files = getattr(e, "_resident_files", None)
    if files is None:
        files = e._resident_files = _tool_files(e)
    for f in files:
        try:
            with open(f, "rb", buffering=0) as fh:
                while fh.read(1 << 20):
                    pass
        except OSError:
            pass
    yield



# Issue #9 §6: on the CI machine (CI set, as .ci/run's caller does) no test
# may be skipped for want of a package: .ci/run installs them all, so such
# a skip means a missing install step.  Skips for what a machine cannot do
# (root, a loop device) stay skips.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not (rep.skipped and os.environ.get("CI")):
        return
    reason = str(rep.longrepr[2]) if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    if reason.startswith("Skipped: "):
        reason = reason[len("Skipped: "):]
    if reason.startswith("needs ") and "root" not in reason:
        rep.outcome = "failed"
        rep.longrepr = f"skipped on CI for want of a package ({reason}): add it to .ci/run"
