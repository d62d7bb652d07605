#!/usr/bin/env python3
"""The gray-box ICL paper's Fig 7 (graybox-icl §4.3.3; issue #11 §3,
"Experiments"): memory-based admission control (MAC) on this machine.

(a) MAC against the truth.  `discnice memprobe --json` runs inside a memory
    cgroup v1 with a limit, beside 0..3 competing memory hogs of known
    resident size (processes that allocate X MiB and keep touching every
    page of it).  The truth is the cgroup's limit minus its usage just
    before the probe (the kernel's own count); MemAvailable (machine-wide,
    what an application outside a cgroup would be told) is printed beside
    it.  Target (issue #11): within +-5 %.
(b) Four competing sort-like jobs (bench/mac_sort.c) started together in the
    cgroup, each sorting its own input file: every job with the same fixed
    pass size (sizes that fit four jobs and sizes that fit one but not
    four), against every job sizing each pass with gb_alloc(min, max=input,
    8) - and, as an experiment, gb_alloc with the four jobs' calls
    serialized by a flock ("gb+lock": the paper's MAC "atomically
    identifies and allocates", §4.3; libgraybox's gb_alloc is not atomic
    across processes).  Wall time of the four, each job's time, major faults (the jobs'
    own getrusage and the cgroup's pgmajfault), pass sizes, swap used.

Paging needs swap; this machine has none, so the script makes a swap file
and the cgroup itself (bench/memcg.py) and always removes both, also on
Ctrl-C.  Root only.  The jobs run under `nice -n 10` (the machine is shared).

    sudo python3 bench/graybox_mac.py [--quick] [--out FILE.md]
    make bench-graybox-mac [ARGS=--quick]

The full run takes about 10 minutes; --quick about 3.  The machine-wide
"unlimited" case (MAC against MemAvailable, no cgroup) is opt-in
(--unlimited): it makes the whole machine page, which other work on a
shared machine would feel.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memcg  # noqa: E402

MIB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CGROUP_NAME = "discnice-gbmac-bench"

HOG = r"""
import mmap, sys, time
size = int(sys.argv[1])
m = mmap.mmap(-1, size)
for off in range(0, size, 4096):
    m[off] = 1
print("ready", flush=True)
# Keep the whole set active (§4.3.1: MAC assumes a competitor's resident
# memory is its working set): touch every page, 20 times a second.
while True:
    t = time.monotonic()
    for off in range(0, size, 4096):
        m[off] = 2
    time.sleep(max(0.0, 0.05 - (time.monotonic() - t)))
