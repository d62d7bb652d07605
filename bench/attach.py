#!/usr/bin/env python3
"""`discnice attach`: is a job that is already running held at its cap from
the moment of attaching (issue #9 item 5)?

    make bench-attach                 # 4 caps x cat (cold read), dd (write); ~8 min
    make bench-attach ARGS=--quick    # 16 MiB/s, cat only, 1 run

Each job runs as `sh -c 'JOB; exec sleep 2 >&-'`, unregulated, with its output
(or, for dd, its input) in a pipe this script holds shut: it starts and
blocks.  Then `discnice attach --read-rate/--write-rate CAP SHPID` attaches
to the shell and its child; when attach says "attached to", the gate opens
and the clock starts.  The JOB closes the pipe when it exits, and its shell,
which has reaped it, then holds its I/O in its own /proc/PID/io (the kernel
adds a reaped child's counts to its parent's): the bytes read or written
since the gate opened are exact, by the kernel's count, not discnice's.

    rate = (read_bytes or write_bytes at the end - at the gate) / time

Target: cat of a cold file attached at 16 MiB/s within +-3 % of the cap; the
other caps and dd are reported against the same bound.  Medians of
alternating runs, with the spread.
"""
import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MiB  # noqa: E402

TOLERANCE = 3.0
SECONDS = 12.0          # job time per run at the cap
CAPS = [("4MiB/s", 4 * MiB), ("10MB/s", 10e6), ("16MiB/s", 16 * MiB), ("40MB/s", 40e6)]


def io_field(pid, field):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/io")


def one_run(kind, cap_text, cap, path):
    """One gated job attached at cap: (rate B/s, bytes, seconds)."""
    size = int(cap * SECONDS) // MiB * MiB
    field = "read_bytes" if kind == "cat" else "write_bytes"
    opt = "--read-rate" if kind == "cat" else "--write-rate"
    out_r, out_w = os.pipe()
    in_r, in_w = os.pipe()
    if kind == "cat":
        common.make_cold(path)
        job = f"cat {path}"
    else:
        if os.path.exists(path):
            os.unlink(path)
        job = f"dd of={path} bs=1M iflag=fullblock count={size // MiB} status=none"
    sh = subprocess.Popen(["sh", "-c", f"{job}; exec sleep 2 >&-"], stdin=in_r, stdout=out_w,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(out_w)
    os.close(in_r)
    attach = None
    try:
        # Let it start and block on the pipe (cat: 64 KiB of output; dd:
        # nothing to read yet).
        time.sleep(0.3)
        attach = subprocess.Popen([common.DISCNICE, "attach", opt, cap_text, str(sh.pid)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  start_new_session=True)
        line = b""
        deadline = time.monotonic() + 10
        while b"\n" not in line and time.monotonic() < deadline:
            if select.select([attach.stderr], [], [], 0.5)[0]:
                c = os.read(attach.stderr.fileno(), 1)
                if not c:
                    break
                line += c
        if b"attached to" not in line:
            raise RuntimeError(f"attach did not start: {line!r}")
        # Before the gate: the shell's own count plus its running child's.
        before = sum(io_field(p, field) for p in [sh.pid] + children(sh.pid))
        t0 = time.monotonic()
        if kind == "cat":
            feeder = None
        else:
            def feed():
                zero = bytes(MiB)
                with os.fdopen(in_w, "wb", buffering=0) as f:
                    for _ in range(size // MiB):
                        f.write(zero)
            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
        while os.read(out_r, 1 << 20):
            pass
        t1 = time.monotonic()
        after = io_field(sh.pid, field)
        moved = after - before
        return moved / (t1 - t0), moved, t1 - t0
    finally:
        if attach and attach.poll() is None:
            attach.send_signal(signal.SIGINT)
            attach.wait(timeout=30)
        sh.kill()
        sh.wait()
        os.close(out_r)
        if kind == "cat":
            pass
        else:
            try:
                os.close(in_w)
            except OSError:
                pass
            if os.path.exists(path):
                os.unlink(path)


def children(pid):
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="16 MiB/s, cat only, one run")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    caps = [c for c in CAPS if c[0] == "16MiB/s"] if args.quick else CAPS
    kinds = ["cat"] if args.quick else ["cat", "dd"]
    runs = 1 if args.quick else args.runs
    os.makedirs(common.SCRATCH, exist_ok=True)
    files = {}
    for cap_text, cap in caps:
        path = os.path.join(common.SCRATCH, f"attach-{cap_text.replace('/', '_')}.dat")
        common.make_file(path, int(cap * SECONDS) // MiB * MiB)
        files[cap_text] = path
    rows = []
    for cap_text, cap in caps:
        for kind in kinds:
            rates = []
            for _ in range(runs):
                path = files[cap_text] if kind == "cat" else files[cap_text] + ".out"
                rate, moved, secs = one_run(kind, cap_text, cap, path)
                rates.append(rate)
                print(f"  {kind:4} {cap_text:8} {moved / MiB:7.1f} MiB in {secs:5.2f} s: "
                      f"{rate / MiB:6.2f} MiB/s ({(rate / cap - 1) * 100:+.2f} %)", flush=True)
            med = statistics.median(rates)
            err = (med / cap - 1) * 100
            rows.append((kind, cap_text, cap, med, err,
                         min(rates) / cap - 1, max(rates) / cap - 1, abs(err) <= TOLERANCE))
    lines = ["# discnice attach: a running job held at its cap (issue #9 item 5)", "",
             *common.machine_lines(), "",
             f"Command: `make bench-attach`; {runs} run(s) per cell; the job runs unregulated, "
             "blocked on a pipe, is attached, and is measured by the kernel (its shell's "
             "/proc/PID/io after reaping it) from the moment the gate opens to its exit.", "",
             "| job | cap | achieved (median) | error | runs min..max | within +-3 % |",
             "|---|---:|---:|---:|---:|---|"]
    for kind, cap_text, cap, med, err, lo, hi, ok in rows:
        what = "cat of a cold file (--read-rate)" if kind == "cat" else "dd from a pipe (--write-rate)"
        lines.append(f"| {what} | {cap_text} | {med / MiB:.2f} MiB/s | {err:+.2f} % | "
                     f"{lo * 100:+.1f}..{hi * 100:+.1f} % | {'yes' if ok else 'NO'} |")
    target = [r for r in rows if r[0] == "cat" and r[1] == "16MiB/s"]
    met = bool(target) and target[0][7]
    lines += ["", f"Target (cat of a cold file attached at 16 MiB/s within +-3 %): "
              f"{'met' if met else 'NOT met'}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        with open(common.results_path("attach"), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
