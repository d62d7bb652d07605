"""discnice on a real one-node Slurm cluster (issue #13): the SPANK plugin
(contrib/slurm/), and `discnice run` inside jobs without it.

The cluster (slurm_cluster.py: munged, slurmctld, slurmd from Debian's
packages, private configuration, state, spool and logs under the scratch
directory, free ports) is brought up once for the module and always torn
down, every process it started killed by the mark in its environment.

Oracles: the kernel's accounting, read by the job itself from /proc/$$/io
of the shell that ran the writer (it holds every child it reaped), and the
job's own clock; process states from /proc/PID/stat; Slurm's own view of
job states.  Never discnice's report.
"""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from slurm_cluster import Cluster, unavailable

MB = 1000 * 1000
WINDOW_S = 1.0  # discnice run's default window: a first burst of one window's budget


@pytest.fixture(scope="module")
def cluster(env):
    why = unavailable()
    if why:
        pytest.skip(why)
    plugin = env.build / "slurm" / "discnice.so"
    task = env.build / "slurm" / "discnice-slurm-task"
    if not plugin.exists() or not task.exists():
        pytest.skip("needs libslurm-dev (slurm/spank.h) to build build/slurm/discnice.so "
                    "(make slurm)")
    root = env.scratch / "slurm"
    c = Cluster(root, plugstack_lines=[])
    c.plugin_line = (f"required {plugin} discnice={env.discnice_bin} "
                     "rate=50MB/s scavenger:rate=4MB/s")
    c.plugstack_lines = [c.plugin_line]
    try:
        c.start()
    except Exception as e:  # the daemons could not run here
        c.stop()
        pytest.skip(f"the Slurm daemons cannot run on this machine: {e}")
    # Jobs run as root here: their classes go to a private directory,
    # never /dev/shm/discnice-0 that other suites on the machine share.
    xdg = root / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    c.env["XDG_RUNTIME_DIR"] = str(xdg)
    c.env["TMPDIR"] = str(env.scratch)
    c.env["LC_ALL"] = "C"
    c.work = env.scratch / "slurm-work"
    c.work.mkdir(exist_ok=True)
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def idle_node(cluster):
    """Each test starts on a node with no job and leaves none behind, even
    when it fails before its own scancel (Cluster.quiesce)."""
    cluster.quiesce()
    yield
    cluster.quiesce()


def writer(path, nbytes):
    """A shell that writes nbytes, then prints its clock and the kernel's
    count of what it and its reaped children wrote."""
    return ("t0=$(date +%s.%N); head -c " + str(nbytes) + " /dev/zero > " + str(path) +
            "; t1=$(date +%s.%N); echo \"T $t0 $t1\"; grep '^write_bytes' /proc/$$/io; "
            "tr '\\0' ' ' < /proc/$PPID/cmdline; echo")


def parse_writer(out):
    t0 = t1 = written = None
    for line in out.splitlines():
        if line.startswith("T "):
            _, a, b = line.split()
            t0, t1 = float(a), float(b)
        elif line.startswith("write_bytes:"):
            written = int(line.split()[1])
    assert t0 is not None and written is not None, out
    return written, t1 - t0


def check_capped(out, cap, what):
    """Written bytes within cap x (elapsed + one window), and not stalled."""
    written, elapsed = parse_writer(out)
    assert written > 0, out
    assert written <= cap * (elapsed + WINDOW_S) * 1.10, \
        f"{what}: {written} B in {elapsed:.2f} s is above {cap} B/s\n{out}"
    assert written / elapsed >= 0.4 * cap, \
        f"{what}: {written} B in {elapsed:.2f} s is far below {cap} B/s\n{out}"
    return written / elapsed


