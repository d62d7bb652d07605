"""Issue #8, the agent's I/O path: appends stay whole, O_DIRECT pieces stay
aligned, an iovec is never read before the kernel has checked it, and holes
are not charged as disk reads.  Each case is compared with the same program
run without discnice."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import MiB


@pytest.mark.parametrize("mode", ["open", "setfl", "setfl-dup", "setfl-child", "pwritev2"])
def test_appends_stay_whole(env, mode):
    """Item 4: O_APPEND set by fcntl(F_SETFL) - directly, through a dup, by
    a child on the shared description - must keep every write whole.
    Before: the write was cut in pieces and 4 writers tore 7-8 of 8 records."""
    prog = env.program("append_records")
    path = env.path(f"append-{mode}.txt")
    argv = [prog, mode, path, "4", "2", "100000"]
    plain = env.run_plain(argv)
    assert plain.rc == 0, plain.dump()
    r = env.run(argv, extra_args=["--write-rate", "512KiB/s", "--chunk", "16KiB"])
    r.check_exit(0)
    r.check_output_equals(plain.stdout)


@pytest.mark.parametrize("chunk", ["4097", "5000", "6KiB", "12345", "1MiB"])
@pytest.mark.parametrize("flag", ["iflag=direct", "oflag=direct"])
def test_direct_io_pieces_stay_aligned(env, chunk, flag):
    """Item 9: a --chunk that is not a multiple of the logical block size
    must not cut O_DIRECT requests into misaligned pieces.  Before: dd
    failed with EINVAL."""
    if not shutil.which("dd"):
        pytest.skip("needs dd")
    src = env.path("dio-src.bin")
    if not src.exists():
        src.write_bytes(os.urandom(8 * MiB))
    out = env.path(f"dio-out-{flag[0]}-{chunk}.bin")
    argv = ["dd", f"if={src}", f"of={out}", "bs=1M", flag, "status=none"]
    plain = env.run_plain(argv)
    if plain.rc != 0:
        pytest.skip(f"O_DIRECT does not work here: {plain.stderr.decode().strip()}")
    out.unlink()
    cap = "--read-rate" if flag.startswith("i") else "--write-rate"
    r = env.run(argv, extra_args=[cap, "64MiB/s", "--chunk", chunk])
    r.check_exit(0)
    r.check_file_equals(out, src.read_bytes())


@pytest.mark.parametrize("flag", ["iflag=direct", "oflag=direct"])
def test_direct_io_of_an_unaligned_length_is_refused_whole(env, flag):
    """An O_DIRECT call whose length is not a multiple of the alignment is
    refused by the kernel as a whole (EINVAL, nothing moved).  Cut into
    pieces, its aligned ones went through and only the last failed: dd
    bs=1048577 oflag=direct copied 1 MiB under a cap where it copies
    nothing without one.  The output file and dd's words, as plain."""
    src = env.path("dio-odd-src.bin")
    if not src.exists():
        src.write_bytes(os.urandom(8 * MiB))
    out = env.path(f"dio-odd-out-{flag[0]}.bin")
    argv = ["dd", f"if={src}", f"of={out}", "bs=1048577", "count=5", flag]
    plain = env.run_plain(argv)
    if b"Invalid argument" not in plain.stderr:
        pytest.skip(f"O_DIRECT of an odd length is not refused here: {plain.dump()}")
    want = out.read_bytes()
    out.unlink()
    cap = "--read-rate" if flag.startswith("i") else "--write-rate"
    r = env.run(argv, extra_args=[cap, "2MiB/s"])
    r.check_exit(plain.rc)
    r.check_file_equals(out, want)
    assert b"0+0 records out" in r.stderr and b"Invalid argument" in r.stderr, r.dump()


