"""`discnice gbp` and libgraybox's gbp_order() (issue #11 §1; graybox-icl
§4.1.2, §4.2.2, §4.2.4), judged by the kernel, never by gbp's own report:

* the page-cache state is set up by the test (fsync + POSIX_FADV_DONTNEED,
  then reading chosen files or ranges) and checked with cachestat(2)
  before gbp runs; the order gbp prints must put exactly the cached files
  (or chunks) first;
* a file the user cannot write (root's file, gbp run as nobody with
  setpriv), for which the kernel's cachestat refuses to answer: --backend
  auto must still order it right (timing probes), and --backend nowait
  (RWF_NOWAIT probes) too; a nowait probe reads at most one page (the kernel's
  /proc/PID/io of the process that reaped gbp), and leaves it uncached (the
  files' cachestat before and after); where the file system has no nowait reads (tmpfs)
  gbp times its probes instead, silently;
* --out: the bytes written are compared with the file's (every chunk once;
  --in-order byte-identical), the chunk boundaries with --record-size;
* --inode and --physical against os.stat and FS_IOC_FIEMAP; bad operands
  by their exit status and stderr lines.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import fanotify_gate
from conftest import MiB, _cached_pages, mount_overlay

PAGE = os.sysconf("SC_PAGE_SIZE")
BACKENDS = ("auto", "probe", "cachestat", "mincore", "nowait")


def cached_fraction(path, off=0, length=None):
    """The kernel's truth: cachestat over [off, off+length)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if length is None:
            length = size - off
        libc = ctypes.CDLL(None, use_errno=True)
        rng = ctypes.create_string_buffer(struct.pack("QQ", off, length), 16)
        out = ctypes.create_string_buffer(40)
        assert libc.syscall(451, fd, rng, out, 0) == 0, "cachestat refused our own file"
        pages = (length + PAGE - 1) // PAGE
        return struct.unpack("5Q", out.raw)[0] / max(pages, 1)
    finally:
        os.close(fd)


def read_range(path, off, length):
    """Read exactly this range in: POSIX_FADV_RANDOM, so no readahead
    spills into the next chunk."""
    with open(path, "rb", buffering=0) as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
        f.seek(off)
        left = length
        while left > 0:
            b = f.read(min(left, MiB))
            if not b:
                break
            left -= len(b)


@pytest.fixture
def files(env, request):
    """Six 6 MiB files, cold; 1, 3 and 5 then read in whole (cached)."""
    d = env.path(f"gbp-{request.node.name}")
    shutil.rmtree(d, ignore_errors=True)
    paths = [env.make_file(d / f"f{i}.txt", 6 * MiB) for i in range(6)]
    return d, paths


def set_cache(env, paths, warm):
    for p in paths:
        env.drop_cache(p)
    for i in warm:
        env.warm(paths[i])
    for i, p in enumerate(paths):
        frac = cached_fraction(p)
        if i in warm:
            assert frac > 0.95, f"{p} not cached after reading it ({frac:.2f})"
        else:
            assert frac < 0.05, f"{p} still cached after DONTNEED ({frac:.2f})"


def gbp(env, *args, user=None):
    if user is None:
        return env.discnice(["gbp", *args])
    argv = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups",
            str(env.discnice_bin), "gbp", *map(str, args)]
    return env._run(argv)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mem_puts_cached_files_first(env, files, backend):
    d, paths = files
    warm = {1, 3, 5}
    set_cache(env, paths, warm)
    r = gbp(env, "--mem", "--backend", backend, *paths)
    r.check_exit(0)
    order = r.stdout.decode().splitlines()
    assert sorted(order) == sorted(map(str, paths)), r.dump()
    first = {paths.index(Path(p)) for p in order[:3]}
    if first != warm:
        r.fail(f"--mem --backend {backend}: first three {order[:3]}, cached were {sorted(warm)}")

    set_cache(env, paths, warm)
    r = gbp(env, "--mem", "--json", "--backend", backend, *paths)
    r.check_exit(0)
    j = json.loads(r.stdout)
    marked = {paths.index(Path(f["path"])) for f in j["files"] if f["in_cache"]}
    if marked != warm:
        r.fail(f"in_cache marks {sorted(marked)}, cached were {sorted(warm)}")
    want_backend = "cachestat" if backend == "auto" else backend
    assert all(f["backend"] == want_backend for f in j["files"]), r.stdout


def test_all_cold_and_all_cached(env, files):
    """One group (§4.2.4: "all files are actually on disk"): nothing, or
    everything, in cache - never a split of alike files."""
    d, paths = files
    for warm in (set(), set(range(6))):
        set_cache(env, paths, warm)
        r = gbp(env, "--mem", "--json", "--backend", "probe", *paths)
        r.check_exit(0)
        marked = {paths.index(Path(f["path"])) for f in json.loads(r.stdout)["files"]
                  if f["in_cache"]}
        if marked != warm:
            r.fail(f"cached {sorted(warm)}, but in_cache marks {sorted(marked)}")


def _need_root_and_setpriv(env):
    if os.geteuid() != 0:
        pytest.skip("needs root: the test makes a root-owned file and runs gbp as nobody")
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux)")
    # nobody must reach the binary and the scratch directory.
    for p in (env.discnice_bin, env.scratch):
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                            "test", "-r", str(p)], capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"user nobody cannot reach {p}")


