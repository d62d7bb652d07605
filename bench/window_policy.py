#!/usr/bin/env python3
"""The rate-windows paper's window against discnice's sliding window, on the
same jobs (issue #12 item 3; src/policy/paper_window.c, rate_window.c).

    make bench-window-policy
    python3 bench/window_policy.py [--seconds S] [--reps N] [--caps 1MB/s,4MiB/s,...] [--out F]

Jobs, each S seconds' worth of bytes at the cap, under
`discnice run --window-policy sliding|paper`:
  - disk: `cat` of a cold file (POSIX_FADV_DONTNEED of that file only)
    under --read-rate; the oracle is the kernel's read_bytes of the cat
    process (/proc/PID/io), sampled every 10 ms;
  - net:  a blocking TCP send (tests/integration/net_peer.py) under
    --send-rate on loopback; the oracle is this script's receiver.
Measures, median over N alternating runs (sliding, paper, sliding, ...):
  rate/cap  the bytes after the first sample (disk) or the first arrival
            (net) over the time to the last byte: the first piece may go
            at once under either window and is not part of a rate;
  smooth    the share of the bytes that fall in one-second windows
            (consecutive, from the first byte) carrying <= 1.15 x the cap;
  max 0.5 s the largest half-second count over cap / 2 (smoothness at a
            finer grain; the last, partial, window is left out of both).
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PEER = os.path.join(common.ROOT, "tests", "integration", "net_peer.py")
UNITS = {"KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}
POLICIES = ["sliding", "paper"]


def parse(cap):
    for unit, scale in sorted(UNITS.items(), key=lambda kv: -len(kv[0])):
        if cap.endswith(unit + "/s"):
            return float(cap[: -len(unit) - 2]) * scale
    raise SystemExit(f"window_policy: cannot read the cap {cap!r} (use e.g. 20MiB/s)")


def child_of(pid, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = f.read().split()
            if kids:
                return int(kids[0])
        except OSError:
            return None
        time.sleep(0.002)
    return None


def judge(samples, cap):
    """samples: (time, cumulative bytes), time-ordered.  Returns rate/cap,
    smooth share and max half-second count over cap/2."""
    samples = [s for s in samples if s[1] > 0]
    if len(samples) < 2:
        return None
    t0, b0 = samples[0]
    final = samples[-1][1]
    t_end = next(t for t, b in samples if b == final)
    rate = (final - b0) / (t_end - t0) if t_end > t0 else float("inf")

    def at(t):  # cumulative bytes at time t, stepwise (the last sample before t)
        lo, hi = 0, len(samples) - 1
        if t < samples[0][0]:
            return 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if samples[mid][0] <= t:
                lo = mid
            else:
                hi = mid - 1
        return samples[lo][1]

    def bins(width):
        out, k = [], 0
        start = t0 - 1e-9  # the first sample's bytes fall in the first window
        while start + (k + 1) * width <= t_end:
            out.append(at(start + (k + 1) * width) - at(start + k * width))
            k += 1
        return out

    seconds = bins(1.0)
    total = sum(seconds)
    smooth = sum(c for c in seconds if c <= 1.15 * cap) / total if total else float("nan")
    halves = bins(0.5)
    max_half = max(halves) / (cap / 2) if halves else float("nan")
    return rate / cap, smooth, max_half


def disk_run(policy, cap_text, cap, path):
    common.make_cold(path)
    p = subprocess.Popen([common.DISCNICE, "run", "-q", "--window-policy", policy, "--read-rate",
                          cap_text, "--", "cat", path], stdout=subprocess.DEVNULL)
    pid = child_of(p.pid)
    samples = []
    while pid and p.poll() is None:
        io = common.proc_io(pid)
        if io is None:
            break
        samples.append((time.monotonic(), io[0]))
        time.sleep(0.01)
    if p.wait() != 0:
        raise SystemExit(f"window_policy: cat failed under {policy} at {cap_text}")
    return judge(samples, cap)


def net_run(policy, cap_text, cap, seconds):
    nbytes = int(cap * seconds)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    p = subprocess.Popen([common.DISCNICE, "run", "-q", "--window-policy", policy, "--send-rate",
                          cap_text, "--", sys.executable, PEER, "tcp-send", "4",
                          str(ls.getsockname()[1]), str(nbytes)])
    ls.settimeout(30)
    conn, _ = ls.accept()
    ls.close()
    samples, got = [], 0
    while True:
        b = conn.recv(1 << 20)
        if not b:
            break
        got += len(b)
        samples.append((time.monotonic(), got))
    conn.close()
    if p.wait() != 0 or got != nbytes:
        raise SystemExit(f"window_policy: the send failed under {policy} at {cap_text}")
    return judge(samples, cap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--caps", default="1MB/s,4MiB/s,20MB/s,64MiB/s")
    ap.add_argument("--jobs", default="disk,net")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    caps = [(c, parse(c)) for c in a.caps.split(",")]
    os.makedirs(common.SCRATCH, exist_ok=True)
    results = {}  # (job, cap_text, policy) -> [(rate, smooth, max_half)]
    for job in a.jobs.split(","):
        for cap_text, cap in caps:
            path = None
            if job == "disk":
                size = int(cap * a.seconds) // 4096 * 4096
                path = common.make_file(os.path.join(common.SCRATCH, f"winpol-{size}.bin"), size)
            for rep in range(a.reps):
                # Alternate, and swap the order every other repetition.
                order = POLICIES if rep % 2 == 0 else POLICIES[::-1]
                for policy in order:
                    m = disk_run(policy, cap_text, cap, path) if job == "disk" else \
                        net_run(policy, cap_text, cap, a.seconds)
                    if m:
                        results.setdefault((job, cap_text, policy), []).append(m)
                    print(f"  {job} {cap_text} {policy}: " +
                          ("rate/cap %.4f smooth %.3f max0.5s %.3f" % m if m else "no samples"),
                          file=sys.stderr, flush=True)

    lines = ["# Window policies: the rate-windows paper's window against the sliding one", ""]
    lines += common.machine_lines()
    lines += ["", f"`make bench-window-policy` (bench/window_policy.py --seconds {a.seconds:g} "
              f"--reps {a.reps}): medians of {a.reps} alternating runs. disk = cat of a cold file "
              "under --read-rate, judged by the kernel's read_bytes of cat; net = a TCP send under "
              "--send-rate on loopback, judged by the receiver. smooth = share of bytes in one-second "
              "windows <= 1.15 x cap; max 0.5 s = the largest half-second count / (cap / 2).", "",
              "| job | cap | sliding rate/cap | paper rate/cap | sliding smooth | paper smooth "
              "| sliding max 0.5 s | paper max 0.5 s |",
              "|---|---|---|---|---|---|---|---|"]
    for job in a.jobs.split(","):
        for cap_text, _ in caps:
            row = [job, cap_text]
            cells = {}
            for policy in POLICIES:
                ms = results.get((job, cap_text, policy), [])
                cells[policy] = [statistics.median(m[i] for m in ms) if ms else float("nan")
                                 for i in range(3)]
            row += [f"{cells[p][0]:.4f}" for p in POLICIES]
            row += [f"{cells[p][1]:.3f}" for p in POLICIES]
            row += [f"{cells[p][2]:.3f}" for p in POLICIES]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "The paper's own figures (rate-windows §4, Table 1; its window, 500 KB/s target): "
              "tar 487 KB/s = 0.974 x the target by disk I/O over the whole run; agrep 534 KB/s "
              "(1.068, disk I/O inflated by page rounding); Fig. 7: one-second file-I/O peaks above "
              "the target, 'since we average I/O requests over a 5 second window'. Fig. 10 "
              "(web servers at 1.5, 3, 6 MB/s) gives no per-server numbers in the text."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
