#!/usr/bin/env python3
"""MS Manners §9.5 (Fig. 9): time-multiplex isolation of two regulated
threads on two resources.

The paper gave the SIS Groveler work on two drives, C and D, and set the
C-drive thread's priority higher; dummy loads ran on C, on D, and on the
CPU.  MS Manners favoured the C thread, shifted execution to the D thread
while C was loaded, and suspended both when the CPU or both drives were
loaded.

Here: two emulated disks (ext4 on two loop devices, each under a cgroup-v1
blkio throttle of 50 MB/s and 150 IOPS, bench/loopfs.py; root), and
bench/manners_threads.c: one process linked with libmanners, a thread per
disk reading its files with O_DIRECT in 1 MiB pieces and checksumming each
(a testpoint per piece), thread C at priority +1, thread D at 0.  The job is
pinned to CPU 0 at nice 19; the dummy loads are `dd iflag=direct` of a large
file on C, on D, on both, and a busy loop pinned to CPU 0 (nice 0), in
phases of PHASE_S seconds with idle phases between.

Prints, per phase, each thread's share of the phase spent running (between
a testpoint's return and the next call) and its rate, and writes
bench/results/DATE-HOST-manners-threads.{md,json,png}.

    make bench-manners-threads          (about 5 minutes; root)
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from loopfs import HDD, LoopFs  # noqa: E402

MiB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(common.BUILD, "bench", "manners_threads")
PHASES = ["idle", "disk C", "idle", "disk D", "idle", "CPU", "idle", "disk C + D", "idle"]
SETTLE_S = 2.0   # each phase's first seconds are not counted (reaction)


def loader(kind, fs_c, fs_d):
    """The dummy load of a phase, each in a process group of its own (to be
    killed whole) but in the bench's session: autogroup scheduling gives
    every session an equal share of a CPU whatever its nice values, so the
    busy loop and the job at nice 19 must share one autogroup for nice to
    mean anything."""
    procs = []
    dd = "while :; do dd if={} of=/dev/null bs=1M iflag=direct status=none; done"
    if kind in ("disk C", "disk C + D"):
        procs.append(subprocess.Popen(["sh", "-c", dd.format(fs_c.path("load.dat"))],
                                      process_group=0))
    if kind in ("disk D", "disk C + D"):
        procs.append(subprocess.Popen(["sh", "-c", dd.format(fs_d.path("load.dat"))],
                                      process_group=0))
    if kind == "CPU":
        procs.append(subprocess.Popen(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"],
                                      process_group=0))
    return procs


def stop(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def populate(fs, files, size):
    with fs.rules(read_bps=0, write_bps=0, read_iops=0, write_iops=0):
        os.makedirs(fs.path("job"), exist_ok=True)
        for i in range(files):
            common.make_file(fs.path("job", f"f{i:02d}"), size)
        common.make_file(fs.path("load.dat"), 256 * MiB)
    subprocess.run(["sync"], check=False)


def run(phase_s, calibrate_s, nice, paper, interval, bootstrap):
    schedule, t = [], calibrate_s
    for kind in PHASES:
        schedule.append((kind, t, t + phase_s))
        t += phase_s
    total = t
    with LoopFs(size_mib=1024, tag="threadsC", throttle=HDD) as fs_c, \
         LoopFs(size_mib=1024, tag="threadsD", throttle=HDD) as fs_d:
        for fs in (fs_c, fs_d):
            populate(fs, 8, 64 * MiB)
        env = dict(os.environ, MANNERS_PERSIST="0", MANNERS_BOOTSTRAP=str(bootstrap), MANNERS_INTERVAL=str(interval),
                   MANNERS_PROBATION="0", MANNERS_SUSPEND_LIMIT="8",
                   MANNERS_SHARE_FILE=os.path.join(common.SCRATCH, "manners-threads.share"))
        if paper:  # the paper's comparator and calibration alone (manners(3))
            env.update(MANNERS_QUICK="0", MANNERS_PROBE="0")
        argv = ["taskset", "-c", "0", "nice", "-n", str(nice), PROGRAM, str(total),
                fs_c.path("job"), fs_d.path("job"), "1"]
        print(f"bench: {' '.join(argv)}", file=sys.stderr)
        # Its lines go to a file: a pipe read only at the end would fill
        # up and block the job's threads in printf().
        log = open(os.path.join(common.SCRATCH, "manners-threads.out"), "w+")
        job = subprocess.Popen(argv, stdout=log, text=True, env=env, process_group=0)
        start = time.monotonic()
        start_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        try:
            for kind, t0, t1 in schedule:
                time.sleep(max(0.0, start + t0 - time.monotonic()))
                print(f"bench: {t0:5.0f} s  {kind}", file=sys.stderr)
                procs = loader(kind, fs_c, fs_d)
                try:
                    time.sleep(max(0.0, start + t1 - time.monotonic()))
                finally:
                    stop(procs)
            job.wait(timeout=total + 60)
            log.seek(0)
            out = log.read()
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
    pieces, stats = {0: [], 1: []}, {}
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "piece":
            pieces[int(f[1])].append(((int(f[2]) - start_ns) / 1e9, (int(f[3]) - start_ns) / 1e9))
        elif f and f[0] == "stats":
            stats[int(f[1])] = dict(kv.split("=", 1) for kv in f[2:])
    return schedule, pieces, stats, total


def share(pieces, t0, t1):
    """Seconds of [t0, t1) spent inside pieces, and pieces finished there."""
    busy = sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in pieces)
    done = sum(1 for a, b in pieces if t0 <= b < t1)
    return busy / (t1 - t0), done / (t1 - t0)


def plot(schedule, pieces, total, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(10, 4))
    rows = [("dummy load, drive C", lambda k: "C" in k and "disk" in k),
            ("dummy load, drive D", lambda k: "D" in k),
            ("dummy load, CPU", lambda k: k == "CPU")]
    for i, (label, on) in enumerate(rows):
        y = 4 - i
        for kind, t0, t1 in schedule:
            if on(kind):
                ax.fill_between([t0, t1], y, y + 0.6, color="tab:gray", step="post")
        ax.text(-2, y + 0.2, label, ha="right", fontsize=8)
    for i, label in enumerate(("Groveler thread C (priority +1)", "thread D (priority 0)")):
        y = 1 - i
        for a, b in pieces[i]:
            ax.fill_between([a, b], y, y + 0.6, color="tab:blue" if i == 0 else "tab:orange",
                            linewidth=0)
        ax.text(-2, y + 0.2, label, ha="right", fontsize=8)
    ax.set_xlim(0, total)
    ax.set_yticks([])
    ax.set_xlabel("time [s]")
    ax.set_title("MS Manners §9.5 (Fig. 9): two regulated threads on two emulated disks")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phase", type=float, default=25.0, help="seconds per phase (25)")
    ap.add_argument("--calibrate", type=float, default=30.0,
                    help="seconds of calibration on the idle machine first (30)")
    ap.add_argument("--nice", type=int, default=19, help="the job's nice value (19)")
    ap.add_argument("--interval", type=float, default=1.0,
                    help="MANNERS_INTERVAL, seconds between processed testpoints (1): each "
                         "thread's turn; the emulated disks' throttle works in 100 ms slices "
                         "and gives a thread that was idle a burst, so shorter turns measure "
                         "rates the disk cannot sustain")
    ap.add_argument("--bootstrap", type=int, default=10, help="MANNERS_BOOTSTRAP (10)")
    ap.add_argument("--paper", action="store_true",
                    help="MANNERS_QUICK=0 MANNERS_PROBE=0: the paper's controller alone")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    why = LoopFs.unavailable(throttle=True)
    if why:
        sys.exit(f"bench: cannot emulate two disks: {why}")
    if not os.path.exists(PROGRAM):
        sys.exit(f"bench: {PROGRAM} missing (make {os.path.relpath(PROGRAM, ROOT)})")
    schedule, pieces, stats, total = run(args.phase, args.calibrate, args.nice, args.paper, args.interval, args.bootstrap)
    m = common.machine()
    rows, data = [], []
    for kind, t0, t1 in schedule:
        c_busy, c_rate = share(pieces[0], t0 + SETTLE_S, t1)
        d_busy, d_rate = share(pieces[1], t0 + SETTLE_S, t1)
        rows.append(f"| {t0:.0f}-{t1:.0f} s | {kind} | {c_busy * 100:.0f} % | {c_rate:.1f} | "
                    f"{d_busy * 100:.0f} % | {d_rate:.1f} |")
        data.append({"phase": kind, "t0": t0, "t1": t1, "c_running": c_busy, "c_mib_s": c_rate,
                     "d_running": d_busy, "d_mib_s": d_rate})
    c_cal, c_cal_rate = share(pieces[0], 5.0, args.calibrate)
    d_cal, d_cal_rate = share(pieces[1], 5.0, args.calibrate)
    base = os.path.join(ROOT, "bench", "results", f"{m['date'][:10]}-{m['host']}-manners-threads{'-paper' if args.paper else ''}")
    png = plot(schedule, pieces, total, base + ".png")
    lines = ["# MS Manners §9.5: time-multiplex isolation of two regulated threads\n",
             f"Machine: {m['host']}, Linux {m['kernel']}, {m['cpus']} CPUs, {m['date']}. "
             "Command: `make bench-manners-threads`.\n",
             "Job: bench/manners_threads.c, one process linked with libmanners, a thread per "
             "emulated disk (ext4 on a loop device under a blkio throttle of 50 MB/s and 150 "
             "IOPS each) reading 8 x 64 MiB files with O_DIRECT in 1 MiB pieces and "
             "checksumming each piece, one testpoint per piece; thread C at priority +1, "
             f"thread D at 0; pinned to CPU 0 at nice {args.nice}; MANNERS_INTERVAL={args.interval:g} s, "
             f"MANNERS_BOOTSTRAP={args.bootstrap}, MANNERS_SUSPEND_LIMIT=8 s, no probation"
             f"{'; MANNERS_QUICK=0 MANNERS_PROBE=0 (the paper controller alone)' if args.paper else ' (the quick raise and short probe on, the defaults)'}. Calibration: {args.calibrate:.0f} s on "
             f"the idle machine (C ran {c_cal * 100:.0f} % of it at {c_cal_rate:.1f} MiB/s, D "
             f"{d_cal * 100:.0f} % at {d_cal_rate:.1f} MiB/s). Dummy loads: `dd iflag=direct` "
             "loops on the drive, a busy loop on CPU 0. Running = share of the phase (its first "
             f"{SETTLE_S:.0f} s left out) a thread spent between a testpoint's return and its "
             "next call.\n",
             "| time | dummy load | thread C running | C [MiB/s] | thread D running | "
             "D [MiB/s] |",
             "|---|---|---:|---:|---:|---:|"] + rows
    lines.append("\nPaper (§9.5, Fig. 9): the C thread (higher priority) is favoured; while C "
                 "is loaded execution shifts to the D thread; when the CPU or both drives are "
                 "loaded both threads are suspended exponentially.\n")
    lines.append("Library statistics at the end: " + "; ".join(
        f"thread {'CD'[i]}: {s.get('testpoints')} testpoints, suspended {s.get('suspended_s')} s, "
        f"blocked {s.get('blocked_s')} s" for i, s in sorted(stats.items())) + ".\n")
    if png:
        lines.append(f"![Fig. 9 analogue]({os.path.basename(base)}.png)\n")
    text = "\n".join(lines)
    print(text)
    with open(base + ".md", "w") as f:
        f.write(text)
    with open(base + ".json", "w") as f:
        json.dump({"phases": data, "stats": stats, "pieces": pieces}, f)
    print(f"bench: wrote {base}.md", file=sys.stderr)


if __name__ == "__main__":
    main()
