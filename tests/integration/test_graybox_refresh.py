"""`discnice refresh DIR` (graybox-icl §4.2.1 FLDC; issue #11 §2): faithful,
crash-safe, refuses what it cannot copy.

Oracles, none of them discnice's own: lstat (types, modes, owners, sizes,
times to the nanosecond, link counts), SHA-256 of every file's bytes,
readlink, the extended attributes, SEEK_DATA/SEEK_HOLE for holes, which
names share an i-number (hard-link groups), and a listing of DIR's parent
for leftovers.  Everything is read with O_NOATIME (root, or the owner), so
looking changes no access time; a symbolic link's access time is the
exception - readlink(2) always updates it (fs/stat.c: touch_atime), for
refresh as for `ls -l` (under relatime: when the atime is not newer than
the mtime and ctime, as after a utimensat).  So a tree is looked at twice
before it is the reference (stable_snapshot), and where refresh or the
test itself may have read a symbolic link since, its atime is left out.

The crash-injection test (the issue's target) kills refresh with SIGKILL
after every step of its work in turn (DISCNICE_REFRESH_KILL_AT=N, N = 1, 2,
... until a run completes) and after each kill checks that DIR's name
holds a complete, faithful tree, recovers (`--recover`, or a plain second
`refresh`), and checks again, and that no journal or copy is left.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import random
import pwd
import resource
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from loopfs import LoopFs  # noqa: E402

import fanotify_gate

ROOT = os.geteuid() == 0
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FS_NODUMP_FL = 0x40
MiB = 1 << 20
JOURNAL_SUFFIX, COPY_SUFFIX = ".discnice-refresh", ".discnice-refresh.d"


# ---- looking at a tree ----------------------------------------------------------

def _open_dir(path, dir_fd=None):
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(path, flags | os.O_NOATIME, dir_fd=dir_fd)
    except PermissionError:
        return os.open(path, flags, dir_fd=dir_fd)


def _xattrs(path, follow=True):
    try:
        names = os.listxattr(path, follow_symlinks=follow)
    except OSError:
        return {}
    return {n: os.getxattr(path, n, follow_symlinks=follow) for n in sorted(names)}


def _data_map(fd, size):
    """[(start, end)] of data, by SEEK_DATA/SEEK_HOLE."""
    out, pos = [], 0
    while pos < size:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:
            break
        hole = os.lseek(fd, data, os.SEEK_HOLE)
        out.append((data, hole))
        pos = hole
    return out


def snapshot(top, symlink_atime=True, inos=False):
    """{relative path: facts} for top and everything under it, plus the
    hard-link groups as a set of frozensets of paths."""
    top = Path(top)
    facts, by_ino = {}, {}

    def walk(rel):
        full = top / rel if rel else top
        st = os.lstat(full)
        f = {"type": stat.S_IFMT(st.st_mode), "mode": stat.S_IMODE(st.st_mode),
             "uid": st.st_uid, "gid": st.st_gid, "mtime": st.st_mtime_ns,
             "atime": st.st_atime_ns, "nlink": st.st_nlink if not stat.S_ISDIR(st.st_mode) else 0}
        if inos:
            f["ino"] = st.st_ino
        if stat.S_ISLNK(st.st_mode):
            f["target"] = os.readlink(full)
            f["xattrs"] = _xattrs(full, follow=False)
            if not symlink_atime:
                del f["atime"]
        elif stat.S_ISREG(st.st_mode):
            try:
                fd = os.open(full, os.O_RDONLY | os.O_NOATIME)
            except PermissionError:
                fd = os.open(full, os.O_RDONLY)
            try:
                h = hashlib.sha256()
                while chunk := os.read(fd, 1 << 20):
                    h.update(chunk)
                f["sha256"] = h.hexdigest()
                f["size"] = st.st_size
                f["data"] = _data_map(fd, st.st_size)
            finally:
                os.close(fd)
            f["xattrs"] = _xattrs(full)
        elif stat.S_ISDIR(st.st_mode):
            f["xattrs"] = _xattrs(full)
            fd = _open_dir(full)
            try:
                names = sorted(os.listdir(fd))
            finally:
                os.close(fd)
            for n in names:
                walk(f"{rel}/{n}" if rel else n)
        if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
            by_ino.setdefault(st.st_ino, []).append(rel)
        facts[rel or "."] = f

    walk("")
    groups = {frozenset(v) for v in by_ino.values()}
    return facts, groups


def stable_snapshot(top, **kw):
    """Looked at twice: the first look may move a symbolic link's atime
    (readlink), after which it stays (relatime: atime is then newer than
    mtime and ctime)."""
    snapshot(top)
    return snapshot(top, **kw)


def assert_same_tree(got, want, what=""):
    gf, gg = got
    wf, wg = want
    missing = sorted(set(wf) - set(gf))
    extra = sorted(set(gf) - set(wf))
    assert not missing and not extra, f"{what}: missing {missing[:5]}, extra {extra[:5]}"
    for p in sorted(wf):
        for k in wf[p]:
            if k == "atime" and k not in gf[p]:
                continue                    # looked at with symlink_atime=False
            assert gf[p].get(k) == wf[p][k], \
                f"{what}: {p}: {k} is {gf[p].get(k)!r}, want {wf[p][k]!r}"
    assert gg == wg, f"{what}: hard-link groups {sorted(map(sorted, gg))} != {sorted(map(sorted, wg))}"


def parent_listing(d):
    return sorted(os.listdir(Path(d).parent))


def full_state(d):
    """Everything refusals and dry runs must leave alone: the tree (with
    i-numbers, which a refresh changes) and the parent's listing."""
    facts, groups = stable_snapshot(d, inos=True)
    return facts, groups, parent_listing(d)


# ---- making trees ---------------------------------------------------------------

def write(path, data, mode=0o644, times=None):
    path = Path(path)
    path.write_bytes(data)
    os.chmod(path, mode)
    if times:
        os.utime(path, ns=times)
    return path


def make_fixture(top, rng=None, owner_variety=True):
    """A small tree with everything refresh must keep: sizes in a random
    creation order, a sparse file, hard links (a group of 2 in two
    directories, a group of 3), symbolic links (one dangling), set-ID and
    odd modes, other owners (as root), user.* (and as root trusted.*)
    attributes, nanosecond times, empty files and directories, nesting."""
    rng = rng or random.Random(11)
    top = Path(top)
    top.mkdir(parents=True)
    (top / "sub" / "deeper").mkdir(parents=True)
    (top / "empty-dir").mkdir()
    sizes = [0, 1, 100, 4096, 8192, 8193, 20000, 65536, 150000]
    rng.shuffle(sizes)
    for i, size in enumerate(sizes):
        t = 1_600_000_000_123_456_789 + i * 1_000_000_007
        write(top / f"file{i:02d}", rng.randbytes(size), 0o644, (t + 17, t))
    write(top / "setuid", b"#!/bin/sh\n", 0o4755, (1_500_000_000_000_000_001, 1_400_000_000_000_000_002))
    write(top / "readonly", b"ro\n", 0o444)
    write(top / "sub" / "private", rng.randbytes(3000), 0o600)
    write(top / "sub" / "deeper" / "leaf", rng.randbytes(5000), 0o640)
    # Sparse: 2 MiB, data at 0 and at 1 MiB, holes elsewhere.
    with open(top / "sparse", "wb") as f:
        f.write(rng.randbytes(4096))
        f.seek(1 << 20)
        f.write(rng.randbytes(8192))
        f.truncate(2 << 20)
    # Hard links: one group across directories, one of three names.
    write(top / "linked", rng.randbytes(7000))
    os.link(top / "linked", top / "sub" / "linked-too")
    write(top / "sub" / "three", rng.randbytes(100))
    os.link(top / "sub" / "three", top / "sub" / "deeper" / "three-b")
    os.link(top / "sub" / "three", top / "three-c")
    # Symbolic links.
    os.symlink("file00", top / "to-file")
    os.symlink("/nonexistent/dangling", top / "sub" / "dangling")
    os.utime(top / "to-file", ns=(1_300_000_000_000_000_003, 1_200_000_000_000_000_004),
             follow_symlinks=False)
    # Attributes.
    os.setxattr(top / "file01", "user.colour", b"blue")
    os.setxattr(top / "sub", "user.note", b"a directory's own")
    os.setxattr(top, "user.top", b"top")
    if ROOT:
        os.setxattr(top / "file02", "trusted.refresh-test", b"only root")
        if owner_variety:
            os.chown(top / "sub" / "private", 1234, 5678)
            os.chown(top / "sub" / "dangling", 4321, 8765, follow_symlinks=False)
            os.chown(top / "sub" / "deeper", 2345, 6789)
    # Directory modes and times last (creating entries moves mtime).
    os.chmod(top / "sub" / "deeper", 0o750)
    os.chmod(top / "empty-dir", 0o700)
    for i, d in enumerate([top / "sub" / "deeper", top / "sub", top / "empty-dir", top]):
        os.utime(d, ns=(1_100_000_000_000_000_000 + i, 1_000_000_000_000_000_000 + 7 * i))
    return top


