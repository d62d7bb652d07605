#!/usr/bin/env python3
"""The DiscNice evaluation on this machine, beside the kernel's own controls
(issue #3): every experiment of the paper (E1-E6), its tables with the
paper's published figures beside ours, and PNG plots.

    make bench-quick    # reduced sizes, one repetition (<= 5 minutes)
    make bench          # full sizes, 3+ alternating repetitions (<= 1 hour)

Writes bench/results/DATE-HOST-evaluation.md and DATE-HOST-e*.png next to it.
Needs root for the kernel comparisons (BFQ switch, cgroup-v1 blkio throttle);
what the machine lacks is reported as "n/a (reason)", never a failure.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from evaluation import (e1_contention, e2_prediction, e3_traces, e4_ablation,  # noqa: E402
                        e5_overhead, e6_unobtrusive, workspace)

EXPERIMENTS = [("e1", e1_contention), ("e2", e2_prediction), ("e3", e3_traces),
               ("e4", e4_ablation), ("e5", e5_overhead), ("e6", e6_unobtrusive)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="reduced sizes, one repetition (<= 5 minutes)")
    ap.add_argument("--only", default="", help="comma-separated subset, e.g. e1,e6 (for development)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    t0 = time.monotonic()
    ctx = workspace.Context(args.quick)
    ctx.prepare()
    print(f"evaluate: disk {ctx.disk} {ctx.disk_bps / 1e6:.0f} MB/s; "
          f"{'quick' if args.quick else 'full'} run", flush=True)
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
    cmd = "make bench-quick" if args.quick else "make bench"
    head = ["# DiscNice evaluation on this machine (issue #3)", ""] + ctx.machine_lines() + [
        "", f"Command: `{cmd}`{' (subset: ' + args.only + ')' if args.only else ''}; "
        f"{'quick: reduced sizes, 1 repetition' if args.quick else f'full: {ctx.sizes.reps} alternating repetitions'}; "
        f"took {elapsed / 60:.1f} min. Paper: Yamada & Kono, DiscNice (2007), Linux 2.4.27, SCSI HDD "
        "(~47 MB/s sequential); ours is a virtio disk ~10x faster, so absolute times differ: compare rates "
        "and ratios.", ""]
    if ctx.notes:
        head += ["**Targets missed on this run:**", ""] + [f"- {n}" for n in ctx.notes] + [""]
    else:
        head += ["All targets met on this run.", ""]
    with open(ctx.results, "w") as f:
        f.write("\n".join(head + sections) + "\n")
    print("\n".join(head + sections))
    print(f"evaluate: written to {os.path.relpath(ctx.results, os.getcwd())} in {elapsed:.0f} s")


if __name__ == "__main__":
    main()
