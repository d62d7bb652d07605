"""graybox-icl Fig 6, "Undoing the effects of aging": 100 files of 8 KiB in
one directory; each epoch deletes 5 random files and creates 5 new ones; at
epoch 31 `discnice refresh` rewrites the directory.  Every epoch, a cold
read of all the files is timed in three orders - directory (readdir) order,
i-number order (the FLDC's, §4.2.2) and random - and the layout itself is
measured: for the files in i-number order, the share of neighbours whose
data also comes later on disk (FIBMAP, the first block of each file; root)
and the total distance between them, in blocks.  The layout numbers are
the oracle this virtual disk cannot hide; the timings are what it shows.

Cold = fsync, then posix_fadvise(POSIX_FADV_DONTNEED) on every file until
cachestat finds none of its pages.  Limits: that drops the files' data
pages only - their inodes and the directory stay in the kernel's caches
(dropping those takes drop_caches, machine-wide, which this machine's other
users would feel) - and the host caches this VM's virtio disk, so a "cold"
read may be served from the host's memory.  Medians of --reps reads.

    make bench-graybox-refresh            # this VM's disk, and a loop ext4 as root
    python3 bench/graybox_refresh.py --epochs 40 --reps 5 [--no-loop]

Writes bench/results/DATE-HOST-graybox-refresh.md.
"""
import argparse
import ctypes
import fcntl
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
from loopfs import LoopFs  # noqa: E402

FIBMAP = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def cached_pages(fd):
    rng = ctypes.create_string_buffer(struct.pack("QQ", 0, 0), 16)
    out = ctypes.create_string_buffer(40)
    if _LIBC.syscall(451, fd, rng, out, 0) != 0:
        return 0
    return struct.unpack("5Q", out.raw)[0]


