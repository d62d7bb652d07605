"""`discnice calibrate` and the calibration file (graybox-icl §5).

Oracles: the file itself (its place under XDG_STATE_HOME, mode, atomic
replacement), os.stat() for the device an entry names, uname for the
kernel, the clock for its date, and the ordering the physics imposes (a
cached read is faster than the threshold, which is faster than a miss).
Every run gets its own XDG_STATE_HOME, so the user's file is never touched.
gbp's threshold (where the kernel counted no read of its probes) is judged
by the entry it stores or is given, and by the verdict a planted value
forces, the files' cache state checked with cachestat(2) first.
"""
from __future__ import annotations

import json
import resource
import subprocess
import os
import time
from pathlib import Path

import pytest

from conftest import MiB, _cached_pages

PAGE = os.sysconf("SC_PAGE_SIZE")


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


def test_calibration_is_private_and_usable_whatever_the_umask(env, state):
    """Under umask 0377 the directories were made 0400 (no file could be
    made in them but by root) and the file 0000 (unreadable).  0700 and
    0600 now, and --show reads it."""
    import stat
    p = subprocess.run([str(env.discnice_bin), "calibrate", "--quick", str(env.scratch)],
                       env={**env.base_env, "XDG_STATE_HOME": str(state / "deep")},
                       capture_output=True, timeout=120, preexec_fn=lambda: os.umask(0o377))
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    path = _calibration(state / "deep")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for d in (path.parent, path.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    r = env.discnice(["calibrate", "--show"], env={"XDG_STATE_HOME": str(state / "deep")})
    r.check_exit(0)


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
    # No block device behind it: the reason, without a stray errno text
    # ("cannot measure the disk: No such file or directory (no block ...)").
    r = env.discnice(["calibrate", "--quick", "/proc"], env=e)
    r.check_exit(1)
    assert r.stderr_lines() == ["discnice: /proc: cannot measure the disk: no block device is "
                                "behind its file system; name a directory on a disk"], r.dump()
    # No file: --show says so once (it printed two lines, the second "no entries yet").
    r = env.discnice(["calibrate", "--show"], env=e)
    r.check_exit(0)
    assert r.stdout.decode() == (f"{_calibration(state)}: no calibration yet; "
                                 "run 'discnice calibrate'\n"), r.dump()
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

    # A file that cannot be read may hold anything, a newer discnice's
    # entries too: calibrate says so before measuring, and neither it nor a
    # run's stored threshold replaces it (both did, silently, exit 0).
    path.write_text(newer)
    os.chmod(path, 0)
    unreadable = os.geteuid() != 0
    if not unreadable:  # root reads anything: a file too large to be ours
        path.write_text("discnice-calibration 1\n" + "# pad\n" * 20000)
    before = path.read_bytes()
    st = path.stat()
    r = env.discnice(["calibrate", "--quick", env.scratch], env=e, timeout=120)
    r.check_exit(1)
    assert len(r.stderr_lines()) == 1 and "not replaced" in r.stderr_lines()[0], r.dump()
    r = env.run(["/bin/true"], rate="inf", env=e)
    r.check_exit(0)
    assert path.read_bytes() == before and path.stat().st_ino == st.st_ino

    # A file of no entries: --show says so (it printed nothing).
    path.unlink()
    path.write_text("discnice-calibration 1\n")
    r = env.discnice(["calibrate", "--show"], env=e)
    r.check_exit(0)
    assert r.stdout.decode() == f"{path}: no entries yet; run 'discnice calibrate'\n", r.dump()


# -- gbp: the probe threshold where the kernel counts no read ---------------
#
# gbp's timed probes meet a threshold only where the kernel counted no
# read for any of them (issue #11: "The agent, gbp and MAC read it.  Each
# runs a quick measurement itself when the file is missing or stale").  On
# a real disk that is a run whose every probe hit - the files read in whole
# beforehand, which cachestat(2) confirms - and on tmpfs every run.

def _gbp_files(env, name, n=3, size=6 * MiB):
    d = env.fresh_dir(name, mode=0o755)
    return [env.make_file(d / f"f{i}", size) for i in range(n)]


def _all_cached(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            pages = (os.fstat(fd).st_size + PAGE - 1) // PAGE
            assert _cached_pages(fd) == pages, f"{p} not wholly cached"
        finally:
            os.close(fd)


def _gbp_json(env, state, paths):
    r = env.discnice(["gbp", "--mem", "--json", "--backend", "probe", *map(str, paths)],
                     env={"XDG_STATE_HOME": str(state)}, timeout=60)
    r.check_exit(0)
    assert r.stderr == b"", r.dump()
    return r, json.loads(r.stdout)


def _device_line(state, dev):
    text = _calibration(state).read_text()
    want = f"device {os.major(dev)}:{os.minor(dev)} "
    lines = [l for l in text.splitlines() if l.startswith(want)]
    assert len(lines) == 1, text
    return dict(w.split("=", 1) for w in lines[0].split()[3:])


def _plant(state, dev, threshold_ns, kernel=None):
    path = _calibration(state)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text("discnice-calibration 1\n"
                    f"device {os.major(dev)}:{os.minor(dev)} - measured={int(time.time())} "
                    f"kernel={kernel or os.uname().release} boot=- quick=0 "
                    f"probe_threshold_ns={threshold_ns}\n")
    path.chmod(0o600)


def test_a_fifo_for_the_file_hangs_no_one(env, state):
    """A FIFO where the calibration file goes once hung every reader -
    calibrate --show, memprobe, gbp, a gb_alloc() in someone's program -
    in open(), waiting for a writer.  Now only a regular file is read:
    --show says what it is (exit 1), the others go on as with no file,
    and calibrate replaces it with a file."""
    e = {"XDG_STATE_HOME": str(state)}
    path = _calibration(state)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    r = env.discnice(["calibrate", "--show"], env=e, timeout=20)
    r.check_exit(1)
    assert "not a regular file" in r.stderr_lines()[0] and len(r.stderr_lines()) == 1, r.dump()
    r = env.discnice(["memprobe", "--max", "2MiB"], env=e, timeout=60)
    r.check_exit(0)
    r = env.discnice(["calibrate", "--quick", env.scratch], env=e, timeout=120)
    r.check_exit(0)
    assert path.is_file() and not path.is_fifo()


def test_gbp_measures_stores_and_reuses_the_probe_threshold(env, state):
    """All probes hit (no read counted): no file -> measured on the files'
    device and stored (quick=1, hit < threshold < miss); then read from the
    file without rewriting it; stale (another kernel) -> measured again.
    Probes that read (two files cold) need no threshold: the file is not
    touched."""
    paths = _gbp_files(env, "gbp-threshold")
    dev = os.stat(paths[0]).st_dev
    for p in paths:
        env.warm(p)
    _all_cached(paths)

    r, j = _gbp_json(env, state, paths)
    v = j["probe_verdict"]
    assert j["probe_read_pages"] == 0 and v["rule"] in ("known-hits", "two-groups"), r.stdout
    assert v["threshold_source"] == "measured", r.stdout
    assert v["threshold_device"] == f"{os.major(dev)}:{os.minor(dev)}", r.stdout
    entry = _device_line(state, dev)
    assert entry["quick"] == "1" and entry["kernel"] == os.uname().release
    assert int(entry["probe_threshold_ns"]) == v["threshold_ns"], (entry, r.stdout)
    assert int(entry["probe_hit_ns"]) < v["threshold_ns"] < int(entry["probe_miss_ns"]), entry
    assert all(f["in_cache"] for f in j["files"]), r.stdout

    path = _calibration(state)
    ino, mtime = path.stat().st_ino, path.stat().st_mtime_ns
    r, j2 = _gbp_json(env, state, paths)
    v2 = j2["probe_verdict"]
    assert v2["threshold_source"] == "file" and v2["threshold_ns"] == v["threshold_ns"], r.stdout
    assert path.stat().st_ino == ino and path.stat().st_mtime_ns == mtime    # read, not rewritten

    path.write_text(path.read_text().replace(f"kernel={os.uname().release}", "kernel=0.0.0-other"))
    ino = path.stat().st_ino
    r, j3 = _gbp_json(env, state, paths)
    assert j3["probe_verdict"]["threshold_source"] == "measured", r.stdout
    assert path.stat().st_ino != ino                                         # stored anew
    assert _device_line(state, dev)["kernel"] == os.uname().release

    # Lazy: two files cold, their probes read - the kernel's count decides,
    # no threshold is fetched and the file is not even rewritten.
    env.drop_cache(paths[0])
    env.drop_cache(paths[2])
    path.write_text(path.read_text().replace(f"kernel={os.uname().release}", "kernel=0.0.0-other"))
    ino, mtime = path.stat().st_ino, path.stat().st_mtime_ns
    r, j4 = _gbp_json(env, state, paths)
    v4 = j4["probe_verdict"]
    assert j4["probe_read_pages"] > 0, r.stdout
    assert v4["threshold_source"] == "none" and v4["threshold_ns"] is None, r.stdout
    assert path.stat().st_ino == ino and path.stat().st_mtime_ns == mtime
    marked = {f["path"] for f in j4["files"] if f["in_cache"]}
    assert marked == {str(paths[1])}, r.stdout


def test_gbp_reads_a_planted_threshold(env, state):
    """A fresh entry for the files' device is what decides, as planted:
    above every probe (1 s) they all hit, below every probe (1 ns) they
    all miss - the one-group verdict, before sleepless misses are pardoned."""
    paths = _gbp_files(env, "gbp-planted")
    dev = os.stat(paths[0]).st_dev
    for p in paths:
        env.warm(p)
    _all_cached(paths)
    for planted, verdict in ((1_000_000_000, "hit"), (1, "miss")):
        _plant(state, dev, planted)
        r, j = _gbp_json(env, state, paths)
        v = j["probe_verdict"]
        assert j["probe_read_pages"] == 0, r.stdout
        assert v["threshold_source"] == "file" and v["threshold_ns"] == planted, r.stdout
        assert v["threshold_device"] == f"{os.major(dev)}:{os.minor(dev)}", r.stdout
        assert v["rule"] == "known-hits" and v["all"] == verdict, r.stdout
        if verdict == "hit":
            assert all(f["in_cache"] for f in j["files"]), r.stdout
    r = env.discnice(["gbp", "-v", "--backend", "probe", *map(str, paths)],
                     env={"XDG_STATE_HOME": str(state)})
    r.check_exit(0)
    assert b"hit/miss threshold 1 ns (file)" in r.stderr, r.dump()


def test_gbp_leaves_a_malformed_file_as_it_is(env, state):
    """One bad value in the file (a device line's probe_threshold_ns=abc):
    gbp measured the threshold and rewrote the file with that one entry -
    the valid machine entry (memprobe's page threshold) and the user's
    comments gone, exit 0, not a word.  A measurement made on the way is a
    cache: the malformed file is left byte for byte; only `discnice
    calibrate`, which says so, replaces it."""
    paths = _gbp_files(env, "gbp-malformed")
    dev = os.stat(paths[0]).st_dev
    for p in paths:
        env.warm(p)
    _all_cached(paths)
    path = _calibration(state)
    path.parent.mkdir(mode=0o700, parents=True)
    text = ("discnice-calibration 1\n"
            "# measured by hand on the new disk\n"
            f"machine measured={int(time.time())} kernel={os.uname().release} quick=1 "
            "page_disk_ns=58146 page_memory_ns=20 page_alloc_zero_ns=1281 "
            "page_threshold_ns=14746 timer_overhead_ns=20\n"
            f"device {os.major(dev)}:{os.minor(dev)} - measured={int(time.time())} "
            f"kernel={os.uname().release} boot=- quick=0 probe_threshold_ns=abc\n")
    path.write_text(text)
    path.chmod(0o600)
    ino = path.stat().st_ino
    r, j = _gbp_json(env, state, paths)
    assert j["probe_verdict"]["threshold_source"] == "measured", r.stdout
    assert path.read_text() == text and path.stat().st_ino == ino


def test_gbp_threshold_on_tmpfs(env, state, shm_files):
    """tmpfs counts no reads and cannot evict a page: without an entry the
    measurement fails and the known hits decide ("default"), nothing is
    written; a planted entry for its (anonymous) device is used."""
    paths = shm_files()
    dev = os.stat(paths[0]).st_dev
    r, j = _gbp_json(env, state, paths)
    v = j["probe_verdict"]
    assert j["probe_read_pages"] == 0 and v["rule"] in ("known-hits", "two-groups"), r.stdout
    assert v["threshold_source"] == "default" and "threshold_device" not in v, r.stdout
    # 8 known hits (both rounded to whole ns in the JSON).
    assert abs(v["threshold_ns"] - 8 * v["known_hit_median_ns"]) <= 5, r.stdout
    assert all(f["in_cache"] for f in j["files"]), r.stdout
    assert not _calibration(state).exists()

    _plant(state, dev, 987654)
    r, j = _gbp_json(env, state, paths)
    v = j["probe_verdict"]
    assert v["threshold_source"] == "file" and v["threshold_ns"] == 987654, r.stdout
    assert v["threshold_device"] == f"{os.major(dev)}:{os.minor(dev)}", r.stdout
    assert v["rule"] == "known-hits" and v["all"] == "hit", r.stdout


def test_a_file_size_limit_kills_no_one(env, state):
    """Under RLIMIT_FSIZE below the 8 MiB scratch file (ulimit -f 1024),
    measuring the threshold once wrote past the limit, and SIGXFSZ killed
    gbp (exit 153) - and any program calling gbp_order().  Now the
    measurement is skipped and the known-hits rule answers."""
    paths = _gbp_files(env, "gbp-fsize", n=2, size=2 * MiB)
    for p in paths:
        env.warm(p)
    _all_cached(paths)

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))

    p = subprocess.run([str(env.discnice_bin), "gbp", "--mem", "--json", "--backend", "probe",
                        *map(str, paths)], capture_output=True, timeout=60, preexec_fn=limit,
                       env=env._env({"XDG_STATE_HOME": str(state)}))
    assert p.returncode == 0, p
    j = json.loads(p.stdout)
    assert sorted(f["path"] for f in j["files"]) == sorted(map(str, paths)), p.stdout
    assert j["probe_verdict"]["threshold_source"] != "measured", p.stdout


def test_a_missing_home_is_not_created(env, tmp_path):
    """With no XDG_STATE_HOME, the file goes under $HOME/.local/state; a
    HOME that does not exist (a daemon's HOME=/nonexistent) was created,
    mode 0700, by the first gbp that measured.  The measurement is used
    and not kept, and HOME stays missing."""
    paths = _gbp_files(env, "gbp-nohome", n=2, size=2 * MiB)
    for p in paths:
        env.warm(p)
    home = tmp_path / "no-such-home"
    e = env._env({"HOME": str(home)})
    e.pop("XDG_STATE_HOME", None)
    p = subprocess.run([str(env.discnice_bin), "gbp", "--mem", "--backend", "probe",
                        *map(str, paths)], capture_output=True, timeout=60, env=e)
    assert p.returncode == 0, p
    assert not home.exists(), "gbp created a missing HOME"
    home.mkdir(mode=0o700)
    p = subprocess.run([str(env.discnice_bin), "gbp", "--mem", "--backend", "probe",
                        *map(str, paths)], capture_output=True, timeout=60, env=e)
    assert p.returncode == 0, p
    assert (home / ".local/state/discnice/calibration").is_file(), "not kept under an existing HOME"