def test_bad_iovec(env):
    """Item 10: readv/writev/preadv/pwritev/preadv2/pwritev2 with a NULL or
    unmapped iovec, a bad element, a bad count, an overflowing sum, on a
    disk file, a pipe and /dev/null: the kernel's answer, unchanged.
    Before: SIGSEGV inside the agent."""
    prog = env.program("bad_iovec")
    plain = env.run_plain([prog, env.path("iov-plain.dat")])
    assert plain.rc == 0, plain.dump()
    for cap in ("1MiB/s", "inf"):
        r = env.run([prog, env.path(f"iov-{cap[0]}.dat")], rate=cap)
        r.check_exit(0)
        r.check_output_equals(plain.stdout)


def test_counts_beyond_the_buffer(env):
    """read/write/pread/pwrite/writev with counts past the end of user space
    or SSIZE_MAX, an offset the count carries past LLONG_MAX, and counts
    that run into a guard page: the kernel's answer, offsets and file size
    unchanged (tests/programs/huge_count.c).  Before (a new-user pass): the
    calls the kernel refuses whole (EFAULT) moved a piece - bytes from past
    the buffer into the file, or past it in memory - under a cap, and a
    count of 2^46 or SSIZE_MAX spun for minutes predicting its pages."""
    prog = env.program("huge_count")
    plain = env.run_plain([prog, env.path("huge-plain.dat")])
    assert plain.rc == 0, plain.dump()
    # 9 here; 7 on 6.4-6.11, whose access_ok() takes a buffer up to 2^63.
    assert plain.stdout.count(b"EFAULT") >= 7, plain.dump()
    for args in (["--rate", "2MiB/s"], ["--write-rate", "3MB/s"],
                 ["--rate", "inf", "--cache", "drop"]):
        out = env.path(f"huge-{args[1][0]}.dat")
        r = env.run([prog, out], extra_args=args, timeout=120)
        r.check_exit(0)
        r.check_output_equals(plain.stdout)
        r.check_file_equals(out, env.path("huge-plain.dat").read_bytes())


def test_bad_offset_pointers(env):
    """sendfile, copy_file_range and splice with an offset pointer into
    unmapped or PROT_NONE memory: the kernel's EFAULT, as without discnice.
    The agent read the offset first to predict the copy, and the program
    died of SIGSEGV under a cap (a new-user pass)."""
    prog = env.program("bad_offset")
    src = env.path("bad-offset.dat")
    src.write_bytes(os.urandom(64 * 1024))
    plain = env.run_plain([prog, src])
    assert plain.rc == 0, plain.dump()
    assert b"EFAULT" in plain.stdout, plain.dump()
    for cap in ("1MiB/s", "inf"):
        r = env.run([prog, src], rate=cap)
        r.check_exit(0)
        r.check_output_equals(plain.stdout)


def _sparse(env, name, islands):
    """A 64 MiB file: holes, with 1 MiB of data at each MiB offset in islands."""
    path = env.path(name)
    with open(path, "wb") as f:
        f.truncate(64 * MiB)
        for mib in islands:
            f.seek(mib * MiB)
            f.write(os.urandom(MiB))
        f.flush()
        os.fsync(f.fileno())
    env.drop_cache(path)
    return path


def test_all_hole_file_is_not_charged(env):
    """Item 11: a 64 MiB file that is all hole costs no disk reads.  Before:
    predicted 64 MiB, 8 s at --rate 8MiB/s instead of a fraction of one."""
    path = _sparse(env, "hole.dat", [])
    r = env.run(["cat", path], rate="8MiB/s")
    r.check_exit(0)
    rep = r.check_report()
    assert rep["predicted_read_bytes"] <= rep["actual_read_bytes"] + MiB, r.dump()
    assert r.elapsed < 4, f"an all-hole file took {r.elapsed:.1f} s at 8 MiB/s: holes charged"
    assert r.stdout == b"\0" * (64 * MiB)