"""


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def major_faults(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[9])
    except OSError:
        return 0


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


# ---- (a) MAC against the truth ---------------------------------------------

def mac_vs_truth(args, cg, discnice, state_dir):
    rows = []
    for rep in range(args.reps_a):
        for n in range(4):
            hogs = []
            try:
                for _ in range(n):
                    p = subprocess.Popen(cg.argv([sys.executable, "-c", HOG, args.hog_mib * MIB]),
                                         stdout=subprocess.PIPE, text=True)
                    hogs.append(p)
                    if p.stdout.readline().strip() != "ready":
                        raise RuntimeError("a memory hog did not start")
                time.sleep(1.0)
                usage = cg.usage()
                available = meminfo("MemAvailable")
                kills = cg.oom_kills()
                faults = [major_faults(p.pid) for p in hogs]
                t0 = time.monotonic()
                r = subprocess.run(cg.argv([discnice, "memprobe", "--json", "--max",
                                            f"{2 * args.limit_mib}MiB"]),
                                   capture_output=True, text=True, timeout=600,
                                   env={**os.environ, "XDG_STATE_HOME": state_dir})
                elapsed = time.monotonic() - t0
                if r.returncode != 0:
                    raise RuntimeError(f"memprobe failed: {r.stderr.strip()}")
                out = json.loads(r.stdout)
                alive = all(p.poll() is None for p in hogs)
                truth = cg.limit - usage
                row = {"rep": rep, "hogs": n, "hog_mib": args.hog_mib, "usage": usage,
                       "truth": truth, "mac": out["available_bytes"],
                       "error_pct": 100.0 * (out["available_bytes"] - truth) / truth,
                       "mem_available": available, "probe_s": elapsed,
                       "probes": out["probes"], "paging_probes": out["paging_probes"],
                       "threshold_ns": out["threshold_ns"],
                       "threshold_source": out["threshold_source"],
                       "hog_major_faults": sum(major_faults(p.pid) - f
                                               for p, f in zip(hogs, faults)),
                       "hogs_alive": alive, "oom_kills": cg.oom_kills() - kills}
                rows.append(row)
                print(f"  (a) rep {rep} hogs {n}: truth {truth / MIB:7.1f} MiB, MAC "
                      f"{row['mac'] / MIB:7.1f} MiB, error {row['error_pct']:+5.1f} %, "
                      f"{elapsed:.1f} s, hog major faults {row['hog_major_faults']}", flush=True)
            finally:
                for p in hogs:
                    p.kill()
                    p.wait()
                time.sleep(0.3)
    return rows


def mac_unlimited(args, discnice, state_dir):
    """Opt-in: no cgroup, the truth is MemAvailable."""
    rows = []
    for rep in range(args.reps_a):
        available = meminfo("MemAvailable")
        r = subprocess.run([discnice, "memprobe", "--json"], capture_output=True, text=True,
                           timeout=1800, env={**os.environ, "XDG_STATE_HOME": state_dir})
        out = json.loads(r.stdout)
        rows.append({"rep": rep, "truth": available, "mac": out["available_bytes"],
                     "error_pct": 100.0 * (out["available_bytes"] - available) / available,
                     "probe_s": out["elapsed_s"]})
        print(f"  unlimited rep {rep}: MemAvailable {available / MIB:.0f} MiB, MAC "
              f"{out['available_bytes'] / MIB:.0f} MiB", flush=True)
    return rows


# ---- (b) four sorts --------------------------------------------------------

def four_sorts(args, cg, swap, sort_bin, inputs, scratch, config):
    kind, value = config
    mode = ["--fixed", f"{value}M"] if kind == "fixed" else ["--gb", "--min", f"{value}M"]
    if kind.startswith("gb+lock"):
        mode += ["--gb-lock", os.path.join(scratch, "gb_alloc.lock")]
    # "-timing": gb_alloc deciding by page-write timing alone, as the paper
    # (DISCNICE_GB_ALLOC_TIMING_ONLY, gb_alloc(3)); otherwise it also fails
    # a probe during which the cgroup swapped.
    job_env = dict(os.environ)
    if kind.endswith("-timing"):
        job_env["DISCNICE_GB_ALLOC_TIMING_ONLY"] = "1"
    if args.no_merge:
        mode.append("--no-merge")
    for path in inputs:
        drop_cache(path)         # "The file cache is flushed between each test."
    stat0 = cg.stat()
    kills = cg.oom_kills()
    t0 = time.monotonic()
    jobs = []
    for i, path in enumerate(inputs):
        d = os.path.join(scratch, f"job{i}")
        os.makedirs(d, exist_ok=True)
        jobs.append(subprocess.Popen(cg.argv(["nice", "-n", "10", sort_bin, "--input", path,
                                              "--scratch", d, "--label", f"job{i}"] + mode),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=job_env))
    peak_swap = peak_usage = 0
    timed_out = False
    while any(p.poll() is None for p in jobs):
        time.sleep(0.25)
        st = cg.stat()
        peak_swap = max(peak_swap, st.get("swap", 0))
        peak_usage = max(peak_usage, cg.usage())
        if time.monotonic() - t0 > args.timeout:
            timed_out = True
            for p in jobs:
                p.kill()
    wall = time.monotonic() - t0
    results = []
    for p in jobs:
        out, err = p.communicate()
        if p.returncode == 0 and out.strip():
            results.append(json.loads(out))
        elif not timed_out:
            raise RuntimeError(f"mac_sort failed ({p.returncode}): {err.strip()}")
    stat1 = cg.stat()
    return {"config": f"{kind} {value}", "kind": kind, "value_mib": value, "wall_s": wall,
            "timed_out": timed_out, "jobs": results,
            "cgroup_major_faults": stat1["total_pgmajfault"] - stat0["total_pgmajfault"],
            "peak_swap": peak_swap, "peak_usage": peak_usage,
            "oom_kills": cg.oom_kills() - kills, "swap_file_used_after": swap.used_bytes()}


# ---- the report ------------------------------------------------------------

def report(args, a_rows, b_runs, u_rows, started, elapsed, command):
    w = []
    w.append("# graybox-icl Fig 7 on this VM: MAC against the truth, and four sorts\n")
    w.append(f"Produced by `{command}` ({'quick run' if args.quick else 'full run'}), "
             f"{started}, in {elapsed / 60:.1f} min.  Script: bench/graybox_mac.py, job: "
             "bench/mac_sort.c, setup: bench/memcg.py; raw data in the .json beside this file.\n")
    w.append(f"Machine: 2 cores, 24 GiB, Linux {os.uname().release}, ext4 on a virtio disk the "
             "host caches.  Everything below runs inside a **memory cgroup v1** "
             f"(`/sys/fs/cgroup/memory/{CGROUP_NAME}`) with `memory.limit_in_bytes` = "
             f"**{args.limit_mib} MiB**, swappiness 60, and a **{args.swap_mib} MiB swap file** "
             "on the same virtio disk (the machine has no swap: made for the run, removed "
             "after).  The paper's machine had 830 MB available and a disk used only for "
             "paging; here the cgroup limit plays the 830 MB, and swap goes to a disk the host "
             "caches, so paging costs far less than on the paper's disks.\n")

    w.append("## (a) MAC against the truth (§4.3.3: \"if one process allocates x MB ... MAC "
             "reliably returns (830 - x) MB\")\n")
    w.append(f"`discnice memprobe --json --max {2 * args.limit_mib}MiB` inside the cgroup, "
             f"beside 0-3 hogs of {args.hog_mib} MiB each (Python, every page written "
             "20 times a second).  Truth = limit - `memory.usage_in_bytes` just before the "
             f"probe.  {args.reps_a} repetitions, medians.  Target: within +-5 %.\n")
    w.append("| hogs | truth MiB | MAC MiB | error % (median) | error % (min..max) | "
             "within 5 % | probe s | hog major faults | MemAvailable (machine) MiB |")
    w.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in range(4):
        rs = [r for r in a_rows if r["hogs"] == n]
        if not rs:
            continue
        errs = [r["error_pct"] for r in rs]
        ok = sum(abs(e) <= 5 for e in errs)
        w.append(f"| {n} | {median([r['truth'] for r in rs]) / MIB:.0f} | "
                 f"{median([r['mac'] for r in rs]) / MIB:.0f} | {median(errs):+.1f} | "
                 f"{min(errs):+.1f}..{max(errs):+.1f} | {ok}/{len(rs)} | "
                 f"{median([r['probe_s'] for r in rs]):.1f} | "
                 f"{median([r['hog_major_faults'] for r in rs]):.0f} | "
                 f"{median([r['mem_available'] for r in rs]) / MIB:.0f} |")
    all_ok = sum(abs(r["error_pct"]) <= 5 for r in a_rows)
    w.append(f"\nAll probes: {all_ok}/{len(a_rows)} within +-5 %; OOM kills "
             f"{sum(r['oom_kills'] for r in a_rows)}; hogs alive after every probe: "
             f"{all(r['hogs_alive'] for r in a_rows)}.  Threshold: "
             f"{sorted({r['threshold_source'] for r in a_rows})}, median "
             f"{median([r['threshold_ns'] for r in a_rows]) / 1e3:.0f} us.  "
             "MemAvailable is machine-wide: an application inside the cgroup that trusted it "
             "would over-commit by ~20x.\n")
    if u_rows:
        w.append("Unlimited (no cgroup; truth = MemAvailable): " + ", ".join(
            f"{r['mac'] / MIB:.0f} vs {r['truth'] / MIB:.0f} MiB ({r['error_pct']:+.1f} %)"
            for r in u_rows) + "\n")
    else:
        w.append("Not run: the unlimited case (no cgroup, truth = MemAvailable, ~23 GiB here). "
                 "Probing it writes every page of ~23 GiB twice per step and pages the whole "
                 "machine at the edge, on a machine shared with other work; `--unlimited` runs "
                 "it.\n")

    w.append("## (b) Fig 7: four competing sorts, fixed pass sizes against gb_alloc\n")
    w.append("Paper (Fig 7): four `fastsort`s, 477 MB each, 830 MB available; passes of 150 MB "
             "are best, 200 MB already page and are much slower, 290 MB take ~30 min; "
             "`gb-fastsort` (gb_alloc, min 100 MB, max 477 MB) never pages, averages 154 MB "
             "passes, and is 54 % slower than the best static size because of gb_alloc's "
             "probing and waiting.  The paper times the run-formation phase only.\n")
    w.append(f"Here: four `mac_sort` jobs, **{args.input_mib} MiB of random 64-bit keys each** "
             f"(own input file, cache dropped before each run), started together in the "
             f"{args.limit_mib} MiB cgroup under `nice -n 10`; per pass: read, in-place "
             "quicksort, write a run (input and runs dropped from the page cache 8 MiB at a "
             "time, so the memory at stake is the pass buffers); then a merge "
             f"{'(skipped: --no-merge)' if args.no_merge else 'of the runs, checked (order, count, sum)'}. "
             f"gb: `gb_alloc(min {args.gb_min_mib} MiB, max = what is left of the input, 8)` "
             "before each pass, gb_free after; -EAGAIN: wait 100 ms and ask again.  "
             f"{args.reps_b} repetition(s), configurations in rotating order; medians.  "
             f"Timeout {args.timeout} s per run.\n")
    w.append("| config | 4 x pass fits? | wall s (median) | runs phase s (slowest job) | "
             "merge s | per-job total s | jobs' major faults | cgroup pgmajfault | "
             "peak swap MiB | pass sizes MiB (rep 0) | gb_alloc s / waits |")
    w.append("|---|---|---:|---:|---:|---|---:|---:|---:|---|---|")
    configs = []
    for run in b_runs:
        if run["config"] not in configs:
            configs.append(run["config"])
    best_fixed = None
    summary = {}
    for c in configs:
        rs = [r for r in b_runs if r["config"] == c]
        kind, value = rs[0]["kind"], rs[0]["value_mib"]
        fits = ("-" if kind != "fixed" else
                ("yes" if 4 * value <= args.limit_mib * 0.9 else "no"))
        walls = [r["wall_s"] for r in rs]
        timed = sum(r["timed_out"] for r in rs)
        jobs = [j for r in rs for j in r["jobs"]]
        runs_phase = median([max((j["runs_s"] for j in r["jobs"]), default=float("nan"))
                             for r in rs])
        merge_s = median([j["merge_s"] for j in jobs])
        per_job = sorted(j["total_s"] for j in rs[0]["jobs"])
        mf = median([sum(j["major_faults"] for j in r["jobs"]) for r in rs])
        cmf = median([r["cgroup_major_faults"] for r in rs])
        swap_peak = median([r["peak_swap"] for r in rs]) / MIB
        passes = " / ".join("+".join(str(p // MIB) for p in j["passes"]) for j in rs[0]["jobs"])
        alloc = (f"{median([j['alloc_s'] for j in jobs]):.1f} / "
                 f"{median([j['eagain'] for j in jobs]):.0f}" if kind != "fixed" else "-")
        wall_text = f"{median(walls):.1f}" + (f" ({timed} timed out)" if timed else "")
        summary[c] = median(walls)
        if kind == "fixed" and (best_fixed is None or median(walls) < summary[best_fixed]):
            best_fixed = c
        w.append(f"| {c} MiB | {fits} | {wall_text} | {runs_phase:.1f} | {merge_s:.1f} | "
                 f"{', '.join(f'{t:.1f}' for t in per_job)} | {mf:.0f} | {cmf:.0f} | "
                 f"{swap_peak:.0f} | {passes} | {alloc} |")
    gb = [c for c in configs if c.startswith("gb ")]
    bad = [c for c in configs if c.startswith("fixed") and
           int(c.split()[1]) * 4 > args.limit_mib]
    w.append("")
    if gb and best_fixed:
        g = summary[gb[0]]
        line = (f"gb_alloc against the best fixed size ({best_fixed} MiB): "
                f"{100 * (g / summary[best_fixed] - 1):+.0f} % wall time")
        for c in bad:
            line += f"; against fixed {c.split()[1]} MiB (4 x does not fit): " \
                    f"{100 * (g / summary[c] - 1):+.0f} %"
        w.append(line + ".  OOM kills in all runs: "
                 f"{sum(r['oom_kills'] for r in b_runs)}.\n")
    for kind in ("gb", "gb+lock", "gb-timing", "gb+lock-timing"):
        gb_jobs = [j for r in b_runs if r["kind"] == kind for j in r["jobs"]]
        if not gb_jobs:
            continue
        first = [j["passes"][0] for j in gb_jobs if j["passes"]]
        allp = [p for j in gb_jobs for p in j["passes"]]
        line = (f"{kind} passes: mean {statistics.mean(allp) / MIB:.0f} MiB, first passes mean "
                f"{statistics.mean(first) / MIB:.0f} MiB; sum of the four first passes per run: "
                + ", ".join(f"{sum(j['passes'][0] for j in r['jobs']) / MIB:.0f}"
                            for r in b_runs if r["kind"] == kind)
                + f" MiB (limit {args.limit_mib} MiB)")
        if best_fixed:
            line += (f"; wall time against the best fixed size: "
                     f"{100 * (summary[f'{kind} {args.gb_min_mib}'] / summary[best_fixed] - 1):+.0f} %")
        w.append(line + ".\n")
    return "\n".join(w) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run (~3 min)")
    ap.add_argument("--limit-mib", type=int, default=1024)
    ap.add_argument("--swap-mib", type=int, default=2048)
    ap.add_argument("--hog-mib", type=int, default=192)
    ap.add_argument("--input-mib", type=int, default=512)
    ap.add_argument("--gb-min-mib", type=int, default=64)
    ap.add_argument("--fixed", default="128,192,256,320",
                    help="fixed pass sizes in MiB, comma-separated")
    ap.add_argument("--reps-a", type=int, default=5)
    ap.add_argument("--reps-b", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--no-merge", action="store_true", help="time run formation only")
    ap.add_argument("--no-lock", action="store_true",
                    help="leave out the gb+lock configuration (gb_alloc calls serialized "
                         "across the four jobs by a flock, mac_sort --gb-lock)")
    ap.add_argument("--no-timing-only", action="store_true",
                    help="leave out gb_alloc deciding by write timing alone (the paper's "
                         "rule; DISCNICE_GB_ALLOC_TIMING_ONLY=1)")
    ap.add_argument("--unlimited", action="store_true",
                    help="also probe without a cgroup against MemAvailable (pages the machine)")
    ap.add_argument("--out", default=None, help="results file (.md; raw .json beside it)")
    args = ap.parse_args()
    if args.quick:
        args.reps_a, args.reps_b = 2, 1
        if args.fixed == ap.get_default("fixed"):
            args.fixed = "192,320"
    why = memcg.unavailable()
    if why:
        sys.exit(f"bench/graybox_mac.py: {why}")
    build = os.environ.get("DISCNICE_BUILD", os.path.join(ROOT, "build"))
    discnice, sort_bin = os.path.join(build, "discnice"), os.path.join(build, "bench", "mac_sort")
    for b in (discnice, sort_bin):
        if not os.access(b, os.X_OK):
            sys.exit(f"bench/graybox_mac.py: {b} not built (make -j2 {build}/bench/mac_sort)")
    out = args.out or os.path.join(
        ROOT, "bench", "results",
        f"{time.strftime('%Y-%m-%d')}-vm-graybox-mac{'-quick' if args.quick else ''}.md")
    command = "sudo make bench-graybox-mac" + (f" ARGS='{' '.join(sys.argv[1:])}'"
                                               if sys.argv[1:] else "")
    started = time.strftime("%Y-%m-%d %H:%M")
    t_start = time.monotonic()

    configs = [("fixed", int(v)) for v in args.fixed.split(",") if v] + \
        [("gb", args.gb_min_mib)] + \
        ([] if args.no_lock else [("gb+lock", args.gb_min_mib)]) + \
        ([] if args.no_timing_only else
         [("gb-timing", args.gb_min_mib)] +
         ([] if args.no_lock else [("gb+lock-timing", args.gb_min_mib)]))
    a_rows, b_runs, u_rows = [], [], []
    scratch = tempfile.mkdtemp(prefix="discnice-gbmac-", dir="/var/tmp")
    try:
        inputs = []
        print(f"generating 4 x {args.input_mib} MiB inputs in {scratch}", flush=True)
        for i in range(4):
            path = os.path.join(scratch, f"input{i}")
            subprocess.run([sort_bin, "--generate", path, "--size", f"{args.input_mib}M",
                            "--seed", str(i + 1)], check=True)
            inputs.append(path)
        state_dir = os.path.join(scratch, "state")
        with memcg.SwapFile(args.swap_mib) as swap, \
                memcg.MemoryCgroup(CGROUP_NAME, args.limit_mib * MIB) as cg:
            print(f"swap file {swap.path} ({args.swap_mib} MiB), cgroup {cg.path} "
                  f"(limit {args.limit_mib} MiB)", flush=True)
            a_rows = mac_vs_truth(args, cg, discnice, state_dir)
            for rep in range(args.reps_b):
                order = configs[rep % len(configs):] + configs[:rep % len(configs)]
                for config in order:
                    run = four_sorts(args, cg, swap, sort_bin, inputs, scratch, config)
                    run["rep"] = rep
                    b_runs.append(run)
                    print(f"  (b) rep {rep} {run['config']}: wall {run['wall_s']:.1f} s"
                          f"{' TIMEOUT' if run['timed_out'] else ''}, passes "
                          + " / ".join("+".join(str(p // MIB) for p in j["passes"])
                                       for j in run["jobs"])
                          + f", cgroup majflt {run['cgroup_major_faults']}, peak swap "
                          f"{run['peak_swap'] / MIB:.0f} MiB", flush=True)
        if args.unlimited:
            with memcg.SwapFile(args.swap_mib):
                u_rows = mac_unlimited(args, discnice, state_dir)
    finally:
        subprocess.run(["rm", "-rf", scratch])
    elapsed = time.monotonic() - t_start
    text = report(args, a_rows, b_runs, u_rows, started, elapsed, command)
    with open(out, "w") as f:
        f.write(text)
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump({"args": vars(args), "mac_vs_truth": a_rows, "unlimited": u_rows,
                   "four_sorts": b_runs}, f, indent=1)
    print(text)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