def no_leftovers(d):
    d = Path(d)
    left = [n for n in os.listdir(d.parent) if n.startswith(f".{d.name}.discnice-refresh")]
    assert not left, f"left beside {d}: {left}"


def refresh(env, *args, extra_env=None, timeout=120, as_nobody=False, umask=None):
    argv = [str(env.discnice_bin), "refresh"] + [str(a) for a in args]
    if as_nobody:
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + argv
    e = dict(env.base_env)
    e.pop("DISCNICE_REFRESH_KILL_AT", None)
    if extra_env:
        e.update(extra_env)
    p = subprocess.run(argv, env=e, capture_output=True, timeout=timeout, cwd="/",
                       preexec_fn=None if umask is None else lambda: os.umask(umask))
    return p


def one_error_line(p):
    lines = p.stderr.decode(errors="replace").strip().splitlines()
    errors = [l for l in lines if not l.startswith(("discnice: warning:", "Try 'discnice"))]
    assert len(errors) == 1 and errors[0].startswith("discnice: "), \
        f"want one 'discnice: ' line, got {lines!r}"
    return errors[0]


@pytest.fixture
def workdir(env, request):
    d = env.path(f"refresh-{request.node.name}")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ---- the tests --------------------------------------------------------------------

def test_refresh_is_faithful(env, workdir):
    d = make_fixture(workdir / "d")
    want = stable_snapshot(d)
    before_ino = os.lstat(d).st_ino
    p = refresh(env, d)
    assert p.returncode == 0, p.stderr
    assert os.lstat(d).st_ino != before_ino, "the directory was not replaced"
    assert_same_tree(snapshot(d), want, "after refresh")
    no_leftovers(d)
    # Every file is a new inode.
    assert os.lstat(d / "file00").st_ino not in {before_ino}
    # A second refresh of the refreshed directory: the same again.
    p = refresh(env, "--order", "name", d)
    assert p.returncode == 0, p.stderr
    assert_same_tree(snapshot(d, symlink_atime=False), want, "after a second refresh")


def test_preallocated_space_is_kept(env, workdir):
    """fallocate(1)'d space (a database's or an image's reservation) reads
    as holes; a refresh must reserve it again, inside the size and past it
    (FALLOC_FL_KEEP_SIZE), not turn it into holes that a later write could
    find no space for.  The kernel's st_blocks is the oracle."""
    d = workdir / "d"
    d.mkdir()
    whole = d / "reserved"
    with open(whole, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, 8 * 1024 * 1024)
    past = d / "past-eof"
    write(past, b"hi\n")
    r = subprocess.run(["fallocate", "--keep-size", "--length", "4MiB", str(past)],
                       capture_output=True, text=True)   # FALLOC_FL_KEEP_SIZE
    if r.returncode != 0:
        pytest.skip(f"no fallocate --keep-size here: {r.stderr.strip()}")
    sparse = d / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(10 * 1024 * 1024)
    os.sync()
    before = {p.name: (os.stat(p).st_size, os.stat(p).st_blocks) for p in (whole, past, sparse)}
    if before["reserved"][1] * 512 < 8 * 1024 * 1024:
        pytest.skip("this file system does not preallocate")
    p = refresh(env, d)
    assert p.returncode == 0, p.stderr
    after = {p.name: (os.stat(p).st_size, os.stat(p).st_blocks) for p in (whole, past, sparse)}
    assert after == before, f"size and blocks before {before}, after refresh {after}"
    assert whole.read_bytes() == bytes(8 * 1024 * 1024)
    assert past.read_bytes() == b"hi\n"


def test_cached_preallocated_space_is_reserved_not_written(env, workdir):
    """A preallocated file that was read (a backup, a checksum) has its
    reserved space in the page cache as zero pages, and SEEK_DATA counts
    cached pages of an unwritten extent as data.  refresh copied them as
    data: 64 MiB of zeros written for a 64 MiB reservation holding 100 kB,
    and the copy's space was no longer reserved but written.  Now zeros
    inside an unwritten extent are reserved again, not written.  Oracles:
    the kernel's count of the blocks refresh wrote (its rusage), the bytes,
    st_blocks, and FIEMAP's unwritten flag on the copy (filefrag)."""
    d = workdir / "d"
    d.mkdir()
    f = d / "reserved"
    data = os.urandom(100_000)
    with open(f, "wb") as fh:
        os.posix_fallocate(fh.fileno(), 0, 64 * MiB)
        os.pwrite(fh.fileno(), data, 10 * MiB)
    os.sync()
    if os.stat(f).st_blocks * 512 < 64 * MiB:
        pytest.skip("this file system does not preallocate")
    want = f.read_bytes()                     # every page now in the cache
    blocks = os.stat(f).st_blocks
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
    p = refresh(env, d)
    written = (resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock - before) * 512
    assert p.returncode == 0, p.stderr
    assert f.read_bytes() == want
    assert os.stat(f).st_blocks == blocks
    assert written < 4 * MiB, f"refresh wrote {written / MiB:.1f} MiB for 100 kB of data"
    if shutil.which("filefrag"):
        ff = subprocess.run(["filefrag", "-v", str(f)], capture_output=True, text=True).stdout
        assert "unwritten" in ff, f"the copy's reservation is gone:\n{ff}"


@pytest.mark.parametrize("when", [1, 2])
def test_a_journal_that_cannot_be_written_fails_and_changes_nothing(env, workdir, when):
    """fsync(2) of the journal's first version fails with EIO (strace's
    fault injection: the first fsync is the new version's, the second the
    parent directory's): an I/O failure, exit 1 and one line saying nothing
    was changed - not exit 2, which says the refresh was refused - and no
    journal or copy left beside DIR."""
    if not shutil.which("strace"):
        pytest.skip("strace not installed")
    d = make_fixture(workdir / "d")
    want = stable_snapshot(d)
    argv = ["strace", "-o", "/dev/null", "-f", "-e", f"inject=fsync:error=EIO:when={when}",
            str(env.discnice_bin), "refresh", str(d)]
    p = subprocess.run(argv, env=env.base_env, capture_output=True, timeout=120, cwd="/")
    line = one_error_line(p)
    assert p.returncode == 1, (p.returncode, line)
    assert "writing the journal" in line and "nothing was changed" in line, line
    assert_same_tree(snapshot(d, symlink_atime=False), want, "after the failed journal")
    no_leftovers(d)


