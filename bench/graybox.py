#!/usr/bin/env python3
"""bench/graybox.py - `discnice gbp` against the gray-box ICL paper's
experiments (Arpaci-Dusseau & Arpaci-Dusseau, SOSP 2001), issue #11 §1.

  Fig 2  repeated scans of one file, linear (cat) vs gray-box
         (discnice gbp --out), as the file's size crosses the cache size;
  Fig 3  grep over 100 x 10 MB files: plain, `grep $(gbp --mem *)`; and a
         sort-like read phase of one file: cat vs `gbp --out --record-size 100`;
  Fig 4  probe accuracy per backend against cachestat(2) truth: agreement,
         precision, recall per prediction unit, probe time as a share of
         the scan time, and the disk bytes the probes read (the kernel's
         /proc/self/io count of the reaped gbp runs);
  Fig 5  200 x 8 KiB files in two directories, read in random order, by
         directory, by i-number (gbp --inode), by disk address (gbp --physical).

The LRU worst case needs a cache smaller than the data; this VM has 24 GiB.
Figs 2 and 3 run every scan inside a memory cgroup v1
(/sys/fs/cgroup/memory/discnice-gbp-bench, memory.limit_in_bytes set below;
page cache is charged to the cgroup that reads it in), removed afterwards.
This VM's disk is cached by its host (cold reads vary, 1-2 GB/s): Figs 2, 3
run on an emulated disk, a loop device under a 50 MB/s, 150 IOPS blkio
throttle (bench/loopfs.py), so a miss costs what a disk read costs.  Fig 5
runs on an unthrottled fresh ext4 loop device, remounted before each
trial so data and metadata are cold.  Times: medians; ratios, never
absolute thresholds.  Needs root.

    make bench-graybox [ARGS="--quick"]       writes bench/results/DATE-vm-graybox.md
    bench/graybox.py --figs 4 --out bench/results/DATE-vm-graybox-fig4.md   Fig 4 alone
"""
import argparse
import contextlib
import ctypes
import datetime
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from loopfs import HDD, LoopFs  # noqa: E402

REPO = common.ROOT
DISCNICE = common.DISCNICE      # the build under test: $DISCNICE_BUILD
MEMCG = "/sys/fs/cgroup/memory"
MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
LIBC = ctypes.CDLL(None, use_errno=True)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def read_bytes_self():
    """/proc/self/io read_bytes: ours plus every child we reaped."""
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("read_bytes")).split()[1])


def cachestat(fd, off, length):
    rng = ctypes.create_string_buffer(struct.pack("QQ", off, length), 16)
    out = ctypes.create_string_buffer(40)
    if LIBC.syscall(451, fd, rng, out, 0) != 0:
        raise OSError(ctypes.get_errno(), "cachestat")
    return struct.unpack("5Q", out.raw)[0]


@contextlib.contextmanager
def memory_cgroup(limit_bytes, name="discnice-gbp-bench"):
    """A cgroup v1 memory group with a hard limit; yields its cgroup.procs
    path.  Its processes go back to the root group and it is removed after
    (rmdir reparents the page cache charged to it)."""
    path = os.path.join(MEMCG, name)
    if not os.path.isdir(path):
        os.mkdir(path)
    try:
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit_bytes))
        yield os.path.join(path, "cgroup.procs")
    finally:
        with contextlib.suppress(OSError):
            with open(os.path.join(path, "cgroup.procs")) as f:
                for pid in f.read().split():
                    with contextlib.suppress(OSError), \
                            open(os.path.join(MEMCG, "cgroup.procs"), "w") as g:
                        g.write(pid)
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)


def timed_shell(script, procs=None, stdout=subprocess.DEVNULL):
    """Run `sh -c script` (inside the cgroup when procs is given); seconds."""
    if procs:
        script = f"echo $$ > {procs}; {script}"
    t0 = time.monotonic()
    r = subprocess.run(["sh", "-c", script], stdout=stdout, stderr=subprocess.PIPE)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{script!r} failed: {r.stderr.decode()[-500:]}")
    return dt


def q(path):
    return "'" + str(path).replace("'", "'\\''") + "'"


def write_file(path, size, seed):
    """Random lowercase text (byte 10 stays a newline: lines of ~256
    bytes, so grep has lines), fsynced; no two files share a page."""
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, 4 * MiB)
            f.write(rnd.randbytes(n).translate(TABLE))
            left -= n
        f.flush()
        os.fsync(f.fileno())


# bytes -> lowercase letters, newline kept: a table for bytes.translate.
TABLE = bytes((97 + b % 26) if b != 10 else 10 for b in range(256))


