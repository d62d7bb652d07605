#!/usr/bin/env python3
"""Rate accuracy: does the job's real disk traffic stay at the cap?

For each workload and cap, runs `discnice run` and samples the job's
/proc/PID/io (the kernel's own counters) every 50 ms.  Reports
  * the job-average rate  = kernel bytes / elapsed, against the cap;
  * for reads, the share of one-second windows (sliding, 50 ms steps) whose
    rate is <= 1.10 x cap.
Targets (issue #2): reads within +-3% of the cap, >=95% of windows <= 1.10x;
writes within +-5% (the kernel counts a write when it dirties a page, which
is the average the flusher writes out over its intervals).  Issue #4: I/O
the agent cannot see (mmap, io_uring, a static Go program), held by the
supervisor's measured feedback, within +-2%.

    make bench-rate              # ~3 minutes
    make bench-rate ARGS=--quick
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MiB  # noqa: E402

SAMPLE_S = 0.05


MMAP_SCRIPT = r"""
import mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    print(sum(m[i] for i in range(0, len(m), 4096)))
"""

GO_COPY = """package main

import (
	"io"
	"os"
)

func main() {
	in, _ := os.Open(os.Args[1])
	out, _ := os.Create(os.Args[2])
	io.CopyBuffer(out, in, make([]byte, 1<<20))
	out.Close()
}
"""


def escape_command(kind, path):
    """A command whose reads the agent cannot see, or None."""
    import shutil
    if kind == "mmap":
        return [sys.executable, "-c", MMAP_SCRIPT, path]
    if kind == "fio":
        if not shutil.which("fio"):
            return None
        return ["fio", "--name=uring", f"--filename={path}", "--ioengine=io_uring", "--rw=read",
                "--bs=128k", "--iodepth=8", "--direct=0", f"--size={os.path.getsize(path)}",
                "--output=/dev/null"]
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        return None
    d = os.path.join(common.SCRATCH, "gocopy")
    binary = os.path.join(d, "gocopy")
    if not os.path.exists(binary):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "main.go"), "w") as f:
            f.write(GO_COPY)
        with open(os.path.join(d, "go.mod"), "w") as f:
            f.write("module gocopy\n\ngo 1.20\n")
        env = dict(os.environ, CGO_ENABLED="0", GOCACHE=os.path.join(d, "cache"))
        if subprocess.run([go, "build", "-o", binary, "."], cwd=d, env=env).returncode != 0:
            return None
    return [binary, path, os.path.join(common.SCRATCH, "gocopy.out")]


def job_pid(supervisor):
    """The job: the supervisor's child that is not its feedback guard (a
    fork of the supervisor, so with the supervisor's own command line)."""
    try:
        with open(f"/proc/{supervisor}/cmdline", "rb") as f:
            own = f.read()
    except OSError:
        return None
    for _ in range(400):
        try:
            with open(f"/proc/{supervisor}/task/{supervisor}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            return None
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as f:
                    if f.read() not in (own, b""):
                        return kid
            except OSError:
                pass
        time.sleep(0.005)
    return None


def run_sampled(cmd, args):
    """Run under discnice, sampling the job's counters; returns (report, samples)."""
    import json
    import tempfile
    fd, report = tempfile.mkstemp(prefix="rate-", suffix=".json", dir=common.SCRATCH)
    os.close(fd)
    p = subprocess.Popen([common.DISCNICE, "run", "--quiet", "--report", report, *args, "--", *cmd],
                         stdout=subprocess.DEVNULL)
    pid = job_pid(p.pid)
    t0 = time.monotonic()
    samples = []
    while p.poll() is None and pid:
        io = common.proc_io(pid)
        if io:
            samples.append((time.monotonic() - t0, *io))
        time.sleep(SAMPLE_S)
    p.wait()
    with open(report) as f:
        r = json.load(f)
    os.unlink(report)
    return r, samples


def windows_ok(samples, cap, column):
    """Share of sliding one-second windows at <= 1.10 x cap."""
    ok = total = 0
    j = 0
    for i, s in enumerate(samples):
        while samples[j][0] < s[0] - 1.0:
            j += 1
        if s[0] - samples[j][0] < 0.95 or j == 0 and s[0] < 1.0:
            continue
        rate = (s[column] - samples[j][column]) / (s[0] - samples[j][0])
        total += 1
        ok += rate <= 1.10 * cap
    return ok, total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.makedirs(common.SCRATCH, exist_ok=True)
    seconds = 6 if args.quick else 15
    mb = common.MICROBENCH
    d = common.SCRATCH
    big = common.make_file(os.path.join(d, "rate-read-256M"), 256 * MiB)
    cases = []
    for cap_mib in (1, 5, 20):
        cases += [("Sequential read", "read", cap_mib, [mb, "sequential", big]),
                  ("Random read", "read", cap_mib, [mb, "random", big, "10"]),
                  ("Stride read", "read", cap_mib, [mb, "stride", big])]
    for cap_mib in (5, 20):
        cases.append(("Create (write)", "write", cap_mib, None))
    # I/O the agent cannot see, held by the supervisor's measured feedback
    # (issue #4: within +-2% of the cap).
    for cap_mib in (5, 20):
        cases += [("mmap read (python3)", "escape", cap_mib, "mmap"),
                  ("io_uring read (fio)", "escape", cap_mib, "fio"),
                  ("static Go copy (read)", "escape", cap_mib, "go")]
    lines = ["# Rate accuracy (DiscNice Fig. 11)", ""] + common.machine_lines() + [
        "", f"Command: `make bench-rate{' ARGS=--quick' if args.quick else ''}`; each run stopped by size "
        f"(~{seconds} s at the cap). Rates from the kernel's /proc/PID/io of the job, sampled every "
        f"{int(SAMPLE_S * 1000)} ms; the job-average uses the supervisor's reaped totals.", "",
        "| workload | cap | job-average | vs cap | 1-s windows <= 1.10x cap | predicted vs kernel |",
        "|---|---:|---:|---:|---:|---:|"]
    met = True
    for name, kind, cap_mib, cmd in cases:
        cap = cap_mib * MiB
        budget = int(cap * seconds)
        if kind == "read":
            common.make_cold(big)
            if "sequential" in cmd:
                # Read only what `seconds` at the cap allows: a file of that size.
                part = common.make_file(os.path.join(d, f"rate-seq-{budget // MiB}M"), budget // MiB * MiB)
                common.make_cold(part)
                cmd = [mb, "sequential", part]
            elif "random" in cmd:
                # pages/10 random 4 KiB reads per pass; pick passes to fill the budget roughly.
                passes = max(1, int(budget / (256 * MiB / 10)))
                cmd = [mb, "random", big, str(passes)]
            else:
                part = common.make_file(os.path.join(d, f"rate-stride-{budget * 3 // MiB}M"), budget * 3 // MiB * MiB)
                common.make_cold(part)
                cmd = [mb, "stride", part]
            r, samples = run_sampled(cmd, ["--read-rate", f"{cap_mib}MiB/s"])
            actual, column = r["actual_read_bytes"], 1
            predicted = r["predicted_read_bytes"]
        elif kind == "escape":
            part = common.make_file(os.path.join(d, f"rate-escape-{budget // MiB}M"), budget // MiB * MiB)
            common.make_cold(part)
            cmd = escape_command(cmd, part)
            if cmd is None:
                lines.append(f"| {name} | {cap_mib} MiB/s | n/a (tool missing) | | | |")
                print(lines[-1], flush=True)
                continue
            r, samples = run_sampled(cmd, ["--read-rate", f"{cap_mib}MiB/s"])
            actual, column = r["actual_read_bytes"], 1
            predicted = r["predicted_read_bytes"] + r.get("feedback_read_bytes", 0)
        else:
            out = os.path.join(d, "rate-create.out")
            if os.path.exists(out):
                os.unlink(out)
            os.sync()
            r, samples = run_sampled([mb, "create", out, str(budget // MiB)], ["--write-rate", f"{cap_mib}MiB/s"])
            actual, column = r["actual_write_bytes"], 2
            predicted = r["predicted_write_bytes"]
        avg = actual / r["elapsed_s"]
        dev = 100 * (avg - cap) / cap
        tol = {"read": 3, "write": 5, "escape": 2}[kind]
        # A job that spent little of its time held back was slower than its
        # cap by itself (this VM's disk latency varies with the host): the
        # cap did not bind, so the run says nothing about it.
        held = (r["slept_s"] + r.get("stopped_s", 0)) / r["elapsed_s"]
        if dev < -tol and held < 0.5:
            lines.append(f"| {name} | {cap_mib} MiB/s | {avg / MiB:.3f} MiB/s | n/a: the job was slower "
                         f"than its cap (held back {100 * held:.0f}% of the time) | | |")
            print(lines[-1], flush=True)
            continue
        ok_w, total_w = windows_ok(samples, cap, column)
        share = 100 * ok_w / total_w if total_w else 0
        good = abs(dev) <= tol and (kind != "read" or share >= 95)
        met &= good
        perr = common.error_pct(predicted, actual)
        lines.append(f"| {name} | {cap_mib} MiB/s | {avg / MiB:.3f} MiB/s | {dev:+.2f}%"
                     f"{'' if abs(dev) <= tol else ' MISSED'} | "
                     f"{share:.0f}% ({ok_w}/{total_w}){'' if kind != 'read' or share >= 95 else ' MISSED'} | "
                     f"{perr:+.2f}% |")
        print(lines[-1], flush=True)
    lines += ["", "Targets: reads within +-3% of the cap and >=95% of 1-s windows <= 1.10x cap; "
              f"writes within +-5%; unseen I/O (feedback) within +-2%: {'met' if met else 'NOT met'}."]
    path = common.results_path("rate")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[-1])
    print(f"written to {os.path.relpath(path, common.ROOT)}")


if __name__ == "__main__":
    main()
