"""Shared helpers for the bench/ scripts: the machine, the files, the runs.

Every figure comes from the kernel: a run's actual_* fields are the growth of
the supervisor's own /proc/self/io after it reaped the job (see
src/tool/tool_run.c), and device traffic from /proc/diskstats.
"""
import datetime
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("DISCNICE_BUILD", os.path.join(ROOT, "build"))
DISCNICE = os.path.join(BUILD, "discnice")
MICROBENCH = os.path.join(BUILD, "bench", "microbench")
SCRATCH = os.environ.get("DISCNICE_BENCH_DIR", os.path.join(BUILD, "bench-scratch"))
RESULTS = os.path.join(ROOT, "bench", "results")
MiB = 1 << 20


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def device_of(path):
    """(major, minor, name) of the whole disk under path."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    link = os.path.realpath(f"/sys/dev/block/{major}:{minor}")
    if not os.path.exists(os.path.join(link, "queue")):
        link = os.path.dirname(link)
    return major, minor, os.path.basename(link)


def read_sys(path, default="?"):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def machine():
    """What every results file records about the machine."""
    os.makedirs(SCRATCH, exist_ok=True)
    _, _, disk = device_of(SCRATCH)
    fs = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", SCRATCH], capture_output=True,
                        text=True).stdout.strip() or "?"
    sched = read_sys(f"/sys/block/{disk}/queue/scheduler")
    return {
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "filesystem": fs,
        "disk": disk,
        "read_ahead_kb": read_sys(f"/sys/block/{disk}/queue/read_ahead_kb"),
        "scheduler": sched,
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
    }


def make_file(path, size, fill=None):
    """A file of size bytes (random data unless fill), written once and synced."""
    if os.path.exists(path) and os.path.getsize(path) == size:
        return path
    # Its directory too: `--hook-only` makes its file before anything
    # else has made the scratch directory of a fresh build.
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    chunk = fill * MiB if fill else os.urandom(MiB)
    with open(path + ".tmp", "wb") as f:
        left = size
        while left > 0:
            f.write(chunk[:min(left, MiB)])
            left -= MiB
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)
    return path


def cached_pages(fd):
    """cachestat(2) (syscall 451): pages of the file in the page cache, or None."""
    import ctypes
    import struct
    libc = ctypes.CDLL(None, use_errno=True)
    rng = ctypes.create_string_buffer(struct.pack("QQ", 0, 0), 16)
    out = ctypes.create_string_buffer(40)
    if libc.syscall(451, fd, rng, out, 0) != 0:
        return None
    return struct.unpack("5Q", out.raw)[0]


def make_cold(path):
    """Evict one file's pages with POSIX_FADV_DONTNEED (never drop all caches),
    and check with cachestat that it worked: pages still on a per-CPU LRU
    batch of a freshly written file can survive the first try."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        for _ in range(20):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            left = cached_pages(fd)
            if not left:
                return
            time.sleep(0.05)
        print(f"bench: warning: {left} pages of {path} stay cached", file=sys.stderr)
    finally:
        os.close(fd)


def make_tree_cold(top):
    """make_cold for every regular file under top (directory and inode
    blocks stay cached: only dropping all caches would evict them)."""
    for dirpath, _, files in os.walk(top):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def proc_io(pid):
    """(read_bytes, write_bytes - cancelled) of one process, or None if gone."""
    try:
        with open(f"/proc/{pid}/io") as f:
            d = dict(line.split(": ") for line in f.read().splitlines())
        return int(d["read_bytes"]), int(d["write_bytes"]) - int(d["cancelled_write_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def hook_cost_samples(runs, rate="inf"):
    """Alternating runs of 2,000,000 cached 4 KiB preads (microbench
    pread-loop), plain and under `discnice run --rate RATE`: two lists of
    (wall ns, thread CPU ns) per call, one entry per run."""
    f = make_file(os.path.join(SCRATCH, "pread-loop.dat"), 1 << 20)
    mb = [MICROBENCH, "pread-loop", f, "2000000"]

    def ns(cmd):
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
        return float(out[0]), float(out[1])

    plain, under = [], []
    for _ in range(runs):
        plain.append(ns(mb))
        under.append(ns([DISCNICE, "run", "--quiet", "--rate", rate, "--", *mb]))
    return plain, under


def hook_cost(plain, under):
    """The hook's cost from hook_cost_samples(): the median of the
    per-pair differences (each run beside the plain one just before it),
    for the wall clock and for the thread's CPU time, in ns per call."""
    wall = statistics.median(u[0] - p[0] for p, u in zip(plain, under))
    cpu = statistics.median(u[1] - p[1] for p, u in zip(plain, under))
    return wall, cpu


def run(cmd, args, cwd=None, timeout=3600):
    """discnice run ARGS -- CMD; returns (report dict, wall seconds)."""
    fd, report = tempfile.mkstemp(prefix="report-", suffix=".json", dir=SCRATCH)
    os.close(fd)
    t0 = time.monotonic()
    p = subprocess.run([DISCNICE, "run", "--quiet", "--report", report, *args, "--", *cmd],
                       cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    with open(report) as f:
        r = json.load(f)
    os.unlink(report)
    return r, wall


def actual_total(r):
    return r["actual_read_bytes"] + r["actual_write_bytes"]


def predicted_total(r):
    return r["predicted_read_bytes"] + r["predicted_write_bytes"]


def error_pct(predicted, actual):
    if actual == 0:
        return 0.0 if predicted == 0 else float("inf")
    return 100.0 * (predicted - actual) / actual


def results_path(kind):
    os.makedirs(RESULTS, exist_ok=True)
    m = machine()
    return os.path.join(RESULTS, f"{datetime.date.today().isoformat()}-{m['host']}-{kind}.md")


def write_results(path, text):
    """Print a bench's table and write it to path (under bench/results)."""
    print(text)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(f"bench: wrote {path}")


def machine_lines():
    m = machine()
    return [f"Machine: {m['host']}, Linux {m['kernel']}, {m['cpus']} CPUs, {m['filesystem']} on {m['disk']} "
            f"(read_ahead_kb {m['read_ahead_kb']}, scheduler {m['scheduler']}), {m['date']}"]


def stop_group(p, grace=10):
    """End a server started with start_new_session=True, with its whole
    session (nginx's workers, a job's children): SIGTERM, then SIGKILL
    after `grace` seconds; always reaped."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
