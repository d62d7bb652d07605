#!/usr/bin/env python3
"""bench/graybox_cold_order.py - which run makes the warm grep after nowait
ordering slower (issue #11, Fig 3's grep; bench/graybox_backends.py found it
4.63 s against 3.54 s after timed probes, cause unknown).

Per trial, in a memory cgroup v1 of 84 % of the data (the LRU worst case of
bench/graybox.py's Fig 3), 100 x 10 MB files on the emulated 50 MB/s,
150 IOPS disk of bench/loopfs.py, the cache dropped first: one cold grep
ordered by backend A, then one warm grep ordered by backend B.  The pairs
(A, B) alternate, their order rotated.  "nowait;sleep 2" is nowait with the
grep started 2 s after gbp, when every read its probes began has ended;
"first:X+Y" runs a gbp with backend X, its output thrown away, then orders
the grep by backend Y (--pairs A/B,... chooses the pairs).
Writes bench/results/DATE-vm-graybox-cold-order.md unless --out.  Needs root
(loop device, blkio throttle, memory cgroup); all torn down.

    make bench-graybox-cold-order [ARGS="--reps 3"]
"""
import argparse
import datetime
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import graybox as g  # noqa: E402
from loopfs import HDD, LoopFs  # noqa: E402

PATTERN = "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"   # never there: grep reads all
PAIRS = [("probe", "probe"), ("nowait", "nowait"), ("probe", "nowait"), ("nowait", "probe"),
         ("nowait;sleep 2", "probe")]


def disk_reads(fs):
    """The loop device's read requests and bytes so far (fields 1 and 3 of
    /sys/block/loopN/stat): what the filesystem under test asked its disk for."""
    s = fs.stat()
    return s[0], s[2] * 512


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pairs", default="",
                    help="comma list of COLD/WARM backend pairs (default: the five above)")
    ap.add_argument("--out")
    args = ap.parse_args()
    n, each = 100, 10 * 1000 * 1000
    limit = int(n * each * 0.84)
    pairs = [tuple(x.split("/", 1)) for x in args.pairs.split(",")] if args.pairs else PAIRS
    res = {p: [] for p in pairs}
    with LoopFs(size_mib=(2 * n * each) // g.MiB + 512, tag="gbp-cold", throttle=HDD) as fs:
        files = " ".join(g.q(p) for p in g.grep_files(fs, n, each))
        for rep in range(args.reps):
            k = rep % len(pairs)
            for a, b in pairs[k:] + pairs[:k]:
                fs.drop_cache()
                with g.memory_cgroup(limit) as procs:
                    ts, ios = [], []
                    for be in (a, b):
                        pre = ""
                        if be.startswith("first:"):
                            first, _, be = be[len("first:"):].partition("+")
                            pre = f"{g.DISCNICE} gbp --mem --backend {first} {files} > /dev/null; "
                        be, _, then = be.partition(";")
                        order = (f"$({pre}{g.DISCNICE} gbp --mem --backend {be} {files}; "
                                 f"{then or 'true'})")
                        ios0, bytes0 = disk_reads(fs)
                        ts.append(g.timed_shell(f"grep -c {PATTERN} {order} > /dev/null || true",
                                                procs))
                        ios1, bytes1 = disk_reads(fs)
                        ios.append((ios1 - ios0, bytes1 - bytes0))
                res[(a, b)].append(ts + ios)
                g.log(f"rep {rep}: cold after {a} {ts[0]:.2f} s, warm after {b} {ts[1]:.2f} s, "
                      f"{ios[1][0]} read requests, {ios[1][1] / g.MiB:.0f} MiB")
    date = datetime.date.today().isoformat()
    cmd = f"--reps {args.reps}" + (f" --pairs {args.pairs}" if args.pairs else "")
    lines = [f"# Fig 3's grep: the cold run's order and the warm run after it ({date})", "",
             f"Command: `make bench-graybox-cold-order ARGS=\"{cmd}\"` (root). {n} x 10 MB "
             "files on a loop device throttled to 50 MB/s, 150 IOPS; each trial in a fresh memory "
             f"cgroup v1 of {limit // g.MiB} MiB (84 % of the data), the cache dropped: a cold "
             "`grep $(gbp --mem --backend A FILES)`, then a warm one ordered by backend B. Pairs "
             "alternate, their order rotated.", "",
             "Read requests and MiB: the loop device's count (`/sys/block/loopN/stat`) over "
             "the warm run, gbp's probes included.", "",
             "| cold ordered by | warm ordered by | cold s (median) | warm s, each trial | warm median "
             "| warm read requests (median) | warm MiB read (median) |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: |"]
    for (a, b), runs in res.items():
        lines.append(f"| {a} | {b} | {statistics.median(r[0] for r in runs):.2f} | "
                     f"{', '.join(f'{r[1]:.2f}' for r in runs)} | "
                     f"{statistics.median(r[1] for r in runs):.2f} | "
                     f"{statistics.median(r[3][0] for r in runs):.0f} | "
                     f"{statistics.median(r[3][1] for r in runs) / g.MiB:.0f} |")
    common.write_results(args.out or common.results_path("graybox-cold-order"),
                         "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
