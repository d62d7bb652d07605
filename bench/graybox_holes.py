#!/usr/bin/env python3
"""bench/graybox_holes.py - what gbp's probes leave in the page cache for the
scan that follows them (issue #11; why the warm grep after nowait probes of
a cold cache ran ~30 % slower, bench/graybox_cold_order.py).

Per backend, alternating: 100 files of 10 MB on this machine's disk, made
cold (common.make_cold: fsync + POSIX_FADV_DONTNEED until cachestat finds none); then, in a memory cgroup v1 of 84 % of
the data (the LRU worst case of Fig 3), one cold `cat $(gbp --mem --backend
B FILES)`.  Then, by cachestat(2) page by page, each file's cached pages and
its small holes: runs of at most 16 uncached pages with cached pages on both
sides.  A scan reads each such hole alone - one more disk request, a seek on
a disk that has them.  The oracle is the kernel's page cache, never gbp's
report.  Needs root (memory cgroup).  Writes
bench/results/DATE-HOST-graybox-holes.md unless --out.

    make bench-graybox-holes [ARGS="--reps 3 --backends probe,nowait"]
"""
import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import graybox as g  # noqa: E402

HOLE_PAGES = 16


def cached_bitmap(path):
    """1 per cached page of path, by cachestat(2) of each page."""
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        return [g.cachestat(fd, off, g.PAGE) for off in range(0, size, g.PAGE)]
    finally:
        os.close(fd)


def small_holes(bits):
    holes, i, n = 0, 0, len(bits)
    while i < n:
        if bits[i]:
            i += 1
            continue
        j = i
        while j < n and not bits[j]:
            j += 1
        holes += 0 < i and j < n and j - i <= HOLE_PAGES
        i = j
    return holes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="probe,nowait")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/graybox_holes.py: needs root (a memory cgroup)")
    backends = args.backends.split(",")
    n, each = 100, 10 * 1000 * 1000
    d = os.path.join(common.SCRATCH, "graybox-holes")
    os.makedirs(d, exist_ok=True)
    paths = [os.path.join(d, f"f{i:03d}") for i in range(n)]
    for p in paths:
        if not os.path.exists(p) or os.path.getsize(p) != each:
            with open(p, "wb") as f:
                f.write(os.urandom(each))
    files = " ".join(g.q(p) for p in paths)
    limit = int(n * each * 0.84)
    res = {b: [] for b in backends}
    try:
        for rep in range(args.reps):
            k = rep % len(backends)
            for b in backends[k:] + backends[:k]:
                for p in paths:
                    common.make_cold(p)
                with g.memory_cgroup(limit, name="discnice-gbp-holes") as procs:
                    g.timed_shell(f"cat $({g.DISCNICE} gbp --mem --backend {b} {files}) > /dev/null",
                                  procs)
                    bits = [cached_bitmap(p) for p in paths]
                cached = sum(map(sum, bits)) / sum(map(len, bits))
                holes = sum(small_holes(x) for x in bits)
                res[b].append((cached, holes))
                g.log(f"rep {rep} {b}: {100 * cached:.1f} % cached, {holes} small holes")
    finally:
        subprocess.run(["rm", "-rf", d])
    lines = [f"# What gbp's probes leave for the next scan ({common.machine()['date']})", "",
             *common.machine_lines(), "",
             f"Command: `make bench-graybox-holes ARGS=\"--backends {args.backends} --reps "
             f"{args.reps}\"` (root). {n} x 10 MB files on this machine's disk, made cold; in a "
             f"memory cgroup v1 of {limit // g.MiB} MiB (84 % of the data), one cold `cat` in "
             "gbp's order; then cachestat(2) of every page: the share cached, and the small "
             f"holes (runs of at most {HOLE_PAGES} uncached pages between cached ones), each a "
             "request of its own for the next scan. Backends alternate, their order rotated.", "",
             "| backend | cached, each rep | small holes, each rep | median holes |",
             "| --- | --- | --- | ---: |"]
    for b, runs in res.items():
        lines.append(f"| {b} | {', '.join(f'{100 * c:.1f} %' for c, _ in runs)} | "
                     f"{', '.join(str(h) for _, h in runs)} | "
                     f"{statistics.median(h for _, h in runs):.0f} |")
    common.write_results(args.out or common.results_path("graybox-holes"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
