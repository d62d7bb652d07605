#!/usr/bin/env python3
"""The DiscNice evaluation on this machine, beside the kernel's own controls
(issue #3): every experiment of the paper (E1-E6), its tables with the
paper's published figures beside ours, and PNG plots.

    make bench-quick    # reduced sizes, one repetition (<= 5 minutes)
    make bench          # full sizes, 3+ alternating repetitions (<= 1 hour)
    make bench-emulated # E1, E4, E6 on an emulated 50 MB/s, 150 IOPS disk (<= 40 minutes)
    make bench-emulated ARGS=--quick    # the same, tiny sizes (smoke test, ~5 minutes)

Writes bench/results/DATE-HOST-evaluation.md and DATE-HOST-e*.png next to it
(--emulated: DATE-HOST-evaluation-emulated.md, DATE-HOST-emulated-e*.png).
Needs root for the kernel comparisons (BFQ switch, cgroup-v1 blkio throttle);
what the machine lacks is reported as "n/a (reason)", never a failure.

--emulated (issue #9 §7): this VM's disk is cached by its host, so one rsync
hardly slows a foreground.  The experiments that compare a foreground with
and without a background (E1, E4, E6) then run with their workspace on
bench/loopfs.py's LoopFs(throttle=HDD): ext4 on a loop device whose every
process shares 50 MB/s and 150 IOPS, about the paper's disk; sizes are the
paper's (200 MB foreground, 600 MB rsync).  The disk is always torn down,
also on Ctrl-C.  `python3 bench/loopfs.py --check` first measures what it
does (shares, flat v1 throttling, BFQ) and the results file shows it.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import loopfs  # noqa: E402
from evaluation import (e1_contention, e2_prediction, e3_traces, e4_ablation,  # noqa: E402
                        e5_overhead, e6_unobtrusive, workspace)

EXPERIMENTS = [("e1", e1_contention), ("e2", e2_prediction), ("e3", e3_traces),
               ("e4", e4_ablation), ("e5", e5_overhead), ("e6", e6_unobtrusive)]
EMULATED = {"e1", "e4", "e6"}       # foreground beside background: what a cached disk hides


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="reduced sizes, one repetition (<= 5 minutes)")
    ap.add_argument("--only", default="", help="comma-separated subset, e.g. e1,e6 (for development)")
    ap.add_argument("--emulated", action="store_true",
                    help="E1, E4, E6 on an emulated 50 MB/s, 150 IOPS disk (bench/loopfs.py; root)")
    ap.add_argument("--out", default=None, help="results file (default bench/results/DATE-HOST-KIND.md)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    t0 = time.monotonic()
    if not args.emulated:
        ctx = workspace.Context(args.quick, results=args.out)
        run(ctx, args, only, t0)
        return
    why = loopfs.LoopFs.unavailable(throttle=True)
    if why:
        sys.exit(f"evaluate: --emulated: {why}")
    only = (only or EMULATED) & EMULATED
    print("evaluate: checking the emulated disk (bench/loopfs.py --check) ...", flush=True)
    check = loopfs.check()
    for what, result in check:
        print(f"  {what:55} {result}", flush=True)
    size = 1024 if args.quick else 4096
    with loopfs.LoopFs(size_mib=size, tag="eval", throttle=loopfs.HDD) as fs:
        ctx = workspace.Context(args.quick, loopfs=fs, results=args.out)
        ctx.check_lines = check
        run(ctx, args, only, t0)


def run(ctx, args, only, t0):
    ctx.prepare()
    print(f"evaluate: disk {ctx.disk} {ctx.disk_bps / 1e6:.1f} MB/s; "
          f"{'quick' if args.quick else 'full'} run{' (emulated disk)' if ctx.emulated else ''}", flush=True)
    sections = []
    for name, module in EXPERIMENTS:
        if only and name not in only:
            continue
        t = time.monotonic()
        print(f"evaluate: {name} ...", flush=True)
        sections += module.run(ctx)
        print(f"evaluate: {name} done in {time.monotonic() - t:.0f} s", flush=True)
    elapsed = time.monotonic() - t0
    write(ctx, args, sections, elapsed)


def write(ctx, args, sections, elapsed):
    """The results file: machine, targets missed, then every section."""
    if ctx.emulated:
        cmd = "make bench-emulated" + (" ARGS=--quick" if args.quick else "")
        title = "# DiscNice evaluation on an emulated disk (issue #9 §7; E1, E4, E6)"
        disk = ("the experiments' workspace is on an emulated disk of about the paper's speed (below), "
                "so times are comparable in kind; the page cache is this VM's 24 GiB.")
    else:
        cmd = "make bench-quick" if args.quick else "make bench"
        title = "# DiscNice evaluation on this machine (issue #3)"
        disk = "ours is a virtio disk ~10x faster, so absolute times differ: compare rates and ratios."
    head = [title, ""] + ctx.machine_lines() + [
        "", f"Command: `{cmd}`{' (subset: ' + args.only + ')' if args.only else ''}; "
        f"{'quick: reduced sizes, 1 repetition' if args.quick else f'full: {ctx.sizes.reps} alternating repetitions'}; "
        f"took {elapsed / 60:.1f} min. Paper: Yamada & Kono, DiscNice (2007), Linux 2.4.27, SCSI HDD "
        f"(~47 MB/s sequential); {disk}", ""]
    if ctx.check_lines:
        head += ["**The emulated disk, measured** (`python3 bench/loopfs.py --check`: cold `dd bs=1M` "
                 "readers of 100 MiB files, 25 MiB in a 5 MB/s group; MB = 10^6 B):", ""]
        head += util_table(["what", "measured"], ctx.check_lines)
        head += ["", "So: every process in the root group shares the disk; cgroup-v1 blkio throttling is "
                 "flat on this kernel (a child group's I/O is not counted against the root group's rules), "
                 "hence E6's kernel-throttle case splits the disk (root HDD - cap, child cap); and BFQ, "
                 "though offered for the loop device, sits below the throttle, so ionice -c3 has no queue "
                 "to order and is not compared.", ""]
    if ctx.notes:
        head += ["**Targets missed on this run:**", ""] + [f"- {n}" for n in ctx.notes] + [""]
    else:
        head += ["All targets met on this run.", ""]
    with open(ctx.results, "w") as f:
        f.write("\n".join(head + sections) + "\n")
    print("\n".join(head + sections))
    print(f"evaluate: written to {os.path.relpath(ctx.results, os.getcwd())} in {elapsed:.0f} s")


def util_table(header, rows):
    from evaluation import util
    return util.table(header, [list(r) for r in rows])


if __name__ == "__main__":
    main()
