#!/usr/bin/env python3
"""Caps on files whose start another process read first (issue #9 item 2).

The rate sweep (rate_sweep.py) reads cold files.  In real use a backup
meets files that something has peeked at: head, file(1), a thumbnailer, an
interrupted earlier run.  They leave the start cached with the kernel's
PG_readahead marker in it, which no model can see; until 2026-11-25 the
kernel then read every window ahead of the agent's model, and without the
supervisor's feedback the cap did not hold at all (src/agent/io_read.c,
watch_look).

For each cap, each reader (cat: read(2); md5sum: stdio) and each prefix
read by another process just before (4 KiB, 1 MB, 20 MB), the job reads a
file of ~SECONDS at the cap plus the prefix, under three forms: `run --exec`
(no supervisor), `run --feedback off`, and `run` with the defaults.  The
rate is the kernel's count of the blocks the job's process tree read
(wait4's ru_inblock, submission-time accounting, readahead included) over
the wall time from start to exit; target +-3 %, as for cold reads.

`--backend probe` runs the same with the timing-probe cache detector, the
one the agent falls back to for files the user cannot write (the kernel
refuses cachestat for them, and mincore answers only for pages the caller
mapped): it cannot watch the cached start, so the agent asks the kernel
what each call read (RUSAGE_THREAD, io_read.c io_unseen_settle()).

`--at F` has the other process read its bytes from F of the way into the
file instead of its start (dd skip=, an interrupted copy, a scan that began
in the middle): the job then streams cold onto a run someone else left,
with that reader's marker in it (io_read.c meets_foreign_run(); before
2026-11-26 only a cached start was watched).

    make bench-rate-peeked [ARGS="--runs 3 --seconds 4 --caps 4MB/s,16M --backend probe --at 0.5"]
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MiB  # noqa: E402
from rate_sweep import cap_bytes  # noqa: E402

CAPS = ["4MB/s", "7.5MiB/s", "16M", "33MiB/s", "64MB/s"]
PREFIXES = [4096, 1000 * 1000, 20 * 1000 * 1000]
READERS = ["cat", "md5sum"]
FORMS = [("--exec", ["--exec"]), ("--feedback off", ["--feedback", "off"]), ("defaults", [])]
TOLERANCE = 3.0
SMOOTH_FACTOR = 1.15   # as for writes (bench/writeback.py): a 1-s window over 1.15x the cap is a burst
SMOOTH_TARGET = 90.0   # % of the bytes, as for writes
SAMPLE_S = 0.02


def tree_read_bytes(root):
    """read_bytes of root and its descendants (/proc/PID/io; the kernel's
    count at submission, readahead included)."""
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/io") as f:
                for line in f:
                    if line.startswith("read_bytes:"):
                        total += int(line.split()[1])
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return total


class DiskTrace:
    """The job tree's read_bytes every SAMPLE_S, into 1-s windows from the
    job's start: what the disk saw, second by second."""

    def __init__(self, pid):
        self.pid, self.samples, self.done = pid, [], threading.Event()
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        high = 0
        while not self.done.is_set():
            high = max(high, tree_read_bytes(self.pid))  # an exited reader's count is gone
            self.samples.append((time.monotonic() - self.t0, high))
            time.sleep(SAMPLE_S)

    def stop(self, total):
        """[(bytes, seconds)] per 1-s window from the start; the last sample
        is the kernel's total (wait4), so reads after the last poll count.
        A last part-window under half a second joins the one before."""
        self.done.set()
        self.thread.join()
        end = time.monotonic() - self.t0
        self.samples.append((end, max(total, self.samples[-1][1] if self.samples else 0)))
        wins, prev = [[0, 1.0] for _ in range(int(end) + 1)], 0
        for t, b in self.samples:
            wins[min(int(t), len(wins) - 1)][0] += b - prev
            prev = b
        wins[-1][1] = end - int(end)
        if len(wins) > 1 and wins[-1][1] < 0.5:
            tail = wins.pop()
            wins[-1] = [wins[-1][0] + tail[0], 1.0 + tail[1]]
        return [tuple(w) for w in wins if w[1] > 0]


def smooth_share(wins, bps):
    """Byte-weighted share of the 1-s windows whose rate is at most
    SMOOTH_FACTOR x the cap (idle seconds prove nothing), and the largest
    window's rate over the cap."""
    total = sum(b for b, _ in wins)
    if not total:
        return 100.0, 0.0
    ok = sum(b for b, s in wins if b / s <= SMOOTH_FACTOR * bps)
    return 100.0 * ok / total, max(b / s for b, s in wins) / bps


