"""--cache keep|drop (issue #9 item 4): a job does not push others' files out
of the page cache.

Oracle: the kernel's own view of the page cache, cachestat(2) (Linux >= 6.5,
through ctypes), or mincore(2) on a mapping where cachestat is missing -
never discnice's report.  Bytes are compared with an unregulated run.

The VM this runs on loses page cache to reclaim all the time (kdamond takes
long-idle pages within a minute), so "kept" means >= 90 % of the pages in
the cache or taken by reclaim - cachestat's nr_evicted counts the shadow
entries reclaim leaves, which the job's POSIX_FADV_DONTNEED never does -
and "dropped" means <= 10-25 % cached (written files: the flusher may lag),
not exact page counts.
"""
import ctypes
import mmap
import os

import pytest

MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
SYS_CACHESTAT = 451
libc = ctypes.CDLL(None, use_errno=True)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in
                ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


def _mincore_pages(fd, size):
    """Pages of the file in the cache, by mincore(2) on a mapping of ours."""
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    try:
        vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
        if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(v & 1 for v in vec)
    finally:
        libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))


def _page_counts(path):
    """(pages, cached, reclaimed) of the file, per the kernel.  reclaimed is
    cachestat's nr_evicted: pages reclaim took, each leaving a workingset
    shadow entry in the file's mapping.  POSIX_FADV_DONTNEED (what --cache
    drop does) invalidates and leaves none, so a page counted there was
    taken by the machine's reclaim, not by the job: this VM's kdamond
    takes long-idle page cache within a minute, a hot file's included.
    Without cachestat (mincore), reclaimed is 0."""
    size = os.path.getsize(path)
    pages = (size + PAGE - 1) // PAGE
    fd = os.open(path, os.O_RDONLY)
    try:
        r, s = _Range(0, 0), _Stat()
        rc = libc.syscall(ctypes.c_long(SYS_CACHESTAT), ctypes.c_int(fd), ctypes.byref(r),
                          ctypes.byref(s), ctypes.c_uint(0))
        if rc == 0:
            return pages, s.nr_cache, s.nr_evicted
        return pages, _mincore_pages(fd, size), 0
    finally:
        os.close(fd)


def cached_fraction(path):
    """Share of the file's pages in the page cache, per the kernel."""
    pages, cached, _ = _page_counts(path)
    return cached / pages


def kept_fraction(path):
    """Share of the file's pages not dropped by anyone but reclaim: in the
    cache, or reclaimed (a shadow entry, see _page_counts).  What "the job
    left it alone" means on a machine whose reclaim never sleeps."""
    pages, cached, reclaimed = _page_counts(path)
    return min(1.0, (cached + reclaimed) / pages)


@pytest.fixture
def files(env):
    """COLD (not cached, 64 MiB) and HOT (cached, 32 MiB)."""
    cold = env.make_file(env.path("cache-cold"), 64 * MiB)
    hot = env.make_file(env.path("cache-hot"), 32 * MiB)
    yield cold, hot
    for p in (cold, hot):
        p.unlink(missing_ok=True)


def prepare(env, cold, hot):
    env.drop_cache(cold)
    env.warm(hot)
    assert cached_fraction(cold) < 0.02
    assert cached_fraction(hot) > 0.98


def hot_kept_enough(r, cold, hot):
    """HOT left alone: >= 90 % kept, less what the job itself read in of it.
    A page of HOT that the machine took between prepare() and the job's
    read of it (this VM's DAMON pages out whole physical regions that look
    idle, freshly read pages in them included) is read back from disk by
    the job - so --cache drop rightly drops it - and the refault consumes
    its shadow entry, so kept_fraction cannot see it.  The kernel's count
    of the job's disk reads beyond COLD's size says how much of HOT that
    was (CI once: 4 MiB of 32, the job read 68 MiB for a 64 MiB COLD)."""
    read = (r.report or {}).get("actual_read_bytes", 0)
    extra = max(0, read - os.path.getsize(cold)) / os.path.getsize(hot)
    return kept_fraction(hot) >= 0.90 - extra


