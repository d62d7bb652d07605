#!/usr/bin/env python3
"""The yield policy's targets (issue #4 section 3; rate-windows paper §3.1).

A background `cat` of a large cold file runs under
`discnice run --policy yield --read-rate CAP`: free while the disk is
otherwise idle, held at CAP as soon as another process reads from it.
Alternating repetitions, medians; cache state set with posix_fadvise:

  A. the background alone, plain            -> its disk bandwidth alone
  B. the background alone, under yield      -> share of A   (target >= 80 %)
  C. the foreground `sequential` (cat of a cold file) alone (beside a
     `sleep`, sampled like the others: the sampling costs CPU too)
  D. C beside B, the foreground starting once the background runs free
                                            -> foreground slowdown (target <= 5 %)
                                            -> reaction: from the foreground's start
                                               until the background stays at the cap
                                               (target <= 0.5 s)
  E. C beside an uncontrolled background    -> the slowdown yield avoids
  F. C beside the background under the plain cap policy (--policy cap)

The oracle is the kernel: the background's read_bytes in /proc/PID/io,
sampled every 10 ms, and wall-clock times of whole runs.

    make bench-yield              # 5 repetitions, ~3 minutes
    make bench-yield ARGS=--quick # 1 repetition
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from rate import job_pid  # noqa: E402

MiB = common.MiB
SAMPLE_S = 0.010
CAP = 1 * MiB            # the background's cap while others read (paper's smallest, 1 MB/s)
SLACK = 512 * 1024       # bytes the background may be ahead of CAP after the switch
LEAD_S = 0.5             # the background runs free this long before the foreground starts
TAIL_S = 1.5             # and is watched this long after it ends (hysteresis: 1 s quiet)
TARGETS = {"share": 0.80, "slowdown": 0.05, "reaction": 0.5}


def cold(path):
    common.make_cold(path)


def timed_plain(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def cat(path):
    return ["cat", path]


def start_background(bg, mode):
    """The background job: 'plain', 'yield' or 'cap'; 'none' is a sleep, so
    that the foreground alone is timed with the same sampling beside it.
    Returns (Popen, job pid)."""
    argv = ["sleep", "3600"] if mode == "none" else cat(bg)
    if mode not in ("plain", "none"):
        argv = [common.DISCNICE, "run", "--quiet", "--policy", "yield" if mode == "yield" else "cap",
                "--read-rate", str(CAP), "--", *argv]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, start_new_session=True)
    return p, (p.pid if mode in ("plain", "none") else job_pid(p.pid))


def stop(p):
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    p.wait()


def contention(fg, bg, mode):
    """D/E/F: the foreground's time beside a background in `mode`, and the
    background's (t, read_bytes) samples; t = 0 is the foreground's start."""
    cold(fg)
    cold(bg)
    p, pid = start_background(bg, mode)
    samples = []

    def sample(t0):
        io = common.proc_io(pid) if pid else None
        if io:
            samples.append((time.monotonic() - t0, io[0]))

    t0 = time.monotonic()
    while time.monotonic() - t0 < LEAD_S:
        sample(t0 + LEAD_S)
        time.sleep(SAMPLE_S)
    f = subprocess.Popen(cat(fg), stdout=subprocess.DEVNULL)
    t_fg = time.monotonic()
    while f.poll() is None:
        sample(t_fg)
        time.sleep(SAMPLE_S)
    fg_s = time.monotonic() - t_fg
    while time.monotonic() - t_fg < fg_s + TAIL_S and p.poll() is None:
        sample(t_fg)
        time.sleep(SAMPLE_S)
    finished_early = p.poll() is not None
    stop(p)
    return fg_s, samples, finished_early


def reaction(samples, fg_s):
    """Seconds from the foreground's start until the background stays at
    the cap (within SLACK bytes) for the rest of the foreground's run."""
    during = [s for s in samples if 0 <= s[0] <= fg_s]
    for i, (t, b) in enumerate(during):
        if all(b2 - b <= CAP * (t2 - t) + SLACK for t2, b2 in during[i + 1:]):
            return max(t, 0.0)
    return None