@pytest.mark.parametrize("cache", ["cachestat", "mincore"])
@pytest.mark.parametrize("rate", ["inf", "8MiB/s"])
def test_data_islands_predicted(env, cache, rate):
    """Item 11: 8 MiB of data in islands of a 64 MiB sparse file: the
    prediction follows the kernel's count (cold), and is 0 warm.

    A cold run may be tried three times.  Seen once in 15 runs beside a
    512 MiB fsync loop (and once in CI): the kernel read one island (1 MiB
    of the 8) in an earlier call's window than the model's, so the model
    found it cached at the call it expected it and the run's prediction
    was 7 MiB.  The trace was the good runs' but for that last line; most
    likely a large-folio allocation failure under fragmented memory moved
    the kernel's marker, a limit graybox/readahead.c states ("what the
    model cannot see"), not proven.  A model error repeats; that did not."""
    path = _sparse(env, f"islands-{cache}-{rate[0]}.dat", range(0, 64, 8))
    want = path.read_bytes()
    args = ["--cache-backend", cache, "--feedback", "off", "--predict-uncapped", "on"]
    misses = []
    for attempt in range(3):
        env.drop_cache(path)
        r = env.run(["cat", path], rate=rate, extra_args=args)
        r.check_exit(0)
        r.check_output_equals(want)
        rep = r.check_report()
        actual, predicted = rep["actual_read_bytes"], rep["predicted_read_bytes"]
        if abs(predicted - actual) <= 0.05 * actual + 256 * 1024:
            break
        misses.append(f"cold: predicted {predicted}, kernel {actual}\n{r.dump()}")
    else:
        pytest.fail("\n".join(misses))
    r = env.run(["cat", path], rate=rate, extra_args=args)
    r.check_exit(0)
    r.check_output_equals(want)
    rep = r.check_report()
    actual, predicted = rep["actual_read_bytes"], rep["predicted_read_bytes"]
    assert predicted <= actual + 256 * 1024, f"warm: predicted {predicted}, kernel {actual}"


FILL_WHILE_READING = r"""
import os, sys, threading
path = sys.argv[1]
fd = os.open(path, os.O_RDWR)
def fill():
    w = os.open(path, os.O_WRONLY)
    for mib in range(0, 64, 4):
        os.pwrite(w, bytes([mib]) * 65536, mib << 20)
    os.close(w)
t = threading.Thread(target=fill)
t.start()
total = 0
while True:
    b = os.read(fd, 1 << 17)
    if not b:
        break
    total += len(b)
t.join()
print(total)
"""


def test_holes_filled_while_read(env):
    """Item 11, a file written while it is read: nothing breaks, the reader
    gets every byte."""
    path = _sparse(env, "filling.dat", [0])
    r = env.run([sys.executable, "-c", FILL_WHILE_READING, path], rate="16MiB/s")
    r.check_exit(0)
    assert r.stdout.strip() == str(64 * MiB).encode()


