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

    make bench-rate-peeked [ARGS="--runs 3 --seconds 4 --caps 4MB/s,16M --backend probe"]
"""
import argparse
import os
import statistics
import subprocess
import sys
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


def peek(path, prefix):
    """Make path cold, then read its first prefix bytes as another process
    would (with the kernel's readahead and its marker)."""
    common.make_cold(path)
    with open(path, "rb", buffering=0) as f:
        left = prefix
        while left > 0:
            got = f.read(min(left, 128 * 1024))
            if not got:
                break
            left -= len(got)


def one_run(form_args, cap, reader, path, backend="auto"):
    """(rate in B/s by the kernel's block count, bytes) for one job."""
    argv = [common.DISCNICE, "run", *form_args, "--quiet", "--cache-backend", backend,
            "--read-rate", cap, "--", reader, path]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench: {' '.join(argv)} failed: {err.strip()}")
    disk = usage.ru_inblock * 512
    return disk / wall, disk


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="runs per cell (median); default 1")
    ap.add_argument("--seconds", type=float, default=4.0, help="job length at the cap")
    ap.add_argument("--caps", default=",".join(CAPS), help="comma-separated caps")
    ap.add_argument("--backend", choices=["auto", "probe"], default="auto",
                    help="the agent's cache detector (run --cache-backend); default auto")
    ap.add_argument("--tag", default="", metavar="NAME",
                    help="append -NAME to the results file's name (keep an earlier run of the day)")
    args = ap.parse_args()
    caps = args.caps.split(",")
    os.makedirs(common.SCRATCH, exist_ok=True)
    rows, misses, cells = [], 0, 0
    for cap in caps:
        bps = cap_bytes(cap)
        size = (int(bps * args.seconds) + max(PREFIXES)) // MiB * MiB + MiB
        path = common.make_file(os.path.join(common.SCRATCH, f"peeked-{size // MiB}M.dat"), size)
        for prefix in PREFIXES:
            for reader in READERS:
                cell = [cap, f"{prefix:,}", reader]
                for _, form_args in FORMS:
                    got = []
                    for _ in range(args.runs):
                        peek(path, prefix)
                        rate, disk = one_run(form_args, cap, reader, path, args.backend)
                        got.append(rate)
                    err = 100.0 * (statistics.median(got) / bps - 1)
                    cells += 1
                    ok = abs(err) <= TOLERANCE
                    misses += not ok
                    cell.append(f"{err:+.2f} %" + ("" if ok else " **miss**"))
                rows.append(cell)
                print(" | ".join(cell), flush=True)
    lines = ["# Caps on files whose start another process read first", ""]
    lines += common.machine_lines()
    lines += ["", f"`bench/rate_peeked.py --runs {args.runs} --seconds {args.seconds} "
              f"--caps {args.caps} --backend {args.backend}`: rate by the kernel's block count (wait4 ru_inblock) over "
              f"the wall time, against the cap; median of {args.runs} run(s); target "
              f"±{TOLERANCE:.0f} %.", "",
              "| cap | bytes read before | reader | " + " | ".join(f for f, _ in FORMS) + " |",
              "|---|---:|---|" + "---:|" * len(FORMS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", f"{cells - misses} of {cells} cells within ±{TOLERANCE:.0f} %."]
    name = "rate-peeked" if args.backend == "auto" else f"rate-peeked-{args.backend}"
    if args.tag:
        name += f"-{args.tag}"
    common.write_results(common.results_path(name), "\n".join(lines) + "\n")
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main())
