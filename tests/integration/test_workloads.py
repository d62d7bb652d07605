"""Real programs under discnice: same bytes, same exit codes, and the agent's
prediction of disk I/O against the kernel's count."""
import shutil
import subprocess
import sys

import pytest

from conftest import MiB, KiB

# Integration tolerance of predicted vs kernel-counted bytes.  The unit-level
# target for the predictors is 0.5%; a whole process also moves metadata
# (inode and directory blocks, the loader's pages, journal effects) that the
# kernel charges and the agent cannot see, so whole-job comparisons allow 2%.
PREDICTION_TOLERANCE = 0.02
# A whole-job rate over about a second includes start-up and the last chunk.
RATE_TOLERANCE = 1.10
# "About zero": below this fraction of the bytes the job touched.
NEAR_ZERO_FRACTION = 0.01

WORKLOAD_SIZE = 24 * MiB
TREE_FILES = 20
CAP = "40MiB/s"
# --rate inf predicts nothing unless asked (issue #9 §3): these tests judge
# the predictors, so they ask.
PREDICT = ["--predict-uncapped", "on"]

PYTHON = shutil.which("python3") or sys.executable

COPY_SCRIPT = r"""
import sys
src, dst = sys.argv[1], sys.argv[2]
with open(src, "rb", buffering=0) as f, open(dst, "wb", buffering=0) as g:
    while True:
        b = f.read(65536)
        if not b:
            break
        g.write(b)
"""


def _workload(name, src, tree, out):
    """(command, output file or None for stdout) for each workload."""
    return {
        "cat": (["cat", src], None),
        "dd": (["dd", f"if={src}", f"of={out}", "bs=1M", "status=none"], out),
        "gzip": (["gzip", "-c", src], None),
        "sort": (["sort", src], None),
        "tar": (["tar", "cf", "-", "-C", tree.parent, tree.name], None),
        "grep": (["grep", "-r", "-e", "abc1", tree], None),
        "python3": ([PYTHON, "-c", COPY_SCRIPT, src, out], out),
        "awk": (["awk", "{n+=length($0)} END{print n}", src], None),
        "cp": (["cp", src, out], out),
        "cat-to-file": (["sh", "-c", 'cat "$1" > "$2"', "sh", src, out], out),
        "rsync": (["rsync", src, out], out),
    }[name]


TOOLS = {"cat": "cat", "dd": "dd", "gzip": "gzip", "sort": "sort", "tar": "tar",
         "grep": "grep", "python3": PYTHON, "awk": "awk", "cp": "cp", "cat-to-file": "cat",
         "rsync": "rsync"}
JOB_TIMEOUT = 30           # a 24 MiB job at 40 MiB/s takes about 1 s