def _kill_loop(env, d, want, recover_with):
    """Kill at step 1, 2, ... until a run completes; returns the number of
    kills and what was at DIR's name after them."""
    seen = {"old": 0, "new": 0, "journal_left": 0}
    n = 1
    while True:
        ino_before = os.lstat(d).st_ino
        p = refresh(env, d, extra_env={"DISCNICE_REFRESH_KILL_AT": str(n)})
        if p.returncode == 0:
            break
        assert p.returncode == -signal.SIGKILL, \
            f"step {n}: exit {p.returncode}, want death by SIGKILL: {p.stderr!r}"
        # DIR's name holds a complete, faithful tree (a symbolic link's atime
        # aside: refresh's own readlink of the old one may move it).
        assert_same_tree(snapshot(d, symlink_atime=False), want, f"killed after step {n}")
        seen["old" if os.lstat(d).st_ino == ino_before else "new"] += 1
        if any(x.endswith(JOURNAL_SUFFIX) for x in os.listdir(d.parent)):
            seen["journal_left"] += 1
        how = recover_with(n)
        r = refresh(env, *how, d)
        assert r.returncode == 0, f"step {n}: {' '.join(how)} {d}: {r.stderr!r}"
        assert_same_tree(snapshot(d, symlink_atime=False), want,
                         f"killed after step {n}, then {' '.join(how) or 'refresh'}")
        no_leftovers(d)
        n += 1
        assert n < 2000, "refresh never completed"
    assert_same_tree(snapshot(d, symlink_atime=False), want, "the run that completed")
    no_leftovers(d)
    return n - 1, seen


def test_crash_injection_every_step(env, workdir):
    """The issue's target: SIGKILL at every step loses nothing."""
    d = make_fixture(workdir / "d")
    want = stable_snapshot(d)
    kills, seen = _kill_loop(env, d, want,
                             lambda n: ["--recover"] if n % 2 else [])
    # Every step of the work was hit: a kill before the exchange leaves the
    # old tree at the name, after it the new one - both must have happened.
    entries = sum(1 for _ in d.rglob("*"))
    assert kills > 2 * entries, f"only {kills} steps for {entries} entries"
    assert seen["old"] > 0 and seen["new"] > 0, seen
    assert seen["journal_left"] == kills or seen["journal_left"] >= kills - 1, seen


def test_interrupted_refresh_is_recovered_by_the_next_refresh_only(env, workdir):
    """After a kill in each phase, `--dry-run` says what recovery would do
    and touches nothing; `--recover` alone does not refresh again."""
    d = make_fixture(workdir / "d")
    want = stable_snapshot(d)
    # Step 3 is inside the copy (journal "copying").
    p = refresh(env, d, extra_env={"DISCNICE_REFRESH_KILL_AT": "3"})
    assert p.returncode == -signal.SIGKILL
    copy = d.parent / f".{d.name}{COPY_SUFFIX}"
    journal = d.parent / f".{d.name}{JOURNAL_SUFFIX}"
    assert copy.is_dir() and journal.is_file()
    assert b"phase copying" in journal.read_bytes()
    state = full_state(d)
    listing = sorted(os.listdir(copy))
    p = refresh(env, "--dry-run", d)
    assert p.returncode == 0, p.stderr
    assert b"would be undone" in p.stdout, p.stdout
    assert full_state(d) == state and sorted(os.listdir(copy)) == listing
    ino = os.lstat(d).st_ino
    p = refresh(env, "--recover", d)
    assert p.returncode == 0 and b"undone" in p.stdout, p
    assert os.lstat(d).st_ino == ino          # the old one, not refreshed
    no_leftovers(d)
    assert_same_tree(snapshot(d, symlink_atime=False), want, "undone")
    # Nothing to recover: says so, exit 0.
    p = refresh(env, "--recover", d)
    assert p.returncode == 0 and b"no interrupted refresh" in p.stdout


def test_dry_run_touches_nothing(env, workdir):
    d = make_fixture(workdir / "d")
    state = full_state(d)
    p = refresh(env, "--dry-run", "--order", "largest", d)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert "nothing changed (dry run)" in out
    # The plan: files of the top directory largest first.
    sizes = [int(l.split()[1]) for l in out.splitlines()
             if l.startswith("file ") and "/" not in l.split()[2]]
    assert sizes == sorted(sizes, reverse=True), sizes
    assert "link" in out and "sub/linked-too => linked" in out
    assert full_state(d) == state


def test_dry_run_shows_one_line_per_entry(env, workdir):
    """A name with a newline, a tab, a control character or a backslash
    is one line of the plan, escaped as ls -b escapes it; it was printed
    raw, a newline making two lines of one entry."""
    d = workdir / "odd"
    d.mkdir()
    names = {b"new\nline": "new\\nline", b"tab\there": "tab\\there",
             b"bell\x07": "bell\\007", b"back\\slash": "back\\\\slash", b"plain": "plain",
             # C1 controls (a raw CSI byte, and NEL and CSI as UTF-8) and
             # U+2028 can move a terminal's cursor or break a line too;
             # other UTF-8 stays as it is.
             b"raw\x9bcsi": "raw\\233csi", b"nel\xc2\x85x": "nel\\302\\205x",
             b"ls\xe2\x80\xa8sep": "ls\\342\\200\\250sep", "caf\u00e9".encode(): "caf\u00e9"}
    for name in names:
        with open(os.path.join(os.fsencode(d), name), "wb") as f:
            f.write(b"x")
    p = refresh(env, "--dry-run", d)
    assert p.returncode == 0, p.stderr
    plan = [l for l in p.stdout.decode().splitlines() if l.startswith("file ")]
    assert sorted(l.split(None, 2)[2] for l in plan) == sorted(names.values()), plan
    # DIR itself, in the summary and in a refusal, is escaped the same way.
    odd = workdir / "dir\nname"
    odd.mkdir()
    (odd / "a").write_bytes(b"x")
    p = refresh(env, "--dry-run", odd)
    assert p.returncode == 0 and p.stdout.decode().splitlines()[-1].startswith(
        f"{workdir}/dir\\nname: would rewrite"), p.stdout
    os.mkfifo(odd / "fifo")
    p = refresh(env, odd)
    assert p.returncode == 2 and len(p.stderr.decode().splitlines()) == 1, p.stderr
    assert "dir\\nname" in p.stderr.decode(), p.stderr


def _refusal(env, d, expect, *args, as_nobody=False, setup_state=None):
    state = setup_state() if setup_state else full_state(d)
    p = refresh(env, *args, d, as_nobody=as_nobody)
    line = one_error_line(p)
    assert p.returncode == 2, (p.returncode, line)
    assert expect in line, f"{line!r} does not say {expect!r}"
    after = setup_state() if setup_state else full_state(d)
    assert after == state, "a refused refresh touched something"
    return line


def test_refusals_simple(env, workdir):
    # a directory of sysfs or /proc: a dry run planned "3 files", then
    # the run stopped at EACCES
    for pseudo in ("/sys/module/loop/parameters", "/proc/self/fd"):
        if os.path.isdir(pseudo):
            for args in (("--dry-run",), ()):
                p = refresh(env, *args, pseudo)
                assert p.returncode == 2 and "a pseudo file system" in one_error_line(p), p
    # not a directory
    f = write(workdir / "plain", b"x")
    st = os.lstat(f)
    p = refresh(env, f)
    assert p.returncode == 2 and "not a directory" in one_error_line(p)
    assert os.lstat(f).st_mtime_ns == st.st_mtime_ns
    # missing
    p = refresh(env, workdir / "missing")
    assert p.returncode == 2 and "No such file" in one_error_line(p)
    # a symbolic link to a directory
    (workdir / "real").mkdir()
    os.symlink("real", workdir / "alias")
    p = refresh(env, workdir / "alias")
    assert p.returncode == 2 and "symbolic link" in one_error_line(p)
    # the root directory
    p = refresh(env, "/")
    assert p.returncode == 2 and "root directory" in one_error_line(p)
    # usage
    p = refresh(env)
    assert p.returncode == 2
    p = refresh(env, "--order", "biggest", workdir / "real")
    assert p.returncode == 2 and "--order" in one_error_line(p)
    p = refresh(env, workdir / "real", workdir / "real")
    assert p.returncode == 2