# ---------------------------------------------------------------- Fig 2

def fig2(args, out):
    limit = args.cache_mib * MiB
    sizes = [int(args.cache_mib * r) for r in (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)]
    rows = []
    with LoopFs(size_mib=max(sizes) + 256, tag="gbp-fig2", throttle=HDD) as fs:
        for size in sizes:
            path = fs.path(f"scan-{size}.dat")
            with fs.rules(write_bps=0, write_iops=0):
                write_file(path, size * MiB, size)
            row = {"size_mib": size}
            for method, script in (("linear", f"cat {q(path)} > /dev/null"),
                                   ("graybox", f"{DISCNICE} gbp --out {q(path)} "
                                               f"--backend {args.backend} > /dev/null")):
                fs.drop_cache()
                with memory_cgroup(limit) as procs:
                    times = [timed_shell(script, procs) for _ in range(1 + args.runs)]
                row[method + "_cold_s"] = times[0]
                row[method + "_warm_s"] = statistics.median(times[1:])
                log(f"fig2 {size} MiB {method}: cold {times[0]:.2f} s, warm "
                    f"{[round(t, 2) for t in times[1:]]}")
            # Probe cost: one gbp run that only examines (--json), warm state.
            fs.drop_cache()
            with memory_cgroup(limit) as procs:
                timed_shell(f"cat {q(path)} > /dev/null", procs)
                r = subprocess.run(["sh", "-c", f"echo $$ > {procs}; {DISCNICE} gbp --out "
                                    f"{q(path)} --json --backend {args.backend}"],
                                   capture_output=True, check=True)
            row["examine_s"] = json.loads(r.stdout)["examine_s"]
            row["worst_s"] = size * MiB / HDD["read_bps"]
            row["ideal_s"] = max(0, size - args.cache_mib) * MiB / HDD["read_bps"]
            rows.append(row)
            os.unlink(path)
    out["fig2"] = rows


# ---------------------------------------------------------------- Fig 3

def grep_files(fs, n, each):
    """Fig 3's n files of `each` bytes in fs/grep, written unthrottled;
    their paths."""
    d = fs.path("grep")
    os.mkdir(d)
    names = []
    with fs.rules(write_bps=0, write_iops=0):
        for i in range(n):
            p = os.path.join(d, f"f{i:03d}.txt")
            write_file(p, each, 1000 + i)
            names.append(p)
    return names


