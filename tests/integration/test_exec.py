"""`discnice run --exec`: no supervisor, discnice becomes the job.

What must hold: the job is the very process its parent started (same pid,
its own exit status and death by signal), the agent alone still holds it at
its cap and `discnice set` still changes that cap (oracle: the kernel's
read_bytes in /proc/PID/io), the class is gone when the job ends, however
it leaves but killed (then the next run removes it), and whatever needs a
supervisor is refused before anything starts.
Every test uses a private XDG_RUNTIME_DIR (test_control.py's `runtime`).
"""
import os
import signal
import subprocess
import time

import pytest

from test_control import (MiB, _ls, _rate_over, _spawn_run, _stop_job, _wait_for_class,  # noqa: F401
                          runtime)  # (a fixture)


def _spawn_exec(env, extra_env, args, stdout=subprocess.PIPE):
    return _spawn_run(env, extra_env, ["--exec", *args], stdout)


def _classes(seg_dir):
    return sorted(p.name for p in seg_dir.iterdir()) if seg_dir.exists() else []


def test_exec_job_keeps_pid_cap_and_set(env, runtime):
    """The process discnice was is the job: `cat` with discnice's pid, shown
    by ls under that pid, read by the kernel at its 2 MiB/s cap, and
    raised to 8 MiB/s by `set` with no supervisor to relay it."""
    extra, _ = runtime
    name = env.class_name("exec-set")
    big = env.path("exec-set.dat")
    env.make_file(big, 64 * MiB)
    env.drop_cache(big)
    proc = _spawn_exec(env, extra, ["--class", name, "--read-rate", "2MiB/s", "--",
                                    "cat", str(big)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                argv0 = open(f"/proc/{proc.pid}/cmdline", "rb").read().split(b"\0")[0]
            except OSError:
                argv0 = b"(gone)"
            if os.path.basename(argv0) == b"cat":
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"pid {proc.pid} never became cat ({argv0!r}, "
                            f"exit {proc.poll()})", pytrace=False)
            time.sleep(0.01)
        r, classes = _ls(env, extra)
        mine = [c for c in classes if c["class"] == name]
        if not mine or [run["pid"] for run in mine[0]["runs"]] != [proc.pid]:
            r.fail(f"ls --json does not show the class with run {proc.pid}")
        time.sleep(0.5)
        before = _rate_over(proc.pid, 1.5)
        r = env.discnice(["set", name, "--read-rate", "8MiB/s"], env=extra, timeout=30)
        r.check_exit(0)
        time.sleep(0.3)
        after = _rate_over(proc.pid, 3.0)
        if not 1.5 * MiB <= before <= 2.6 * MiB:
            r.fail(f"under a 2 MiB/s cap the --exec job read {before / MiB:.2f} MiB/s")
        # Cold reads come in readahead windows: a few seconds' average.
        if not 5 * MiB <= after <= 10 * MiB:
            r.fail(f"after set --read-rate 8MiB/s the --exec job read {after / MiB:.2f} MiB/s "
                   f"(before {before / MiB:.2f})")
    finally:
        _stop_job(proc)


def _finish(proc, timeout=60):
    """communicate(), and on a timeout kill the job's session, not leave it."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_job(proc)
        pytest.fail(f"the --exec job did not end in {timeout} s", pytrace=False)


@pytest.mark.parametrize("how", ["exit", "_exit", "_Exit", "threads", "fork", "exec-sh",
                                 "signal", "signal-in-sleep"])
def test_exec_job_status_and_class_gone(env, runtime, how):
    """The parent sees the job's own status (a death by signal as such, not
    128+N), and the class is removed however the job leaves but killed:
    exit(), _exit(), _Exit(), four threads in _exit() beside exit() (one
    end, not five), after a fork and a vfork child's _exit() (which must
    not end it: the program checks), through an exec, and from a signal
    handler that interrupted a throttled write."""
    extra, seg_dir = runtime
    name = env.class_name(f"exec-{how}")
    ways = str(env.program("exit_ways"))
    cap, cmd, status = ["--rate", "inf"], None, 5
    if how == "exit":
        cmd = ["bash", "-c", "exit 5"]
    elif how in ("_exit", "_Exit", "threads", "fork"):
        cmd = [ways, how, "5"]
    elif how == "exec-sh":
        cmd = ["sh", "-c", f"exec {ways} _exit 5"]       # the pid moves on
    elif how == "signal":
        cmd, status = ["bash", "-c", "kill -TERM $$"], -signal.SIGTERM
    else:
        cap = ["--write-rate", "1MiB/s"]
        cmd = [ways, "signal", "5", str(env.path(f"exec-{how}.out"))]
    proc = _spawn_exec(env, extra, ["--class", name, *cap, "--", *cmd])
    out, err = _finish(proc)
    if proc.returncode != status:
        pytest.fail(f"{cmd}: exit {proc.returncode}, expected {status} (3: a child's exit "
                    f"removed the class); stderr {err!r}", pytrace=False)
    if err:
        pytest.fail(f"--exec wrote to stderr: {err!r}", pytrace=False)
    if how != "signal" and name in _classes(seg_dir):
        pytest.fail(f"class {name} is still in {seg_dir} after its job ended by {how}",
                    pytrace=False)


def test_exec_job_in_a_supervised_class(env, runtime):
    """An --exec job that joins a supervised run's class and leaves by
    five exits at once ends only its own run: the class and the other run
    stay (ls)."""
    extra, _ = runtime
    name = env.class_name("exec-shared")
    sup = _spawn_run(env, extra, ["--quiet", "--class", name, "--rate", "inf", "--",
                                  "sleep", "60"])
    try:
        _wait_for_class(env, extra, name, sup)
        proc = _spawn_exec(env, extra, ["--class", name, "--rate", "inf", "--",
                                        str(env.program("exit_ways")), "threads", "0"])
        _finish(proc)
        r, classes = _ls(env, extra)
        mine = [c for c in classes if c["class"] == name]
        if not mine or [run["pid"] for run in mine[0]["runs"]] != [sup.pid]:
            r.fail(f"after the --exec job left, class {name} should hold the supervised "
                   f"run {sup.pid} alone")
    finally:
        _stop_job(sup)


def test_exec_output_is_the_programs(env, runtime):
    """Bytes through an --exec job equal those of the plain program."""
    extra, seg_dir = runtime
    src = env.path("exec-bytes.dat")
    env.make_file(src, 3 * MiB + 123)
    plain = env.run_plain(["sha256sum", str(src)])
    proc = _spawn_exec(env, extra, ["--rate", "64MiB/s", "--", "sha256sum", str(src)])
    out, err = _finish(proc)
    if proc.returncode != 0 or out != plain.stdout:
        pytest.fail(f"exit {proc.returncode}, output {out!r} vs {plain.stdout!r}; {err!r}",
                    pytrace=False)
    if _classes(seg_dir):
        pytest.fail(f"classes left behind: {_classes(seg_dir)}", pytrace=False)


def test_exec_killed_job_class_reaped_by_next_run(env, runtime):
    """A job killed outright runs no code: its class stays until the next
    `discnice run` finds its pid dead (older than 5 s) and removes it."""
    extra, seg_dir = runtime
    name = env.class_name("exec-killed")
    proc = _spawn_exec(env, extra, ["--class", name, "--rate", "inf", "--",
                                    "bash", "-c", "kill -KILL $$"])
    _finish(proc)
    if proc.returncode != -signal.SIGKILL:
        pytest.fail(f"exit {proc.returncode}, expected -9", pytrace=False)
    if name not in _classes(seg_dir):
        pytest.skip("the class was already gone (nothing to reap)")
    time.sleep(5.2)
    r = env.discnice(["run", "--quiet", "--rate", "inf", "--", "true"], env=extra)
    r.check_exit(0)
    if name in _classes(seg_dir):
        r.fail(f"the next run did not remove the dead --exec job's class {name}")


@pytest.mark.parametrize("args,env_extra,says", [
    (["--report", "r.json"], {}, "--report"),
    (["--policy", "yield"], {}, "yield"),
    (["--policy", "manners"], {}, "manners"),
    (["--feedback", "on"], {}, "--feedback on"),
    ([], {"DISCNICE_FEEDBACK": "on"}, "DISCNICE_FEEDBACK=on"),
    ([], {"DISCNICE_POLICY": "manners"}, "manners"),
])
def test_exec_refuses_what_needs_a_supervisor(env, runtime, request, args, env_extra, says):
    """One line, exit 2, and the job never started."""
    extra, seg_dir = runtime
    marker = env.path(f"exec-refused-{request.node.callspec.id}")
    r = env.discnice(["run", "--exec", "--rate", "inf", *args, "--", "touch", str(marker)],
                     env={**extra, **env_extra})
    r.check_exit(2)
    if says not in r.stderr.decode() or marker.exists() or _classes(seg_dir):
        r.fail(f"expected one refusal naming {says!r}, no job, no class")


def test_exec_refuses_a_program_the_agent_cannot_load_into(env, runtime):
    """A static program under --exec would run unregulated: refused."""
    extra, seg_dir = runtime
    r = env.discnice(["run", "--exec", "--rate", "5M", "--", env.program("static_waiter"), "0"],
                     env=extra)
    r.check_exit(2)
    if "statically linked" not in r.stderr.decode() or _classes(seg_dir):
        r.fail("expected a refusal naming the static program, and no class")