@pytest.mark.parametrize("backend", ("auto", "nowait", "probe"))
def test_unwritable_file_auto_uses_probes(env, files, backend):
    """A root-owned 0444 file read by nobody: cachestat refuses (EPERM,
    can_do_cachestat()), mincore would lie; auto must probe (timing, the
    paper's method) and be right, and so must the timing and the nowait
    (RWF_NOWAIT) probes asked for by name."""
    _need_root_and_setpriv(env)
    d, paths = files
    for p in paths:
        os.chmod(p, 0o444)
    set_cache(env, paths, {0, 4})
    r = gbp(env, "--mem", "--json", "--backend", backend, *paths, user="nobody")
    r.check_exit(0)
    j = json.loads(r.stdout)
    want = "nowait" if backend == "nowait" else "probe"
    assert {f["backend"] for f in j["files"]} == {want}, r.stdout
    assert not any(f["exact"] for f in j["files"]), r.stdout
    order = [paths.index(Path(f["path"])) for f in j["files"]]
    if set(order[:2]) != {0, 4}:
        r.fail(f"as nobody, --backend {backend}: order {order}, cached were [0, 4]")
    marked = {paths.index(Path(f["path"])) for f in j["files"] if f["in_cache"]}
    if marked != {0, 4}:
        r.fail(f"as nobody, --backend {backend}: in_cache {sorted(marked)}, cached were [0, 4]")
    if backend != "auto":
        return
    # Asked for by name, cachestat refuses: one line per file, exit 1.
    r = gbp(env, "--mem", "--backend", "cachestat", paths[0], paths[1], user="nobody")
    assert r.rc == 1, r.dump()
    lines = r.stderr_lines()
    assert len(lines) == 2 and all("cachestat does not answer" in l for l in lines), r.dump()


# Runs gbp as nobody under a shell that prints, on stderr, how much its
# /proc/PID/io read_bytes grew across gbp's run (with builtins only, no other
# child): wait_task_zombie() adds the reaped child's task_io_accounting to the
# parent's signal->ioac, so that is what gbp made the disk read, by the
# kernel's count.  The delta leaves out setpriv's and the shell's own start,
# and a first `gbp --help` pages in discnice and its libraries: this host's
# DAMON reclaim (kdamond) evicts pages idle for a while, so "the binaries are
# cached" cannot be assumed (CI once saw one extra page, 28672 bytes for 6 probes).
_IO_SHELL = ('rb() { while read -r k v; do [ "$k" = read_bytes: ] && n=$v; done < /proc/$$/io; }; '
             '"$1" gbp --help >/dev/null 2>&1; rb; b=$n; '
             '"$@"; s=$?; rb; echo "read_bytes $((n - b))" >&2; exit $s')


def gbp_counting_reads(env, *args, user="nobody"):
    argv = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups",
            "/bin/sh", "-c", _IO_SHELL, "sh", str(env.discnice_bin), "gbp", *map(str, args)]
    r = env._run(argv)
    lines = r.stderr_lines()
    assert lines and lines[-1].startswith("read_bytes "), r.dump()
    return {"rc": r.rc, "stdout": r.stdout.decode(), "stderr": "\n".join(lines[:-1]),
            "read_bytes": int(lines[-1].split()[1])}


def _cached_pages_total(paths):
    return sum(_cached_pages_of(p) for p in paths)


def test_nowait_probe_reads_one_page_per_miss(env, files):
    """As nobody on root's 0444 files, with units cached in runs (not whole
    files): the nowait backend's in-cache marks and order against
    cachestat, and what its probing costs the disk, by the kernel's count -
    at most one page per probe that missed (POSIX_FADV_RANDOM on the probe's
    description), both in /proc/PID/io and in the pages newly cached."""
    _need_root_and_setpriv(env)
    d, paths = files
    for p in paths:
        os.chmod(p, 0o444)
    # Files 1 and 3 whole, file 5 its first 5 MiB of 6: cached; file 2 its
    # last MiB only: not; 0 and 4 cold.  Prediction units are 5 MiB (two
    # probes per 6 MiB file: [0, 5) and [5, 6) MiB).
    for p in paths:
        env.drop_cache(p)
    env.warm(paths[1])
    env.warm(paths[3])
    read_range(paths[5], 0, 5 * MiB)
    read_range(paths[2], 5 * MiB, MiB)
    # The truth per prediction unit, by cachestat: each unit wholly cached
    # or wholly cold, so every probe point in it has one right answer.
    units = [(0, 5 * MiB), (5 * MiB, MiB)]
    truth = {i: [cached_fraction(p, off, n) for off, n in units] for i, p in enumerate(paths)}
    for i, fr in truth.items():
        assert all(f > 0.99 or f < 0.01 for f in fr), truth
    want = {i: sum(f > 0.5 for f in fr) / 2 for i, fr in truth.items()}
    assert want == {0: 0, 1: 1, 2: 0.5, 3: 1, 4: 0, 5: 0.5}, truth
    cold_units = sum(f < 0.5 for fr in truth.values() for f in fr)      # 6
    before = _cached_pages_total(paths)
    out = gbp_counting_reads(env, "--mem", "--json", "--backend", "nowait", *paths)
    assert out["rc"] == 0 and out["stderr"] == "", out
    j = json.loads(out["stdout"])
    new_pages = _cached_pages_total(paths) - before
    got = {paths.index(Path(f["path"])): f["cached_fraction"] for f in j["files"]}
    if got != want:
        pytest.fail(f"nowait cached shares {got}, cachestat per unit says {want}")
    # The probing's cost to the disk, by the kernel: one page per cold
    # unit probed, no more.  And none of those pages stays cached: gbp
    # waits for each and drops it again (fccd_plan.c, settle_file()), so
    # the cache is as the probes found it - a lone probed page would be
    # the first of its file that reclaim takes, a hole in the next scan.
    assert 0 < out["read_bytes"] <= cold_units * PAGE, out
    if new_pages != 0:
        pytest.fail(f"{new_pages} pages the nowait probes read in are still cached "
                    f"({cold_units} cold units probed): {out['stdout'][:300]}")
    print(f"nowait: {out['read_bytes']} bytes read, {new_pages} pages newly cached, "
          f"{cold_units} cold units")
    marked = {paths.index(Path(f["path"])) for f in j["files"] if f["in_cache"]}
    order = [paths.index(Path(f["path"])) for f in j["files"]]
    # Shares 1, 1, 1/2, 1/2, 0, 0: the whole files are in cache, the cold
    # ones are not; the halves go either way with 2-means.
    assert {1, 3} <= marked and not marked & {0, 4}, (marked, out["stdout"])
    assert set(order[:2]) == {1, 3} and set(order[-2:]) == {0, 4}, order