def make_cold(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            for _ in range(20):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                if not cached_pages(fd):
                    break
                time.sleep(0.01)
        finally:
            os.close(fd)


def read_all(paths):
    t0 = time.perf_counter()
    for p in paths:
        fd = os.open(p, os.O_RDONLY | os.O_NOATIME)
        try:
            while os.read(fd, 1 << 16):
                pass
        finally:
            os.close(fd)
    return time.perf_counter() - t0


def first_block(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return struct.unpack("i", fcntl.ioctl(fd, FIBMAP, struct.pack("i", 0)))[0]
    except OSError:
        return None
    finally:
        os.close(fd)


def write_file(path, rng, size):
    with open(path, "wb") as f:
        f.write(rng.randbytes(size))
        f.flush()
        os.fsync(f.fileno())


def orders(d, rng):
    names = os.listdir(d)                     # readdir order
    paths = [os.path.join(d, n) for n in names]
    by_ino = sorted(paths, key=lambda p: os.lstat(p).st_ino)
    shuffled = paths[:]
    rng.shuffle(shuffled)
    return {"directory": paths, "inode": by_ino, "random": shuffled}


def layout(by_ino):
    blocks = [first_block(p) for p in by_ino]
    if any(b is None for b in blocks):
        return None, None
    forward = sum(1 for a, b in zip(blocks, blocks[1:]) if b > a) / (len(blocks) - 1)
    distance = sum(abs(b - a) for a, b in zip(blocks, blocks[1:]))
    return forward, distance


def run_on(top, label, args, log):
    rng = random.Random(args.seed)
    d = os.path.join(top, "aging")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    serial = 0
    for _ in range(args.files):
        write_file(os.path.join(d, f"f{serial:05d}"), rng, args.size)
        serial += 1
    rows = []
    for epoch in range(args.epochs + 1):
        refresh_s = None
        if epoch == args.refresh_at:
            t0 = time.perf_counter()
            p = subprocess.run([common.DISCNICE, "refresh", d], capture_output=True, text=True)
            refresh_s = time.perf_counter() - t0
            if p.returncode != 0:
                raise SystemExit(f"refresh failed: {p.stderr.strip()}")
        o = orders(d, rng)
        times = {k: [] for k in o}
        for _ in range(args.reps):
            for k in ("random", "directory", "inode"):   # alternate the orders
                make_cold(o[k])
                times[k].append(read_all(o[k]))
        forward, distance = layout(o["inode"])
        row = {"epoch": epoch, **{k: statistics.median(v) * 1000 for k, v in times.items()},
               "forward": forward, "distance": distance, "refresh_s": refresh_s}
        rows.append(row)
        log(f"{label} epoch {epoch:2d}: dir {row['directory']:7.2f} ms  inode {row['inode']:7.2f} ms"
            f"  random {row['random']:7.2f} ms  layout forward "
            f"{'-' if forward is None else f'{forward:.0%}'}"
            + (f"  (refreshed in {refresh_s:.2f} s)" if refresh_s is not None else ""))
        # Age it: delete 5, create 5 (the paper's epoch).
        names = sorted(os.listdir(d))
        for n in rng.sample(names, 5):
            os.unlink(os.path.join(d, n))
        for _ in range(5):
            write_file(os.path.join(d, f"f{serial:05d}"), rng, args.size)
            serial += 1
    shutil.rmtree(d, ignore_errors=True)
    return rows


def table(label, rows, args):
    out = [f"### {label}", "",
           "| epoch | directory order ms | i-number order ms | random ms | i-number→disk forward | "
           "distance (blocks) |", "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mark = " (refresh)" if r["refresh_s"] is not None else ""
        fw = "-" if r["forward"] is None else f"{r['forward']:.0%}"
        dist = "-" if r["distance"] is None else f"{r['distance']}"
        out.append(f"| {r['epoch']}{mark} | {r['directory']:.2f} | {r['inode']:.2f} | "
                   f"{r['random']:.2f} | {fw} | {dist} |")
    fresh = [r for r in rows if r["epoch"] < 3]
    aged = [r for r in rows if args.refresh_at - 3 <= r["epoch"] < args.refresh_at]
    refreshed = [r for r in rows if args.refresh_at <= r["epoch"] < args.refresh_at + 3]

    def med(rs, k):
        vals = [r[k] for r in rs if r[k] is not None]
        return statistics.median(vals) if vals else float("nan")
    out += ["", "| phase (median of 3 epochs) | directory ms | i-number ms | random ms | forward |",
            "|---|---:|---:|---:|---:|"]
    for name, rs in (("fresh (0-2)", fresh), (f"aged ({args.refresh_at - 3}-{args.refresh_at - 1})", aged),
                     (f"refreshed ({args.refresh_at}-{args.refresh_at + 2})", refreshed)):
        out.append(f"| {name} | {med(rs, 'directory'):.2f} | {med(rs, 'inode'):.2f} | "
                   f"{med(rs, 'random'):.2f} | {med(rs, 'forward'):.0%} |")
    refresh_s = [r["refresh_s"] for r in rows if r["refresh_s"] is not None]
    if refresh_s:
        out.append(f"\nThe refresh itself took {refresh_s[0]:.2f} s ({args.files} files, fsync each).")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--refresh-at", type=int, default=31)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--no-loop", action="store_true", help="only this VM's own disk")
    ap.add_argument("--out", help="results file [default: bench/results/DATE-HOST-graybox-refresh.md]")
    args = ap.parse_args()
    if not os.access(common.DISCNICE, os.X_OK):
        raise SystemExit(f"{common.DISCNICE}: build it first (make)")
    lines = []

    def log(s):
        print(s, flush=True)

    results = {}
    os.makedirs(common.SCRATCH, exist_ok=True)
    results["this VM's disk (" + common.machine()["filesystem"] + " on " + common.machine()["disk"] + ")"] = \
        run_on(common.SCRATCH, "vm-disk", args, log)
    loop_note = ""
    if not args.no_loop:
        why = LoopFs.unavailable()
        if why:
            loop_note = f"Loop-device ext4: not run ({why})."
        else:
            with LoopFs(size_mib=256, tag="refresh") as fs:
                results["a fresh 256 MiB ext4 on a loop device (direct I/O to a file on the VM's disk)"] = \
                    run_on(fs.mountpoint, "loop-ext4", args, log)
    lines += ["# graybox-icl Fig 6: aging and refresh (`discnice refresh`)", ""]
    lines += common.machine_lines()
    lines += ["", f"Command: `python3 bench/graybox_refresh.py --epochs {args.epochs} --reps {args.reps}"
              f"{' --no-loop' if args.no_loop else ''}` (`make bench-graybox-refresh`).",
              f"{args.files} files of {args.size} bytes in one directory; each epoch deletes 5 random "
              f"files and creates 5; `discnice refresh` (smallest first) at epoch {args.refresh_at}. "
              f"Each cell: the median of {args.reps} cold reads of all files (fsync + "
              "POSIX_FADV_DONTNEED until cachestat finds no page; inodes and the directory stay cached).",
              "\"forward\": of the files in i-number order, the share of neighbours whose first data "
              "block (FIBMAP) is further on; \"distance\": the sum of the block gaps between them.",
              "The paper (Fig 6, a 2001 disk): i-number order degrades from fresh to 30 epochs by more "
              "than 3x, random stays poor, and the refresh at epoch 31 restores the fresh time.", ""]
    for label, rows in results.items():
        lines += table(label, rows, args) + [""]
    if loop_note:
        lines += [loop_note, ""]
    out = args.out or common.results_path("graybox-refresh")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
