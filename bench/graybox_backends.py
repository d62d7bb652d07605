#!/usr/bin/env python3
"""bench/graybox_backends.py - Fig 3's `grep $(gbp --mem)` with two gbp
backends side by side, alternating (issue #11: probe overhead <= 1 % of the
scan time).

One data set (100 x 10 MB files on the emulated 50 MB/s, 150 IOPS disk of
bench/loopfs.py), then for each repetition, the order of the backends
rotated: drop the cache, and in a memory cgroup of 84 % of the data (the
LRU worst case, as bench/graybox.py's Fig 3) one cold and three warm runs
of `grep -c PATTERN $(discnice gbp --mem --backend B FILES)`, then one
`gbp --mem --json` for its examine time (the probing alone).  Prints every
run, each backend's median of warm medians, and the probe time's share of
that scan; writes bench/results/DATE-vm-graybox-backends.md unless --out.
Machines are noisy: only ratios from alternating runs mean anything.
Needs root (loop device, blkio throttle, memory cgroup); all torn down.

    make bench-graybox-backends [ARGS="--backends nowait,probe --reps 3"]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graybox as g  # noqa: E402
from loopfs import HDD, LoopFs  # noqa: E402

PATTERN = "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"   # never there: grep reads all


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="nowait,probe")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--file-mb", type=int, default=10)
    ap.add_argument("--out")
    args = ap.parse_args()
    backends = args.backends.split(",")
    n, each = args.files, args.file_mb * 1000 * 1000
    total = n * each
    limit = int(total * 0.84)
    res = {b: [] for b in backends}
    plain = []
    with LoopFs(size_mib=(2 * total) // g.MiB + 512, tag="gbp-backends", throttle=HDD) as fs:
        files = " ".join(g.q(p) for p in g.grep_files(fs, n, each))
        for rep in range(args.reps):
            order = backends[rep % len(backends):] + backends[:rep % len(backends)]
            for b in order + (["plain"] if rep == 0 else []):
                script = (f"grep -c {PATTERN} {files} > /dev/null || true" if b == "plain" else
                          f"grep -c {PATTERN} $({g.DISCNICE} gbp --mem --backend {b} {files})"
                          " > /dev/null || true")
                fs.drop_cache()
                with g.memory_cgroup(limit) as procs:
                    times = [g.timed_shell(script, procs) for _ in range(4)]
                    examine = None
                    if b != "plain":
                        r = subprocess.run(["sh", "-c", f"echo $$ > {procs}; {g.DISCNICE} gbp "
                                            f"--mem {files} --json --backend {b}"],
                                           capture_output=True, check=True)
                        examine = json.loads(r.stdout)["examine_s"]
                row = {"runs": times, "warm_s": statistics.median(times[1:]),
                       "examine_s": examine}
                (plain if b == "plain" else res[b]).append(row)
                g.log(f"rep {rep} {b}: cold {times[0]:.2f} s, warm "
                      f"{[round(t, 2) for t in times[1:]]}"
                      + (f", examine {examine:.4f} s" if examine is not None else ""))
    date = datetime.date.today().isoformat()
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"{date}-vm-graybox-backends.md")
    with open(out, "w") as f:
        w = lambda s="": f.write(s + "\n")  # noqa: E731
        w(f"# gbp backends side by side on Fig 3's grep ({date})")
        w()
        w(f"Command: `make bench-graybox-backends ARGS=\"--backends {args.backends} "
          f"--reps {args.reps}\"` (bench/graybox_backends.py). {n} x {args.file_mb} MB files on "
          "a loop device throttled to 50 MB/s, 150 IOPS; every run in a memory cgroup v1 of "
          f"{limit // g.MiB} MiB (84 % of the data: the LRU worst case); per repetition and "
          "backend, the cache dropped, one cold and three warm runs; backends alternate, "
          "their order rotated.")
        w()
        w("| backend | warm medians per repetition, s | median | examine s (median) | "
          "probe share of the scan | vs plain grep |")
        w("| --- | --- | --- | --- | --- | --- |")
        base = plain[0]["warm_s"] if plain else None
        for b in backends:
            wm = [r["warm_s"] for r in res[b]]
            ex = statistics.median(r["examine_s"] for r in res[b])
            m = statistics.median(wm)
            vs = f"{base / m:.1f}x" if base else ""
            w(f"| {b} | {', '.join(f'{x:.2f}' for x in wm)} | {m:.2f} | {ex:.4f} | "
              f"{100 * ex / m:.2f} % | {vs} |")
        if base:
            w(f"| plain grep | {base:.2f} | {base:.2f} | | | 1.0x |")
        w()
        w("Every run (cold first):")
        w()
        for b in backends:
            for i, r in enumerate(res[b]):
                w(f"- {b}, repetition {i}: {[round(t, 2) for t in r['runs']]}, examine "
                  f"{r['examine_s']:.4f} s")
        json.dump({"backends": res, "plain": plain}, open(out[:-3] + ".json", "w"), indent=1)
    print(open(out).read())


if __name__ == "__main__":
    main()