def test_refusals_contents(env, workdir):
    """Sockets, FIFOs, devices, links to outside, inode flags: refused,
    one line, exit 2, nothing touched."""
    d = make_fixture(workdir / "d", owner_variety=False)
    # FIFO
    os.mkfifo(d / "sub" / "fifo")
    _refusal(env, d, "is a FIFO")
    os.unlink(d / "sub" / "fifo")
    # socket
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(d / "sock"))
    try:
        _refusal(env, d, "is a socket")
    finally:
        s.close()
        os.unlink(d / "sock")
    # a hard link to a file outside
    os.link(d / "file03", workdir / "outside")
    _refusal(env, d, "outside the directory")
    os.unlink(workdir / "outside")
    # chattr +d (nodump): an inode flag refresh does not copy
    fd = os.open(d / "file04", os.O_RDONLY)
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("i", 0)))[0]
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags | FS_NODUMP_FL))
        _refusal(env, d, "inode flags")
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags))
    except OSError as e:
        pytest.skip(f"FS_IOC_SETFLAGS on {env.fstype}: {e}")
    finally:
        os.close(fd)
    # A file beside the directory at the copy's name, not ours.
    (workdir / f".d{COPY_SUFFIX}").mkdir()
    _refusal(env, d, "move it away first",
             setup_state=lambda: (full_state(d), sorted(os.listdir(workdir))))
    (workdir / f".d{COPY_SUFFIX}").rmdir()


def test_refusals_in_use(env, workdir):
    """An open file, a mapped file, a working directory inside: refused."""
    d = make_fixture(workdir / "d", owner_variety=False)
    holders = {
        "it has it open": f"f=open({str(d / 'sub' / 'private')!r}); import time; time.sleep(60)",
        # (Python's mmap module keeps a descriptor: libc's mmap, then close.)
        "it has it mapped": f"import ctypes,os,time; c=ctypes.CDLL(None); "
                            "c.mmap.restype=ctypes.c_void_p; "
                            f"fd=os.open({str(d / 'file05')!r},os.O_RDONLY); "
                            "assert c.mmap(None,4096,1,1,fd,0) not in (None,2**64-1); "
                            "os.close(fd); time.sleep(60)",
        "working directory": f"import os,time; os.chdir({str(d / 'sub' / 'deeper')!r}); time.sleep(60)",
    }
    for expect, code in holders.items():
        if expect == "it has it mapped" and os.lstat(d / "file05").st_size == 0:
            code = code.replace("file05", "file06")
        proc = subprocess.Popen(["python3", "-c", code + "\n"])
        try:
            time.sleep(0.5)
            line = _refusal(env, d, expect)
            assert f"process {proc.pid}" in line
        finally:
            proc.kill()
            proc.wait()
    # And once nothing holds them: it works.
    p = refresh(env, d)
    assert p.returncode == 0, p.stderr


def test_concurrent_refresh_refused(env, workdir):
    d = make_fixture(workdir / "d", owner_variety=False)
    journal = workdir / f".d{JOURNAL_SUFFIX}"
    fd = os.open(journal, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _refusal(env, d, "another refresh",
                 setup_state=lambda: (full_state(d), sorted(os.listdir(workdir))))
    finally:
        os.close(fd)
    # The empty journal (as a crash before its first write leaves it) is
    # no interrupted refresh: a refresh goes ahead and removes it.
    p = refresh(env, d)
    assert p.returncode == 0, p.stderr
    no_leftovers(d)


def test_refresh_started_beside_another_says_so(env, workdir):
    """Two refreshes of one tree started in the same instant: each finds
    the other holding DIR open before either has locked its journal, and
    the one refused said "is in use by process N (discnice)".  It names
    the other refresh now: a process named discnice whose argv[1] is
    "refresh".  Played by cat(1) run through a symbolic link named
    discnice (the kernel names a process after the path it ran), holding
    DIR open and blocked opening a FIFO named after its first argument;
    with "refresh" further on (discnice run -- make refresh) it is no
    refresh."""
    d = make_fixture(workdir / "d", owner_variety=False)
    fake = workdir / "fake"
    fake.mkdir()
    os.symlink(shutil.which("cat"), fake / "discnice")
    for name in ("refresh", "run"):
        os.mkfifo(fake / name)
    for args, expect in ((["refresh", str(d)],
                          "another refresh is running (process {}; .: it has it open"),
                         (["run", "--", "make", "refresh"],
                          "is in use by process {} (discnice)")):
        fd = os.open(d, os.O_RDONLY)
        try:
            proc = subprocess.Popen([str(fake / "discnice"), *args], cwd=fake, pass_fds=(fd,),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            os.close(fd)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if Path(f"/proc/{proc.pid}/comm").read_text().strip() == "discnice":
                    break
                time.sleep(0.01)
            _refusal(env, d, expect.format(proc.pid))
        finally:
            proc.kill()
            proc.wait()


def test_journal_that_does_not_match_is_refused(env, workdir):
    """A journal saying "exchanged" while the old tree is still at the name
    (someone moved things by hand): refuse, touch nothing."""
    d = make_fixture(workdir / "d", owner_variety=False)
    st = os.lstat(d)
    journal = workdir / f".d{JOURNAL_SUFFIX}"
    journal.write_text("discnice-refresh 1\nphase exchanged\norder smallest\nname 64\n"
                       f"dev {st.st_dev}\nold_ino {st.st_ino}\nnew_ino {st.st_ino + 999999}\n"
                       "pid 1\n")
    _refusal(env, d, "does not match", setup_state=lambda: (full_state(d), journal.read_bytes()))
    _refusal(env, d, "does not match", "--recover",
             setup_state=lambda: (full_state(d), journal.read_bytes()))
    journal.write_text("something else\n")
    _refusal(env, d, "not one this version", setup_state=lambda: (full_state(d), journal.read_bytes()))
    journal.unlink()


def test_recover_names_a_copy_no_journal_explains(env, workdir):
    """A directory at the copy's name and no journal: a refresh refuses
    it, and --recover said "no interrupted refresh" (exit 0), leaving the
    user to find out from the next refresh.  It says so now (exit 2),
    nothing touched."""
    d = make_fixture(workdir / "d", owner_variety=False)
    stray = workdir / f".d{COPY_SUFFIX}"
    stray.mkdir()
    write(stray / "kept", b"kept\n")
    state = lambda: (full_state(d), sorted(os.listdir(workdir)), (stray / "kept").read_bytes())
    for args in (("--recover",), ("--recover", "--dry-run"), ()):
        _refusal(env, d, "exists beside it", *args, setup_state=state)
    shutil.rmtree(stray)
    p = refresh(env, "--recover", d)
    assert p.returncode == 0 and b"no interrupted refresh" in p.stdout + p.stderr, p


def test_journal_of_another_user_is_refused_even_for_root(env, workdir):
    """A journal beside DIR says which tree recovery removes.  One that
    another user put there (here nobody's: phase "exchanged", the old
    tree's i-number that of their own directory at the copy's name, the
    new one DIR's) made root's --recover remove that tree and report a
    refresh that never happened (exit 0); an empty one of theirs was
    taken over.  Refused now (exit 2), nothing touched."""
    if not ROOT:
        pytest.skip("a journal of another user beside a directory needs root to set up")
    d = make_fixture(workdir / "d", owner_variety=False)
    theirs = workdir / f".d{COPY_SUFFIX}"
    theirs.mkdir()
    write(theirs / "their-file", b"theirs\n")
    nobody = pwd.getpwnam("nobody").pw_uid
    st, their_st = os.lstat(d), os.lstat(theirs)
    journal = workdir / f".d{JOURNAL_SUFFIX}"
    journal.write_text("discnice-refresh 1\nphase exchanged\norder smallest\nname 64\n"
                       f"dev {st.st_dev}\nold_ino {their_st.st_ino}\nnew_ino {st.st_ino}\n"
                       "pid 1\n")
    os.chown(journal, nobody, -1)
    state = lambda: (full_state(d), sorted(os.listdir(workdir)), journal.read_bytes(),
                     (theirs / "their-file").read_bytes())
    for args in ((), ("--recover",), ("--dry-run",)):
        line = _refusal(env, d, "belongs to uid", *args, setup_state=state)
        assert f"uid {nobody}" in line, line
    journal.write_bytes(b"")
    _refusal(env, d, "belongs to uid", setup_state=state)
    journal.unlink()
    shutil.rmtree(theirs)
    p = refresh(env, d)
    assert p.returncode == 0, p.stderr
    no_leftovers(d)


def test_journal_tmp_name_of_somebody_else_is_left_alone(env, workdir):
    """A file at the journal's next-version name (.NAME.discnice-refresh.tmp)
    that no interrupted refresh explains - here a hard link to a file that
    matters - is refused up front and never written or removed; a leftover
    that a crash between the next version's create and its rename leaves
    (beside the journal) is removed, by --recover and by a refresh."""
    d = make_fixture(workdir / "d", owner_variety=False)
    important = write(workdir / "important", b"IMPORTANT\n")
    tmp = workdir / f".d{JOURNAL_SUFFIX}.tmp"
    os.link(important, tmp)
    state = lambda: (full_state(d), sorted(os.listdir(workdir)), important.read_bytes(),
                     os.lstat(important).st_nlink)
    _refusal(env, d, "move it away first", setup_state=state)
    _refusal(env, d, "move it away first", "--recover", setup_state=state)
    # Beside an (empty) journal too: a file with two names is nobody's leftover.
    journal = workdir / f".d{JOURNAL_SUFFIX}"
    journal.write_bytes(b"")
    _refusal(env, d, "move it away first", setup_state=state)
    journal.unlink()
    os.unlink(tmp)
    # A symbolic link there: refused, and not removed.
    os.symlink("important", tmp)
    _refusal(env, d, "move it away first", setup_state=state)
    os.unlink(tmp)
    assert important.read_bytes() == b"IMPORTANT\n"

    # The protocol's own leftover: killed after the first journal write, a
    # next version (the journal's text, mode 0600, one name) as a crash
    # before its rename leaves it.
    want = stable_snapshot(d)
    for how in (["--recover"], []):
        p = refresh(env, d, extra_env={"DISCNICE_REFRESH_KILL_AT": "1"})
        assert p.returncode == -signal.SIGKILL, p.stderr
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, journal.read_bytes())
        os.close(fd)
        p = refresh(env, *how, d)
        assert p.returncode == 0, p.stderr
        no_leftovers(d)
        assert_same_tree(snapshot(d, symlink_atime=False), want, f"after {how or 'refresh'}")
    assert important.read_bytes() == b"IMPORTANT\n"


def _inode_flags(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("i", 0)))[0]
    finally:
        os.close(fd)