def test_malformed_option_refused_before_queueing(cluster, env):
    before = cluster.client(["squeue", "-h", "-o", "%i"]).stdout.split()
    same = env.discnice(["run", "--rate", "12x", "--", "true"])
    assert same.rc == 2
    message = same.stderr.decode().splitlines()[0] if isinstance(same.stderr, bytes) else same.stderr.splitlines()[0]
    # The same words, naming the option the user typed.
    assert message.startswith("discnice: --rate '12x'"), message
    message = message.replace("discnice: --rate ", "discnice: --discnice-rate ", 1)
    for cmd in (["srun", "--discnice-rate", "12x", "true"],
                ["sbatch", "--discnice-rate", "12x", "--wrap", "true"]):
        r = cluster.client(cmd, check=False)
        assert r.returncode != 0, r
        assert message in r.stderr.splitlines(), (message, r.stderr)
    r = cluster.client(["srun", "--discnice-policy", "nice", "true"], check=False)
    assert r.returncode != 0
    assert "discnice: --discnice-policy 'nice': expected cap, yield or manners" in r.stderr
    r = cluster.client(["srun", "--discnice-class", "a/b", "true"], check=False)
    assert r.returncode != 0 and "discnice: --discnice-class 'a/b'" in r.stderr
    # Nothing was queued.
    assert cluster.client(["squeue", "-h", "-o", "%i"]).stdout.split() == before
    assert "Submitted" not in r.stdout


def test_higher_cap_than_the_administrators_refused(cluster):
    r = cluster.client(["srun", "--discnice-rate", "100MB/s", "true"], check=False)
    assert r.returncode != 0
    assert "above the administrator's cap of 50 MB/s" in r.stderr, r.stderr
    r = cluster.client(["srun", "--discnice-rate", "inf", "true"], check=False)
    assert r.returncode != 0
    r = cluster.client(["srun", "--discnice-policy", "yield", "true"], check=False)
    assert r.returncode != 0 and "yield" in r.stderr
    # A repeated option: the last one counts, as for srun's own options
    # (each occurrence was checked, and the first refused).
    r = cluster.client(["srun", "--discnice-rate", "100MB/s", "--discnice-rate", "5MB/s", "true"],
                       check=False)
    assert r.returncode == 0, r.stderr
    r = cluster.client(["srun", "--discnice-rate", "5MB/s", "--discnice-rate", "100MB/s", "true"],
                       check=False)
    assert r.returncode != 0
    assert "above the administrator's cap of 50 MB/s" in r.stderr, r.stderr


def test_capped_job_disk_rate_by_the_kernel(cluster):
    cap = 5 * MB
    r = cluster.client(["srun", "--discnice-write-rate", "5MB/s", "sh", "-c",
                        writer(cluster.work / "capped", 5 * cap)], timeout=90)
    check_capped(r.stdout, cap, "srun --discnice-write-rate 5MB/s")
    # The task ran under discnice run, in its job's class.
    assert "discnice run" in r.stdout and "--write-rate 5000000" in r.stdout


def test_admin_default_and_users_lower_cap(cluster):
    # The scavenger partition's default, 4 MB/s, for a job that names none.
    r = cluster.client(["srun", "-p", "scavenger", "sh", "-c",
                        writer(cluster.work / "default", 16 * MB)], timeout=90)
    check_capped(r.stdout, 4 * MB, "scavenger default")
    # A user's lower cap holds.
    r = cluster.client(["srun", "-p", "scavenger", "--discnice-rate", "2MB/s", "sh", "-c",
                        writer(cluster.work / "lower", 8 * MB)], timeout=90)
    check_capped(r.stdout, 2 * MB, "lower cap")
    # A higher one is the partition's ceiling, with a warning: srun knows the
    # global ceiling (50 MB/s), the node the partition's.
    r = cluster.client(["srun", "-p", "scavenger", "--discnice-rate", "20MB/s", "sh", "-c",
                        writer(cluster.work / "higher", 16 * MB)], timeout=90)
    check_capped(r.stdout, 4 * MB, "clamped cap")
    assert "above the administrator's cap for partition scavenger" in r.stderr, r.stderr