def test_nowait_falls_back_to_timing_where_unsupported(env, shm_files):
    """tmpfs has no nowait buffered reads (no FMODE_NOWAIT: preadv2 says
    EOPNOTSUPP): --backend nowait times its probes there, silently, and is
    right (tmpfs pages are all in memory; cachestat says so)."""
    paths = shm_files(mode=0o444)
    fd = os.open(paths[0], os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT)
        pytest.skip("this tmpfs has nowait reads: nothing to fall back from")
    except OSError as e:
        if e.errno != 95:                    # EOPNOTSUPP
            raise
    finally:
        os.close(fd)
    assert all(cached_fraction(p) > 0.99 for p in paths)
    runs = [gbp(env, "--mem", "--json", "--backend", "nowait", *paths)]
    for r in runs:
        r.check_exit(0)
        assert r.stderr == b"", r.dump()
        j = json.loads(r.stdout)
        assert j["nowait_fallbacks"] == 3 and j["nowait_probes"] == 0, r.stdout
        assert {f["backend"] for f in j["files"]} == {"probe"}, r.stdout
        assert all(f["in_cache"] and f["probes"] == 1 for f in j["files"]), r.stdout


@pytest.mark.parametrize("backend", ("probe", "nowait"))
def test_heisenberg_small_file_not_probed(env, files, backend):
    """§4.1.4: a file under a page would be read in whole by one probe - by
    a nowait one too (it does not wait for the read, but starts it)."""
    d, paths = files
    small = d / "small.txt"
    small.write_bytes(b"x" * 100)
    os.sync()
    env.drop_cache(small)
    set_cache(env, paths, {2})
    r = gbp(env, "--mem", "--json", "--backend", backend, small, *paths)
    r.check_exit(0)
    j = json.loads(r.stdout)
    assert j["files"][-1]["path"] == str(small), r.stdout
    assert j["files"][-1]["not_probed"] is True and j["files"][-1]["in_cache"] is False
    assert j["files"][0]["path"] == str(paths[2])
    assert _cached_pages_of(small) == 0, "gbp read the small file in"
    # The exact backends need no probe: the small file is just cold.
    r = gbp(env, "--mem", "--json", "--backend", "cachestat", small)
    assert json.loads(r.stdout)["files"][0]["not_probed"] is False