def peek(path, prefix, at=0.0):
    """Make path cold, then read prefix bytes from `at` of its size (its
    first bytes by default) as another process would (with the kernel's
    readahead and its marker)."""
    common.make_cold(path)
    with open(path, "rb", buffering=0) as f:
        f.seek(int(os.path.getsize(path) * at) // 4096 * 4096)
        left = prefix
        while left > 0:
            got = f.read(min(left, 128 * 1024))
            if not got:
                break
            left -= len(got)


def one_run(form_args, cap, reader, path, backend="auto"):
    """(rate in B/s by the kernel's block count, bytes, 1-s windows) for one job."""
    argv = [common.DISCNICE, "run", *form_args, "--quiet", "--cache-backend", backend,
            "--read-rate", cap, "--", reader, path]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    trace = DiskTrace(p.pid)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench: {' '.join(argv)} failed: {err.strip()}")
    disk = usage.ru_inblock * 512
    return disk / wall, disk, trace.stop(disk)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="runs per cell (median); default 1")
    ap.add_argument("--seconds", type=float, default=4.0, help="job length at the cap")
    ap.add_argument("--caps", default=",".join(CAPS), help="comma-separated caps")
    ap.add_argument("--backend", choices=["auto", "probe"], default="auto",
                    help="the agent's cache detector (run --cache-backend); default auto")
    ap.add_argument("--tag", default="", metavar="NAME",
                    help="append -NAME to the results file's name (keep an earlier run of the day)")
    ap.add_argument("--at", type=float, default=0.0, metavar="F",
                    help="the other process reads from F of the file's size (0 <= F < 1); default 0")
    ap.add_argument("--windows", action="store_true",
                    help="print each run's MB per 1-s window as it ends")
    args = ap.parse_args()
    caps = args.caps.split(",")
    if not 0.0 <= args.at < 1.0:
        ap.error("--at must be in [0, 1)")
    os.makedirs(common.SCRATCH, exist_ok=True)
    rows, misses, cells, smooth_cells = [], 0, 0, 0
    for cap in caps:
        bps = cap_bytes(cap)
        size = (int(bps * args.seconds) + max(PREFIXES)) // MiB * MiB + MiB
        path = common.make_file(os.path.join(common.SCRATCH, f"peeked-{size // MiB}M.dat"), size)
        for prefix in PREFIXES:
            for reader in READERS:
                cell = [cap, f"{prefix:,}", reader]
                for _, form_args in FORMS:
                    got, shares, peaks = [], [], []
                    for _ in range(args.runs):
                        peek(path, prefix, args.at)
                        rate, disk, wins = one_run(form_args, cap, reader, path, args.backend)
                        got.append(rate)
                        share, peak = smooth_share(wins, bps)
                        shares.append(share)
                        peaks.append(peak)
                        if args.windows:
                            print(f"  {cap} {prefix} {reader} {form_args}: MB per 1-s window "
                                  + " ".join(f"{b / s / 1e6:.1f}" for b, s in wins), flush=True)
                    err = 100.0 * (statistics.median(got) / bps - 1)
                    share, peak = statistics.median(shares), statistics.median(peaks)
                    cells += 1
                    ok = abs(err) <= TOLERANCE
                    misses += not ok
                    smooth_cells += share >= SMOOTH_TARGET
                    cell.append(f"{err:+.2f} %" + ("" if ok else " **miss**")
                                + f" · {share:.0f} % · {peak:.2f}x")
                rows.append(cell)
                print(" | ".join(cell), flush=True)
    title = "whose start another process read first" if not args.at else \
        f"another process read part of first, from {args.at:g} of their size"
    lines = [f"# Caps on files {title}", ""]
    lines += common.machine_lines()
    lines += ["", f"`bench/rate_peeked.py --runs {args.runs} --seconds {args.seconds} "
              f"--caps {args.caps} --backend {args.backend}"
              + (f" --at {args.at:g}" if args.at else "") + "`: rate by the kernel's block count (wait4 ru_inblock) over "
              f"the wall time, against the cap; median of {args.runs} run(s); target "
              f"±{TOLERANCE:.0f} %. Then, what the disk saw: the job tree's `read_bytes` "
              f"(/proc/PID/io) every {SAMPLE_S * 1000:.0f} ms, in 1-s windows from its start: "
              f"the share of the bytes read in windows at most {SMOOTH_FACTOR}x the cap "
              f"(byte-weighted, so idle seconds prove nothing; as for writes, bench/writeback.py), "
              f"and the largest window over the cap.", "",
              "| cap | bytes read before" + (f" (from {args.at:g} of the file)" if args.at else "") + " | reader | " + " | ".join(f for f, _ in FORMS) + " |",
              "|---|---:|---|" + "---:|" * len(FORMS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", f"{cells - misses} of {cells} cells within ±{TOLERANCE:.0f} %; "
              f"{smooth_cells} of {cells} with at least {SMOOTH_TARGET:.0f} % of their bytes "
              f"in 1-s windows at most {SMOOTH_FACTOR}x the cap."]
    name = "rate-peeked" if args.backend == "auto" else f"rate-peeked-{args.backend}"
    if args.tag:
        name += f"-{args.tag}"
    common.write_results(common.results_path(name), "\n".join(lines) + "\n")
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main())
