"""A second reader of the disk, for the tests of the disk rise
(manners/quiet.h: a new sample when others' disk traffic rises)."""
import subprocess
import sys
import time

import pytest

MiB = 1 << 20

# A reader that passes the page cache (O_DIRECT), so that the disk moves
# every byte it reads, for argv[2] seconds; at the end it prints its
# read_bytes as the kernel counted them (/proc/self/io).
DIRECT_READER = """
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT wants
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    if os.readv(fd, [buf]) <= 0:
        os.lseek(fd, 0, 0)
print(next(l.split()[1] for l in open("/proc/self/io") if l.startswith("read_bytes")))
"""


def prepare(env, name):
    """The rival's 256 MiB file, made before the job starts: making it
    takes seconds of CPU and a write of its own, which would land in the
    rival's window, where it may get the job suspended through all of it
    (the library's test failed once in a local CI run, perhaps so)."""
    return env.make_file(env.path(name), 256 * MiB)


def read(env, name, seconds):
    """Read the file prepare() made directly for `seconds`: the MiB/s the
    kernel counted.  Skips where the file system refuses O_DIRECT."""
    src = env.path(name)
    assert src.exists(), f"{src}: call disk_rival.prepare() before the job starts"
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", DIRECT_READER, str(src), str(seconds)],
                       capture_output=True, timeout=seconds + 30)
    if p.returncode != 0:
        pytest.skip(f"this file system refuses O_DIRECT reads: {p.stderr.decode()[-200:]}")
    return int(p.stdout) / MiB / (time.monotonic() - t)


def check(mib_s):
    """The rise needs others' bytes at 2 MiB/s and half the job's
    (manners/quiet.h); any disk gives a direct reader far more."""
    assert mib_s >= 8, f"the rival read only {mib_s:.1f} MiB/s: no test of a rise"
