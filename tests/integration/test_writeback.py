"""Paced writeback (issue #9 §1): the disk itself sees the write cap.

Oracle: an ext4 image on a loop device of its own (bench/loopfs.py), whose
/sys/block/loopN/stat counts exactly what that filesystem sends to its
disk.  Needs root (losetup, mount); skipped with the reason without it.

Rates here are loose behavioural bounds (the disk writes while the job
runs, not 30 s later; never a burst above the cap); the exact figures are
`make bench-writeback`'s.
"""
import os
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from loopfs import LoopFs  # noqa: E402

MiB = 1 << 20
PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def fs():
    why = LoopFs.unavailable()
    if why:
        pytest.skip(f"paced writeback is judged on a loop device: {why}")
    with LoopFs(size_mib=512, tag="test-writeback") as f:
        yield f


def settle(fs):
    subprocess.run(["sync", "-f", fs.mountpoint], check=True)
    time.sleep(0.3)


class Sampler(threading.Thread):
    """The loop device's written bytes every 50 ms."""

    def __init__(self, fs):
        super().__init__(daemon=True)
        self.fs, self.samples, self.done = fs, [], threading.Event()

    def run(self):
        while not self.done.is_set():
            self.samples.append((time.monotonic(), self.fs.written_bytes()))
            time.sleep(0.05)

    def stop(self):
        self.done.set()
        self.join()


def written_during(env, fs, cmd, cap, mode, cwd=None):
    settle(fs)
    s = Sampler(fs)
    s.start()
    w0 = fs.written_bytes()
    t0 = time.monotonic()
    r = env.run(cmd, extra_args=["--write-rate", cap, "--writeback", mode], cwd=cwd)
    t1 = time.monotonic()
    w1 = fs.written_bytes()
    s.stop()
    r.check_exit(0)
    return r, w1 - w0, t1 - t0, s.samples


@pytest.mark.parametrize("cap", ["8MiB/s", "12MB/s"])
def test_paced_dd_reaches_the_disk_at_the_cap(env, fs, cap):
    """dd under a write cap: the disk writes while the job runs, at no more
    than the cap, and the file is the source, byte for byte."""
    src = env.make_file(env.path("wb-src"), 32 * MiB)
    out = fs.path("dd.out")
    r, during, dur, _ = written_during(
        env, fs, ["dd", f"if={src}", f"of={out}", "bs=1M", "status=none"], cap, "paced")
    cap_bps = 8 * MiB if cap == "8MiB/s" else 12e6
    assert during >= 0.6 * 32 * MiB, r.fail(
        f"the disk saw only {during / MiB:.1f} MiB of 32 while the job ran: writeback not paced")
    assert during / dur <= 1.15 * cap_bps, r.fail(
        f"disk wrote {during / dur / MiB:.2f} MiB/s during the job, cap {cap}")
    r.check_file_equals(out, src.read_bytes())
    os.unlink(out)


def test_kernel_mode_leaves_writeback_to_the_kernel(env, fs):
    """--writeback kernel: as before, the data stays dirty in memory and the
    disk sees little of it while the job runs."""
    src = env.make_file(env.path("wb-src"), 32 * MiB)
    out = fs.path("dd-kernel.out")
    cmd = ["dd", f"if={src}", f"of={out}", "bs=1M", "status=none"]
    r, kernel, _, _ = written_during(env, fs, cmd, "16MiB/s", "kernel")
    os.unlink(out)
    r2, paced, _, _ = written_during(env, fs, cmd, "16MiB/s", "paced")
    assert paced > kernel + 8 * MiB, r2.fail(
        f"paced wrote {paced / MiB:.1f} MiB during the job, kernel mode {kernel / MiB:.1f}")
    r2.check_file_equals(out, src.read_bytes())
    os.unlink(out)


def test_tar_x_of_many_files_keeps_every_byte(env, fs):
    """tar x of a tree of many small files (more than the agent holds
    descriptors for): every byte arrives, the disk writes during the job."""
    tree = env.make_tree(env.path("wb-tree"), files=120, size_each=160 * 1024)
    tarball = env.path("wb-tree.tar")
    subprocess.run(["tar", "cf", tarball, "-C", tree, "."], check=True)
    out = fs.path("tarx")
    os.mkdir(out)
    r, during, _, _ = written_during(env, fs, ["tar", "xf", tarball, "-C", out], "8MiB/s", "paced")
    assert during >= 0.5 * 120 * 160 * 1024, r.fail(f"disk saw {during / MiB:.1f} MiB during the job")
    diff = subprocess.run(["diff", "-r", str(tree), out], capture_output=True)
    assert diff.returncode == 0, diff.stdout.decode()[:2000]
    subprocess.run(["rm", "-rf", out], check=True)