def _set_inode_flags(path, flags):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags))
    finally:
        os.close(fd)


def test_inode_flags_inherited_from_the_parent_are_not_copied(env, workdir):
    """New files and directories inherit inode flags from their directory
    (chattr +d +A +S +D on DIR's parent): the copy must carry only the
    original's flags (none), so that it is faithful - and a second
    refresh does not refuse its own output."""
    FS_SYNC_FL, FS_NOATIME_FL, FS_DIRSYNC_FL = 0x8, 0x80, 0x10000
    inherited = FS_NODUMP_FL | FS_NOATIME_FL | FS_SYNC_FL | FS_DIRSYNC_FL
    d = workdir / "d"
    (d / "sub").mkdir(parents=True)
    write(d / "f", b"x" * 100)
    write(d / "sub" / "g", b"y" * 5000)
    names = [d, d / "f", d / "sub", d / "sub" / "g"]
    before = {p: _inode_flags(p) for p in names}
    assert not any(f & inherited for f in before.values())
    try:
        _set_inode_flags(workdir, _inode_flags(workdir) | inherited)
    except OSError as e:
        pytest.skip(f"FS_IOC_SETFLAGS on {env.fstype}: {e}")
    try:
        want = stable_snapshot(d)
        for n in range(2):
            p = refresh(env, d)
            assert p.returncode == 0, (n, p.stderr)
            assert_same_tree(snapshot(d), want, f"refresh {n + 1}")
            after = {p: _inode_flags(p) for p in names}
            assert after == before, {str(p): hex(f) for p, f in after.items()}
    finally:
        _set_inode_flags(workdir, _inode_flags(workdir) & ~inherited)


@pytest.mark.parametrize("when", ["scan", "copy"])
def test_file_replaced_by_a_fifo_does_not_hang(env, workdir, when):
    """A regular file replaced by a FIFO after refresh stat'ed it: its open
    must not block (no writer ever comes).  The smaller file "a" is opened
    (scan) or read (copy) before "b"; that open or read waits in the
    kernel (fanotify_gate) while "b" is replaced.  Refused before the copy
    (exit 2), undone during it (exit 1); the FIFO is still there and
    nothing else is left."""
    why = fanotify_gate.available()
    if why:
        pytest.skip(f"no fanotify permission events here ({why}): needs root")
    d = workdir / "d"
    d.mkdir()
    write(d / "a", b"a" * 10)
    write(d / "b", b"b" * 5000)
    os.mkfifo(workdir / "fifo")
    mask = fanotify_gate.FAN_OPEN_PERM if when == "scan" else fanotify_gate.FAN_ACCESS_PERM
    with fanotify_gate.Gate(d / "a", mask, lambda: os.rename(workdir / "fifo", d / "b")) as gate:
        p = refresh(env, d, timeout=30)
    assert gate.fired, "refresh never reached a"
    line = one_error_line(p)
    if when == "scan":
        assert p.returncode == 2 and "changed while it was looked at" in line, (p.returncode, line)
    else:
        assert p.returncode == 1 and "b changed during the refresh" in line, (p.returncode, line)
    assert stat.S_ISFIFO(os.lstat(d / "b").st_mode)
    assert (d / "a").read_bytes() == b"a" * 10
    no_leftovers(d)


needs_root = pytest.mark.skipif(not ROOT, reason="needs root (mount, mknod, setpriv)")


@needs_root
def test_refusals_mounts_and_devices(env, workdir):
    d = make_fixture(workdir / "d")
    os.mknod(d / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    _refusal(env, d, "character device")
    os.unlink(d / "null")
    mnt = d / "sub" / "mnt"
    mnt.mkdir()
    state = full_state(d)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "refresh-test", str(mnt)], check=True)
    try:
        p = refresh(env, d)
        assert p.returncode == 2 and "crosses filesystems" in one_error_line(p)
        p = refresh(env, mnt)
        assert p.returncode == 2 and "mount point" in one_error_line(p)
        # A bind mount of the same filesystem: same st_dev, still a mount.
        subprocess.run(["umount", str(mnt)], check=True)
        subprocess.run(["mount", "--bind", str(d / "empty-dir"), str(mnt)], check=True)
        p = refresh(env, d)
        assert p.returncode == 2 and "crosses filesystems" in one_error_line(p)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
    assert full_state(d) == state
    os.rmdir(mnt)


