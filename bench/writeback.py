#!/usr/bin/env python3
"""Paced writeback: does the disk itself see the write cap (issue #9 §1)?

    make bench-writeback                 # 3 caps x dd, tar x, cp -a; ~25 min
    make bench-writeback ARGS=--quick    # one cap, dd and tar x

The filesystem under test is ext4 (--fs: xfs, btrfs...) on a loop device of its own (bench/loopfs.py):
/sys/block/loopN/stat counts exactly what it sends to its disk.  The sources
are on the main disk and warm, so the loop device sees the job's writes only.
Sampled every 50 ms from the job's start until 35 s after its end (the
flusher's dirty_expire_centisecs = 30 s, plus its 5 s period).

Per run:
  smooth  = share of the bytes written in 1-s windows whose rate is <= 1.15 x cap
            (byte-weighted: idle seconds prove nothing).   Target >= 90 %.
  rate    = bytes the disk wrote while the job ran / the job's duration.
            Target within +-5 % of the cap.
  peak    = the largest 1-s window, x cap.
Both --writeback paced (the default) and --writeback kernel (as before).

Second table: delayed-write savings kept.  Disk bytes after the job and a
sync, paced against kernel, for the paper's six micro-benchmarks (§6.1:
the three readers, Create, and those that rewrite in place (Region-Write) or
delete what they wrote (Create-Delete)), for tar x and for a make of this
project.  Target: paced writes at most 1 % more.
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MiB  # noqa: E402
from loopfs import LoopFs  # noqa: E402

SMOOTH_FACTOR = 1.15
SMOOTH_TARGET = 90.0
RATE_TOLERANCE = 5.0
GROWTH_TARGET = 1.0
TAIL_S = 35.0
SAMPLE_S = 0.05


class Sampler(threading.Thread):
    def __init__(self, fs):
        super().__init__(daemon=True)
        self.fs, self.samples, self.stop = fs, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), self.fs.written_bytes()))
            time.sleep(SAMPLE_S)


def windows(samples, t0, t1):
    """Bytes written in each 1-s window [t0 + k, t0 + k + 1) up to t1."""
    n = int(t1 - t0) + 1
    out = [0] * n
    for (ta, a), (tb, b) in zip(samples, samples[1:]):
        k = int((tb - t0))
        if 0 <= k < n:
            out[k] += b - a
    return out


def make_tree(top, total, seed=1):
    """Files of log-uniform sizes, 4 KiB .. 4 MiB, about total bytes."""
    if os.path.isdir(top) and os.path.exists(os.path.join(top, ".done")):
        return top
    shutil.rmtree(top, ignore_errors=True)
    rng = random.Random(seed)
    left, i = total, 0
    while left > 0:
        size = min(left, int(2 ** rng.uniform(12, 22)))
        d = os.path.join(top, f"d{i // 64:03d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05d}"), "wb") as f:
            f.write(rng.randbytes(size))
        left -= size
        i += 1
    open(os.path.join(top, ".done"), "w").close()
    return top


def sources(scratch, cap):
    """The data for one cap: about 12 s of work at the cap, warm in cache."""
    size = max(16 * MiB, int(cap * 12) // MiB * MiB)
    src = common.make_file(os.path.join(scratch, f"wb-src-{size // MiB}M"), size)
    tree = make_tree(os.path.join(scratch, f"wb-tree-{size // MiB}M"), size)
    tarball = os.path.join(scratch, f"wb-tree-{size // MiB}M.tar")
    if not os.path.exists(tarball):
        subprocess.run(["tar", "cf", tarball + ".tmp", "-C", tree, "."], check=True)
        os.rename(tarball + ".tmp", tarball)
    for p in (src, tarball):
        subprocess.run(["cat", p], stdout=subprocess.DEVNULL, check=True)
    subprocess.run(["tar", "cf", "/dev/null", "-C", tree, "."], check=True)
    return size, {"dd": ["dd", f"if={src}", "of={out}/dd.out", "bs=1M", "status=none"],
                  "tar x": ["tar", "xf", tarball, "-C", "{out}"],
                  "cp -a": ["cp", "-a", tree, "{out}/tree"]}


def clean(fs):
    for name in os.listdir(fs.mountpoint):
        if name != "lost+found":
            p = fs.path(name)
            shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
    subprocess.run(["sync", "-f", fs.mountpoint], check=True)
    time.sleep(1)


def one_run(fs, argv, cap, mode):
    clean(fs)
    out = fs.path("out")
    os.mkdir(out)
    cmd = [a.replace("{out}", out) for a in argv]
    sampler = Sampler(fs)
    sampler.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    w0 = fs.written_bytes()
    subprocess.run([common.DISCNICE, "run", "-q", "--write-rate", str(cap), "--writeback", mode,
                    "--"] + cmd, check=True)
    t1 = time.monotonic()
    w1 = fs.written_bytes()
    time.sleep(TAIL_S)
    sampler.stop.set()
    sampler.join()
    wins = windows(sampler.samples, t0, t1 + TAIL_S)
    total = sum(wins)
    smooth = 100.0 * sum(w for w in wins if w <= SMOOTH_FACTOR * cap) / total if total else 0.0
    rate = (w1 - w0) / (t1 - t0)
    return {"smooth": smooth, "rate": rate, "err": 100.0 * (rate - cap) / cap,
            "peak": max(wins) / cap if wins else 0.0, "total": total, "dur": t1 - t0}


def smoothness(fs, caps, workloads, runs, lines):
    lines += ["## Disk-side smoothness (loop device)", "",
              "| workload | cap | writeback | smooth [% bytes in 1-s windows <= 1.15x cap] "
              "| disk rate during job | error | peak 1-s window | disk bytes / data | met |",
              "|---|---:|---|---:|---:|---:|---:|---:|---|"]
    verdict = {}
    for cap in caps:
        size, cmds = sources(common.SCRATCH, cap)
        for name in workloads:
            for mode in ("paced", "kernel"):
                rs = [one_run(fs, cmds[name], cap, mode) for _ in range(runs)]
                med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                ok = med["smooth"] >= SMOOTH_TARGET and abs(med["err"]) <= RATE_TOLERANCE
                if mode == "paced":
                    verdict[(name, cap)] = ok
                spread = (f" ({min(r['smooth'] for r in rs):.0f}-{max(r['smooth'] for r in rs):.0f})"
                          if runs > 1 else "")
                lines.append(f"| {name} | {cap / MiB:g} MiB/s | {mode} | {med['smooth']:.1f}{spread} "
                             f"| {med['rate'] / MiB:.2f} MiB/s | {med['err']:+.1f}% "
                             f"| {med['peak']:.2f}x | {med['total'] / size:.3f} "
                             f"| {'met' if ok else 'NOT met'} |")
                print(lines[-1], flush=True)
    met = all(verdict.values())
    lines += ["", f"Target (paced rows: >= {SMOOTH_TARGET:.0f} % smooth and rate within "
              f"+-{RATE_TOLERANCE:.0f} % of the cap, at every cap and workload): "
              f"{'MET' if met else 'NOT MET'}", ""]
    return met


def savings(fs, cap, runs, quick, lines):
    mb = common.MICROBENCH
    count = "2000" if quick else "10000"
    size, cmds = sources(common.SCRATCH, cap)
    region = os.path.join(fs.mountpoint, "region")
    project = os.path.join(common.SCRATCH, "wb-project")
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(common.ROOT, project, ignore=shutil.ignore_patterns("build", ".git", "results"))

    def region_write():
        common.make_file(region, 64 * MiB, fill=b"r")
        return [mb, "region-write", region, count]

    # The paper's three readers (§6.1) write nothing themselves; their
    # rows show that pacing adds nothing either (atime, the journal).  Their
    # file is made on the loop device and synced before the count starts.
    read_mib = 64 if quick else 256
    source = os.path.join(fs.mountpoint, "source")

    def reader(*args):
        def setup():
            common.make_file(source, read_mib * MiB)
            return [mb, args[0], source, *args[1:]]
        return setup

    cases = [
        (f"Sequential ({read_mib} MiB)", reader("sequential"), None),
        (f"Random ({read_mib} MiB, 10 passes)", reader("random", "10", "1"), None),
        (f"Stride ({read_mib} MiB)", reader("stride"), None),
        (f"Create ({read_mib if quick else 400} MiB)",
         lambda: [mb, "create", fs.path("out", "create"), str(read_mib if quick else 400)], None),
        ("Region-Write", region_write, None),
        ("Create-Delete", lambda: [mb, "create-delete", fs.path("out"), count], None),
        ("tar x", lambda: [a.replace("{out}", fs.path("out")) for a in cmds["tar x"]], None),
        ("make -j2", lambda: ["make", "-s", "-j2", "-C", project, f"BUILD={fs.path('out')}/build",
                              "all"], dict(os.environ, TMPDIR=fs.path("out"))),
    ]
    lines += ["## Delayed-write savings kept (disk bytes after the job and a sync)", "",
              "| job | cap | kernel [B] | paced [B] | paced / kernel | met (<= +1 %) |",
              "|---|---:|---:|---:|---:|---|"]
    allok = True
    for name, setup, env in cases:
        got = {"paced": [], "kernel": []}
        for _ in range(runs):
            for mode in ("kernel", "paced"):
                clean(fs)
                os.makedirs(fs.path("out"), exist_ok=True)
                cmd = setup()
                w0 = fs.written_bytes()
                subprocess.run([common.DISCNICE, "run", "-q", "--write-rate", str(cap), "--writeback",
                                mode, "--"] + cmd, check=True, env=env, stdout=subprocess.DEVNULL)
                subprocess.run(["sync", "-f", fs.mountpoint], check=True)
                time.sleep(0.5)
                got[mode].append(fs.written_bytes() - w0)
        k, p = statistics.median(got["kernel"]), statistics.median(got["paced"])
        ratio = p / k if k else float("nan")
        ok = p <= k * (1 + GROWTH_TARGET / 100) + 256 * 1024
        allok &= ok
        lines.append(f"| {name} | {cap / MiB:g} MiB/s | {k:,.0f} | {p:,.0f} | {ratio:.4f} "
                     f"| {'met' if ok else 'NOT met'} |")
        print(lines[-1], flush=True)
    shutil.rmtree(project, ignore_errors=True)
    lines += ["", f"Target (paced at most 1 % more disk writes than kernel; 256 KiB slack for "
              f"journal noise): {'MET' if allok else 'NOT MET'}", ""]
    return allok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one cap (16 MiB/s), dd and tar x, one run")
    ap.add_argument("--runs", type=int, default=None, help="runs per row (median); default 1 quick, 2 full")
    ap.add_argument("--part", choices=["all", "smooth", "savings"], default="all",
                    help="run one of the two tables only")
    ap.add_argument("--caps", help="comma-separated caps in MiB/s (default 4,16,64)")
    ap.add_argument("--workloads", help="comma-separated jobs: dd, tar x, cp -a (default all)")
    ap.add_argument("--fs", default="ext4", metavar="TYPE",
                    help="the file system under test (default ext4; results file named -TYPE else)")
    args = ap.parse_args()
    why = LoopFs.unavailable()
    if why:
        sys.exit(f"bench-writeback: cannot run: {why}")
    runs = args.runs or (1 if args.quick else 2)
    caps = [16 * MiB] if args.quick else [4 * MiB, 16 * MiB, 64 * MiB]
    workloads = ["dd", "tar x"] if args.quick else ["dd", "tar x", "cp -a"]
    if args.caps:
        caps = [int(float(c) * MiB) for c in args.caps.split(",")]
    if args.workloads:
        workloads = [w.strip() for w in args.workloads.split(",")]
        unknown = set(workloads) - {"dd", "tar x", "cp -a"}
        if unknown:
            sys.exit(f"bench-writeback: unknown workload {sorted(unknown)[0]!r} (dd, tar x, cp -a)")
    os.makedirs(common.SCRATCH, exist_ok=True)
    lines = ["# Paced writeback: the disk sees the cap (issue #9 §1)", ""] + common.machine_lines() + [
        "", f"Command: `make bench-writeback ARGS='{' '.join(sys.argv[1:])}'`.  "
        f"Median of {runs} run(s) per row.  Oracle: /sys/block/loopN/stat of an {args.fs} image "
        "on a loop device (--direct-io=on), sampled every 50 ms during the job and 35 s after.", ""]
    size_mib = max(2048, int(max(caps) * 12 * 2.5) // MiB)
    with LoopFs(size_mib=size_mib, tag="writeback", fstype=args.fs) as fs:
        smooth_ok = savings_ok = None
        if args.part in ("all", "smooth"):
            smooth_ok = smoothness(fs, caps, workloads, runs, lines)
        if args.part in ("all", "savings"):
            savings_ok = savings(fs, 16 * MiB, runs, args.quick, lines)
    verdict = {True: "MET", False: "NOT MET", None: "not run"}
    lines.append(f"Summary: smoothness {verdict[smooth_ok]}; savings kept {verdict[savings_ok]}")
    path = common.results_path("writeback" + ("" if args.part == "all" else f"-{args.part}")
                               + ("" if args.fs == "ext4" else f"-{args.fs}"))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[-1])
    print(f"written to {os.path.relpath(path, common.ROOT)}")


if __name__ == "__main__":
    main()
