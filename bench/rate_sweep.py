#!/usr/bin/env python3
"""Rate sweep (issue #9 item 2): is every cap exact, with the default options?

Thirteen caps spaced logarithmically from 1 MiB/s to 200 MiB/s, base-1000 and
base-1024 values mixed, typed as a user would (`9M` is 9,000,000 B/s: a
plain M is base 1000, only Mi is 1024 - src/common/rate.c).  For each cap and
workload the job runs ~SECONDS at the cap:

  seq read    cat of a cold file                          --read-rate CAP
  rand read   cold 4 KiB random preads (microbench random) --read-rate CAP
  seq write   64 KiB writes of a new file (microbench)      --write-rate CAP
  mixed       tar -cf of a cold tree (reads + writes)       --rate CAP (total)
  copy        cp of a cold file to a new one                --read-rate CAP
              (coreutils copies with one copy_file_range(): the kernel
              reads the source, the agent paces it - io_copy.c)

with --feedback on (the default) and --feedback off, runs alternating.
Achieved = the kernel's bytes of the job tree (the report's actual_*: the
supervisor's /proc/self/io growth, every reaped descendant included) over
the job's elapsed time; the median of RUNS runs per cell.  Targets: reads
within +-3 %, writes and mixed within +-5 %.  A cell whose unregulated run
(--rate inf, the agent idle) is itself slower than 1.2 x the cap is
"device-bound": the cap cannot bind there, and it is not counted a miss.

    make bench-rate                       # the sweep, then bench/rate.py
    build/venv/bin/python bench/rate_sweep.py [--runs N] [--seconds S] [--caps 7.5MiB/s,9M]
    build/venv/bin/python bench/rate_sweep.py --fs btrfs --quick   # as root

--fs TYPE runs every workload on a file system of that type made on a loop
device of its own (bench/loopfs.py; root), instead of the scratch
directory's: btrfs, xfs and ext4 reach the model by different ways
(graybox/device.c), and btrfs's files sit on an anonymous device.  The
results file is then named rate-sweep-TYPE.
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
from loopfs import LoopFs  # noqa: E402

CAPS = ["1MiB/s", "1.7MB/s", "3MiB/s", "5MB/s", "7.5MiB/s", "9M", "13MiB/s", "20MB/s",
        "33MiB/s", "50MB/s", "80MiB/s", "120MB/s", "200MiB/s"]
WORKLOADS = [("seq read", "read"), ("rand read", "read"), ("seq write", "write"),
             ("mixed (tar)", "mixed"), ("copy (cp)", "read")]
TOLERANCE = {"read": 3.0, "write": 5.0, "mixed": 5.0}
DEVICE_BOUND = 1.2
RANDOM_FILE_MIB = 1024
TREE_FILES = 16


def cap_bytes(text):
    """The cap as discnice parses it (src/common/rate.c), for the table:
    k/M/G = 1000^n, Ki/Mi/Gi = 1024^n, optional B and /s.  Every run
    checks it against the report's cap field."""
    t = text.removesuffix("/s").removesuffix("B").removesuffix("b")
    mult = 1
    if t[-1] == "i":
        mult, t = 1024 ** ("kmgt".index(t[-2].lower()) + 1), t[:-2]
    elif t[-1].lower() in "kmgt":
        mult, t = 1000 ** ("kmgt".index(t[-1].lower()) + 1), t[:-1]
    whole, _, frac = t.partition(".")
    return int(whole or 0) * mult + (int(frac) * mult // 10 ** len(frac) if frac else 0)


class Workloads:
    """The files each workload needs, made once and reused across runs."""

    def __init__(self, seconds, directory=None):
        self.seconds = seconds
        self.dir = directory or os.path.join(common.SCRATCH, "sweep")
        os.makedirs(self.dir, exist_ok=True)
        self.random_file = None

    def budget(self, cap):
        return int(cap * self.seconds)

    def prepare(self, kind, cap):
        """(argv, cap option, which bytes count) for one run; files made
        cold, old outputs gone."""
        mb, d, budget = common.MICROBENCH, self.dir, self.budget(cap)
        if kind in ("seq read", "copy (cp)"):
            mib = max(4, round(budget / MiB))
            f = common.make_file(os.path.join(d, f"seq-{mib}M"), mib * MiB)
            common.make_cold(f)
            if kind == "seq read":
                return ["cat", f], "--read-rate", "read"
            out = os.path.join(d, "copy.out")
            if os.path.exists(out):
                os.unlink(out)
            os.sync()
            return ["cp", f, out], "--read-rate", "read"
        if kind == "rand read":
            if not self.random_file:
                self.random_file = common.make_file(os.path.join(d, f"random-{RANDOM_FILE_MIB}M"),
                                                    RANDOM_FILE_MIB * MiB)
            common.make_cold(self.random_file)
            # 4 KiB each; repeats of a page hit the cache, so ask for a few
            # more than the budget's pages (P(repeat) ~ reads / pages / 2).
            pages = RANDOM_FILE_MIB * MiB // 4096
            reads = max(256, budget // 4096)
            reads = int(reads * (1 + reads / pages / 2))
            return [mb, "random", self.random_file, "1000", "7", str(reads)], "--read-rate", "read"
        if kind == "seq write":
            out = os.path.join(d, "write.out")
            if os.path.exists(out):
                os.unlink(out)
            os.sync()
            return [mb, "create", out, str(max(4, round(budget / MiB)))], "--write-rate", "write"
        # mixed: tar of a tree of TREE_FILES files; read + write = the budget.
        each = max(64 * 1024, budget // 2 // TREE_FILES) // 4096 * 4096
        tree = os.path.join(d, f"tree-{each // 1024}K")
        if not os.path.isdir(tree):
            for i in range(TREE_FILES):
                sub = os.path.join(tree + ".tmp", f"d{i % 4}")
                os.makedirs(sub, exist_ok=True)
                common.make_file(os.path.join(sub, f"f{i:02d}"), each)
            os.rename(tree + ".tmp", tree)
        out = os.path.join(d, "mixed.tar")
        if os.path.exists(out):
            os.unlink(out)
        os.sync()
        common.make_tree_cold(tree)
        return ["tar", "-cf", out, "-C", tree, "."], "--rate", "both"


def moved(r, which):
    if which == "read":
        return r["actual_read_bytes"]
    if which == "write":
        return r["actual_write_bytes"]
    return r["actual_read_bytes"] + r["actual_write_bytes"]


def one_run(w, kind, cap_text, cap, feedback):
    cmd, option, which = w.prepare(kind, cap)
    args = [option, "inf" if feedback is None else cap_text]
    if feedback is not None:
        args += ["--feedback", feedback]
    r, _ = common.run(cmd, args)
    if feedback is not None:
        parsed = {"read": r["read_cap_bps"], "write": r["write_cap_bps"]}.get(which, r["total_cap_bps"])
        if parsed != cap:
            sys.exit(f"bench: discnice took {cap_text} as {parsed} B/s, this table as {cap}")
    return moved(r, which) / r["elapsed_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per cell (median)")
    ap.add_argument("--seconds", type=float, default=3.0, help="job time at the cap")
    ap.add_argument("--caps", help="comma-separated caps (default: the 13 of the sweep)")
    ap.add_argument("--workloads", help="comma-separated workload names (default: all)")
    ap.add_argument("--quick", action="store_true", help="one run per cell")
    ap.add_argument("--fs", metavar="TYPE",
                    help="run on a TYPE file system on a loop device of its own (root)")
    args = ap.parse_args()
    if args.quick:
        args.runs = 1
    if not args.fs:
        return sweep(args, None)
    why = LoopFs.unavailable()
    if why:
        sys.exit(f"bench: --fs {args.fs}: {why}")
    # 200MiB/s x 3 s: 600 MiB read, copied, written or tarred, and the 1 GiB
    # random file; sparse, on the scratch disk.
    with LoopFs(size_mib=8192, tag=f"sweep-{args.fs}", fstype=args.fs) as fs:
        return sweep(args, fs)


def sweep(args, fs):
    caps = args.caps.split(",") if args.caps else CAPS
    workloads = [wl for wl in WORKLOADS if not args.workloads or wl[0] in args.workloads.split(",")]
    os.makedirs(common.SCRATCH, exist_ok=True)
    w = Workloads(args.seconds, fs.mountpoint if fs else None)
    started = time.monotonic()
    cmdline = "make bench-rate" if not (args.caps or args.workloads or args.fs) else \
        "bench/rate_sweep.py " + " ".join(sys.argv[1:])
    lines = ["# Rate sweep: every cap, default options (issue #9 item 2)", ""] + common.machine_lines() + [
        "", f"File system: {args.fs} on {fs.device}, a loop device of its own." if fs else
        "File system: the scratch directory's.",
        "", f"Command: `{cmdline}` (runs per cell: {args.runs}, job ~{args.seconds:g} s at the cap). "
        "Achieved = the kernel's bytes of the job tree (report actual_*, the supervisor's "
        "/proc/self/io growth over the job) / the job's elapsed time; median of the runs, "
        "feedback on and off alternating. Reads: read bytes under --read-rate; writes: "
        "write bytes (counted when dirtied) under --write-rate; mixed: read + write bytes of "
        "`tar -cf` of a cold tree under --rate; copy: read bytes of `cp` of a cold file under --read-rate. Targets: reads +-3 %, writes and mixed +-5 %; "
        f"device-bound: the unregulated run (--rate inf) was slower than {DEVICE_BOUND} x the cap.",
        "", "| workload | cap as typed | bytes/s | unregulated | feedback on | error | within | "
        "feedback off | error | within |", "|---|---|---:|---:|---:|---:|---|---:|---:|---|"]
    print("\n".join(lines[2:]), flush=True)
    tally = {"on": [0, 0], "off": [0, 0]}
    bound = 0
    for name, group in workloads:
        tol = TOLERANCE[group]
        for cap_text in caps:
            cap = cap_bytes(cap_text)
            free = one_run(w, name, cap_text, cap, None)
            def no_io():
                lines.append(f"| {name} | {cap_text} | {cap:,} | {free / MiB:.1f} MiB/s | "
                             "no I/O to cap: the file system clones | | | | | |")
                print(lines[-1], flush=True)

            if free < 0.01 * cap:
                no_io()     # cp on btrfs or XFS: copy_file_range() clones, reading nothing
                continue
            device_bound = free < DEVICE_BOUND * cap
            runs = 1 if device_bound else args.runs
            got = {"on": [], "off": []}
            for i in range(runs):
                for fb in (("on", "off") if i % 2 == 0 else ("off", "on")):
                    got[fb].append(one_run(w, name, cap_text, cap, fb))
            if max(statistics.median(got["on"]), statistics.median(got["off"])) < 0.01 * cap:
                # The unregulated run read the source (a file system that
                # clones only once its new file's extents are on disk), the
                # capped runs cloned it: nothing to cap.
                no_io()
                continue
            cells = []
            for fb in ("on", "off"):
                rate = statistics.median(got[fb])
                err = 100 * (rate - cap) / cap
                if device_bound:
                    verdict = "device-bound"
                else:
                    ok = abs(err) <= tol
                    tally[fb][0] += ok
                    tally[fb][1] += 1
                    verdict = "yes" if ok else "NO"
                spread = (f" ({min(got[fb]) / MiB:.2f}-{max(got[fb]) / MiB:.2f})"
                          if len(got[fb]) > 1 else "")
                cells += [f"{rate / MiB:.3f} MiB/s{spread}", f"{err:+.2f}%", verdict]
            bound += device_bound
            lines.append(f"| {name} | {cap_text} | {cap:,} | {free / MiB:.1f} MiB/s | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    lines.append("")
    for fb in ("on", "off"):
        ok, total = tally[fb]
        lines.append(f"Feedback {fb}: {ok} of {total} cells within target (reads +-3 %, writes and "
                     f"mixed +-5 %): {'met' if ok == total else 'NOT met'}.")
    lines.append(f"{bound} cells device-bound (not counted). Sweep time: "
                 f"{(time.monotonic() - started) / 60:.1f} min.")
    print("\n".join(lines[-3:]))
    if not (args.caps or args.workloads):
        path = common.results_path("rate-sweep" + ("-quick" if args.runs == 1 else "")
                                   + (f"-{args.fs}" if args.fs else ""))
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"written to {os.path.relpath(path, common.ROOT)}")
    for out in ("mixed.tar", "write.out", "copy.out"):
        if os.path.exists(os.path.join(w.dir, out)):
            os.unlink(os.path.join(w.dir, out))


if __name__ == "__main__":
    main()