def rate_between(samples, a, b):
    pts = [s for s in samples if a <= s[0] <= b]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def plot(samples, fg_s, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ts, rates = [], []
    for (t0, b0), (t1, b1) in zip(samples, samples[5:]):
        if t1 > t0:
            ts.append(t1)
            rates.append((b1 - b0) / (t1 - t0) / MiB)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(ts, rates, lw=1, label="background read rate (kernel, /proc/PID/io)")
    ax.axhline(CAP / MiB, color="red", ls="--", lw=1, label=f"cap {CAP / MiB:.0f} MiB/s")
    ax.axvspan(0, fg_s, color="orange", alpha=0.2, label="foreground `cat` of a cold file")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("seconds from the foreground's start")
    ax.set_ylabel("MiB/s (50 ms)")
    ax.set_title("--policy yield: free while alone, at the cap while others read")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one repetition")
    ap.add_argument("--reps", type=int, default=0)
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 5)
    os.makedirs(common.SCRATCH, exist_ok=True)
    # The evaluation's files (bench/evaluation/workspace.py), made once: a
    # disk that reads 1-2 GB/s (this VM's, from its host's cache) must not
    # finish the background before the foreground is over.
    eval_dir = os.path.join(common.SCRATCH, "eval")
    os.makedirs(eval_dir, exist_ok=True)
    bg = common.make_file(os.path.join(eval_dir, "rsync-src-4096M"), 4096 * MiB)
    fg = common.make_file(os.path.join(eval_dir, "seq-2048M"), 2048 * MiB)
    bg_size = os.path.getsize(bg)

    alone, under, fg_alone = [], [], []
    beside = {"yield": [], "plain": [], "cap": []}
    reacts, held, last = [], [], None
    invalid = 0
    # This VM's virtio disk is cached by its host: a file the guest has
    # not read for a while comes at ~400 MB/s, one it read lately at
    # 1-2 GB/s, whatever the guest's page cache says.  One untimed read of
    # each file first puts every timed run in the same (recently read)
    # state; the guest's cache is emptied before each with posix_fadvise.
    for path in (bg, fg):
        cold(path)
        timed_plain(cat(path))
    yield_cmd = [common.DISCNICE, "run", "--quiet", "--policy", "yield", "--read-rate", str(CAP), "--", *cat(bg)]
    for rep in range(reps):
        # ABBA: a disk whose host caches favours whichever runs second.
        for which in (("plain", "yield") if rep % 2 == 0 else ("yield", "plain")):
            cold(bg)
            if which == "plain":
                alone.append(bg_size / timed_plain(cat(bg)))
            else:
                under.append(bg_size / timed_plain(yield_cmd))
        modes = ["none", "yield", "plain", "cap"]
        for mode in modes[rep % 4:] + modes[:rep % 4]:   # rotated: no case always first
            fg_s, samples, early = contention(fg, bg, mode)
            if early:
                invalid += 1
                continue
            (fg_alone if mode == "none" else beside[mode]).append(fg_s)
            if mode == "yield":
                r = reaction(samples, fg_s)
                reacts.append(r if r is not None else float("inf"))
                h = rate_between(samples, r, fg_s) if r is not None else None
                if h is not None:
                    held.append(h)
                last = (samples, fg_s)
        print(f"yield: rep {rep + 1}/{reps} done", flush=True)

    med = statistics.median
    share = med(under) / med(alone)
    t0 = med(fg_alone)
    slow = {m: (med(v) / t0 - 1 if v else None) for m, v in beside.items()}
    react = med(reacts) if reacts else None
    met = {"share": share >= TARGETS["share"],
           "slowdown": slow["yield"] is not None and slow["yield"] <= TARGETS["slowdown"],
           "reaction": react is not None and react <= TARGETS["reaction"]}

    def pct(x):
        return "n/a" if x is None else f"{100 * x:+.1f}%"

    def secs(mode):
        v = beside[mode]
        return f"{med(v):.2f} s (runs {min(v):.2f}..{max(v):.2f})" if v else "n/a"

    lines = ["# Yield policy (issue #4 section 3)", ""] + common.machine_lines() + [
        "", f"Command: `make bench-yield{' ARGS=--quick' if args.quick else ''}`; {reps} alternating repetition(s), "
        f"medians. Background: `cat` of a cold {bg_size >> 20} MiB file under `discnice run --policy yield "
        f"--read-rate {CAP >> 20}MiB/s` (defaults --yield-above 1MiB/s, --yield-below 256KiB/s for 1 s). "
        f"Foreground `sequential`: `cat` of a cold {os.path.getsize(fg) >> 20} MiB file, started "
        f"{LEAD_S} s after the background. Oracle: the background's /proc/PID/io read_bytes every "
        f"{SAMPLE_S * 1000:.0f} ms; wall-clock times of whole runs. Each file read once, untimed, before the "
        "runs (this VM's disk is cached by its host: recently read blocks come 3-4x faster); cases rotated "
        "between repetitions."
        + (f" {invalid} contention run(s) dropped: the background finished before the foreground." if invalid else ""),
        "",
        "| measure | value | target | |",
        "|---|---:|---:|---|",
        f"| background alone: plain | {med(alone) / MiB:.0f} MiB/s (runs {min(alone) / MiB:.0f}..{max(alone) / MiB:.0f}) | | |",
        f"| background alone: under --policy yield | {med(under) / MiB:.0f} MiB/s (runs {min(under) / MiB:.0f}.."
        f"{max(under) / MiB:.0f}) = {100 * share:.1f}% of plain "
        f"| >= 80% | {'met' if met['share'] else 'NOT met'} |",
        f"| foreground alone (noise floor: its runs spread {100 * (max(fg_alone) / min(fg_alone) - 1):.0f}%) | "
        f"{t0:.2f} s (runs {min(fg_alone):.2f}..{max(fg_alone):.2f}) | | |",
        f"| foreground beside the yielding background | {secs('yield')} = {pct(slow['yield'])} "
        f"| <= +5% | {'met' if met['slowdown'] else 'NOT met'} |",
        f"| reaction: foreground start until the background stays at the cap | "
        f"{'n/a' if react is None else f'{react:.2f} s'} (runs: {', '.join(f'{r:.2f}' for r in reacts)}) "
        f"| <= 0.5 s | {'met' if met['reaction'] else 'NOT met'} |",
        f"| background's average rate while held (from the reaction to the foreground's end) | "
        f"{'n/a' if not held else f'{med(held) / MiB:.2f} MiB/s'} | cap {CAP >> 20} MiB/s | |",
        f"| for reference: foreground beside an uncontrolled background | {secs('plain')} = {pct(slow['plain'])} "
        "| | |",
        f"| for reference: foreground beside the background under --policy cap | {secs('cap')} = "
        f"{pct(slow['cap'])} | | |",
        "", f"Yield targets: {'all met' if all(met.values()) else 'NOT all met'}."]
    path = common.results_path("yield")
    if last:
        png = plot(last[0], last[1], path[:-len(".md")] + ".png")
        if png:
            lines += ["", f"![background rate under --policy yield]({os.path.basename(png)})"]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {os.path.relpath(path, common.ROOT)}")


if __name__ == "__main__":
    main()