def test_two_batch_jobs_each_held_to_its_own_cap(cluster):
    jobs = {}
    for cap in (2 * MB, 6 * MB):
        # The script's own writer runs in the batch step, a second one in
        # an srun step: both in the job's one class.
        script = ("#!/bin/sh\n" + writer(cluster.work / f"batch-{cap}", 4 * cap) + "\n")
        out = cluster.work / f"batch-{cap}.out"
        jobs[cap] = (cluster.sbatch(["--discnice-rate", str(cap), "-o", str(out)], script), out)
    for cap, (job, out) in jobs.items():
        cluster.wait_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
        assert cluster.job_state(job) == "COMPLETED", out.read_text()
        text = out.read_text()
        check_capped(text, cap, f"batch job at {cap}")
        assert f"--class slurm-{job}" in text, text


def test_steps_of_a_batch_job_share_its_class(cluster):
    out = cluster.work / "steps.out"
    script = ("#!/bin/sh\nsrun sh -c 'tr \"\\0\" \" \" < /proc/$PPID/cmdline; echo; "
              "echo LD=$LD_PRELOAD'\n")
    job = cluster.sbatch(["--discnice-rate", "3MB/s", "-o", str(out)], script)
    cluster.wait_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
    text = out.read_text()
    assert f"--rate 3000000 --policy cap --class slurm-{job}" in text, text
    # One agent, not the batch step's and the step's.
    ld = [l for l in text.splitlines() if l.startswith("LD=")][0]
    assert ld.count("libdiscnice.so") == 1, ld


# ---- Slurm's signals: cancel, suspend/resume, preemption --------------------

HEAVY = ("while :; do busybox dd if=/dev/zero of={f} bs=64k count=64 2>/dev/null; "
         "head -c 4000000 /dev/zero > {f}.2; done")