@pytest.fixture(scope="module")
def inputs(env):
    src = env.make_file(env.path("work/input.txt"), WORKLOAD_SIZE)
    tree = env.make_tree(env.path("work/tree"), TREE_FILES, WORKLOAD_SIZE // TREE_FILES)
    return src, tree


@pytest.mark.parametrize("name", list(TOOLS))
def test_workload_identical(env, inputs, name):
    """A real program reading a cold file or tree gives byte-identical output
    and the same exit code under `--rate inf` and under a 40 MiB/s cap as
    unregulated, and every run leaves a complete report."""
    if shutil.which(TOOLS[name]) is None:
        pytest.skip(f"needs {TOOLS[name]}")
    src, tree = inputs
    data_in = tree if name in ("tar", "grep") else src

    def one(kind, rate=None):
        out = env.path(f"work/{name}-{kind}.out")
        if out.exists():
            out.unlink()
        cmd, out_file = _workload(name, src, tree, out)
        env.drop_cache(data_in)
        refaulted = env.refaulted_bytes()
        if rate is None:
            r = env.run_plain(cmd, timeout=JOB_TIMEOUT)
        else:
            r = env.run(cmd, rate=rate, timeout=JOB_TIMEOUT, extra_args=PREDICT)
            r.check_report()
        r.refaulted = env.refaulted_bytes() - refaulted
        data = out_file.read_bytes() if out_file else r.stdout
        return r, data, out_file

    def prediction_error(r):
        rep = r.report
        actual = rep["actual_read_bytes"] + rep["actual_write_bytes"]
        predicted = rep["predicted_read_bytes"] + rep["predicted_write_bytes"]
        return predicted, actual

    plain, expected, _ = one("plain")
    if plain.rc != 0 or not expected:
        plain.fail("the unregulated reference run failed or wrote nothing")
    for kind, rate in (("inf", "inf"), ("capped", CAP)):
        misses = []
        for attempt in range(3):
            r, _, out_file = one(kind, rate)
            predicted, actual = prediction_error(r)
            if abs(predicted - actual) <= PREDICTION_TOLERANCE * actual:
                break
            # A miss is run again: reclaim taking back page cache meanwhile
            # (the machine's memory pressure), or - seen in 2 of 5 CI runs on
            # this VM, with nothing else running, by one readahead window of
            # a cold read (gzip: 17.0 of 25.8 MB predicted) and never again
            # on a re-run - the host's cache of the virtual disk.  A miss of
            # the model's own comes back every time, and fails below.
            misses.append(f"{predicted} vs {actual} ({r.refaulted} bytes refaulted)")
        r.check_exit(plain.rc)
        if out_file:
            r.check_file_equals(out_file, expected)
        else:
            r.check_output_equals(expected)
        rep = r.report
        if rep["actual_read_bytes"] < 0.5 * WORKLOAD_SIZE:
            r.fail("precondition: the input was not read from disk (was it cold?)")
        # The prediction matches the kernel's count of the job's disk I/O.
        if abs(predicted - actual) > PREDICTION_TOLERANCE * actual:
            r.fail(f"predicted {predicted} vs kernel {actual}: error "
                   f"{(predicted - actual) / actual:+.2%} beyond {PREDICTION_TOLERANCE:.0%} "
                   f"({r.refaulted} bytes refaulted system-wide during the run); every "
                   f"attempt: {'; '.join(misses)}")
        # The cap holds, by the kernel's count (loosely: exact rates are bench/'s).
        if kind == "capped":
            cap = 40 * MiB
            if actual / rep["elapsed_s"] > RATE_TOLERANCE * cap:
                r.fail(f"{actual / rep['elapsed_s'] / MiB:.1f} MiB/s by the kernel's count "
                       f"> {RATE_TOLERANCE} x the 40 MiB/s cap")


# -- prediction against the kernel --------------------------------------------

def _check_close(r, predicted_key, actual_key, tolerance=PREDICTION_TOLERANCE):
    rep = r.check_report()
    predicted, actual = rep[predicted_key], rep[actual_key]
    if actual <= 0:
        r.fail(f"precondition: the kernel counted no bytes ({actual_key} = 0)")
    err = abs(predicted - actual) / actual
    if err > tolerance:
        r.fail(f"{predicted_key} = {predicted} vs kernel {actual_key} = {actual}: "
               f"error {err:.2%} > {tolerance:.0%}")


@pytest.fixture(scope="module")
def file64(env):
    return env.make_file(env.path("pred/cold64.txt"), 64 * MiB)


@pytest.mark.parametrize("tool", ["cat", "dd"])
def test_prediction_cold_read(env, file64, tool):
    """Reading a cold 64 MiB file with --rate inf, the agent's predicted
    disk reads match the kernel's read_bytes within PREDICTION_TOLERANCE,
    and the kernel really read about the whole file."""
    cmd = ["cat", file64] if tool == "cat" else \
        ["dd", f"if={file64}", "of=/dev/null", "bs=1M", "status=none"]
    env.run_plain(cmd)                  # warm the program and its libraries
    env.drop_cache(file64)
    r = env.run(cmd if tool == "dd" else ["sh", "-c", 'cat "$1" >/dev/null', "sh", file64],
                rate="inf", extra_args=PREDICT)
    r.check_exit(0)
    if r.report["actual_read_bytes"] < 0.95 * 64 * MiB:
        r.fail("precondition: the kernel read less than the file (not cold?)")
    _check_close(r, "predicted_read_bytes", "actual_read_bytes")


def test_prediction_warm_read(env, file64):
    """Reading a file that is entirely in the page cache: the kernel reads
    about nothing from disk, and the agent predicts about nothing."""
    limit = NEAR_ZERO_FRACTION * 64 * MiB
    # A machine under memory pressure (or this VM's background reclaim,
    # while the rest of the suite writes) may evict pages between warming
    # and reading: warm again and retry, and skip if it keeps happening.
    for attempt in range(3):
        env.warm(file64)
        r = env.run(["sh", "-c", 'cat "$1" >/dev/null', "sh", file64], rate="inf", extra_args=PREDICT)
        r.check_exit(0)
        rep = r.check_report()
        if rep["actual_read_bytes"] < limit:
            break
    else:
        pytest.skip(f"the page cache would not keep a warmed 64 MiB file: the kernel read "
                    f"{rep['actual_read_bytes']} bytes of it in 3 tries")
    if rep["predicted_read_bytes"] >= limit:
        r.fail(f"predicted {rep['predicted_read_bytes']} disk bytes for a warm file "
               f"(limit {limit:.0f})")
    if rep["file_read_bytes"] < 64 * MiB:
        r.fail("the agent did not see the job read the file")


WRITE_SCRIPT = r"""
import sys
block = bytes(range(256)) * 4096        # 1 MiB
with open(sys.argv[1], "wb", buffering=0) as f:
    for _ in range(int(sys.argv[2])):
        f.write(block)
"""


def test_prediction_write(env):
    """A job writing a new 32 MiB file: the predicted newly dirtied bytes
    match the kernel's write_bytes within PREDICTION_TOLERANCE."""
    out = env.path("pred/new32.bin")
    if out.exists():
        out.unlink()
    r = env.run([PYTHON, "-c", WRITE_SCRIPT, out, 32], rate="inf", extra_args=PREDICT)
    r.check_exit(0)
    if r.report["actual_write_bytes"] < 0.95 * 32 * MiB:
        r.fail("precondition: the kernel counted less than the file as written")
    _check_close(r, "predicted_write_bytes", "actual_write_bytes")
    out.unlink()


CREATE_DELETE_SCRIPT = r"""
import os, sys
d = sys.argv[1]
data = b"x" * 65536
for i in range(200):
    p = os.path.join(d, "tmp-%d" % (i % 3))
    with open(p, "wb", buffering=0) as f:
        f.write(data)
    os.unlink(p)
"""


def test_prediction_create_delete(env):
    """Files written and unlinked before writeback never reach the disk:
    the kernel's write_bytes - cancelled_write_bytes is about 0, and so is
    the agent's net predicted writes (dirtied minus cancelled)."""
    d = env.path("pred/churn")
    d.mkdir(parents=True, exist_ok=True)
    r = env.run([PYTHON, "-c", CREATE_DELETE_SCRIPT, d], rate="inf", extra_args=PREDICT)
    r.check_exit(0)
    rep = r.check_report()
    touched = 200 * 64 * KiB
    limit = NEAR_ZERO_FRACTION * touched
    if rep["file_write_bytes"] < touched:
        r.fail("the agent did not see the job's writes")
    if rep["actual_write_bytes"] >= limit:
        r.fail(f"precondition: the kernel's net writes {rep['actual_write_bytes']} are not ~0")
    if rep["predicted_write_bytes"] >= limit:
        r.fail(f"net predicted writes {rep['predicted_write_bytes']} not ~0 (limit {limit:.0f})")


COPY_CALLS = {
    # os.copy_file_range / os.sendfile with a count far beyond the file, as
    # cp(1) and other copiers pass ("copy up to EOF"); the loop ends at EOF.
    "copy_file_range": "n = os.copy_file_range(i, o, 1 << 40)",
    "sendfile": "n = os.sendfile(o, i, None, 1 << 30)",
}
KERNEL_COPY_SCRIPT = r"""
import os, sys
i = os.open(sys.argv[1], os.O_RDONLY)
o = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
while True:
    %s
    if n == 0:
        break
"""


@pytest.mark.parametrize("call", list(COPY_CALLS))
def test_kernel_copy(env, inputs, call):
    """Kernel-side copies (copy_file_range, sendfile) asked to copy far more
    than the file holds, as copiers do, finish promptly under --rate inf and
    under a cap, produce an identical copy, and are predicted from the bytes
    that exist, not from the count asked for."""
    src, _ = inputs
    expected = src.read_bytes()
    script = KERNEL_COPY_SCRIPT % COPY_CALLS[call]
    for rate in ("inf", CAP):
        out = env.path(f"work/kcopy-{call}.out")
        if out.exists():
            out.unlink()
        env.drop_cache(src)
        r = env.run([PYTHON, "-c", script, src, out], rate=rate, timeout=JOB_TIMEOUT)
        r.check_exit(0)
        r.check_file_equals(out, expected)
        rep = r.check_report()
        moved = rep["actual_read_bytes"] + rep["actual_write_bytes"]
        predicted = rep["predicted_read_bytes"] + rep["predicted_write_bytes"]
        if predicted > 4 * max(moved, WORKLOAD_SIZE):
            r.fail(f"predicted {predicted} bytes for a copy that moved {moved}: the "
                   "requested count was charged instead of the file's bytes")


def test_readme_rsync_example(env, inputs):
    """The README's first example, `discnice run --rate 5MiB/s -- rsync -a
    SRC DST`, on a cold tree: the copy is identical (content, names and
    modes), and the kernel's count of the job's disk I/O stays under the
    cap.  rsync is a package .ci/run installs; CI fails rather than skips."""
    if shutil.which("rsync") is None:
        pytest.skip("needs rsync")
    _, tree = inputs
    backup = env.path("work/backup")
    shutil.rmtree(backup, ignore_errors=True)
    backup.mkdir(parents=True)
    env.drop_cache(tree)
    r = env.run(["rsync", "-a", tree, backup], rate="5MiB/s", timeout=60)
    r.check_exit(0)
    diff = subprocess.run(["diff", "-r", str(tree), str(backup / tree.name)],
                          capture_output=True, text=True)
    assert diff.returncode == 0, r.fail(f"the backup differs:\n{diff.stdout[:2000]}")
    rep = r.report
    moved = rep["actual_read_bytes"] + rep["actual_write_bytes"]
    if moved < WORKLOAD_SIZE:
        r.fail("precondition: the kernel counted less than the tree (not cold?)")
    if moved / rep["elapsed_s"] > RATE_TOLERANCE * 5 * MiB:
        r.fail(f"rsync moved {moved / rep['elapsed_s'] / MiB:.2f} MiB/s, cap 5 MiB/s")