def fig3(args, out):
    wanted = set(args.fig3_cases.split(","))
    n, each = args.files, args.file_mb * 1000 * 1000
    total = n * each
    limit = int(total * 0.84)        # the paper's ~896 MB of memory for ~1 GB
    res = {"files": n, "file_bytes": each, "cache_bytes": limit}
    with LoopFs(size_mib=(2 * total) // MiB + 512, tag="gbp-fig3", throttle=HDD) as fs:
        names = grep_files(fs, n, each)
        with fs.rules(write_bps=0, write_iops=0):
            big = fs.path("records.dat")
            write_file(big, total, 7)
        files = " ".join(q(p) for p in names)
        pattern = "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"   # never there: grep reads all
        cases = [
            ("grep", f"grep -c {pattern} {files} > /dev/null || true"),
            ("grep $(gbp --mem)", f"grep -c {pattern} $({DISCNICE} gbp --mem "
                                  f"--backend {args.backend} {files}) > /dev/null || true"),
            ("sort read: cat", f"cat {q(big)} | wc -c > /dev/null"),
            ("sort read: gbp --out", f"{DISCNICE} gbp --out {q(big)} --record-size 100 "
                                     f"--backend {args.backend} | wc -c > /dev/null"),
        ]
        for name, script in cases:
            if name.split(":")[0].split(" ")[0] not in wanted:
                continue
            fs.drop_cache()
            with memory_cgroup(limit) as procs:
                times = [timed_shell(script, procs) for _ in range(1 + args.runs)]
                probe = None
                if "gbp" in name:
                    target = files if "--mem" in name else f"--out {q(big)}"
                    mode = "--mem" if "--mem" in name else ""
                    r = subprocess.run(["sh", "-c", f"echo $$ > {procs}; {DISCNICE} gbp "
                                        f"{mode} {target} --json --backend {args.backend}"],
                                       capture_output=True)
                    probe = json.loads(r.stdout)["examine_s"]
            res[name] = {"cold_s": times[0], "warm_s": statistics.median(times[1:]),
                         "runs": times, "examine_s": probe}
            log(f"fig3 {name}: cold {times[0]:.2f} s, warm {[round(t, 2) for t in times[1:]]}")
    out["fig3"] = res


# ---------------------------------------------------------------- Fig 4

def fig4(args, out, workdir):
    """Accuracy per backend on this VM's disk, files we own."""
    d = os.path.join(workdir, "fig4")
    os.makedirs(d, exist_ok=True)
    au, pu = 5 * MiB, 5 * MiB // 4
    names = []
    for i in range(args.acc_files):
        p = os.path.join(d, f"a{i}.dat")
        if not os.path.exists(p) or os.path.getsize(p) != args.acc_mib * MiB:
            write_file(p, args.acc_mib * MiB, 500 + i)
        names.append(p)
    rnd = random.Random(11)
    results = {}
    # "auto, as nobody": the files are root's, so auto asks cachestat;
    # run as nobody, cachestat refuses and auto times its probes.
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    for label in args.fig4_backends.split(","):
        backend = label.split(" ")[0]
        prefix = nobody if label.endswith("as nobody") else []
        tp = fp = fn = tn = 0
        examine = scan = 0.0
        probe_bytes = 0
        rules = {}
        for trial in range(args.acc_trials):
            truth = {}
            for p in names:
                fd = os.open(p, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                # Runs of cached and cold units, as an LRU leaves them.
                state = rnd.random() < 0.5
                for u in range(args.acc_mib * MiB // pu):
                    if rnd.random() < 0.3:
                        state = not state
                    if state:
                        os.pread(fd, pu, u * pu)
                os.close(fd)
                fd = os.open(p, os.O_RDONLY)
                for u in range(args.acc_mib * MiB // pu):
                    truth[(p, u)] = cachestat(fd, u * pu, pu) * PAGE >= pu / 2
                os.close(fd)
            for p in names:
                before = read_bytes_self()
                r = subprocess.run(prefix + [DISCNICE, "gbp", "--out", p, "--json", "--backend",
                                             backend, "--access-unit", str(au)],
                                   capture_output=True, check=True)
                # The reaped gbp's disk reads are added to ours (/proc/self/io).
                probe_bytes += read_bytes_self() - before
                j = json.loads(r.stdout)
                examine += j["examine_s"]
                if not j["probes"]:
                    rule = "exact"
                elif j.get("nowait_probes") == j["probes"]:
                    rule = "nowait"
                else:
                    rule = j["probe_verdict"]["rule"]
                rules[rule] = rules.get(rule, 0) + 1
                if j["probes"]:
                    for off, ns, again, reads, hit in j["probe_points"]:
                        t = truth[(p, off // pu)]
                        tp += hit and t; fp += hit and not t
                        fn += (not hit) and t; tn += (not hit) and not t
                else:   # exact backends: each chunk's mark against the chunk's truth
                    for c in j["chunks"]:
                        units = range(c["offset"] // pu, (c["offset"] + c["length"]) // pu)
                        t = sum(truth[(p, u)] for u in units) * 2 >= len(units)
                        hit = c["in_cache"]
                        tp += hit and t; fp += hit and not t
                        fn += (not hit) and t; tn += (not hit) and not t
            # The scan the probes serve: read everything once, as it lies.
            scan += timed_shell("cat " + " ".join(q(p) for p in names) + " > /dev/null")
        n = tp + fp + fn + tn
        results[label] = {
            "units": n, "agreement": (tp + tn) / n if n else 0,
            "precision": tp / (tp + fp) if tp + fp else 1.0,
            "recall": tp / (tp + fn) if tp + fn else 1.0,
            "examine_s": examine, "scan_s": scan,
            "overhead": examine / scan if scan else 0, "rules": rules,
            "probe_disk_bytes": probe_bytes}
        log(f"fig4 {label}: {results[label]}")
    out["fig4"] = results


# ---------------------------------------------------------------- Fig 5

def fig5(args, out):
    res = {}
    for label, throttle in (("fresh ext4 loop, unthrottled", None),
                            ("fresh ext4 loop, 50 MB/s 150 IOPS", HDD)):
        with LoopFs(size_mib=512, tag="gbp-fig5", throttle=throttle) as fs:
            names = []
            ctx = fs.rules(write_bps=0, write_iops=0) if throttle else contextlib.nullcontext()
            with ctx:
                for sub in ("a", "b"):
                    os.mkdir(fs.path(sub))
                rnd = random.Random(5)
                for i in range(200):        # created alternating, as two writers would
                    p = fs.path("ab"[i % 2], f"g{i:03d}")
                    with open(p, "wb") as f:
                        f.write(rnd.randbytes(8192))
                    names.append(p)
                subprocess.run(["sync", "-f", fs.mountpoint], check=True)
            listing = " ".join(q(p) for p in names)
            orders = {
                "random": None,
                "by directory": " ".join(q(p) for p in sorted(names)),
                "by i-number (gbp --inode)": f"$({DISCNICE} gbp --inode {listing})",
                "by disk address (gbp --physical)": f"$({DISCNICE} gbp --physical {listing})",
            }
            times = {k: [] for k in orders}
            for trial in range(args.layout_trials):
                for name, arg in orders.items():   # alternate the orders within a trial
                    if arg is None:
                        shuffled = names[:]
                        random.Random(trial).shuffle(shuffled)
                        arg = " ".join(q(p) for p in shuffled)
                    fs.drop_cache()
                    times[name].append(timed_shell(f"cat {arg} > /dev/null"))
            res[label] = {k: statistics.median(v) for k, v in times.items()}
            log(f"fig5 {label}: {res[label]}")
    out["fig5"] = res


# ---------------------------------------------------------------- report

def report(args, out, path):
    L = []
    w = L.append
    w(f"# gbp on this VM ({datetime.date.today()}): the gray-box ICL paper's Figs 2-5")
    w("")
    given = " ".join(sys.argv[1:])
    command = f'make bench-graybox ARGS="{given}"' if given else "make bench-graybox"
    w(f"Command: `{command}` "
      f"(bench/graybox.py). Machine: {os.uname().release}, 2 vCPU, ext4 on a "
      "host-cached virtio disk. Figs 2-3: every scan in a memory cgroup v1 "
      "(`/sys/fs/cgroup/memory/discnice-gbp-bench`, removed afterwards) on a loop "
      "device throttled to 50 MB/s, 150 IOPS (bench/loopfs.py); medians of "
      f"{args.runs} warm runs after one cold run; gbp's backend in Figs 2-3: "
      f"`{args.backend}`.")
    w("")
    if "fig2" in out:
        w(f"## Fig 2: repeated single-file scan, cache (cgroup limit) {args.cache_mib} MiB")
        w("")
        w("| file MiB | linear warm s | gray-box warm s | speed-up | model worst s | model ideal s "
          "| probe s (share of gray-box scan) |")
        w("| --- | --- | --- | --- | --- | --- | --- |")
        for r in out["fig2"]:
            w(f"| {r['size_mib']} | {r['linear_warm_s']:.2f} | {r['graybox_warm_s']:.2f} | "
              f"{r['linear_warm_s'] / r['graybox_warm_s']:.2f}x | {r['worst_s']:.2f} | "
              f"{r['ideal_s']:.2f} | {r['examine_s']:.4f} "
              f"({100 * r['examine_s'] / r['graybox_warm_s']:.2f} %) |")
        w("")
        w("Paper (Fig 2, Linux 2.2, 896 MB): past the cache size the linear scan runs at "
          "disk rate on every run; the gray-box scan's I/O is proportional to file size "
          "minus cache size, near the ideal model.")
        w("")
    if "fig3" in out:
        f3 = out["fig3"]
        w(f"## Fig 3: {f3['files']} x {f3['file_bytes'] / 1e6:.0f} MB grep, and a sort-like "
          f"read phase of one {f3['files'] * f3['file_bytes'] / 1e9:.1f} GB file; cache "
          f"{f3['cache_bytes'] / MiB:.0f} MiB")
        w("")
        w("| run | cold s | warm s (median) | normalised to plain | probe s (share) |")
        w("| --- | --- | --- | --- | --- |")
        for base, names in (("grep", ("grep", "grep $(gbp --mem)")),
                            ("sort read: cat", ("sort read: cat", "sort read: gbp --out"))):
            for n in names:
                if n not in f3:
                    continue
                r = f3[n]
                pr = "" if r["examine_s"] is None else \
                    f"{r['examine_s']:.4f} ({100 * r['examine_s'] / r['warm_s']:.2f} %)"
                w(f"| {n} | {r['cold_s']:.2f} | {r['warm_s']:.2f} | "
                  f"{r['warm_s'] / f3[base]['warm_s']:.2f} | {pr} |")
        w("")
        w("Paper (Fig 3): gb-grep ~1/3 of plain grep's time (52.3 s), `grep $(gbp -mem *)` "
          "almost as good; fastsort's read phase (55 s) improved less, `gbp -out` most of it.")
        w("")
    if "fig4" in out:
        w("## Fig 4: classification against cachestat, per prediction unit (1.25 MiB)")
        w("")
        w(f"{args.acc_files} files x {args.acc_mib} MiB on this VM's disk, {args.acc_trials} "
          "trials, cache state in runs of units (p = 0.3 of a change per unit).")
        w("")
        w("| backend | units | agreement | precision | recall | examine s | scan s | overhead "
          "| probes' disk KiB | how decided (files) |")
        w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for b, r in out["fig4"].items():
            disk = r.get("probe_disk_bytes")
            w(f"| {b} | {r['units']} | {100 * r['agreement']:.1f} % | {100 * r['precision']:.1f} % "
              f"| {100 * r['recall']:.1f} % | {r['examine_s']:.4f} | {r['scan_s']:.2f} | "
              f"{100 * r['overhead']:.2f} % | {'' if disk is None else disk // 1024} "
              f"| {r['rules']} |")
        w("")
        w("Probes are judged one by one against their prediction unit; the exact backends "
          "(they *are* the kernel's answer) by each 5 MiB chunk's in_cache mark against "
          "the chunk's truth (most of its units cached), so their 'units' are chunks. "
          "Scan time here is a read of the same files from this VM's host-cached disk "
          "(~1 GB/s cold): the probe share of a scan from a real disk is in Figs 2-3. "
          "'probes' disk KiB' is what the gbp runs made the disk read, by the kernel's count "
          "(/proc/self/io of the benchmark, which reaps them): a nowait probe that misses "
          "does not wait, but still starts the read of its page - examine s no longer "
          "includes that read, the disk still does it. 'auto, as nobody': the files are "
          "root's, so auto run as root asks cachestat; as nobody it may not, and probes.")
        w("")
    if "fig5" in out:
        w("## Fig 5: 200 x 8 KiB files in two directories, cold (remounted) each trial")
        w("")
        for label, r in out["fig5"].items():
            w(f"**{label}** (median of {args.layout_trials})")
            w("")
            w("| order | s | vs random |")
            w("| --- | --- | --- |")
            for k, v in r.items():
                w(f"| {k} | {v:.3f} | {r['random'] / v:.2f}x |")
            w("")
        w("Paper (Fig 5, Linux): by directory 10-25 % better than random, by i-number 6x.")
        w("")
    w(f"Raw numbers: `{os.path.basename(os.path.splitext(path)[0])}.json` beside this file.")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))
    print(json.dumps(out, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller and fewer (~4 min)")
    ap.add_argument("--figs", default="2,3,4,5")
    ap.add_argument("--out", default=None)
    ap.add_argument("--fig4-backends", default="probe,nowait,cachestat,mincore,auto,"
                    "auto as nobody", help="Fig 4's backends, comma-separated; 'NAME as "
                    "nobody' runs gbp as user nobody")
    ap.add_argument("--fig3-cases", default="grep,sort",
                    help="Fig 3's cases: grep (plain and gbp --mem), sort (cat and gbp --out)")
    ap.add_argument("--backend", default="probe",
                    help="gbp's backend in Figs 2-3 (default probe: the paper's method; "
                         "auto would ask cachestat, the files being ours)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/graybox.py needs root (memory cgroup, loop devices)")
    why = LoopFs.unavailable(throttle=True)
    if why:
        sys.exit(f"bench/graybox.py: {why}")
    if not os.path.isdir(MEMCG):
        sys.exit(f"bench/graybox.py: no memory cgroup v1 at {MEMCG}")
    args.runs = 3
    args.cache_mib = 64 if args.quick else 128
    args.files, args.file_mb = (100, 2) if args.quick else (100, 10)
    args.acc_files, args.acc_mib, args.acc_trials = (4, 20, 3) if args.quick else (8, 40, 5)
    args.layout_trials = 5 if args.quick else 11
    workdir = os.path.join(REPO, "build", "bench-graybox")
    os.makedirs(workdir, exist_ok=True)
    out = {"quick": args.quick}
    figs = set(args.figs.split(","))
    if "4" in figs:
        fig4(args, out, workdir)
    if "5" in figs:
        fig5(args, out)
    if "2" in figs:
        fig2(args, out)
    if "3" in figs:
        fig3(args, out)
    path = args.out or os.path.join(REPO, "bench", "results",
                                    f"{datetime.date.today()}-vm-graybox.md")
    # A run of some figures keeps the others of an earlier run of the day.
    raw = os.path.splitext(path)[0] + ".json"
    if os.path.exists(raw):
        with open(raw) as f:
            kept = json.load(f)
        for key, value in kept.items():
            out.setdefault(key, value)
    with open(raw, "w") as f:
        json.dump(out, f, indent=1)
    report(args, out, path)
    shutil.rmtree(os.path.join(workdir, "fig4"), ignore_errors=True)


if __name__ == "__main__":
    main()