def written_by(cluster, job):
    total = 0
    for pid in cluster.job_pids(job):
        try:
            with open(f"/proc/{pid}/io") as f:
                for line in f:
                    if line.startswith("write_bytes:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def start_heavy(cluster, name, extra=()):
    f = cluster.work / name
    job = cluster.sbatch(["--discnice-rate", "3MB/s", "-o", str(f) + ".out"] + list(extra),
                         "#!/bin/sh\n" + HEAVY.format(f=f) + "\n")
    cluster.wait_state(job, ("RUNNING",), timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and written_by(cluster, job) == 0:
        time.sleep(0.2)
    assert written_by(cluster, job) > 0, "the job never wrote"
    return job


def assert_suspended(cluster, job, seconds=2.5):
    """Every process of the job stopped, and nothing written meanwhile:
    discnice resumed none of them.  Slurm suspends in two steps
    (slurmstepd req.c _handle_suspend(): SIGTSTP, 2 s of grace, then
    SIGSTOP), and discnice run, following its job's stop, starts a watcher
    of its own (tool_run.c start_stop_watcher()) that only the SIGSTOP
    stops: the set is taken once all of them are stopped."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = cluster.job_pids(job)
        if states and all(s in "Tt" for s in states.values()):
            break
        time.sleep(0.2)
    first = written_by(cluster, job)
    pids = set(cluster.job_pids(job))
    time.sleep(seconds)
    states = cluster.job_pids(job)
    assert states, "the job's processes vanished"
    assert all(s in "Tt" for s in states.values()), states
    assert set(states) == pids, "processes came and went while suspended"
    assert written_by(cluster, job) == first, "the job wrote while suspended"


def assert_running_again(cluster, job):
    """Progress again within a few seconds, and no process left stopped."""
    first = written_by(cluster, job)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and written_by(cluster, job) == first:
        time.sleep(0.2)
    assert written_by(cluster, job) > first, "no progress after resume"
    # A ptrace hold ('t') is short; a group stop ('T') left behind would
    # persist: sample for a second.
    stuck = None
    for _ in range(5):
        now = {p for p, s in cluster.job_pids(job).items() if s == "T"}
        stuck = now if stuck is None else stuck & now
        time.sleep(0.2)
    assert not stuck, f"left stopped: {stuck}"


def assert_gone(cluster, job, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and cluster.job_pids(job):
        time.sleep(0.2)
    assert not cluster.job_pids(job), f"left behind: {cluster.job_pids(job)}"


def test_suspend_resume_and_cancel(cluster):
    job = start_heavy(cluster, "suspend")
    cluster.client(["scontrol", "suspend", str(job)])
    assert cluster.wait_state(job, ("SUSPENDED",)) == "SUSPENDED"
    assert_suspended(cluster, job)
    cluster.client(["scontrol", "resume", str(job)])
    cluster.wait_state(job, ("RUNNING",))
    assert_running_again(cluster, job)
    cluster.client(["scancel", str(job)])
    assert_gone(cluster, job)


def test_cancel_while_suspended(cluster):
    job = start_heavy(cluster, "cancel-suspended")
    cluster.client(["scontrol", "suspend", str(job)])
    cluster.wait_state(job, ("SUSPENDED",))
    time.sleep(1)
    cluster.client(["scancel", str(job)])
    assert_gone(cluster, job)


def test_preemption_suspends_and_resumes(cluster):
    victim = start_heavy(cluster, "preempted", ["-p", "scavenger", "-c", "8"])
    # The hog outlasts assert_suspended(): Slurm's 2 s of grace before
    # its SIGSTOP, then 2 s of watching.
    hog = cluster.sbatch(["-p", "high", "-c", "8", "-o", "/dev/null"], "#!/bin/sh\nsleep 8\n")
    cluster.wait_state(victim, ("SUSPENDED",), timeout=30)
    assert_suspended(cluster, victim, seconds=2)
    cluster.wait_state(hog, ("COMPLETED",), timeout=30)
    cluster.wait_state(victim, ("RUNNING",), timeout=30)
    assert_running_again(cluster, victim)
    cluster.client(["scancel", str(victim)])
    assert_gone(cluster, victim)


# ---- without the plugin ---------------------------------------------------

@pytest.fixture
def no_plugin(cluster):
    cluster.write_plugstack([])
    yield cluster
    cluster.write_plugstack([cluster.plugin_line])


def test_without_plugin_srun_and_sbatch_discnice_run(no_plugin, env):
    cluster = no_plugin
    r = cluster.client(["srun", str(env.discnice_bin), "run", "--quiet", "--write-rate", "4MB/s",
                        "--", "sh", "-c", writer(cluster.work / "plain", 16 * MB)], timeout=90)
    check_capped(r.stdout, 4 * MB, "srun discnice run")
    out = cluster.work / "plain-batch.out"
    body = cluster.work / "plain-batch.sh"
    body.write_text(writer(cluster.work / "plain-batch", 12 * MB) + "\n")
    script = (f"#!/bin/sh\n{env.discnice_bin} run --quiet --rate 3MB/s "
              f"--class batch-$SLURM_JOB_ID -- sh {body}\n")
    job = cluster.sbatch(["-o", str(out)], script)
    cluster.wait_state(job, ("COMPLETED", "FAILED"), timeout=90)
    check_capped(out.read_text(), 3 * MB, "sbatch script with discnice run")


def test_ls_shows_slurm_job_and_step(cluster, env):
    job = start_heavy(cluster, "listed")
    try:
        r = env.discnice(["ls", "--json"], env={"XDG_RUNTIME_DIR": cluster.env["XDG_RUNTIME_DIR"]})
        assert r.rc == 0, r.dump()
        import json
        classes = {c["class"] if "class" in c else c.get("name"): c for c in json.loads(r.stdout)}
        assert f"slurm-{job}" in classes, r.stdout
        runs = classes[f"slurm-{job}"]["runs"]
        assert any(run.get("slurm_job_id") == job and run.get("slurm_step") == "batch"
                   for run in runs), runs
        table = env.discnice(["ls"], env={"XDG_RUNTIME_DIR": cluster.env["XDG_RUNTIME_DIR"]})
        assert f"slurm job {job} step batch" in table.stdout.decode(), table.stdout
        # A step's tasks: "0".
        r = cluster.client(["srun", "--discnice-rate", "3MB/s", "sh", "-c",
                            f"XDG_RUNTIME_DIR={cluster.env['XDG_RUNTIME_DIR']} "
                            f"{env.discnice_bin} ls --json"])
        assert f'"slurm_job_id": ' in r.stdout and '"slurm_step": "0"' in r.stdout, r.stdout
        top = env.discnice(["top", "--json", "--count", "1", "--interval", "0.2"],
                           env={"XDG_RUNTIME_DIR": cluster.env["XDG_RUNTIME_DIR"]})
        assert f'"slurm_job_id": {job}, "slurm_step": "batch"' in top.stdout.decode(), top.stdout
    finally:
        cluster.client(["scancel", str(job)])
        assert_gone(cluster, job)


def test_plugin_of_another_slurm_release_refused(cluster, env):
    wrong = env.build / "slurm" / "test" / "discnice.so"
    cluster.write_plugstack([f"optional {wrong} discnice={env.discnice_bin} rate=1MB/s"])
    try:
        r = cluster.client(["srun", "sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline"])
        assert "discnice" not in r.stdout  # not wrapped: the plugin was not loaded
        log = (cluster.root / "log" / "slurmd.log").read_text()
        assert f"Incompatible Slurm plugin {wrong} version (21.08" in log, log[-2000:]
        # slurmd is alive and well.
        assert cluster.client(["scontrol", "ping"]).returncode == 0
        assert all(p.poll() is None for p in cluster.procs), "a daemon died"
        cluster._wait(cluster._node_idle, 30, "the node to be idle again")
    finally:
        cluster.write_plugstack([cluster.plugin_line])


# ---- what the Slurm hunt of stop 52 found -----------------------------------

def test_sbatch_export_none_keeps_the_options(cluster):
    """sbatch --export=NONE (or a list) left the batch step's environment
    without the options, and the script ran under the global default
    (20 MB in 0.4 s asked at 2 MB/s); the plugin reads them from Slurm's
    SPANK job environment then."""
    for export in ("NONE", "HOME"):
        out = cluster.work / f"export-{export}.out"
        script = "#!/bin/sh\n" + writer(cluster.work / f"export-{export}", 8 * MB) + "\n"
        job = cluster.sbatch([f"--export={export}", "--discnice-write-rate", "2MB/s",
                              "-o", str(out)], script)
        cluster.wait_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
        text = out.read_text()
        assert "--write-rate 2000000" in text, text
        check_capped(text, 2 * MB, f"sbatch --export={export}")


def test_the_submitting_shells_discnice_variables_are_not_the_jobs(cluster):
    """DISCNICE_READ_RATE=1k in the shell that ran srun once re-capped the
    job's class on the node (a job hung); its settings are the plugin's."""
    r = cluster.client(["srun", "--discnice-write-rate", "5MB/s", "sh", "-c",
                        writer(cluster.work / "shellvars", 10 * MB) + "; env | grep '^DISCNICE_'"],
                       env={"DISCNICE_WRITE_RATE": "100k", "DISCNICE_WINDOW": "30"}, timeout=90)
    check_capped(r.stdout, 5 * MB, "srun beside DISCNICE_WRITE_RATE=100k")
    leaked = [l for l in r.stdout.splitlines()
              if l.startswith(("DISCNICE_WRITE_RATE", "DISCNICE_WINDOW", "DISCNICE_SLURM"))]
    assert not leaked, r.stdout


@pytest.fixture
def partitions(cluster, env):
    """A partition with a higher ceiling, and yield chosen for scavenger."""
    cluster.write_plugstack([f"required {env.build / 'slurm' / 'discnice.so'} "
                             f"discnice={env.discnice_bin} rate=50MB/s high:rate=200MB/s "
                             "scavenger:rate=4MB/s scavenger:policy=yield"])
    yield cluster
    cluster.write_plugstack([cluster.plugin_line])


def test_srun_refuses_only_what_no_partition_allows(partitions):
    """srun checked every request against the global ceiling alone: a job of
    `high` (200 MB/s) asking 100 MB/s was refused, and so was
    --discnice-policy yield where the administrator chose it."""
    cluster = partitions
    cmdline = "tr '\\0' ' ' < /proc/$PPID/cmdline; echo"
    r = cluster.client(["srun", "-p", "high", "--discnice-rate", "100MB/s", "sh", "-c", cmdline])
    assert "--rate 100000000" in r.stdout, r.stdout
    r = cluster.client(["srun", "-p", "scavenger", "--discnice-policy", "yield", "sh", "-c",
                        cmdline])
    assert "--policy yield" in r.stdout, r.stdout
    # The default partition's ceiling still holds, on the node, with a warning.
    r = cluster.client(["srun", "--discnice-rate", "100MB/s", "sh", "-c", cmdline])
    assert "--rate 50000000" in r.stdout, r.stdout
    assert "the job runs at 50 MB/s" in r.stderr, r.stderr
    # What no partition allows is refused before the job is queued.
    r = cluster.client(["srun", "--discnice-rate", "300MB/s", "true"], check=False)
    assert r.returncode != 0 and "above the administrator's cap" in r.stderr, r.stderr


def test_a_task_that_cannot_be_wrapped_is_said_honestly(cluster, env, tmp_path):
    """A missing discnice-slurm-task: the job's output said 'cannot find
    ... ()' and 'task not started', and under `optional` the task ran.
    Now the line names the program and says what Slurm does next."""
    missing = tmp_path / "no-such-task"
    plugin = env.build / "slurm" / "discnice.so"
    try:
        for mode in ("optional", "required"):
            cluster.write_plugstack([f"{mode} {plugin} discnice={env.discnice_bin} "
                                     f"task={missing} rate=50MB/s"])
            r = cluster.client(["srun", "sh", "-c", "echo ran"], check=False)
            lines = [l for l in r.stderr.splitlines() if l.startswith("discnice:")]
            assert len(lines) == 1, r.stderr
            assert str(missing) in lines[0] and "not regulated" in lines[0], lines
            if mode == "required":
                assert r.returncode != 0 and "ran" not in r.stdout, (r.stdout, r.stderr)
    finally:
        cluster.write_plugstack([cluster.plugin_line])


def test_a_command_found_nowhere_is_said_as_slurm_says_it(cluster):
    """A bare name not on PATH: 'discnice: ./no-such: No such file or
    directory', exit 127, of a './' the user never typed; without the plugin
    slurmstepd says 'execve(): no-such: ...' and exits 2."""
    r = cluster.client(["srun", "no-such-command-dn"], check=False)
    assert "execve(): no-such-command-dn: No such file or directory" in r.stderr, r.stderr
    assert "./no-such-command-dn" not in r.stderr and r.returncode == 2, (r.returncode, r.stderr)


def test_multi_prog_step_is_left_alone_with_a_warning(cluster):
    """--multi-prog: the plugin saw the configuration file as the program,
    the tasks ran unregulated without a word, and the plugin's variables
    were left in their environment."""
    conf = cluster.work / "mp.conf"
    conf.write_text("0-1 /usr/bin/env\n")
    for name in (str(conf), conf.name):   # as typed: absolute, or in the working directory
        r = cluster.client(["srun", "-n", "2", "--discnice-rate", "1MB/s", "--multi-prog", name],
                           cwd=cluster.work)
        assert "DISCNICE_SLURM" not in r.stdout, r.stdout
        warnings = [l for l in r.stderr.splitlines() if "--multi-prog" in l]
        assert len(warnings) == 1 and "unregulated" in warnings[0], r.stderr