def _nobody_dir(workdir, name="nb"):
    """A parent and a fixture that nobody owns (and so may refresh)."""
    parent = workdir / name
    parent.mkdir()
    d = make_fixture(parent / "d", owner_variety=False)
    for p in [parent, *parent.rglob("*")]:
        os.chown(p, 65534, 65534, follow_symlinks=False)
    return parent, d


@needs_root
def test_refresh_as_nobody(env, workdir):
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) not installed")
    parent, d = _nobody_dir(workdir)
    # trusted.* was set as root: nobody cannot even see it, so a refresh as
    # nobody would lose it - take it off for the positive case.
    os.removexattr(d / "file02", "trusted.refresh-test")
    want = stable_snapshot(d)
    p = refresh(env, d, as_nobody=True)
    assert p.returncode == 0, p.stderr
    # It says it could not check other users' processes for a working
    # directory, and that the kernel's leases covered their open files.
    assert b"could not be checked for a working directory" in p.stderr
    assert b"the kernel's leases say none has a file open" in p.stderr
    assert_same_tree(snapshot(d), want, "refreshed as nobody")
    assert os.lstat(d).st_uid == 65534
    no_leftovers(d)
    # A file another user's process holds open: the kernel refuses nobody
    # the lease, and the one line says so - no warning beside it that
    # "the kernel's leases say none has a file open".
    with open(d / "file02", "rb"):
        p = refresh(env, d, as_nobody=True)
    assert p.returncode == 2, p.stderr
    assert b"cannot see" in p.stderr and b"leases say" not in p.stderr, p.stderr
    assert_same_tree(snapshot(d, symlink_atime=False), want, "refused as nobody")
    # Crash-safety as nobody too (a few steps, not all).
    for n in (2, 9, 25):
        p = refresh(env, d, as_nobody=True, extra_env={"DISCNICE_REFRESH_KILL_AT": str(n)})
        if p.returncode == 0:
            break
        assert p.returncode == -signal.SIGKILL
        assert_same_tree(snapshot(d, symlink_atime=False), want, f"nobody, step {n}")
        r = refresh(env, "--recover", d, as_nobody=True)
        assert r.returncode == 0, r.stderr
        no_leftovers(d)


@needs_root
def test_a_journal_made_under_any_umask_can_be_recovered_by_its_owner(env, workdir):
    """A refresh killed under umask 0377 left its journal 0400: its owner's
    --recover could not open it to lock it (EACCES; root can), and the
    interrupted refresh stayed.  The journal is 0600 now."""
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) not installed")
    parent, d = _nobody_dir(workdir)
    os.removexattr(d / "file02", "trusted.refresh-test")
    want = stable_snapshot(d)
    p = refresh(env, d, as_nobody=True, umask=0o377, extra_env={"DISCNICE_REFRESH_KILL_AT": "3"})
    assert p.returncode == -signal.SIGKILL, p.stderr
    journal = d.parent / f".{d.name}{JOURNAL_SUFFIX}"
    assert stat.S_IMODE(os.lstat(journal).st_mode) == 0o600
    r = refresh(env, "--recover", d, as_nobody=True)
    assert r.returncode == 0 and b"undone" in r.stdout, r.stderr
    no_leftovers(d)
    assert_same_tree(snapshot(d, symlink_atime=False), want, "recovered as nobody")


@needs_root
def test_capabilities_and_set_id_bits_survive_the_change_of_owner(env, workdir):
    """A copy made by root is chown'ed to the original's owner, and a chown
    removes security.capability (cap_inode_killpriv) and the set-ID bits:
    they must be set after it.  Files and directories of another user."""
    cap = struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)   # VFS_CAP v2: net_bind_service
    d = workdir / "d"
    (d / "sub").mkdir(parents=True)
    shutil.copy("/bin/true", d / "capbin")
    write(d / "setuid", b"#!/bin/sh\n", 0o4755)
    write(d / "setgid", b"#!/bin/sh\n", 0o2755)
    for name, mode in (("capbin", 0o755), ("setuid", 0o4755), ("setgid", 0o2755), ("sub", 0o2775)):
        os.chown(d / name, 1001, 1002)
        os.chmod(d / name, mode)
        os.setxattr(d / name, "security.capability", cap)
    want = stable_snapshot(d)
    assert want[0]["capbin"]["xattrs"] == {"security.capability": cap}
    p = refresh(env, d)
    assert p.returncode == 0, p.stderr
    assert_same_tree(snapshot(d), want, "after refresh")
    for name in ("capbin", "setuid", "setgid", "sub"):
        assert os.getxattr(d / name, "security.capability") == cap, name
    assert stat.S_IMODE(os.lstat(d / "setuid").st_mode) == 0o4755
    assert stat.S_IMODE(os.lstat(d / "sub").st_mode) == 0o2775


@needs_root
def test_refusals_as_nobody(env, workdir):
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) not installed")
    parent, d = _nobody_dir(workdir)
    os.removexattr(d / "file02", "trusted.refresh-test")
    # A file of another owner.
    os.chown(d / "sub" / "private", 0, 0)
    _refusal(env, d, "belongs to uid 0", as_nobody=True)
    os.chown(d / "sub" / "private", 65534, 65534)
    # An unreadable file.
    os.chmod(d / "file03", 0)
    _refusal(env, d, "cannot read", as_nobody=True)
    os.chmod(d / "file03", 0o644)
    # An attribute nobody cannot set: security.capability (CAP_SETFCAP).
    cap = struct.pack("<IIIII", 0x02000000, 1 << 13, 0, 0, 0)   # v2, cap_net_raw permitted
    os.setxattr(d / "file05", "security.capability", cap)
    _refusal(env, d, "security.capability", as_nobody=True)
    os.removexattr(d / "file05", "security.capability")
    # Without permission: a directory of root's, in a parent nobody cannot write.
    rootdir = make_fixture(workdir / "rootd", owner_variety=False)
    _refusal(env, rootdir, "no permission", as_nobody=True)
    # Root's files in nobody's parent: the owner check.
    rd2 = parent / "rootowned"
    rd2.mkdir()
    write(rd2 / "f", b"root's")
    _refusal(env, rd2, "belongs to uid 0", as_nobody=True)


def test_order_smallest_gives_increasing_inumbers(env, workdir):
    """§4.2.1: after a refresh smallest first, i-numbers increase with size.
    What ext4 gives: a new file takes the lowest free i-number of the block
    group its directory's files go to (fs/ext4/ialloc.c: find_inode_bit from
    0), so creation order is i-number order where the group has no free
    holes below; holes left by deleted files elsewhere in the group are
    filled first.  The test measures the share of size-adjacent pairs in
    i-number order and wants most of them."""
    d = workdir / "aged"
    d.mkdir()
    rng = random.Random(5)
    sizes = [rng.choice([100, 1000, 4000, 8192, 16384, 50000, 120000]) for _ in range(60)]
    for i, s in enumerate(sizes):
        write(d / f"f{i:03d}", rng.randbytes(s))
    for epoch in range(6):                      # age it: delete 5, create 5
        for n in rng.sample(sorted(os.listdir(d)), 5):
            os.unlink(d / n)
        for k in range(5):
            write(d / f"n{epoch}-{k}", rng.randbytes(rng.choice([100, 8192, 50000])))
    p = refresh(env, "--order", "smallest", d)
    assert p.returncode == 0, p.stderr
    files = sorted((os.lstat(d / n).st_size, n, os.lstat(d / n).st_ino) for n in os.listdir(d))
    inos = [f[2] for f in files]
    in_order = sum(1 for a, b in zip(inos, inos[1:]) if a < b) / (len(inos) - 1)
    # Distinct sizes ordered: ties are by name, so i-numbers of equal sizes
    # follow names - also creation order.
    assert in_order >= 0.9, f"only {in_order:.0%} of size-adjacent pairs in i-number order: {inos}"
    # --order inode keeps today's relative order.
    before = [n for _, n in sorted((os.lstat(d / n).st_ino, n) for n in os.listdir(d))]
    p = refresh(env, "--order", "inode", d)
    assert p.returncode == 0, p.stderr
    after = [n for _, n in sorted((os.lstat(d / n).st_ino, n) for n in os.listdir(d))]
    pairs = sum(1 for a, b in zip(after, after[1:]) if before.index(a) < before.index(b))
    assert pairs / (len(after) - 1) >= 0.9


