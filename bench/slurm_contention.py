#!/usr/bin/env python3
"""A node with and without the discnice SPANK plugin (issue #13 "Done
means"): a foreground user's read beside a scavenger Slurm job that reads
and writes heavily, on an emulated disk of fixed speed.

    make bench-slurm                 # 3 rounds (about 3 min); ARGS="--rounds 5"
    python3 bench/slurm_contention.py [--rounds N] [--cap 10MB/s] [--out FILE]

Needs root (a private one-node Slurm cluster, tests/integration/slurm_cluster.py,
and a loop filesystem with the root blkio group's throttle: 50 MB/s and
150 IOPS, HDD-like, bench/loopfs.py).  Everything it starts is stopped and
removed at the end, also on errors.

Foreground: `cat` of a cold 150 MB file, run outside Slurm as the person at
the machine would, timed by this script.  Scavenger: an sbatch job looping,
on the same disk, four `dd iflag=direct` readers of a quarter each of a
600 MB file (every byte from the disk) beside a buffered `dd conv=fsync`
write of 200 MB (the kernel's
flusher then writes it back with a deep queue, as backups and builds do).  Modes, alternated in each round:
  alone     no scavenger;
  plain     the scavenger with no plugin in plugstack.conf;
  plugin    the plugin loaded with an administrator default rate=CAP for
            every job (`required discnice.so rate=CAP`): the scavenger's
            task runs under `discnice run --rate CAP`.
Reported: the foreground's time (median) and its slowdown against alone
(ratio of medians), and what the scavenger moved meanwhile, from the loop
device's /sys/block/loopN/stat less the foreground's own bytes.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from loopfs import HDD, LoopFs  # noqa: E402
from slurm_cluster import Cluster, unavailable  # noqa: E402
from common import make_cold  # noqa: E402

MB = 1000 * 1000
FG_BYTES = 150 * MB
SCAV_READ = 600 * MB
SCAV_WRITE = 200 * MB

SCAVENGER = """#!/bin/bash
while :; do
  for part in 0 1 2 3; do
    dd if={src} of=/dev/null bs=1M iflag=direct status=none skip=$((part * {quarter})) count={quarter} &
  done
  dd if=/dev/zero of={dst} bs=1M count={wmib} conv=fsync status=none
  wait
done
"""


def fill(path, nbytes):
    with open(path, "wb") as f:
        block = os.urandom(1 << 20)
        left = nbytes
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)
        f.flush()
        os.fsync(f.fileno())


def foreground(fs, path):
    """Seconds for a cold cat, and the device bytes it moved (its own)."""
    make_cold(path)
    t0 = time.monotonic()
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cap", default="10MB/s", help="the administrator's default rate (10MB/s)")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()
    why = unavailable() or LoopFs.unavailable(throttle=True)
    if why:
        sys.exit(f"slurm_contention: cannot run here: {why}")
    build = ROOT / "build"
    plugin, task, discnice = build / "slurm" / "discnice.so", build / "slurm" / "discnice-slurm-task", \
        build / "discnice"
    for p in (plugin, task, discnice):
        if not p.exists():
            sys.exit(f"slurm_contention: {p} not built (make all slurm)")
    plugin_line = f"required {plugin} discnice={discnice} rate={args.cap}"
    times = {"alone": [], "plain": [], "plugin": []}
    scav_moved = {"plain": [], "plugin": []}
    with tempfile.TemporaryDirectory(prefix="dn-slurm-bench-") as tmp, \
            LoopFs(size_mib=2048, tag="slurm", throttle=HDD) as fs:
        fg = fs.path("fg.dat")
        src, dst = fs.path("scav-src.dat"), fs.path("scav-dst.dat")
        with fs.rules(read_bps=0, write_bps=0, read_iops=0, write_iops=0):
            fill(fg, FG_BYTES)
            fill(src, SCAV_READ)
        cluster = Cluster(Path(tmp) / "slurm", plugstack_lines=[])
        try:
            cluster.start()
            xdg = Path(tmp) / "xdg"
            xdg.mkdir(mode=0o700)
            cluster.env["XDG_RUNTIME_DIR"] = str(xdg)
            cluster.env["TMPDIR"] = tmp
            script = SCAVENGER.format(src=src, dst=dst, wmib=SCAV_WRITE // (1 << 20),
                                      quarter=SCAV_READ // (1 << 20) // 4)
            modes = ["alone", "plain", "plugin"]
            for rnd in range(args.rounds):
                order = modes if rnd % 2 == 0 else modes[::-1]
                for mode in order:
                    job = None
                    if mode != "alone":
                        cluster.write_plugstack([plugin_line] if mode == "plugin" else [])
                        job = cluster.sbatch(["-o", "/dev/null", "-J", f"scav-{mode}"], script)
                        cluster.wait_state(job, ("RUNNING",), timeout=60)
                        time.sleep(3.0)  # under way: its first reads and writes
                    before = fs.stat()
                    secs = foreground(fs, fg)
                    after = fs.stat()
                    moved = (after[2] - before[2] + after[6] - before[6]) * 512
                    if job is not None:
                        cluster.client(["scancel", str(job)], check=False)
                        cluster.wait_state(job, ("CANCELLED", "COMPLETED", "FAILED", "GONE"),
                                           timeout=60)
                        time.sleep(1.0)
                        scav_moved[mode].append(max(0, moved - FG_BYTES) / secs)
                    times[mode].append(secs)
                    print(f"round {rnd + 1} {mode:6s}: foreground {secs:6.2f} s", file=sys.stderr,
                          flush=True)
        finally:
            cluster.stop()
    alone = statistics.median(times["alone"])
    lines = [
        f"Foreground: cold `cat` of {FG_BYTES // MB} MB outside Slurm; scavenger: sbatch job, "
        f"4 direct readers of {SCAV_READ // MB} MB beside a buffered write of {SCAV_WRITE // MB} MB, "
        f"in a loop; "
        f"emulated disk 50 MB/s, 150 IOPS; {args.rounds} rounds, modes alternated, medians.",
        "",
        "| node | foreground (median s) | slowdown vs alone | scavenger's disk rate meanwhile |",
        "|---|---:|---:|---:|",
        f"| no scavenger | {alone:.2f} | 1.00x | - |",
    ]
    for mode, label in (("plain", "scavenger, no plugin"),
                        ("plugin", f"scavenger, plugin (admin default rate={args.cap})")):
        t = statistics.median(times[mode])
        rate = statistics.median(scav_moved[mode]) / MB
        lines.append(f"| {label} | {t:.2f} | {t / alone:.2f}x (+{(t / alone - 1) * 100:.0f} %) | "
                     f"{rate:.1f} MB/s |")
    lines += ["", "Paper anchors: an unregulated background raised a foreground's time by 90 % "
              "(MS Manners, its §9); DiscNice kept a regulated job's interference within its cap."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(f"# Slurm node with and without the discnice plugin, "
                                  f"{time.strftime('%Y-%m-%d')} (`make bench-slurm`)\n\n{text}\n")


if __name__ == "__main__":
    main()
