"""The network interposer's cost at an infinite cap, by CPU time (issue #12:
"overhead at an infinite cap <= 1 % on a loopback bulk transfer").

Wall-clock ratios of a loopback transfer spread by +-8..13 % between rounds
on this VM (bench/net_trickle.py part B), far more than the target.  The
interposer's cost is user-space CPU, though, and the kernel's work (system
time) is the same with and without it (at --net-rate inf the hooks make no
system call).  So: a bulk TCP send of 4 GiB in 64 KiB send() calls over
loopback (net_bulk send; the sink on the other CPU), plain and under
`discnice run --net-rate inf`, alternating for ROUNDS rounds; the added user
CPU of the job and whatever wraps it (os.wait4: the supervisor too) per
round, against the plain job's whole CPU time.  ru_utime is counted in
ticks (4 ms here), so single rounds are coarse; the median is the figure.

usage: net_overhead_cpu.py [--rounds N]   (make bench-net-overhead-cpu)
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BYTES, CHUNK = 4 << 30, 64 << 10


def one(wrap):
    net_bulk = os.path.join(common.BUILD, "bench", "net_bulk")
    sink = subprocess.Popen(["taskset", "-c", "1", net_bulk, "sink", "127.0.0.1", "1"],
                            stdout=subprocess.PIPE, text=True)
    port = sink.stdout.readline().strip()
    cmd = ["taskset", "-c", "0"] + wrap + [net_bulk, "send", "127.0.0.1", port, str(BYTES),
                                           str(CHUNK)]
    t = time.monotonic()
    p = subprocess.Popen(cmd)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t
    out = sink.communicate(timeout=120)[0].split()
    if status != 0 or int(out[0]) != BYTES:
        sys.exit(f"bench: a transfer failed (status {status}, {out})")
    return {"user": ru.ru_utime, "sys": ru.ru_stime, "wall": wall, "recv": float(out[2])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    modes = {"plain": [], "discnice --net-rate inf": [common.DISCNICE, "run", "-q", "--net-rate",
                                                       "inf", "--"]}
    runs = {k: [] for k in modes}
    for _ in range(args.rounds):
        for k, wrap in modes.items():
            runs[k].append(one(wrap))
    calls = BYTES // CHUNK
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("user", "sys", "wall", "recv")}
           for k, v in runs.items()}
    added = [i["user"] - p["user"] for p, i in zip(runs["plain"], runs["discnice --net-rate inf"])]
    q = statistics.quantiles(added, n=4)
    plain_cpu = statistics.median(r["user"] + r["sys"] for r in runs["plain"])
    share = statistics.median(added) / plain_cpu
    lines = ["# Network interposer at an infinite cap, by CPU time (issue #12)", "",
             *common.machine_lines(),
             f"`make bench-net-overhead-cpu` ({args.rounds} alternating rounds): 4 GiB over loopback TCP in "
             f"{CHUNK // 1024} KiB send() calls (net_bulk send, CPU 0; sink on CPU 1).  Target: <= 1 %.", "",
             "| configuration | user CPU (median) | system CPU | job wall | receiver first-to-last byte |",
             "|---|---:|---:|---:|---:|"]
    for k in modes:
        m = med[k]
        lines.append(f"| {k} | {m['user'] * 1e3:.1f} ms | {m['sys']:.3f} s | {m['wall']:.3f} s | "
                     f"{m['recv']:.3f} s |")
    lines += ["",
              f"Added user CPU (job, agent and supervisor) per round: median {statistics.median(added) * 1e3:.2f} ms "
              f"(quartiles {q[0] * 1e3:.2f}..{q[2] * 1e3:.2f} ms) over {calls} calls = "
              f"{statistics.median(added) / calls * 1e9:.0f} ns per call; "
              f"**{100 * share:+.2f} %** of the plain job's CPU ({plain_cpu:.3f} s): target "
              f"{'met' if share <= 0.01 else 'NOT met'} by this measure.  System time and wall time "
              f"differ by {100 * (med['discnice --net-rate inf']['sys'] / med['plain']['sys'] - 1):+.1f} % and "
              f"{100 * (med['discnice --net-rate inf']['wall'] / med['plain']['wall'] - 1):+.1f} %: the noise of "
              f"this VM, which part B of bench/net_trickle.py shows round by round."]
    text = "\n".join(lines) + "\n"
    common.write_results(common.results_path("net-overhead-cpu"), text)


if __name__ == "__main__":
    main()