def test_files_deleted_soon_never_reach_the_disk(env, fs):
    """Create, write 10 KB, close, delete (the Create-Delete micro-benchmark):
    the kernel's delay saves these writes, and pacing keeps the saving."""
    d = fs.path("cd")
    os.mkdir(d)
    script = ("import os\n"
              f"p = {d!r} + '/f'\n"
              "for i in range(3000):\n"
              "    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
              "    os.write(fd, b'c' * 10240)\n"
              "    os.close(fd)\n"
              "    os.unlink(p)\n")
    got = {}
    for mode in ("kernel", "paced"):
        settle(fs)
        w0 = fs.written_bytes()
        env.run([PYTHON, "-c", script], extra_args=["--write-rate", "4MiB/s", "--writeback", mode]
                ).check_exit(0)
        settle(fs)
        got[mode] = fs.written_bytes() - w0
    # 3000 x 10 KB = 30 MB written by the program; journal noise aside,
    # neither mode may send it to the disk.
    assert got["paced"] <= got["kernel"] + 2 * MiB, \
        f"paced sent {got['paced']:,} B to the disk, kernel mode {got['kernel']:,} B"


def test_posix_lock_survives_our_descriptor(env, fs):
    """The agent holds a descriptor of a file the program closed.  Closing
    any descriptor of a file drops the process's POSIX locks on it, so the
    agent must not close its own while the program holds a lock taken
    through a newer descriptor."""
    f = fs.path("locked")
    other = fs.path("other")
    script = ("import fcntl, os, sys, time\n"
              f"f, other = {f!r}, {other!r}\n"
              "fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)\n"
              "os.write(fd, b'x' * (2 << 20))\n"
              "os.close(fd)\n"                       # pages still queued: held
              "fd2 = os.open(f, os.O_RDWR)\n"
              "fcntl.lockf(fd2, fcntl.LOCK_EX)\n"
              "o = os.open(other, os.O_WRONLY | os.O_CREAT, 0o644)\n"
              "for i in range(64):\n"                # pushes f's pages out
              "    os.write(o, b'y' * (1 << 20))\n"
              "os.close(o)\n"
              "sys.stdout.write('locked\\n'); sys.stdout.flush()\n"
              "sys.stdin.readline()\n")
    argv = [str(env.discnice_bin), "run", "-q", "--write-rate", "32MiB/s", "--writeback", "paced",
            "--", PYTHON, "-c", script]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=env._env())
    try:
        assert p.stdout.readline() == "locked\n"
        probe = ("import fcntl, os\n"
                 f"fd = os.open({f!r}, os.O_RDWR)\n"
                 "try:\n"
                 "    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                 "    print('free')\n"
                 "except OSError:\n"
                 "    print('held')\n")
        got = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, check=True)
        assert got.stdout.strip() == "held", "the program's lock was dropped behind its back"
    finally:
        p.stdin.write("\n")
        p.stdin.close()
        p.wait(timeout=60)
    assert p.returncode == 0
    os.unlink(f)
    os.unlink(other)


CLOSED_IS_CLOSED = r"""
import fcntl, os, subprocess, sys
d = sys.argv[1]
script = os.path.join(d, "hello.sh")
fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755)
os.write(fd, b"#!/bin/sh\necho hi\n" + b"#" * 20000 + b"\n")
os.close(fd)                         # its pages still queued for pacing
print(subprocess.run([script], capture_output=True).stdout.decode().strip())
locked = os.path.join(d, "locked")
fd = os.open(locked, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"x" * 300000)
os.close(fd)                         # drops the flock, without the agent
probe = subprocess.run(["flock", "-n", "-E", "42", locked, "true"])
print("free" if probe.returncode == 0 else "held")
"""


