"""Helpers shared by the experiments: kernel counters, a 100 ms sampler,
per-second rates, statistics, markdown cells and plots.

Only what bench/common.py does not already have lives here.
"""
import os
import signal
import statistics
import subprocess
import threading
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import common  # noqa: E402  (bench/ is on sys.path: evaluate.py puts it there)

MB = 1_000_000          # the paper's "MB/s" caps are decimal here, as discnice's "1M"
SAMPLE_S = 0.1
SECTOR = 512


# ---------------------------------------------------------------- counters

def disk_sectors(disk):
    """(sectors read, sectors written) of one block device, from /proc/diskstats."""
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == disk:
                return int(p[5]), int(p[9])
    return 0, 0


def cpu_ticks():
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


proc_io = common.proc_io


def children(pid):
    """Direct children of every thread of pid."""
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def tree_io(root):
    """Kernel read/write bytes of root plus all its live descendants (a reaped
    child's counts are already in its parent's)."""
    rd = wr = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        stack += children(pid)
        io = proc_io(pid)
        if io:
            rd += io[0]
            wr += io[1]
    return rd, wr


class Sampler:
    """Every 100 ms: device sectors, CPU busy share and the kernel I/O of some
    process trees (labels -> root pid, added while running). Use as a context
    manager; ``samples`` is a list of dicts with t (s since start), disk_r,
    disk_w (bytes), cpu (0..1) and one (read, write) pair per label."""

    def __init__(self, disk):
        self.disk = disk
        self.roots = {}
        self.samples = []
        self.marks = {}
        self._stop = threading.Event()
        self._last = {}

    def watch(self, label, pid):
        self.roots[label] = pid

    def mark(self, name):
        """Remember when something happened (seconds since start)."""
        self.marks[name] = time.monotonic() - self.t0

    def _sample(self):
        r, w = disk_sectors(self.disk)
        busy, total = cpu_ticks()
        s = {"t": time.monotonic() - self.t0, "disk_r": r * SECTOR, "disk_w": w * SECTOR,
             "busy": busy, "total": total}
        for label, pid in list(self.roots.items()):
            io = tree_io(pid)
            # Counters are cumulative: keep the last value once the tree is gone
            # or a child is reaped between two reads (never go backwards).
            last = self._last.get(label, (0, 0))
            io = (max(io[0], last[0]), max(io[1], last[1]))
            self._last[label] = io
            s[label] = io
        self.samples.append(s)

    def _loop(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(SAMPLE_S)

    def __enter__(self):
        self.t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        base_r, base_w = self.samples[0]["disk_r"], self.samples[0]["disk_w"]
        for s in self.samples:
            s["disk_r"] -= base_r
            s["disk_w"] -= base_w
        return False

    def last(self, label):
        """The final (read, write) bytes of a watched tree."""
        for s in reversed(self.samples):
            if label in s:
                return s[label]
        return (0, 0)


def per_second(samples, key, index=None, step=1.0):
    """Mean rate (bytes/s) within each step-long bin of a cumulative counter:
    (bin start times, rates). index picks one side of a (read, write) pair;
    key may be a list of keys, summed."""
    keys = key if isinstance(key, list) else [key]

    def value(s):
        total = 0
        for k in keys:
            v = s.get(k, 0)
            if isinstance(v, tuple):
                v = sum(v) if index is None else v[index]
            total += v
        return total

    pts = [(s["t"], value(s)) for s in samples]
    if len(pts) < 2:
        return [], []
    ts, rates = [], []
    t = 0.0
    while t + step <= pts[-1][0] + 1e-9:
        ts.append(t)
        rates.append((_interp(pts, t + step) - _interp(pts, t)) / step)
        t += step
    return ts, rates


def _interp(pts, t):
    """Linear interpolation of a cumulative counter at time t."""
    if t <= pts[0][0]:
        return pts[0][1]
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return pts[-1][1]


def cpu_share(samples, step=1.0):
    """CPU busy share (0..100 %) per step-long bin."""
    out_t, out_v = [], []
    i = 0
    for j, s in enumerate(samples):
        if s["t"] - samples[i]["t"] >= step or j == len(samples) - 1 and j > i:
            dt = s["total"] - samples[i]["total"]
            out_t.append(samples[i]["t"])
            out_v.append(100.0 * (s["busy"] - samples[i]["busy"]) / dt if dt else 0.0)
            i = j
    return out_t, out_v


def flush_intervals(samples):
    """The paper's Fig. 14: the device's written bytes averaged over the
    intervals between one write-back burst and the next. Returns a list of
    (start, end, bytes/s); a burst is a run of samples where sectors grow."""
    out, start, burst, prev_end = [], None, 0, 0.0
    for a, b in zip(samples, samples[1:]):
        grew = b["disk_w"] - a["disk_w"]
        if grew > 0:
            start = a["t"] if start is None else start
            burst += grew
        elif start is not None:
            end = a["t"] + SAMPLE_S
            out.append((prev_end, end, burst / max(end - prev_end, SAMPLE_S)))
            prev_end, start, burst = end, None, 0
    if start is not None:
        end = samples[-1]["t"]
        out.append((prev_end, end, burst / max(end - prev_end, SAMPLE_S)))
    return out


# ---------------------------------------------------------------- processes

def spawn(cmd, **kw):
    """Start a background command in its own process group."""
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, **kw)