@needs_root
def test_in_use_by_a_process_refresh_cannot_see_is_refused(env, workdir):
    """Not root, refresh cannot read other users' /proc/PID/fd or maps; the
    kernel's write lease (F_SETLEASE, fs/locks.c check_conflicting_open)
    still says a file is open or mapped by anyone.  Here the holder is
    root (this test process, and a child of it): refused, exit 2,
    nothing touched."""
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) not installed")
    parent, d = _nobody_dir(workdir)
    os.removexattr(d / "file02", "trusted.refresh-test")
    fd = os.open(d / "sub" / "private", os.O_RDONLY)
    try:
        line = _refusal(env, d, "in use by a process refresh cannot see", as_nobody=True)
        assert "sub/private" in line
    finally:
        os.close(fd)
    target = "file05" if os.lstat(d / "file05").st_size else "file06"
    code = ("import ctypes,os,time; c=ctypes.CDLL(None); c.mmap.restype=ctypes.c_void_p; "
            f"fd=os.open({str(d / target)!r},os.O_RDONLY); "
            "assert c.mmap(None,4096,1,1,fd,0) not in (None,2**64-1); "
            "os.close(fd); print('mapped',flush=True); time.sleep(60)\n")
    proc = subprocess.Popen(["python3", "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"mapped\n"
        line = _refusal(env, d, "in use by a process refresh cannot see", as_nobody=True)
        assert target in line
    finally:
        proc.kill()
        proc.wait()
    # Nothing holds them now: nobody's refresh goes through.
    p = refresh(env, d, as_nobody=True)
    assert p.returncode == 0, p.stderr
    no_leftovers(d)


def _opener(path, text):
    """A process that opens `path` for appending (blocking in the kernel's
    break_lease() while refresh holds a lease on it), appends `text`, and
    prints when its open returned."""
    code = ("import os,sys,time; fd=os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND); "
            "t=time.monotonic(); os.write(fd, sys.argv[2].encode()); os.close(fd); "
            "print(t, flush=True)\n")
    return subprocess.Popen(["python3", "-c", code, str(path), text], stdout=subprocess.PIPE)


def _refresh_until_the_exchange(env, d, ino, timeout=20.0):
    """Start a refresh of d that holds its leases 2 s after the exchange;
    return it (still running) once d's name holds a new inode."""
    e = dict(env.base_env, DISCNICE_REFRESH_LEASE_GRACE_MS="2000")
    e.pop("DISCNICE_REFRESH_KILL_AT", None)
    proc = subprocess.Popen([str(env.discnice_bin), "refresh", str(d)], env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if os.lstat(d).st_ino != ino:
                return proc
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"refresh ended before the exchange: {proc.communicate()!r}")
        time.sleep(0.001)
    proc.kill()
    proc.wait()
    raise AssertionError("refresh never exchanged the trees")


def _finish(rp, *openers):
    """refresh's stderr once it and the openers are done; it is killed if
    anything failed first."""
    try:
        _, err = rp.communicate(timeout=60)
        for o in openers:
            assert o.wait(timeout=60) == 0
        return err
    finally:
        if rp.poll() is None:
            rp.kill()
            rp.wait()


def test_open_of_an_old_file_during_the_exchange_swaps_back(env, workdir):
    """The race the paper's refresh and a /proc look cannot close: a process
    that looked a name up in the old tree just before the exchange opens
    the old file after it.  refresh holds write leases on both trees'
    files through the exchange; the opener's open(2) waits in
    break_lease(), refresh sees the lease breaking, exchanges back and
    undoes itself, and the opener gets the old file - still DIR's - and
    what it writes is there.  (The opener here reaches the old file by
    the name it has after the exchange, the copy's name: the same inode
    and the same break as a lookup that straddled the exchange.)"""
    d = make_fixture(workdir / "d", owner_variety=False)
    want = stable_snapshot(d, inos=True)
    ino = os.lstat(d).st_ino
    before = (d / "file01").read_bytes()
    rp = _refresh_until_the_exchange(env, d, ino)
    old_file = workdir / f".d{COPY_SUFFIX}" / "file01"
    assert os.lstat(old_file).st_ino == want[0]["file01"]["ino"]
    err = _finish(rp, _opener(old_file, "written while refresh held the lease\n"))
    assert rp.returncode == 1, err
    assert b"was opened during the exchange; exchanged back" in err, err
    assert b"undone, the directory is as it was" in err, err
    # DIR is the old tree again, every inode the same, with what the
    # opener wrote in its file01.
    assert os.lstat(d).st_ino == ino
    assert (d / "file01").read_bytes() == before + b"written while refresh held the lease\n"
    no_leftovers(d)
    got = snapshot(d, symlink_atime=False, inos=True)
    for facts in (got[0], want[0]):
        for k in ("sha256", "size", "data", "mtime", "atime"):
            facts["file01"].pop(k, None)
    assert_same_tree(got, want, "after the exchange back")


def test_what_is_put_in_the_new_tree_during_the_exchange_is_never_removed(env, workdir):
    """A file moved into DIR while the new tree stands there, then an old
    file opened: refresh exchanges back, as above - and the new tree is no
    longer its partial copy.  It used to remove it as one, and the file
    moved in was gone for good; it is kept at the copy's name, refresh says
    so (exit 1) and where, and DIR is the old tree."""
    d = make_fixture(workdir / "d", owner_variety=False)
    ino = os.lstat(d).st_ino
    precious = workdir / "precious"
    precious.write_bytes(b"keep me\n")
    rp = _refresh_until_the_exchange(env, d, ino)
    os.rename(precious, d / "precious")
    err = _finish(rp, _opener(workdir / f".d{COPY_SUFFIX}" / "file01", "old\n"))
    assert rp.returncode == 1, err
    assert b"exchanged back" in err and b"changed meanwhile" in err, err
    assert os.lstat(d).st_ino == ino
    kept = workdir / f".d{COPY_SUFFIX}" / "precious"
    assert kept.read_bytes() == b"keep me\n", err
    os.rename(kept, d / "precious")
    # --recover will not remove a tree changed after the copy: the rest
    # is the user's to remove.
    r = refresh(env, "--recover", d)
    assert r.returncode == 2 and b"changed after the copy" in r.stderr, r.stderr
    shutil.rmtree(workdir / f".d{COPY_SUFFIX}")
    r = refresh(env, "--recover", d)
    assert r.returncode == 0, r.stderr
    assert (d / "precious").read_bytes() == b"keep me\n"
    no_leftovers(d)


@pytest.mark.parametrize("hint", ["chproj 42", "extsize 2m", "chattr +S"])
def test_xfs_project_ids_and_hints_are_refused(env, hint):
    """An XFS project ID (project quotas, lsattr -p) or allocation hint
    (xfs_io extsize, the filestream flag) is not copied: refresh refused
    nothing and dropped them (projid 42 -> 0), changing the tree's quota
    accounting silently.  Now refused (exit 2), the tree untouched."""
    why = LoopFs.unavailable()
    if why:
        pytest.skip(f"an XFS image is made on a loop device: {why}")
    if not shutil.which("mkfs.xfs") or not shutil.which("xfs_io"):
        pytest.skip("needs xfsprogs (mkfs.xfs, xfs_io)")
    with LoopFs(size_mib=320, tag="test-refresh-xfs", fstype="xfs") as fs:
        d = Path(fs.path("x"))
        (d / "sub").mkdir(parents=True)
        (d / "a").write_bytes(b"a\n")
        (d / "c").touch()   # an extent size hint is set on an empty file
        target = {"chattr +S": d / "sub", "extsize 2m": d / "c"}.get(hint, d / "a")
        subprocess.run(["xfs_io", "-c", hint, str(target)], check=True, capture_output=True)
        ino = os.lstat(d).st_ino
        r = refresh(env, d)
        assert r.returncode == 2, r
        err = r.stderr.decode()
        assert ("project ID 42" if hint.startswith("chproj") else "XFS allocation hints") in err, err
        assert os.lstat(d).st_ino == ino
        no_leftovers(d)


def test_xfs_holes_stay_holes(env):
    """On XFS a file written past its end gets speculative preallocation
    beyond EOF; refresh set the copy's size only after its data, so that
    reservation ended up inside the file: 28 MiB of a 50 MiB hole became
    an unwritten extent (du 102400 -> 131008 KiB).  The size is set
    first now: the same data ranges (SEEK_DATA) and bytes, and blocks
    (st_blocks) for the data alone."""
    why = LoopFs.unavailable()
    if why:
        pytest.skip(f"an XFS image is made on a loop device: {why}")
    if not shutil.which("mkfs.xfs"):
        pytest.skip("needs xfsprogs (mkfs.xfs)")
    with LoopFs(size_mib=1024, tag="test-refresh-xfs-holes", fstype="xfs") as fs:
        d = Path(fs.path("x"))
        d.mkdir()
        # Each file closed between its writes and truncate(1), as by hand:
        # XFS trims its speculative preallocation at the last close, so
        # the originals hold none.
        data = os.urandom(MiB)
        with open(d / "big", "wb") as f:
            for _ in range(100):
                f.write(data)
        os.truncate(d / "big", 150 * MiB)
        (d / "middle").write_bytes(data * 50)
        with open(d / "middle", "r+b") as f:
            f.seek(100 * MiB)
            f.write(data * 10)
        os.sync()
        def facts(p):
            fd = os.open(p, os.O_RDONLY)
            try:
                ranges = _data_map(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            return ranges, os.stat(p).st_blocks, hashlib.sha256(p.read_bytes()).hexdigest()

        before = {p.name: facts(p) for p in (d / "big", d / "middle")}
        r = refresh(env, d)
        assert r.returncode == 0, r
        os.sync()
        after = {p.name: facts(p) for p in (d / "big", d / "middle")}
        for name, (ranges, blocks, digest) in after.items():
            assert (ranges, digest) == (before[name][0], before[name][2]), name
            # The copy's blocks are its data's, no more (XFS may keep
            # post-EOF preallocation on an original written twice; the
            # copy drops that, as the man page says).
            assert blocks * 512 == sum(end - start for start, end in ranges), (name, blocks)


@pytest.mark.parametrize("what", ["sub", "itself"])
def test_a_tree_bind_mounted_elsewhere_is_refused(env, workdir, what):
    """DIR or a directory in it bind-mounted somewhere else (a container's
    volume): the mount holds the old tree's directory, which refresh
    removes - the mount was left on a deleted, empty directory (exit 0).
    Refused now (exit 2), naming the mount, the tree untouched."""
    if not ROOT:
        pytest.skip("a bind mount needs root")
    d = make_fixture(workdir / "d", owner_variety=False)
    want = stable_snapshot(d, inos=True)
    view = workdir / "view"
    view.mkdir()
    src = d / "sub" if what == "sub" else d
    if what == "sub":
        src.mkdir(exist_ok=True)
        want = stable_snapshot(d, inos=True)
    subprocess.run(["mount", "--bind", str(src), str(view)], check=True)
    try:
        r = refresh(env, d)
        assert r.returncode == 2, r
        assert f"also mounted at {view}".encode() in r.stderr, r.stderr
    finally:
        subprocess.run(["umount", str(view)], check=True)
    assert_same_tree(stable_snapshot(d, inos=True), want, "after the refusal")
    no_leftovers(d)


def test_recovery_never_removes_a_tree_written_after_the_copy(env, workdir):
    """refresh killed in the moment after the exchange, while an opener of
    an old file waited out its lease - and then wrote.  The journal says
    "copied", the new tree is in place: --recover finished, removing the
    old tree with what was written there.  Now it sees a change after
    the journal's time, refuses (exit 2), touches nothing, and says so."""
    d = make_fixture(workdir / "d", owner_variety=False)
    ino = os.lstat(d).st_ino
    rp = _refresh_until_the_exchange(env, d, ino)
    old_file = workdir / f".d{COPY_SUFFIX}" / "file01"
    try:
        opener = _opener(old_file, "WRITTEN after the copy\n")
        time.sleep(0.3)
        rp.kill()
        rp.wait()
        assert opener.wait(timeout=60) == 0
    finally:
        if rp.poll() is None:
            rp.kill()
            rp.wait()
    assert old_file.read_bytes().endswith(b"WRITTEN after the copy\n")
    for args in (["--recover", "--dry-run"], ["--recover"]):
        r = refresh(env, *args, d)
        assert r.returncode == 2, r
        assert b"was changed after the copy was made" in r.stderr, r.stderr
    assert old_file.read_bytes().endswith(b"WRITTEN after the copy\n")
    shutil.rmtree(workdir / f".d{COPY_SUFFIX}")   # the user's call: the new tree it is
    r = refresh(env, "--recover", d)
    assert r.returncode == 0, r.stderr
    no_leftovers(d)


def test_a_path_longer_than_path_max_is_refused(env, workdir):
    """200 levels of 20-byte names: the deepest entry's path from DIR is
    past PATH_MAX.  It was copied, then could not be opened for its
    metadata, and the whole refresh undone (exit 1, a message cut short);
    the scan refuses it now (exit 2), nothing touched."""
    d = workdir / "deep"
    d.mkdir()
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(200):
            os.mkdir("d" * 20, dir_fd=fd)
            nxt = os.open("d" * 20, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    ino = os.lstat(d).st_ino
    r = refresh(env, d)
    assert r.returncode == 2, r
    assert b"longer than 4096 bytes" in r.stderr, r.stderr
    assert os.lstat(d).st_ino == ino
    no_leftovers(d)


def test_open_of_both_trees_during_the_exchange_keeps_the_old_one(env, workdir):
    """Both an old file and a new one opened during the exchange: both trees
    are somebody's.  refresh keeps the new one in place, leaves the old one
    at the copy's name with the journal, and says so (exit 1); --recover
    then finishes."""
    d = make_fixture(workdir / "d", owner_variety=False)
    ino = os.lstat(d).st_ino
    rp = _refresh_until_the_exchange(env, d, ino)
    err = _finish(rp, _opener(workdir / f".d{COPY_SUFFIX}" / "file01", "old\n"),
                  _opener(d / "file01", "new\n"))
    assert rp.returncode == 1, err
    assert b"were both opened during the exchange" in err, err
    assert os.lstat(d).st_ino != ino
    assert (d / "file01").read_bytes().endswith(b"new\n")
    assert (workdir / f".d{COPY_SUFFIX}" / "file01").read_bytes().endswith(b"old\n")
    r = refresh(env, "--recover", d)
    assert r.returncode == 0, r.stderr
    no_leftovers(d)
