"""Issue #8, the agent's I/O path: appends stay whole, O_DIRECT pieces stay
aligned, an iovec is never read before the kernel has checked it, and holes
are not charged as disk reads.  Each case is compared with the same program
run without discnice."""
import os
import shutil

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