def _cached_pages_of(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return _cached_pages(fd)
    finally:
        os.close(fd)


def _chunks(data, length):
    return [(off, data[off:off + length]) for off in range(0, len(data), length)]


@pytest.mark.parametrize("backend", ("auto", "probe"))
def test_out_streams_whole_chunks_cached_first(env, backend):
    """--out: every chunk of L = 1 MiB rounded down to 100-byte records,
    exactly once, whole, the cached ones first."""
    path = env.make_file(env.path(f"out-{backend}.bin"), 9 * MiB + 12345)
    data = path.read_bytes()
    length = (MiB // 100) * 100
    env.drop_cache(path)
    warm = {2, 5, 6}                  # chunk indexes
    for k in warm:
        read_range(path, k * length, length)
    for k in range(len(_chunks(data, length))):
        frac = cached_fraction(path, k * length, min(length, len(data) - k * length))
        assert (frac > 0.9) == (k in warm), f"chunk {k} cached {frac:.2f}"
    r = gbp(env, "--out", path, "--access-unit", "1MiB", "--record-size", "100",
            "--backend", backend)
    r.check_exit(0)
    out = r.stdout
    assert len(out) == len(data), r.dump()
    by_hash = {hashlib.sha256(c).digest(): off for off, c in _chunks(data, length)}
    pos, seen = 0, []
    while pos < len(out):
        for n in (length, len(data) % length):
            h = hashlib.sha256(out[pos:pos + n]).digest()
            if n and h in by_hash:
                seen.append(by_hash[h] // length)
                pos += n
                break
        else:
            r.fail(f"output at {pos} is no whole chunk of the file")
    assert sorted(seen) == list(range(len(by_hash))), f"chunks {seen}"
    assert set(seen[:3]) == warm, f"chunk order {seen}, cached were {sorted(warm)}"


@pytest.mark.parametrize("record,unit", [("100", "8192"), ("4097", "8192"),
                                         ("10000", "16KiB"), ("4096", "8192")])
def test_probes_of_unaligned_chunks_see_a_cold_file_cold(env, record, unit):
    """Timed probes of a file not cached at all: no chunk in cache, each
    page probed at most once.  Chunks that do not start on a page boundary
    (--record-size) share a page with the chunk before, whose probe had
    brought it in: 732 of 733 chunks were "in cache" at --record-size 4097,
    123 of 371 at 100."""
    path = env.make_file(env.path(f"unaligned-{record}.bin"), 3 * MiB)
    env.drop_cache(path)
    assert cached_fraction(path) < 0.05
    r = gbp(env, "--out", path, "--backend", "probe", "--record-size", record,
            "--access-unit", unit, "--json")
    r.check_exit(0)
    d = json.loads(r.stdout)
    cached = [c["offset"] for c in d["chunks"] if c["in_cache"]]
    assert not cached, f"{len(cached)} of {len(d['chunks'])} chunks in cache: {cached[:8]}"
    pages = -(-3 * MiB // os.sysconf("SC_PAGE_SIZE"))
    assert d["probes"] <= pages, r.dump()


def test_out_in_order_is_the_file(env, tmp_path_factory):
    path = env.make_file(env.path("inorder.bin"), 5 * MiB + 777)
    data = path.read_bytes()
    env.drop_cache(path)
    read_range(path, 3 * MiB, MiB)
    # To a pipe (cached chunks held in memory until their turn).
    r = gbp(env, "--out", path, "--in-order", "--access-unit", "1MiB")
    r.check_exit(0)
    r.check_output_equals(data)
    # To a regular file after a header: written in place, at its offset.
    target = env.path("inorder.out")
    with open(target, "wb") as f:
        f.write(b"HEADER\n")
        f.flush()
        p = subprocess.run([str(env.discnice_bin), "gbp", "--out", str(path), "--in-order",
                            "--access-unit", "1MiB"], stdout=f, stderr=subprocess.PIPE,
                           timeout=60)
        f.write(b"TRAILER\n")
    assert p.returncode == 0, p.stderr
    assert target.read_bytes() == b"HEADER\n" + data + b"TRAILER\n"


def _need_gate():
    why = fanotify_gate.available()
    if why:
        pytest.skip(f"no fanotify permission events here ({why}): needs root")


@pytest.mark.parametrize("in_order", [False, True])
def test_out_file_replaced_by_a_fifo_after_examination(env, in_order):
    """The file is replaced by a FIFO while gbp probes it (its first probe
    read waits in the kernel - fanotify_gate - until the rename is done):
    the copy's open must not block on the FIFO (no writer ever comes), and
    gbp says the file was replaced, exit 1, writing nothing."""
    _need_gate()
    path = env.make_file(env.path("fifo-swap.bin"), 2 * MiB)
    env.drop_cache(path)
    fifo = env.path("fifo-swap.fifo")
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    args = ["gbp", "--out", str(path), "--backend", "probe"] + (["--in-order"] if in_order else [])
    with fanotify_gate.Gate(path, fanotify_gate.FAN_ACCESS_PERM,
                            lambda: os.rename(fifo, path)) as gate:
        p = subprocess.run([str(env.discnice_bin), *args], capture_output=True, timeout=30)
    assert gate.fired, "gbp never read the file"
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    path.unlink()
    assert p.returncode == 1, p
    assert p.stdout == b""
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "replaced since it was examined" in lines[0], lines


@pytest.mark.parametrize("how", ["chunks", "in-order-pipe", "in-order-file"])
def test_out_file_that_grows_after_examination(env, how):
    """4 KiB are appended while gbp probes the file (its first probe read
    waits in the kernel - fanotify_gate - until the append is done): the
    copy holds the examined bytes only, and gbp says the size changed,
    exit 1.  Into a regular file with --in-order, the output's offset ends
    after the bytes written (the shared open file description's offset,
    read by the test), not after the new size."""
    _need_gate()
    path = env.make_file(env.path("grows.bin"), 2 * MiB + 123)
    data = path.read_bytes()
    env.drop_cache(path)
    args = [str(env.discnice_bin), "gbp", "--out", str(path), "--backend", "probe",
            "--access-unit", "1MiB"] + ([] if how == "chunks" else ["--in-order"])
    appender = os.open(path, os.O_WRONLY | os.O_APPEND)
    target = env.path("grows.out")
    out = os.open(target, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(out, b"HEADER\n")
    try:
        with fanotify_gate.Gate(path, fanotify_gate.FAN_ACCESS_PERM,
                                lambda: os.write(appender, b"g" * 4096)) as gate:
            p = subprocess.run(args, stdout=out if how == "in-order-file" else subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=60)
        offset = os.lseek(out, 0, os.SEEK_CUR)
    finally:
        os.close(appender)
        os.close(out)
    assert gate.fired, "gbp never read the file"
    assert os.path.getsize(path) == len(data) + 4096
    assert p.returncode == 1, p
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "changed size since it was examined" in lines[0], lines
    if how == "in-order-file":
        assert offset == len(b"HEADER\n") + len(data), offset
        assert target.read_bytes() == b"HEADER\n" + data
    elif how == "in-order-pipe":
        assert p.stdout == data
    else:
        # A permutation of the examined file's chunks (the last one short).
        chunks = sorted(c for _, c in _chunks(data, MiB))
        got, pos = [], 0
        while pos < len(p.stdout):
            n = next((n for n in (MiB, len(data) % MiB) if p.stdout[pos:pos + n] in chunks), 0)
            assert n, f"output at {pos} is no whole chunk of the examined file"
            got.append(p.stdout[pos:pos + n])
            pos += n
        assert sorted(got) == chunks


def test_out_in_order_to_a_file_that_shrinks_leaves_a_clean_prefix(env):
    """The file is cut from 6 MiB to 5 MiB as the copy's first read waits
    in the kernel (fanotify_gate).  Into a regular file with --in-order,
    the cached chunks 0 and 4 are written in place, then chunk 5 is gone:
    exit 1, and the output holds what a pipe would have got - chunk 0, the
    offset after it, nothing past it.  It used to keep the offset at the
    output's start (the next writer overwrote chunk 0) and chunk 4 past
    4 MiB of zeros."""
    _need_gate()
    path = env.make_file(env.path("shrinks.bin"), 6 * MiB)
    data = path.read_bytes()
    env.drop_cache(path)
    read_range(path, 0, MiB)
    read_range(path, 4 * MiB, 2 * MiB)
    target = env.path("shrinks.out")
    out = os.open(target, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(out, b"HEADER\n")
    try:
        with fanotify_gate.Gate(path, fanotify_gate.FAN_ACCESS_PERM,
                                lambda: os.truncate(path, 5 * MiB)) as gate:
            p = subprocess.run([str(env.discnice_bin), "gbp", "--out", str(path), "--in-order",
                                "--backend", "cachestat", "--access-unit", "1MiB"], stdout=out,
                               stderr=subprocess.PIPE, timeout=60)
        offset = os.lseek(out, 0, os.SEEK_CUR)
        os.write(out, b"TRAILER\n")
    finally:
        os.close(out)
    assert gate.fired, "gbp never read the file"
    assert p.returncode == 1, p
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "shorter than when it was examined" in lines[0], lines
    assert offset == len(b"HEADER\n") + MiB, offset
    assert target.read_bytes() == b"HEADER\n" + data[:MiB] + b"TRAILER\n"


@pytest.mark.parametrize("backend", ["probe", "nowait"])
def test_probes_leave_the_holes_of_a_sparse_file_alone(env, backend):
    """A 256 MiB sparse file with 2 MiB of cold data in its middle: the
    probes read no hole (a hole reads as zeros with no disk I/O, and the
    read puts zero pages in the cache - one nowait run over a 1 TiB sparse
    file left 819 MiB behind).  By cachestat, after the run: no page of
    the holes cached, and with nowait none at all.  The all-hole chunks
    count as in cache (their read costs no I/O), each run of them one
    piece; the data chunks, cold, do not."""
    path = env.path(f"sparse-{backend}.bin")
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.truncate(256 * MiB)
        f.seek(128 * MiB)
        f.write(os.urandom(2 * MiB))
    env.drop_cache(path)
    r = gbp(env, "--backend", backend, "--access-unit", "1MiB", "--out", path, "--json")
    r.check_exit(0)
    fd = os.open(path, os.O_RDONLY)
    try:
        cached = _cached_pages(fd)
    finally:
        os.close(fd)
    limit = 0 if backend == "nowait" else (2 * MiB) // os.sysconf("SC_PAGE_SIZE")
    assert cached <= limit, f"{cached} pages cached after the probes (at most {limit}: the data's)"
    plan = json.loads(r.stdout)
    # A hole's sample is a hit without a read, and a probe all the same
    # (hits were counted without their probes: 20480 hits of 0 probes).
    assert plan["probe_hits"] <= plan["probes"], plan
    chunks = plan["chunks"]
    spans = sorted((c["offset"], c["length"], c["in_cache"]) for c in chunks)
    assert spans == [(0, 128 * MiB, True), (128 * MiB, MiB, False), (129 * MiB, MiB, False),
                     (130 * MiB, 126 * MiB, True)], spans


def test_a_huge_sparse_file_costs_no_memory(env):
    """A file's apparent size is not its data: truncate(1) makes a 4 EiB
    file on tmpfs at no cost, and gbp made one piece per 20 MiB chunk of
    it (2^38 pieces) and took all memory (the kernel's OOM killer ended
    it).  Runs of hole are one piece now: every order, under a 256 MiB
    address-space limit, in seconds; the small file beside it is still
    ordered, the huge one counts as cached, and --out copies a sparse
    file with data inside it byte for byte."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm (tmpfs) on this machine")
    huge = shm / f"discnice-test-huge-{os.getpid()}"
    small = env.path("huge-neighbour.txt")
    small.write_bytes(b"small\n")
    try:
        with open(huge, "wb") as f:
            f.truncate(4 << 60)
        limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (256 << 20, 256 << 20))"
        for order in ["--mem", "--inode", "--physical", "--compose"]:
            r = env._run(["python3", "-c", limit + "; import os, sys; os.execv(sys.argv[1], "
                          "sys.argv[1:])", str(env.discnice_bin), "gbp", order, str(huge),
                          str(small)], timeout=60)
            r.check_exit(0)
            assert sorted(r.stdout.decode().splitlines()) == sorted([str(huge), str(small)]), \
                r.stdout
        r = gbp(env, "--mem", "--json", huge)
        r.check_exit(0)
        entries = json.loads(r.stdout)["files"]
        assert [(e["in_cache"], e["length"]) for e in entries] == [(True, 4 << 60)], entries
        # Data at 1 GiB and at the end, holes between: the runs and the
        # data chunks rebuild the file.
        with open(huge, "r+b") as f:
            f.truncate(3 << 30)
            f.seek(1 << 30)
            f.write(os.urandom(MiB))
            f.seek((3 << 30) - 4096)
            f.write(os.urandom(4096))
        r = gbp(env, "--out", huge, "--json")
        r.check_exit(0)
        chunks = json.loads(r.stdout)["chunks"]
        assert len(chunks) <= 5, chunks
        r = gbp(env, "--out", huge, "--in-order")
        r.check_exit(0)
        with open(huge, "rb") as f:
            assert hashlib.sha256(r.stdout).digest() == hashlib.sha256(f.read()).digest()
    finally:
        huge.unlink(missing_ok=True)


@pytest.mark.parametrize("buffer", ["1MiB", "1"])
def test_out_in_order_to_a_pipe_with_a_small_buffer(env, buffer):
    """--in-order to a slow pipe with --buffer below the cached chunks
    (3 cached chunks of 1 MiB, room for at most one, or for none): still
    byte for byte the file - what does not fit is read again in its turn."""
    path = env.make_file(env.path(f"inorder-small-{buffer}.bin"), 8 * MiB + 123)
    data = path.read_bytes()
    env.drop_cache(path)
    for chunk in (2, 5, 7):
        read_range(path, chunk * MiB, MiB)
    out = env.path(f"inorder-small-{buffer}.out")
    # The consumer starts late and reads slowly: gbp meets a full pipe.
    consumer = ("import sys, time\n"
                "time.sleep(0.3)\n"
                "with open(sys.argv[1], 'wb') as f:\n"
                "    while True:\n"
                "        b = sys.stdin.buffer.read1(16384)\n"
                "        if not b: break\n"
                "        f.write(b); time.sleep(0.0005)\n")
    gbp_p = subprocess.Popen([str(env.discnice_bin), "gbp", "--out", str(path), "--in-order",
                              "--access-unit", "1MiB", "--buffer", buffer],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cons = subprocess.run([sys.executable, "-c", consumer, str(out)], stdin=gbp_p.stdout,
                          timeout=120)
    gbp_p.stdout.close()
    err = gbp_p.stderr.read()
    assert gbp_p.wait(timeout=60) == 0, err
    assert cons.returncode == 0
    assert out.read_bytes() == data


def test_null_separated_and_json(env, files):
    d, paths = files
    odd = d / "name with\nnewline.txt"
    odd.write_bytes(b"y" * 5000)
    r = gbp(env, "--mem", "-0", odd, *paths)
    r.check_exit(0)
    names = r.stdout.split(b"\0")
    assert names[-1] == b"" and len(names) == 8
    assert sorted(names[:-1]) == sorted(os.fsencode(str(p)) for p in [odd, *paths])
    r = gbp(env, "--compose", "--json", *paths)
    r.check_exit(0)
    j = json.loads(r.stdout)
    for key in ("order", "probes", "probe_split", "cache_split", "files", "errors"):
        assert key in j, key
    assert j["order"] == "compose"
    for f in j["files"]:
        st = os.stat(f["path"])
        assert f["inode"] == st.st_ino and f["length"] == st.st_size


def test_json_of_names_that_are_not_utf8(env):
    """File names are bytes: --json must be valid JSON for any of them.
    A byte outside valid UTF-8 (here a lone 0xff, an overlong '/', a
    surrogate, a code point beyond U+10FFFF, a truncated sequence) comes
    out as \\udcXX, so Python's json.loads() accepts the document and
    os.fsencode() gives back the exact bytes of each name the kernel has;
    valid UTF-8 passes as it is.  The same encoder writes run --report."""
    d = os.fsencode(env.path("json-names"))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    names = [b"plain", b"caf\xc3\xa9", b"bad\xff", b"over\xc0\xaflong", b"sur\xed\xa0\x80",
             b"big\xf4\x90\x80\x80", b"cut\xe2\x82", b"quote\"back\\slash\ttab"]
    paths = [os.path.join(d, n) for n in names]
    for p in paths:
        with open(p, "wb") as f:
            f.write(b"x" * 8192)
    missing = os.path.join(d, b"missing\xfe")

    def run(*argv):
        return subprocess.run([os.fsencode(env.discnice_bin), *argv], capture_output=True,
                              timeout=60, env=env.base_env)

    p = run(b"gbp", b"--json", b"--inode", *paths, missing)
    assert p.returncode == 1, p.stderr          # the missing one
    doc = json.loads(p.stdout)
    got = sorted(os.fsencode(f["path"]) for f in doc["files"])
    assert got == sorted(paths)
    for f in doc["files"]:
        assert os.stat(os.fsencode(f["path"])).st_ino == f["inode"]
    assert [os.fsencode(e["path"]) for e in doc["errors"]] == [missing]
    assert os.path.join(d, "café".encode()) in got          # UTF-8 as is, not escaped
    assert "\\u00c3" not in p.stdout.decode("utf-8", "surrogateescape")
    # --out --json: the file's own name.
    p = run(b"gbp", b"--out", paths[2], b"--json")
    assert p.returncode == 0, p.stderr
    assert os.fsencode(json.loads(p.stdout)["file"]) == paths[2]
    # run --report: the command's arguments.
    report = os.path.join(d, b"report.json")
    p = run(b"run", b"--quiet", b"--rate", b"inf", b"--report", report, b"--", b"/bin/true", names[2], names[6])
    assert p.returncode == 0, p.stderr
    with open(report, "rb") as f:
        command = json.loads(f.read())["command"]
    assert [os.fsencode(a) for a in command] == [b"/bin/true", names[2], names[6]]
    shutil.rmtree(d)


def fiemap_first(path):
    """FS_IOC_FIEMAP (0xC020660B), one extent: fe_physical, or None."""
    buf = bytearray(struct.pack("=QQIIII", 0, 0xFFFFFFFFFFFFFFFF, 0, 0, 1, 0) + bytes(56))
    with open(path, "rb") as f:
        try:
            fcntl.ioctl(f.fileno(), 0xC020660B, buf)
        except OSError:
            return None
    mapped = struct.unpack_from("=I", buf, 20)[0]
    if not mapped:
        return None
    physical = struct.unpack_from("Q", buf, 32 + 8)[0]
    flags = struct.unpack_from("=I", buf, 32 + 40)[0]
    return None if flags & 0x6 else physical    # UNKNOWN | DELALLOC


def test_inode_physical_compose_orders(env):
    d = env.path("layout")
    shutil.rmtree(d, ignore_errors=True)
    paths = [env.make_file(d / f"{'ab'[i % 2]}/g{i:03d}", 8192, seed=i) for i in range(40)]
    shuffled = paths[::-3] + [p for p in paths if p not in paths[::-3]]
    r = gbp(env, "--inode", *shuffled)
    r.check_exit(0)
    got = [Path(p) for p in r.stdout.decode().splitlines()]
    assert got == sorted(paths, key=lambda p: os.stat(p).st_ino)
    r = gbp(env, "--physical", *shuffled)
    r.check_exit(0)
    got = [Path(p) for p in r.stdout.decode().splitlines()]
    keys = {p: fiemap_first(p) for p in paths}
    if any(v is None for v in keys.values()):
        pytest.skip("FIEMAP gives no address for some files here")
    assert got == sorted(paths, key=lambda p: (keys[p], os.stat(p).st_ino))
    # Compose: the cached files first, then the rest, each by i-number.
    for p in paths:
        env.drop_cache(p)
    warm = set(paths[5::7])
    for p in warm:
        env.warm(p)
    r = gbp(env, "--compose", *shuffled)
    r.check_exit(0)
    got = [Path(p) for p in r.stdout.decode().splitlines()]
    ino = lambda p: os.stat(p).st_ino
    want = sorted(warm, key=ino) + sorted(set(paths) - warm, key=ino)
    if got != want:
        r.fail(f"--compose: got {[p.name for p in got]}, want {[p.name for p in want]}")


def test_bad_operands_one_line_each(env, files):
    d, paths = files
    fifo = d / "fifo"
    os.mkfifo(fifo)
    missing = d / "missing"
    r = gbp(env, "--mem", paths[0], missing, d, fifo, "/dev/null", paths[1])
    assert r.rc == 1, r.dump()
    assert sorted(r.stdout.decode().splitlines()) == sorted([str(paths[0]), str(paths[1])])
    lines = r.stderr_lines()
    assert len(lines) == 4, r.dump()
    assert all(l.startswith("discnice: ") for l in lines)
    text = "\n".join(lines)
    for want in ("No such file", "is a directory", "FIFO", "character device"):
        assert want in text, text
    # A name with a newline or a terminal control in it is one line, escaped
    # as ls -b shows it (it was printed raw: two lines, a live CSI byte).
    odd = os.fsencode(d) + b"/missing\n\x9b2J"
    r = gbp(env, "--mem", os.fsdecode(odd))
    assert r.rc == 1 and len(r.stderr_lines()) == 1, r.dump()
    assert "missing\\n\\2332J" in r.stderr.decode(), r.dump()
    # --out on a bad file: one line, exit 1, nothing written.
    r = gbp(env, "--out", d)
    assert r.rc == 1 and r.stdout == b"" and len(r.stderr_lines()) == 1, r.dump()
    # A file of /proc (0 bytes by its size, text when read) or /sys (4096
    # bytes whatever it holds): its size says nothing of its content, and
    # --out once copied the 0 bytes examined of /proc/meminfo with exit 0.
    for pseudo in ("/proc/meminfo", "/sys/kernel/mm/transparent_hugepage/enabled"):
        if not os.path.exists(pseudo):
            continue
        for args in (["--mem", pseudo, paths[0]], ["--out", pseudo]):
            r = gbp(env, *args)
            assert r.rc == 1 and len(r.stderr_lines()) == 1, r.dump()
            assert "pseudo file system" in r.stderr.decode(), r.dump()
            assert r.stdout == (f"{paths[0]}\n".encode() if "--mem" in args else b""), r.dump()
    # Usage errors: exit 2, nothing examined.
    for args in (["--mem", "--inode", paths[0]], [], ["--out", paths[0], paths[1]],
                 ["--backend", "psychic", paths[0]], ["--in-order", paths[0]],
                 ["--record-size", "0", "--out", paths[0]]):
        r = gbp(env, *args)
        assert r.rc == 2 and r.stdout == b"", r.dump()


def test_unreadable_file_as_nobody(env, files):
    _need_root_and_setpriv(env)
    d, paths = files
    os.chmod(paths[2], 0o600)
    r = gbp(env, "--mem", paths[1], paths[2], paths[3], user="nobody")
    assert r.rc == 1, r.dump()
    assert "Permission denied" in r.stderr.decode()
    assert sorted(r.stdout.decode().splitlines()) == sorted([str(paths[1]), str(paths[3])])


# struct gbp_options and struct gbp_extent (include/discnice/gbp.h), for
# ctypes: exec'd by the tests here, prepended to the scripts they run.
GBP_STRUCTS = """
class Options(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("order", ctypes.c_uint32),
                ("backend", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("access_unit", ctypes.c_uint64), ("record_size", ctypes.c_uint64),
                ("seed", ctypes.c_uint64)]
class Extent(ctypes.Structure):
    _fields_ = [("file", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("error", ctypes.c_int32), ("backend", ctypes.c_uint32),
                ("offset", ctypes.c_uint64), ("length", ctypes.c_uint64),
                ("cached_fraction", ctypes.c_double), ("probe_ns", ctypes.c_uint64),
                ("probes", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("device", ctypes.c_uint64), ("inode", ctypes.c_uint64),
                ("physical", ctypes.c_uint64)]
"""


def test_library_gbp_order(env, files):
    """gbp_order() through ctypes: every byte of every file in exactly one
    extent, cached first, an error extent for a missing file."""
    lib_path = env.build / "libgraybox.so"
    if not lib_path.exists():
        pytest.fail(f"{lib_path} not built (make)")
    lib = ctypes.CDLL(str(lib_path))
    structs = {"ctypes": ctypes}
    exec(GBP_STRUCTS, structs)
    Options, Extent = structs["Options"], structs["Extent"]

    d, paths = files
    set_cache(env, paths, {4})
    names = [str(p).encode() for p in paths] + [b"/nonexistent/gbp"]
    arr = (ctypes.c_char_p * len(names))(*names)
    opt = Options(size=ctypes.sizeof(Options), order=0, backend=1, flags=0,
                  access_unit=2 * MiB, record_size=0, seed=7)
    out = ctypes.POINTER(Extent)()
    n = ctypes.c_size_t()
    rc = lib.gbp_order(arr, ctypes.c_size_t(len(names)), ctypes.byref(opt), ctypes.byref(out),
                       ctypes.byref(n))
    assert rc == 0
    ext = [out[i] for i in range(n.value)]
    covered = {}
    for e in ext:
        if e.flags & 8:
            continue
        covered.setdefault(e.file, []).append((e.offset, e.length))
    for i, p in enumerate(paths):
        spans = sorted(covered[i])
        pos = 0
        for off, length in spans:
            assert off == pos
            pos += length
        assert pos == os.path.getsize(p)
    assert {e.file for e in ext[:3]} == {4}, [(e.file, e.offset) for e in ext[:4]]
    assert ext[-1].file == 6 and ext[-1].flags & 8 and ext[-1].error == -2
    lib.gbp_free(out)
    opt.size = 8
    assert lib.gbp_order(arr, ctypes.c_size_t(1), ctypes.byref(opt), ctypes.byref(out),
                         ctypes.byref(n)) == -22
    # Every -EINVAL empties the out values, a NULL paths array too.
    n.value = 12345
    out = ctypes.POINTER(Extent)(Extent())
    assert lib.gbp_order(None, ctypes.c_size_t(1), None, ctypes.byref(out), ctypes.byref(n)) == -22
    assert n.value == 0 and not out
    n.value = 12345
    assert lib.gbp_order(None, ctypes.c_size_t(1), None, None, ctypes.byref(n)) == -22
    assert n.value == 0
    # An access unit below a page is refused; a page is not.
    opt.size = ctypes.sizeof(Options)
    for unit, want in ((PAGE - 1, -22), (100, -22), (PAGE, 0)):
        opt.access_unit = unit
        n.value = 12345
        assert lib.gbp_order(arr, ctypes.c_size_t(1), ctypes.byref(opt), ctypes.byref(out),
                             ctypes.byref(n)) == want, unit
        if want:
            assert n.value == 0
        else:
            lib.gbp_free(out)


def test_small_usage_errors_and_verbose_count(env, files):
    """--out given twice and an --access-unit below a page are usage
    errors (exit 2, one line, nothing written); -v counts 1 file, and not
    an operand it could not read."""
    d, paths = files
    for args, text in ((["--out", paths[0], "--out", paths[1]], "--out takes one file"),
                       (["--out", paths[0], "--access-unit", str(PAGE - 1)], "at least a page")):
        r = gbp(env, *args)
        r.check_exit(2)
        assert text in r.stderr_lines()[0] and r.stdout == b"", r.dump()
    r = gbp(env, "--out", paths[0], "--in-order", "--access-unit", str(PAGE))
    r.check_exit(0)
    assert r.stdout == paths[0].read_bytes()
    r = gbp(env, "-v", "--inode", paths[0])
    r.check_exit(0)
    assert b"gbp: 1 file, 0 in cache" in r.stderr, r.dump()
    # An operand that cannot be read is not counted among the files
    # examined (it once read "2 files" for one file and one error).
    r = gbp(env, "-v", "--mem", paths[0], d / "missing")
    r.check_exit(1)
    assert b"gbp: 1 file (1 could not be examined)," in r.stderr, r.dump()


@pytest.fixture
def overlay(env, request):
    """An overlayfs mount over a lower directory of the scratch disk (root):
    the files a container sees.  Yields (lower dir, merged dir)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test mounts an overlayfs")
    base = env.path(f"ovl-{request.node.name}")
    subprocess.run(["umount", "-q", str(base / "merged")], capture_output=True)
    shutil.rmtree(base, ignore_errors=True)
    dirs = {n: base / n for n in ("lower", "upper", "work", "merged")}
    for p in dirs.values():
        p.mkdir(parents=True)
    mount_overlay(dirs)
    try:
        yield dirs["lower"], dirs["merged"]
    finally:
        subprocess.run(["umount", str(dirs["merged"])], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("backend", ("auto", "mincore", "probe"))
def test_overlayfs_files_ordered_by_the_pages_beneath(env, overlay, backend):
    """An overlayfs file keeps no pages of its own (its reads go to the file
    beneath), so cachestat of it says 0 cached even when it is all in the
    cache.  gbp must judge it by the lower file's pages: the kernel's
    cachestat of the *lower* files is the truth.  cachestat asked for by
    name is an error there, not a wrong answer."""
    lower, merged = overlay
    lowers = [env.make_file(lower / f"f{i}.txt", 6 * MiB) for i in range(4)]
    merged_paths = [merged / p.name for p in lowers]
    warm = {0, 2}
    for p in lowers:
        env.drop_cache(p)
    for i in warm:
        env.warm(merged_paths[i])        # read through the overlay
    for i, p in enumerate(lowers):
        frac = cached_fraction(p)
        assert (frac > 0.95) if i in warm else (frac < 0.05), f"{p}: {frac:.2f} cached"
    r = gbp(env, "--mem", "--json", "--backend", backend, *merged_paths)
    r.check_exit(0)
    j = json.loads(r.stdout)
    marked = {merged_paths.index(Path(f["path"])) for f in j["files"] if f["in_cache"]}
    if marked != warm:
        r.fail(f"--backend {backend} on overlayfs: in_cache marks {sorted(marked)}, "
               f"the kernel has {sorted(warm)} cached beneath")
    if backend == "auto":
        assert all(f["backend"] == "mincore" for f in j["files"]), r.stdout

    r = gbp(env, "--mem", "--backend", "cachestat", merged_paths[0])
    r.check_exit(1)
    assert b"overlayfs" in r.stderr, r.dump()


TOP_FDS_TAKEN = r"""
import ctypes, os, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
null = os.open("/dev/null", os.O_RDONLY)
for fd in range(1000, 1024):            # the program holds the top of its limit
    os.dup2(null, fd)
lib = ctypes.CDLL(sys.argv[1])
""" + GBP_STRUCTS + r"""
names = [a.encode() for a in sys.argv[2:]]
arr = (ctypes.c_char_p * len(names))(*names)
out, n = ctypes.POINTER(Extent)(), ctypes.c_size_t()
opt = Options(size=ctypes.sizeof(Options), order=0, backend=1, access_unit=2 << 20, seed=7)
before = len(os.listdir("/proc/self/fd"))
rc = lib.gbp_order(arr, ctypes.c_size_t(len(names)), ctypes.byref(opt), ctypes.byref(out),
                   ctypes.byref(n))
errors = sorted({out[i].error for i in range(n.value) if out[i].flags & 8})
print(rc, errors, len(os.listdir("/proc/self/fd")) - before, flush=True)
"""


def test_probes_when_the_top_descriptors_are_taken(env, files):
    """A program holding fds 1000-1023 of a 1024 limit, numbers below free:
    every file probed came back with -EMFILE (the probe's descriptor had
    nowhere to go in the private reserve).  The library's probes are gone
    before gbp_order() returns, so they may use a low number; none is left
    open."""
    _, paths = files
    p = subprocess.run([sys.executable, "-c", TOP_FDS_TAKEN, env.build / "libgraybox.so",
                        *map(str, paths[:3])], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rc, rest = p.stdout.split(" ", 1)
    assert rc == "0" and rest.strip() == "[] 0", p.stdout


@pytest.mark.parametrize("how", ["read-write", "append"])
def test_out_to_the_file_itself_is_refused(env, how):
    """`gbp --out F 1<>F` wrote cached chunks over chunks not read yet and
    exited 0 with F corrupt; `>>F` doubled F before the size check saw it.
    Now refused as cat(1) refuses: exit 1, one line, F untouched."""
    path = env.make_file(env.path(f"self-{how}.bin"), 3 * MiB)
    data = path.read_bytes()
    env.drop_cache(path)
    read_range(path, MiB, MiB)   # a cached chunk in the middle goes first
    fd = os.open(path, os.O_RDWR if how == "read-write" else os.O_WRONLY | os.O_APPEND)
    try:
        p = subprocess.run([str(env.discnice_bin), "gbp", "--out", str(path),
                            "--access-unit", "1MiB"], stdout=fd, stderr=subprocess.PIPE,
                           timeout=60)
    finally:
        os.close(fd)
    assert p.returncode == 1, p
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "input file is output file" in lines[0], lines
    assert path.read_bytes() == data, "the file was changed"


@pytest.mark.parametrize("backend", ["probe", "nowait"])
def test_out_of_a_wholly_cached_file_keeps_its_order(env, shm_files, backend):
    """Every chunk in cache (tmpfs): their probe times say nothing, and
    their noise once shuffled the chunks; they now go in file order, so
    the copy is the file."""
    path, = shm_files(1, 6 * MiB)
    data = path.read_bytes()
    for _ in range(3):
        r = gbp(env, "--out", path, "--access-unit", "1MiB", "--backend", backend)
        r.check_exit(0)
        r.check_output_equals(data)