def describe(cold, hot):
    return (f"cold {cached_fraction(cold):.1%} cached, hot {cached_fraction(hot):.1%} cached"
            f" ({kept_fraction(hot):.1%} cached or taken by reclaim)")


@pytest.mark.parametrize("cap", [["--rate", "1GiB/s"], ["--read-rate", "200MiB/s"],
                                 ["--rate", "inf"]], ids=["total", "read", "uncapped"])
def test_drop_takes_what_the_job_read_in_and_leaves_the_rest(env, files, cap):
    """cat COLD HOT under --cache drop: COLD, which the job read in, is
    mostly gone from the cache afterwards; HOT, cached before, is all
    there still."""
    cold, hot = files
    prepare(env, cold, hot)
    r = env.run(["sh", "-c", f"cat {cold} {hot} > /dev/null"],
                extra_args=cap + ["--cache", "drop"])
    r.check_exit(0)
    if cached_fraction(cold) > 0.10 or not hot_kept_enough(r, cold, hot):
        r.fail(f"after --cache drop: {describe(cold, hot)}")


def test_keep_is_the_default_and_leaves_the_cache_to_the_kernel(env, files):
    cold, hot = files
    for extra in ([], ["--cache", "keep"]):
        prepare(env, cold, hot)
        r = env.run(["sh", "-c", f"cat {cold} {hot} > /dev/null"],
                    extra_args=["--rate", "1GiB/s"] + extra)
        r.check_exit(0)
        if kept_fraction(cold) < 0.90 or kept_fraction(hot) < 0.90:
            r.fail(f"after --cache keep ({extra or 'default'}): {describe(cold, hot)}")


@pytest.mark.parametrize("reader", ["cat", "stdio", "copy"])
def test_drop_keeps_the_bytes(env, files, reader):
    """Output under drop is byte for byte the unregulated run's, for
    read(), stdio (sha256sum) and copy_file_range (cp) readers."""
    cold, hot = files
    out = env.path("cache-copy")
    cmds = {"cat": ["cat", str(cold), str(hot)],
            "stdio": ["sha256sum", str(cold), str(hot)],
            "copy": ["cp", str(cold), str(out)]}
    cmd = cmds[reader]
    plain = env.run_plain(cmd)
    plain.check_exit(0)
    expected = plain.stdout if reader != "copy" else cold.read_bytes()
    prepare(env, cold, hot)
    r = env.run(cmd, extra_args=["--rate", "1GiB/s", "--cache", "drop"])
    r.check_exit(0)
    if reader == "copy":
        r.check_file_equals(out, expected)
        out.unlink()
    else:
        r.check_output_equals(expected)
    if cached_fraction(cold) > 0.10 or not hot_kept_enough(r, cold, hot):
        r.fail(f"{reader} under --cache drop: {describe(cold, hot)}")


@pytest.mark.parametrize("mode", ["drop", "keep"])
def test_written_output_is_dropped_after_writeback(env, files, mode):
    """dd HOT > OUT under a write cap (paced writeback, the default): with
    drop OUT is mostly out of the cache once the job has exited (what the
    pacer sent went out behind the writer, the rest at exit); with keep it
    stays.  The bytes are the source's."""
    cold, hot = files
    out = env.path("cache-out")
    env.warm(hot)
    r = env.run(["dd", f"if={hot}", f"of={out}", "bs=1M", "status=none"],
                extra_args=["--write-rate", "64MiB/s", "--cache", mode])
    r.check_exit(0)
    frac, kept = cached_fraction(out), kept_fraction(out)
    r.check_file_equals(out, hot.read_bytes())
    out.unlink()
    if mode == "drop" and frac > 0.25:
        r.fail(f"written file {frac:.1%} cached after --cache drop")
    if mode == "keep" and kept < 0.90:
        r.fail(f"written file only {frac:.1%} cached after --cache keep")