@pytest.mark.parametrize("mode", ["dprintf", "vdprintf", "dprintf_chk", "vdprintf_chk"])
def test_dprintf_writes_are_seen(env, mode):
    """dprintf and vdprintf (and the _chk forms fortified programs call)
    write through glibc's internal __write, never our write().  The agent
    must see them: with --feedback off its prediction is the only charge,
    and it follows the kernel's write_bytes; the file is byte for byte the
    unregulated run's (lines of 64 bytes, and some of 5 kB past the
    agent's 4 KiB stack buffer)."""
    plain, capped = env.path(f"dprintf-{mode}.plain"), env.path(f"dprintf-{mode}.out")
    cmd = [env.program("fortified_printer"), mode]
    p = subprocess.run(cmd + [plain, "100000"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    r = env.run(cmd + [capped, "100000"], rate="32MiB/s",
                extra_args=["--feedback", "off", "--predict-uncapped", "on"])
    r.check_exit(0)
    assert capped.read_bytes() == plain.read_bytes()
    rep = r.check_report()
    actual, predicted = rep["actual_write_bytes"], rep["predicted_write_bytes"]
    assert actual >= 6 * MiB, r.dump()
    assert abs(predicted - actual) <= 0.05 * actual + 256 * 1024, r.dump()


@pytest.mark.parametrize("mode", ["read", "pread", "fread", "fread_unlocked", "fgets",
                                  "fgets_unlocked"])
def test_fortified_reads_are_seen(env, mode):
    """Debian builds its packages with -D_FORTIFY_SOURCE=2: where the
    compiler knows a buffer's size but not the count, read, pread, fread and
    fgets become glibc's __read_chk, __pread_chk, __fread_chk, __fgets_chk,
    whose bodies call glibc's internal __read, never our read.  The agent
    must see them (with --feedback off its prediction is the only charge):
    the prediction follows the kernel's count, and the bytes are unchanged.
    tests/programs/fortified_reader.c is built that way (nm -D shows the
    _chk names)."""
    path = env.path(f"fortified-{mode}.txt")
    env.make_file(path, 24 * MiB)
    want = path.read_bytes()
    args = ["--feedback", "off", "--predict-uncapped", "on"]
    cmd = [env.program("fortified_reader"), mode, path, "65536"]
    misses = []
    for attempt in range(2):
        env.drop_cache(path)
        r = env.run(cmd, rate="64MiB/s", extra_args=args)
        r.check_exit(0)
        r.check_output_equals(want)
        rep = r.check_report()
        actual, predicted = rep["actual_read_bytes"], rep["predicted_read_bytes"]
        if actual < 16 * MiB:
            misses.append(f"precondition: the kernel read only {actual} bytes (not cold)")
            continue
        if abs(predicted - actual) <= 0.05 * actual + 256 * 1024:
            return
        misses.append(f"predicted {predicted}, kernel {actual}\n{r.dump()}")
    pytest.fail("\n".join(misses))


SHARED_READERS = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
r, w = os.pipe()
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:                          # both read from one description
        os.close(r)
        while True:
            b = os.read(fd, 1 << 20)      # one read(2) each
            if not b:
                break
            os.write(w, b"%d %d\n" % (len(b), len(set(b)) != 1))
        os._exit(0)
    kids.append(pid)
os.close(w)
for pid in kids:
    os.waitpid(pid, 0)
reads = [tuple(map(int, line.split())) for line in os.fdopen(r).read().split("\n") if line]
print(len(reads), sum(m for _, m in reads), "mixed,", sum(n for n, _ in reads), "bytes")
print("offset after EOF:", os.lseek(fd, 0, os.SEEK_CUR))
"""


@pytest.mark.parametrize("cap", [["--read-rate", "4MiB/s"], ["--rate", "6MB/s"]])
def test_readers_sharing_a_description_get_whole_records(env, cap):
    """Two processes read 1 MiB records from one description (a shell's
    `( a & b ) < file`).  Each read(2) is one range of the file: the kernel
    holds the description's position for the call.  The agent cut a read
    into pieces, and the other reader's pieces came between them.  Now a
    cut read takes its range first; the ones that meet EOF give back what
    they did not read, relative to the position, so it ends at the file's
    size whichever finishes last (every order: test_shared_position.c)."""
    path = env.path("shared-readers.dat")
    # 8 records of 1 MiB, and a half, read cold: the agent sleeps between
    # the pieces of a call, where the other reader's come.
    path.write_bytes(b"".join(bytes([65 + i]) * MiB for i in range(8)) + b"z" * (MiB // 2))
    plain = env.run_plain([sys.executable, "-c", SHARED_READERS, str(path)])
    want = b"9 0 mixed, 8912896 bytes\noffset after EOF: 8912896\n"
    assert plain.rc == 0 and plain.stdout == want, plain.dump()
    env.drop_cache(path)
    r = env.run([sys.executable, "-c", SHARED_READERS, str(path)], extra_args=cap, timeout=120)
    r.check_exit(0)
    r.check_output_equals(plain.stdout)