def stop(proc):
    """End a process group we started, at once (SIGKILL: rsync's own SIGTERM
    clean-up takes ~0.4 s; the caller removes what it leaves behind)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def timed(cmd, **kw):
    """Run cmd to completion; wall seconds (raises if it fails)."""
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.monotonic() - t0


def settle():
    """Write back everything dirty so the next run starts from a quiet disk."""
    os.sync()


# ---------------------------------------------------------------- numbers

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(x):
    return f"{100 * x:+.1f}%"


def mbps(bps):
    return f"{bps / MB:.2f} MB/s"


def human(n):
    return f"{n:,}"


def table(header, rows):
    """Markdown table lines: header is a list of column names."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines


def verdict(ok):
    return "met" if ok else "**MISSED**"


# ---------------------------------------------------------------- plots

def figure(nrows, ncols, title, height=2.6, width=5.2):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    fig.suptitle(title)
    return fig, axes


def save(fig, ctx, name):
    """Write a figure next to the results file; returns its file name."""
    path = ctx.plot_path(name)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return os.path.basename(path)


def rate_axes(ax, title, cap=None):
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("elapsed [s]", fontsize=8)
    ax.set_ylabel("MB/s", fontsize=8)
    ax.tick_params(labelsize=7)
    if cap:
        ax.axhline(cap / MB, color="red", linestyle="--", linewidth=1, label=f"cap {cap / MB:g} MB/s")
    ax.grid(alpha=0.3)


def step_plot(ax, ts, rates, **kw):
    """Per-second rates as steps (a mean within each second, as the paper plots)."""
    if ts:
        ax.step(ts + [ts[-1] + (ts[1] - ts[0] if len(ts) > 1 else 1)], [r / MB for r in rates] + [rates[-1] / MB],
                where="post", **kw)



# ---------------------------------------------------------------- traced runs

def run_traced(ctx, cmd, dn_args=None, sync_after=False, cwd=None):
    """Run cmd (under `discnice run DN_ARGS` when given) while a Sampler
    watches the device and the job's process tree ("job"); with sync_after
    the write-back of what it dirtied is sampled too. Returns
    (report dict or None, samples, marks, seconds until the job ended)."""
    import json
    import tempfile
    report = None
    if dn_args is not None:
        fd, report = tempfile.mkstemp(prefix="eval-", suffix=".json", dir=common.SCRATCH)
        os.close(fd)
        cmd = [common.DISCNICE, "run", "--quiet", "--report", report, *dn_args, "--", *cmd]
    with Sampler(ctx.disk) as s:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        s.watch("job", p.pid)
        _, err = p.communicate()
        elapsed = time.monotonic() - t0
        s.mark("end")
        if sync_after:
            os.sync()
            s.mark("synced")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {err.strip()}")
    r = None
    if report:
        with open(report) as f:
            r = json.load(f)
        os.unlink(report)
    return r, s.samples, s.marks, elapsed


def auto_step(samples):
    """1-s bins (the paper's) unless the run is too short to show any."""
    span = samples[-1]["t"] if samples else 0
    return 1.0 if span >= 3 else 0.2 if span >= 0.6 else 0.1


def job_windows(samples, cap, tol=1.10):
    """Sliding 1-s windows of the watched "job" tree's kernel-counted bytes:
    (windows at <= tol x cap, all windows)."""
    pts = [(s["t"], sum(s.get("job", (0, 0)))) for s in samples]
    ok = total = 0
    j = 0
    for t, v in pts:
        while j + 1 < len(pts) and pts[j + 1][0] <= t - 1.0:
            j += 1
        if pts[j][0] > t - 1.0:
            continue
        total += 1
        ok += (v - pts[j][1]) / (t - pts[j][0]) <= tol * cap
    return ok, total