def test_mapped_file_is_kept(env, files):
    """A file the job maps is never dropped: the job reads it through the
    mapping whenever it likes."""
    cold, hot = files
    prepare(env, cold, hot)
    prog = ("import mmap,sys\n"
            "f=open(sys.argv[1],'rb')\n"
            "m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\n"
            "f.read()\n"
            "print(sum(m[i] for i in range(0,len(m),1<<16)))\n")
    r = env.run(["python3", "-c", prog, str(cold)],
                extra_args=["--rate", "1GiB/s", "--cache", "drop"])
    r.check_exit(0)
    if kept_fraction(cold) < 0.90:
        r.fail(f"mapped file dropped: {describe(cold, hot)}")


def test_file_read_twice_is_kept(env, files):
    """A process that reads a file a second time keeps it: the second pass
    stops the dropping, so what it read stays cached for a third."""
    cold, hot = files
    prepare(env, cold, hot)
    prog = ("import sys\n"
            "f=open(sys.argv[1],'rb',buffering=0)\n"
            "for _ in range(2):\n"
            "    f.seek(0)\n"
            "    while f.read(1<<17): pass\n")
    r = env.run(["python3", "-c", prog, str(cold)],
                extra_args=["--rate", "1GiB/s", "--cache", "drop"])
    r.check_exit(0)
    if kept_fraction(cold) < 0.90:
        r.fail(f"file read twice was dropped: {describe(cold, hot)}")


def test_bad_value_exits_2_and_starts_nothing(env):
    marker = env.path("cache-bad-marker")
    for args, env_extra in ((["--cache", "bogus"], None), ([], {"DISCNICE_CACHE": "bogus"})):
        r = env.discnice(["run", "--rate", "1M"] + args + ["--", "touch", str(marker)],
                         env=env_extra)
        if r.rc != 2:
            r.fail("a bad --cache value must exit 2")
        lines = r.stderr_lines()
        if not lines or "expected keep or drop" not in lines[0] or len(
                [l for l in lines if l.startswith("discnice:")]) != 1:
            r.fail("expected one clear line naming keep and drop")
        assert not marker.exists(), "the job was started"


def test_cache_and_cache_backend_both_parse(env):
    """--cache is a whole option name, not an abbreviation of
    --cache-backend; each works alone and together."""
    for args in (["--cache", "drop"], ["--cache-backend", "mincore"],
                 ["--cache-backend", "probe", "--cache", "keep"], ["--cache=drop"]):
        r = env.discnice(["run", "--quiet", "--rate", "1M"] + args + ["--", "true"])
        if r.rc != 0:
            r.fail(f"{args} refused")
    r = env.discnice(["run", "--quiet", "--rate", "1M", "--cach", "drop", "--", "true"])
    if r.rc != 2:
        r.fail("an ambiguous abbreviation must be refused")
    # Before --cache existed, --cache was an abbreviation of --cache-backend:
    # "--cache probe" still means that, with a warning.
    r = env.discnice(["run", "--quiet", "--rate", "1M", "--cache", "probe", "--", "true"])
    if r.rc != 0 or not any("taken as --cache-backend probe" in l for l in r.stderr_lines()):
        r.fail("--cache probe must still select the probe backend, with a warning")


def test_report_names_cache_and_writeback(env):
    """The report says which --cache and --writeback the run had (it said
    neither, so a report alone could not tell a paced run from the old
    behaviour)."""
    for args, want in ((["--cache", "drop"], ("drop", "paced")),
                       (["--writeback", "kernel"], ("keep", "kernel")),
                       ([], ("keep", "paced"))):
        r = env.run(["true"], rate="1M", extra_args=args)
        r.check_exit(0)
        rep = r.check_report()
        if (rep.get("cache"), rep.get("writeback")) != want:
            r.fail(f"{args}: the report says cache {rep.get('cache')!r}, writeback "
                   f"{rep.get('writeback')!r}; expected {want}")
