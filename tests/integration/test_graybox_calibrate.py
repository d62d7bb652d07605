"""`discnice calibrate` and the calibration file (graybox-icl §5).

Oracles: the file itself (its place under XDG_STATE_HOME, mode, atomic
replacement), os.stat() for the device an entry names, uname for the
kernel, the clock for its date, and the ordering the physics imposes (a
cached read is faster than the threshold, which is faster than a miss).
Every run gets its own XDG_STATE_HOME, so the user's file is never touched.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest


@pytest.fixture
def state(env, tmp_path):
    d = env.scratch / f"state-{tmp_path.name}"
    d.mkdir()
    return d


def _calibration(state: Path) -> Path:
    return state / "discnice" / "calibration"


def test_calibrate_measures_and_stores(env, state):
    before = int(time.time())
    r = env.discnice(["calibrate", "--quick", "--json", env.scratch],
                     env={"XDG_STATE_HOME": str(state)}, timeout=120)
    r.check_exit(0)
    out = json.loads(r.stdout)
    path = _calibration(state)
    assert out["file"] == str(path)
    assert path.is_file() and (path.stat().st_mode & 0o777) == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    text = path.read_text()
    assert "\ndiscnice-calibration 1\n" in text
    assert not list(path.parent.glob("*.tmp"))          # the temporary file is gone

    dev, machine = out["entries"]
    st = os.stat(env.scratch)
    assert dev["scope"] == "device" and dev["device"] == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    assert machine["scope"] == "machine"
    for e in (dev, machine):
        assert before <= e["measured"] <= time.time() + 1
        assert e["kernel"] == os.uname().release and e["quick"] and e["fresh"]
    assert dev["probe_hit_ns"] < dev["probe_threshold_ns"] < dev["probe_miss_ns"]
    assert dev["sequential_read_bps"] > 0 and dev["random_read_ns"] > dev["probe_hit_ns"]
    assert machine["page_memory_ns"] < machine["page_alloc_zero_ns"] \
        < machine["page_threshold_ns"] < machine["page_disk_ns"]
    # The file says what the JSON said.
    line = next(l for l in text.splitlines() if l.startswith("device "))
    assert f"probe_threshold_ns={dev['probe_threshold_ns']}" in line.split()

    r = env.discnice(["calibrate", "--show", "--json"], env={"XDG_STATE_HOME": str(state)})
    r.check_exit(0)
    shown = json.loads(r.stdout)["entries"]
    assert {e["scope"] for e in shown} == {"device", "machine"}

    # The table form names every value.
    r = env.discnice(["calibrate", "--show"], env={"XDG_STATE_HOME": str(state)})
    r.check_exit(0)
    for label in (b"probe threshold", b"sequential read", b"page threshold (MAC)"):
        assert label in r.stdout


def test_run_uses_the_file_and_measures_when_missing_or_stale(env, state):
    """discnice run's probe threshold: measured and stored when there is no
    file, reused while fresh (the file is not rewritten), measured again
    when the entry was made under another kernel."""
    e = {"XDG_STATE_HOME": str(state)}
    r = env.run(["true"], rate="inf", env=e)
    r.check_exit(0)
    path = _calibration(state)
    text = path.read_text()
    line = next(l for l in text.splitlines() if l.startswith("device "))
    assert "quick=1" in line.split() and "probe_threshold_ns=" in line
    ino = path.stat().st_ino

    r = env.run(["true"], rate="inf", env=e)
    r.check_exit(0)
    assert path.stat().st_ino == ino                    # not replaced: reused

    path.write_text(text.replace(f"kernel={os.uname().release}", "kernel=0.0.0-other"))
    ino = path.stat().st_ino
    r = env.run(["true"], rate="inf", env=e)
    r.check_exit(0)
    assert path.stat().st_ino != ino                    # replaced by rename
    assert f"kernel={os.uname().release}" in path.read_text()


def test_calibrate_bad_input(env, state):
    e = {"XDG_STATE_HOME": str(state)}
    r = env.discnice(["calibrate", env.scratch / "nonexistent"], env=e)
    r.check_exit(2)
    assert r.stderr_lines()[0].startswith("discnice: ") and len(r.stderr_lines()) == 1
    r = env.discnice(["calibrate", "a", "b"], env=e)
    r.check_exit(2)
    r = env.discnice(["calibrate", "--show", "--quick"], env=e)
    r.check_exit(2)
    # A file where DIR goes: bad usage, as a missing DIR is (it was exit 1,
    # "cannot measure the disk: Not a directory").
    r = env.discnice(["calibrate", "--quick", "/etc/passwd"], env=e)
    r.check_exit(2)
    assert "not a directory" in r.stderr_lines()[0] and len(r.stderr_lines()) == 1, r.dump()
    if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK):
        r = env.discnice(["calibrate", "--quick", "/dev/shm"], env=e)
        r.check_exit(1)
        assert "cannot be evicted" in r.stderr_lines()[0], r.dump()
    assert not _calibration(state).exists()             # nothing measured, nothing written

    # A malformed file: --show names the line; calibrate writes a new one.
    path = _calibration(state)
    path.parent.mkdir(parents=True)
    path.write_text("discnice-calibration 1\nmachine page_memory_ns=lots\n")
    r = env.discnice(["calibrate", "--show"], env=e)
    r.check_exit(1)
    assert f"{path}:2: malformed" in r.stderr_lines()[0], r.dump()
    r = env.discnice(["calibrate", "--quick", env.scratch], env=e, timeout=120)
    r.check_exit(0)
    assert "lots" not in path.read_text()

    # A newer discnice's file: --show refuses to read it, and calibrate
    # (and the probe threshold a run stores) never replace it.
    newer = "discnice-calibration 99\nmachine future_key=1\n"
    path.write_text(newer)
    st = path.stat()
    r = env.discnice(["calibrate", "--show"], env=e)
    r.check_exit(1)
    assert "newer discnice" in r.stderr_lines()[0]
    r = env.discnice(["calibrate", "--quick", env.scratch], env=e, timeout=120)
    r.check_exit(1)
    assert len(r.stderr_lines()) == 1, r.dump()
    assert "newer discnice" in r.stderr_lines()[0] and "move" in r.stderr_lines()[0], r.dump()
    r = env.run(["/bin/true"], rate="inf", env=e)      # measures and stores a probe threshold
    r.check_exit(0)
    assert path.read_text() == newer and path.stat().st_ino == st.st_ino
    assert path.stat().st_mtime_ns == st.st_mtime_ns