@pytest.mark.parametrize("cap", [["--write-rate", "2MiB/s"], ["--rate", "5MiB/s"]])
def test_a_file_the_program_closed_is_closed(env, cap):
    """Paced writeback reaches the pages of a file the program closed
    through a descriptor of its own.  That was a dup of the program's, so
    the program's description stayed open after its close(): a script it
    had just written failed to run (ETXTBSY) and its flock() stayed held.
    Now a read-only description of the agent's own: the program's close is
    a close."""
    d = env.fresh_dir("closed-is-closed")
    plain = env.run_plain([PYTHON, "-c", CLOSED_IS_CLOSED, str(d)])
    assert plain.rc == 0 and plain.stdout == b"hi\nfree\n", plain.dump()
    r = env.run([PYTHON, "-c", CLOSED_IS_CLOSED, str(d)], extra_args=[*cap, "--writeback", "paced"])
    r.check_exit(0)
    r.check_output_equals(plain.stdout)


REMOVED_BY_ANOTHER = r"""
import os, subprocess, sys, time
d = sys.argv[1]
for i in range(4):
    p = os.path.join(d, "f%d" % i)
    with open(p, "wb") as f:
        for _ in range(30):
            f.write(b"x" * (1 << 20))
    subprocess.run(["rm", p], check=True)   # another process removes it
# A file closed a second ago is not ours to keep either (umount).
with open(os.path.join(d, "last"), "wb") as f:
    f.write(b"y" * (8 << 20))
time.sleep(1.3)
os.close(os.open("/dev/null", os.O_RDONLY))  # any call of the program's
names = []
for n in os.listdir("/proc/self/fd"):
    try:
        names.append(os.readlink("/proc/self/fd/" + n))
    except OSError:
        pass                                # the directory's own, closed
print(sum(1 for n in names if n.startswith(d)))
"""


@pytest.mark.parametrize("cap", ["100MiB/s", "8MiB/s"])
def test_a_removed_file_frees_its_space(env, cap):
    """The agent kept its descriptor of a file the program had closed until
    its queued pages went out, which for a program that stopped writing was
    never: a file `rm` removed kept its blocks, and the script's next 30 MiB
    met ENOSPC on a 64 MiB file system where it had room without us; a file
    system the job wrote to could not be unmounted.  A file with no name
    left is let go at the program's next open, read, write or close, any
    other at the first of them a second after its close (a program that
    calls nothing more keeps it till it does, or exits).  Judged by the
    script's exit status (ENOSPC) and the descriptors /proc shows it
    holding."""
    why = LoopFs.unavailable()
    if why:
        pytest.skip(f"needs a small file system of its own: {why}")
    with LoopFs(size_mib=64, tag="test-wb-removed") as small:
        d = small.path("w")
        os.mkdir(d)
        plain = env.run_plain([PYTHON, "-c", REMOVED_BY_ANOTHER, d])
        assert plain.rc == 0 and plain.stdout == b"0\n", plain.dump()
        os.unlink(os.path.join(d, "last"))
        r = env.run([PYTHON, "-c", REMOVED_BY_ANOTHER, d],
                    extra_args=["--write-rate", cap, "--writeback", "paced"])
        r.check_exit(0)
        r.check_output_equals(plain.stdout)


AGENTS_NUMBERS = r"""
import errno, os, sys
d = sys.argv[1]
fd = os.open(os.path.join(d, "f"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"x" * 300000)
os.close(fd)                          # pacing may keep a descriptor of f
numbers = sorted(int(n) for n in os.listdir("/proc/self/fd") if int(n) > 100)
ebadf = True
for n in numbers:                     # none is the program's
    try:
        os.close(n)
        ebadf = False
    except OSError as e:
        ebadf = ebadf and e.errno == errno.EBADF
target = numbers[-1] if numbers else 1010
r, w = os.pipe()
os.dup2(w, target)
os.close(w)
pid = os.fork()
if pid == 0:
    os.write(target, b"hello")
    fd = os.open(os.path.join(d, "g"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"y" * 300000)
    os.close(fd)
    os._exit(0)
os.waitpid(pid, 0)
os.write(target, b" world")
os.close(target)
print(ebadf, os.read(r, 1000).decode())
"""


@pytest.mark.parametrize("trace", [False, True])
def test_the_agents_descriptors_are_not_the_programs(env, trace):
    """The agent keeps descriptors of its own at the top of the program's
    range (paced writeback, --trace).  Without it those numbers are free:
    the program's close() of one says EBADF and leaves ours alone, and a
    program that dup2()s onto one gets the number for good - a fork child
    writes to it, our trace lines never go into it.  Before: close()
    closed ours, and the child's write failed (EBADF: the agent closed
    'its' number in the child) or trace lines went into the program's
    pipe."""
    d = env.fresh_dir(f"numbers-{trace}")
    plain = env.run_plain([PYTHON, "-c", AGENTS_NUMBERS, str(d)])
    assert plain.rc == 0 and plain.stdout == b"True hello world\n", plain.dump()
    extra = ["--write-rate", "2MiB/s", "--writeback", "paced"]
    if trace:
        extra += ["--trace", str(d / "trace.log")]
    r = env.run([PYTHON, "-c", AGENTS_NUMBERS, str(d)], extra_args=extra)
    r.check_exit(0)
    r.check_output_equals(plain.stdout)


