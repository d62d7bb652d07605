"""`discnice run --exec`: no supervisor, discnice becomes the job.

What must hold: the job is the very process its parent started (same pid,
its own exit status and death by signal), the agent alone still holds it at
its cap and `discnice set` still changes that cap (oracle: the kernel's
read_bytes in /proc/PID/io), the class is gone when the job ends however it
leaves, and whatever needs a supervisor is refused before anything starts.
Every test uses a private XDG_RUNTIME_DIR (test_control.py's `runtime`).
"""
import os
import signal
import subprocess
import time

import pytest

from test_control import MiB, _ls, _rate_over, _stop_job, runtime  # noqa: F401 (fixture)


def _spawn_exec(env, extra_env, args, stdout=subprocess.PIPE):
    return subprocess.Popen(
        [str(env.discnice_bin), "run", "--exec", *args], cwd=env.scratch,
        env={**env.base_env, **extra_env}, stdout=stdout, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, start_new_session=True)


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
            argv0 = open(f"/proc/{proc.pid}/cmdline", "rb").read().split(b"\0")[0]
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


@pytest.mark.parametrize("how,cmd,status", [
    ("exit", ["bash", "-c", "exit 3"], 3),                  # exit(): destructors run
    ("_exit", ["sh", "-c", "exit 4"], 4),                   # dash leaves by _exit()
    ("exec", ["sh", "-c", "exec bash -c 'exit 5'"], 5),     # the pid moves on to bash
    ("signal", ["bash", "-c", "kill -TERM $$"], -signal.SIGTERM),
])
def test_exec_job_status_and_class_gone(env, runtime, how, cmd, status):
    """The parent sees the job's own status (a death by signal as such, not
    128+N), and the class is removed when the job ends by exit or _exit."""
    extra, seg_dir = runtime
    name = env.class_name(f"exec-{how}")
    proc = _spawn_exec(env, extra, ["--class", name, "--rate", "inf", "--", *cmd])
    out, err = proc.communicate(timeout=60)
    if proc.returncode != status:
        pytest.fail(f"{cmd}: exit {proc.returncode}, expected {status}; stderr {err!r}",
                    pytrace=False)
    if err:
        pytest.fail(f"--exec wrote to stderr: {err!r}", pytrace=False)
    left = _classes(seg_dir)
    if how != "signal" and name in left:
        pytest.fail(f"class {name} is still in {seg_dir} after its job ended by {how}",
                    pytrace=False)


def test_exec_output_is_the_programs(env, runtime):
    """Bytes through an --exec job equal those of the plain program."""
    extra, seg_dir = runtime
    src = env.path("exec-bytes.dat")
    env.make_file(src, 3 * MiB + 123)
    plain = env.run_plain(["sha256sum", str(src)])
    proc = _spawn_exec(env, extra, ["--rate", "64MiB/s", "--", "sha256sum", str(src)])
    out, err = proc.communicate(timeout=60)
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
    proc.communicate(timeout=60)
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
    ([], {"DISCNICE_FEEDBACK": "on"}, "--feedback on"),
    ([], {"DISCNICE_POLICY": "manners"}, "manners"),
])
def test_exec_refuses_what_needs_a_supervisor(env, runtime, args, env_extra, says):
    """One line, exit 2, and the job never started."""
    extra, seg_dir = runtime
    marker = env.path(f"exec-refused-{len(args)}-{len(env_extra)}")
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