FSIZE_LIMIT = r"""
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)   # Python ignores it
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
print(os.write(fd, b"z" * (2 << 20)))            # cut short at the limit
os.close(fd)
"""


@pytest.mark.parametrize("cap", [["--write-rate", "2MiB/s"], ["--rate", "1MiB/s"]])
def test_a_write_cut_at_the_file_size_limit_is_short_not_killed(env, cap):
    """RLIMIT_FSIZE of 1 MiB and one write of 2 MiB: the kernel writes up
    to the limit and returns 1048576.  The agent cuts the write into pieces;
    one ended at the limit and the next started there, where the kernel
    sends SIGXFSZ: the program was killed (exit 153)."""
    out = env.fresh_dir("fsize") / "out"
    plain = env.run_plain([PYTHON, "-c", FSIZE_LIMIT, str(out)])
    assert plain.rc == 0 and plain.stdout == b"1048576\n", plain.dump()
    r = env.run([PYTHON, "-c", FSIZE_LIMIT, str(out)], extra_args=cap)
    r.check_exit(0)
    r.check_output_equals(plain.stdout)
    assert out.stat().st_size == 1 << 20


SHARED_WRITERS = r"""
import os, sys
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
kids = []
for letter in b"AB":
    pid = os.fork()
    if pid == 0:                      # both write to one description
        for i in range(4):
            os.write(out, bytes([letter]) * (1 << 20))
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
os.close(out)
data = open(sys.argv[1], "rb").read()
blocks = [data[i:i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
print(len(blocks), sum(len(set(b)) != 1 for b in blocks), "mixed")
"""


@pytest.mark.parametrize("cap", [["--write-rate", "2MiB/s"], ["--rate", "4MiB/s"]])
def test_writers_sharing_a_description_keep_their_records_whole(env, cap):
    """Two processes write 1 MiB records to one description (a shell's
    `( a & b ) > out`).  Each write(2) lands whole: the kernel holds the
    description's position for the call.  The agent cuts a write into
    pieces, and the other writer's pieces came between them: 7 of 8
    records mixed.  Now a cut write takes its range of the file first."""
    out = env.fresh_dir("shared-writers") / "out"
    plain = env.run_plain([PYTHON, "-c", SHARED_WRITERS, str(out)])
    assert plain.rc == 0 and plain.stdout == b"8 0 mixed\n", plain.dump()
    r = env.run([PYTHON, "-c", SHARED_WRITERS, str(out)], extra_args=cap, timeout=120)
    r.check_exit(0)
    r.check_output_equals(plain.stdout)


def test_fsync_and_osync_unchanged(env, fs):
    """fsync, fdatasync and O_SYNC writes return what they return without
    the agent, and the data is whole."""
    out = fs.path("sync.out")
    script = ("import os\n"
              f"p = {out!r}\n"
              "fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
              "for i in range(16):\n"
              "    os.write(fd, bytes([i]) * (1 << 20))\n"
              "    os.fsync(fd) if i % 2 else os.fdatasync(fd)\n"
              "os.close(fd)\n"
              "fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_SYNC)\n"
              "for i in range(4):\n"
              "    os.write(fd, b'z' * 300000)\n"
              "os.close(fd)\n"
              "print('ok')\n")
    r = env.run([PYTHON, "-c", script], extra_args=["--write-rate", "8MiB/s"])
    r.check_exit(0)
    assert r.stdout == b"ok\n"
    want = b"".join(bytes([i]) * (1 << 20) for i in range(16)) + b"z" * 1200000
    r.check_file_equals(out, want)
    os.unlink(out)


def test_bad_writeback_mode_is_refused(env):
    r = env.discnice(["run", "--writeback", "lazy", "--", "true"])
    assert r.rc == 2
    err = r.stderr.decode()
    assert "paced" in err and "kernel" in err, err
    assert err.startswith("discnice: --writeback 'lazy'"), err
