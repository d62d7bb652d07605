"""Issue #8, the supervisor's edges: a full /dev/shm, a class directory that
someone else made, a script without "#!", a report that cannot be written,
and the agent's silence after a uid change or when its class is gone."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, MiB


def _root_or_skip():
    if os.geteuid() != 0:
        pytest.skip("needs root (to mount a tmpfs, or to act as another user)")


def _tmpfs(path, size):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                   check=True, timeout=30)


def _umount(path):
    subprocess.run(["umount", "-l", str(path)], timeout=30)


def test_full_runtime_dir(env):
    """Item 6: the class segment on a full tmpfs.  Before: discnice died of
    SIGBUS (exit 135) and left its run-PID file behind."""
    _root_or_skip()
    mnt = env.path("fulltmp")
    _tmpfs(mnt, "64k")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"x" * 4096) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        r = env.discnice(["run", "--rate", "1MiB/s", "--", "true"], env={"XDG_RUNTIME_DIR": str(mnt)})
        assert r.rc == 125, r.dump()
        err = r.stderr.decode()
        assert "No space left on device" in err, err
        assert err.count("\n") == 1, f"one line, not more:\n{err}"
        left = [p.name for p in (mnt / "discnice").iterdir()] if (mnt / "discnice").is_dir() else []
        assert left == [], f"files left behind: {left}"
    finally:
        _umount(mnt)


def test_class_directory_of_someone_else(env):
    """Item 14: another user made /dev/shm/discnice-UID (here: the runtime
    directory's discnice/ belongs to nobody).  The message must blame the
    directory, not the class."""
    _root_or_skip()
    rt = env.fresh_dir("rt-squatted")
    (rt / "discnice").mkdir(mode=0o700)
    os.chown(rt / "discnice", 65534, 65534)
    r = env.discnice(["run", "--rate", "1MiB/s", "--", "true"], env={"XDG_RUNTIME_DIR": str(rt)})
    assert r.rc == 125, r.dump()
    err = r.stderr.decode()
    assert "belongs to another user" in err and str(rt / "discnice") in err, err
    assert "class" not in err.split(":", 2)[-1].split("(")[0], err
    # ls, top and set blame the directory the same way: set said the
    # class was "not yours ... or not mode 0600".
    for mode, why in ((None, "belongs to another user"), (0o755, "open to other users")):
        if mode is not None:
            os.chown(rt / "discnice", os.getuid(), os.getgid())
            os.chmod(rt / "discnice", mode)
        for args, rc in ((["ls"], 4), (["top", "--count", "1"], 4), (["set", "c1", "--rate", "1M"], 4)):
            r = env.discnice(args, env={"XDG_RUNTIME_DIR": str(rt)})
            err = r.stderr.decode()
            assert r.rc == rc and why in err and str(rt / "discnice") in err, (args, r.dump())
            assert "0600" not in err, (args, err)


def test_script_without_shebang(env):
    """Item 14: env(1) and execvp(3) run a script without "#!" with
    /bin/sh.  Before: discnice failed with 126."""
    script = env.path("noshebang.sh")
    script.write_text('echo "args: $*"; exit 3\n')
    script.chmod(0o755)
    plain = env.run_plain(["env", str(script), "a", "b c"])
    assert plain.rc == 3, plain.dump()
    r = env.run([script, "a", "b c"], rate="inf")
    r.check_exit(3)
    r.check_output_equals(plain.stdout)


@pytest.mark.parametrize("command", ["run", "benice"])
@pytest.mark.parametrize("where", ["directory", "proc", "under-a-file"])
def test_report_that_cannot_be_written(env, where, command):
    """Item 14: --report naming a directory or a file in /proc, or a file
    under a regular file (access(W_OK) passes a file: the job ran, then
    exit 125 with no report).  Before: the up-front check passed, the job
    ran, and discnice exited 0 without a report.  Now: refused before the
    job starts (exit 2, no job)."""
    if where == "directory":
        target = env.path("reportdir")
        target.mkdir(exist_ok=True)
    elif where == "proc":
        target = "/proc/self/discnice-report"
    else:
        blocker = env.path("report-blocker")
        blocker.write_text("a file\n")
        target = blocker / "report.json"
    marker = env.path(f"ran-{where}-{command}")
    head = ["run", "--rate", "inf"] if command == "run" else ["benice", "--persist", "off"]
    r = env.discnice([*head, "--report", target, "--", "touch", marker])
    assert r.rc == 2, r.dump()
    assert not marker.exists(), "the job was started"
    assert "--report" in r.stderr.decode()


def test_report_through_a_symlink_replaces_its_target(env):
    """--report LINK writes the file the link leads to and leaves the link
    (it was renamed over the link: as root, --report /dev/stdout replaced
    the system's /dev/stdout with a regular file).  A link into /proc - a
    descriptor, as /dev/stdout is - is refused before the job starts: the
    report is renamed into place, which would throw away the job's own
    output in that file.  (A private link to /proc/self/fd/1 stands in for
    /dev/stdout, which a regression must not be able to break.)"""
    d = env.fresh_dir("report-links")
    (d / "sub").mkdir()
    os.symlink("../real.json", d / "sub" / "link.json")
    r = env.discnice(["run", "-q", "--rate", "inf", "--report", d / "sub" / "link.json", "--",
                      "true"])
    r.check_exit(0)
    assert os.path.islink(d / "sub" / "link.json"), "the link was replaced"
    assert json.loads((d / "real.json").read_text())["command"] == ["true"]
    os.symlink("/proc/self/fd/1", d / "mystdout")
    marker = d / "ran"
    r = env.discnice(["run", "--rate", "inf", "--report", d / "mystdout", "--", "touch", marker])
    assert r.rc == 2 and "descriptor" in r.stderr.decode(), r.dump()
    assert not marker.exists(), "the job was started"
    assert os.path.islink(d / "mystdout")
    # A descriptor named in /proc itself, or through /dev/fd: the link's
    # target is the job's output file, which the report replaced (the job's
    # output and all that was in the file lost).
    out = d / "out.txt"
    for name in ("/proc/self/fd/1", "/proc/thread-self/fd/1", "/dev/fd/1"):
        out.write_bytes(b"previous\n")
        with open(out, "ab") as f:
            p = subprocess.run([str(env.discnice_bin), "run", "-q", "--rate", "inf", "--report",
                                name, "--", "sh", "-c", "echo job-ran"], stdout=f,
                               stderr=subprocess.PIPE, env=env.base_env, timeout=60)
        assert p.returncode == 2 and b"descriptor" in p.stderr, (name, p)
        assert out.read_bytes() == b"previous\n", (name, out.read_bytes())


def test_no_agent_noise_after_uid_change(env):
    """Item 12: after setpriv to another uid the segment is not readable;
    every exec used to print 'class segment ... is unusable'.  The job's
    stderr must be what it is without discnice."""
    _root_or_skip()
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv")
    cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
           "sh", "-c", "ls / >/dev/null; cat /etc/hostname >/dev/null; echo done"]
    plain = env.run_plain(cmd)
    r = env.run(cmd, rate="inf")
    r.check_exit(plain.rc)
    r.check_output_equals(plain.stdout)
    assert r.stderr == plain.stderr, r.stderr.decode()


def test_no_agent_noise_after_class_is_gone(env):
    """Item 12: a process that outlives discnice (its class removed) and
    then execs used to print the same line at each exec."""
    out = env.path("outlive.txt")
    # The job leaves a grandchild behind that execs after discnice is gone.
    script = f'(sleep 1; sh -c "echo late" > "{out}" 2>"{out}.err") & exit 0'
    r = env.run(["sh", "-c", script], rate="inf")
    r.check_exit(0)
    for _ in range(50):
        if out.exists() and out.read_text():
            break
        __import__("time").sleep(0.1)
    assert out.read_text() == "late\n"
    assert (env.path("outlive.txt.err")).read_text() == ""


def _prog32(env):
    src = env.path("hello32.c")
    src.write_text('#include <stdio.h>\nint main(void) { puts("hello from 32 bits"); return 0; }\n')
    out = env.path("hello32")
    cc = subprocess.run(["cc", "-m32", "-o", str(out), str(src)], capture_output=True, timeout=60)
    if cc.returncode != 0:
        pytest.skip("no 32-bit toolchain (Debian: gcc-multilib, which .ci/run installs): "
                    + cc.stderr.decode().strip().splitlines()[-1])
    return out


def test_32bit_programs_quiet(env):
    """Item 12: a 32-bit program in a job.  Before: ld.so's 'wrong ELF
    class: ELFCLASS64' line on its stderr, and no word from discnice."""
    prog = _prog32(env)
    # Inside a job: the job's stderr is the plain run's, not a byte more.
    cmd = ["sh", "-c", f'"{prog}"; cat /etc/hostname >/dev/null']
    plain = env.run_plain(cmd)
    r = env.run(cmd, rate="inf")
    r.check_exit(0)
    r.check_output_equals(plain.stdout)
    assert r.stderr == plain.stderr, r.stderr.decode()
    # As the job itself: discnice says once that the agent cannot reach it.
    r = env.run([prog], rate="inf")
    r.check_exit(0)
    lines = r.stderr_lines()
    assert len(lines) == 1 and "32-bit" in lines[0] and lines[0].startswith("discnice:"), lines


def _agent_in_maps(r):
    """The kernel's word: how many mappings of the agent each program of
    the job had (one `grep -c` per program, from its /proc/self/maps)."""
    return [int(n) for n in r.stdout.split()]


MAPS_JOB = ["sh", "-c", "grep -c libdiscnice /proc/self/maps; "
            "cat /proc/self/maps | grep -c libdiscnice; exit 0"]


@pytest.mark.parametrize("hwcaps", ["", "glibc.cpu.hwcaps=-AVX2"])
def test_the_agent_loads_into_every_program(env, hwcaps):
    """LD_PRELOAD names the agent through the loader's $PLATFORM.  Before:
    glibc 2.26-2.36 expand it to "haswell" (not the kernel's "x86_64") on
    an Intel CPU with AVX2, found no DIR/haswell/, and every job ran
    without its agent, with no word from discnice.  Judged by each
    program's own mappings, with the CPU's features as they are and with
    AVX2 masked (then the loader says "x86_64")."""
    extra = {"GLIBC_TUNABLES": hwcaps} if hwcaps else None
    r = env.run(MAPS_JOB, rate="inf", env=extra)
    r.check_exit(0)
    counts = _agent_in_maps(r)
    assert len(counts) == 2 and all(n >= 1 for n in counts), (counts, r.stdout.decode())
    assert r.stderr == b"", r.stderr.decode()


def test_installed_agent_loads(env, tmp_path):
    """The same through `make install`'s layout (PREFIX/lib/discnice/ and
    its per-platform directories), with the installed binary."""
    prefix = tmp_path / "prefix"
    r = subprocess.run(["make", "-s", "-C", str(REPO), f"BUILD={env.discnice_bin.parent}",
                        f"PREFIX={prefix}", "install"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    job_env = {k: v for k, v in os.environ.items() if k != "DISCNICE_AGENT"}
    out = subprocess.run([str(prefix / "bin/discnice"), "run", "--quiet", "--rate", "inf", "--",
                          *MAPS_JOB], capture_output=True, env=job_env, timeout=60)
    assert out.returncode == 0, out.stderr
    counts = [int(n) for n in out.stdout.split()]
    assert len(counts) == 2 and all(n >= 1 for n in counts), (counts, out.stderr)
    assert out.stderr == b"", out.stderr.decode()


def test_uninstall_removes_what_install_put(env, tmp_path):
    """`make install` then `make uninstall`, both with DESTDIR and a
    PREFIX: the two targets list the files apart (Makefile), so this keeps
    them in step - nothing installed is left behind, directories aside."""
    dest = tmp_path / "dest"
    make = ["make", "-s", "-C", str(REPO), f"BUILD={env.discnice_bin.parent}",
            f"DESTDIR={dest}", "PREFIX=/usr/local"]
    r = subprocess.run(make + ["install", "install-slurm"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    installed = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir())
    assert "usr/local/bin/discnice" in installed and len(installed) > 10, installed
    # An import leaves bytecode beside the module (__pycache__), which
    # uninstall removes too.
    module = [p for p in dest.rglob("discnice_manners.py")]
    assert len(module) == 1, installed
    r = subprocess.run([sys.executable, "-c", "import discnice_manners"],
                       env={**{k: v for k, v in os.environ.items()
                               if k != "PYTHONDONTWRITEBYTECODE"},
                            "PYTHONPATH": str(module[0].parent),
                            "MANNERS_LIBRARY": str(dest / "usr/local/lib/libmanners.so.0")},
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert list(module[0].parent.glob("__pycache__/discnice_manners.*.pyc")), r.stderr
    r = subprocess.run(make + ["uninstall"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    left = sorted(str(p.relative_to(dest)) for p in dest.rglob("*")
                  if not p.is_dir() or p.is_symlink())
    assert left == [], left


def test_an_agent_the_loader_refuses_is_reported(env):
    """When no program of the job loaded the agent (here a file the loader
    cannot map), discnice says so once, after the job, and the job's
    status and output stand.  Before: nothing was said."""
    bad = env.path("badagent")
    bad.mkdir()
    (bad / "libdiscnice.so").write_bytes(b"")
    cmd = ["sh", "-c", "echo out; exit 3"]
    r = env.run(cmd, rate="5MiB/s", env={"DISCNICE_AGENT": str(bad / "libdiscnice.so")})
    r.check_exit(3)
    assert r.stdout == b"out\n"
    ours = [l for l in r.stderr_lines() if l.startswith("discnice:")]
    assert len(ours) == 1 and "agent never started" in ours[0] and "outside only" in ours[0], ours
    assert r.report["agent_loads"] == 0, r.dump()
    # Killed before the agent could start (as a job held from outside under a
    # tiny cap for what exec read, then interrupted): the line does not
    # say that the loader refused it, only that it may have.
    r = env.run(["sh", "-c", "kill -TERM $$"], rate="5MiB/s",
                env={"DISCNICE_AGENT": str(bad / "libdiscnice.so")})
    ours = [l for l in r.stderr_lines() if l.startswith("discnice:")]
    assert len(ours) == 1 and "killed by signal 15 (Terminated) before, or the loader did " \
        "not load" in ours[0], ours
    # With the agent: no such line, and the report counts the programs.
    r = env.run(cmd, rate="5MiB/s")
    r.check_exit(3)
    assert not [l for l in r.stderr_lines() if l.startswith("discnice:")], r.stderr_lines()
    assert r.report["agent_loads"] == 1, r.dump()


@pytest.mark.parametrize("where", ["a space", "a:colon"])
def test_an_agent_path_ld_preload_cannot_carry_is_refused(env, where):
    """ld.so splits LD_PRELOAD at spaces and colons (elf/rtld.c,
    handle_preload_list()): an install under such a directory started the
    job without the agent, the loader's two "cannot be preloaded" lines on
    its stderr.  Now discnice refuses with one line and 125, before the
    job; through a symbolic link without one, the agent loads."""
    place = env.path(where)
    place.mkdir()
    shutil.copy(env.agent, place / "libdiscnice.so")
    marker = env.path(f"started-{where}")
    r = env.run(["sh", "-c", f"touch '{marker}'"], rate="5MiB/s",
                env={"DISCNICE_AGENT": str(place / "libdiscnice.so")})
    r.check_exit(125)
    lines = r.stderr_lines()
    what = "space" if " " in where else "colon"
    assert len(lines) == 1 and f"holds a {what}" in lines[0] and str(place) in lines[0], lines
    assert not marker.exists(), "the job was started"
    link = env.path(f"link-{what}.so")
    link.symlink_to(place / "libdiscnice.so")
    r = env.run(["sh", "-c", "grep -c libdiscnice /proc/self/maps"], rate="inf",
                env={"DISCNICE_AGENT": str(link)})
    r.check_exit(0)
    assert int(r.stdout) >= 1 and r.stderr == b"", r.dump()


def test_discnice_agent_misnamed_says_how(env):
    """DISCNICE_AGENT set but relative, or naming no file: the message said
    "cannot find the agent (set DISCNICE_AGENT ...)" though it was set."""
    for value, says in (("rel/libdiscnice.so", "is not an absolute path"),
                        (str(env.path("nowhere.so")), "No such file or directory")):
        r = env.run(["true"], rate="5MiB/s", env={"DISCNICE_AGENT": value})
        r.check_exit(125)
        lines = r.stderr_lines()
        assert len(lines) == 1 and f"DISCNICE_AGENT '{value}'" in lines[0] \
            and says in lines[0], lines


def test_trace_on_a_full_disk(env):
    """Item 14: --trace to a full filesystem.  Before: lines were lost
    silently.  Now the job's status stands and discnice says how many."""
    _root_or_skip()
    mnt = env.path("fulltrace")
    _tmpfs(mnt, "16k")
    try:
        data = env.make_file(env.path("traced.dat"), 8 * MiB)
        env.drop_cache(data)
        trace = mnt / "trace.txt"
        r = env.run(["cat", data], rate="64MiB/s", extra_args=["--trace", trace, "--chunk", "16KiB"])
        r.check_exit(0)
        err = r.stderr.decode()
        assert "trace line(s) could not be written" in err and str(trace) in err, err
        assert r.report["trace_lost_lines"] > 0, r.dump()
    finally:
        _umount(mnt)


def test_no_process_for_the_job_exits_125(env):
    """When the job's process cannot be created (posix_spawn's clone() fails
    with EAGAIN: RLIMIT_NPROC here), that is discnice's failure, not the
    command's: exit 125 with one line naming the process limit - not 126,
    'cannot be executed' - and the job never ran."""
    _root_or_skip()
    if not (shutil.which("setpriv") and shutil.which("prlimit")):
        pytest.skip("needs setpriv and prlimit (util-linux)")
    marker = Path(tempfile.mkdtemp(prefix="discnice-nproc-")) / "ran"
    os.chmod(marker.parent, 0o777)
    try:
        # nobody may have one process: discnice itself.
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                            "prlimit", "--nproc=1", str(env.discnice_bin), "run",
                            "--rate", "1MiB/s", "--", "touch", str(marker)],
                           env=env.base_env, capture_output=True, timeout=60, cwd="/")
        err = r.stderr.decode(errors="replace")
        assert r.returncode == 125, (r.returncode, err)
        lines = [l for l in err.splitlines() if l.strip()]
        assert len(lines) == 1 and lines[0].startswith("discnice: "), lines
        assert "cannot start a process" in lines[0] and "process limit" in lines[0], lines
        assert not marker.exists(), "the job ran"
    finally:
        shutil.rmtree(marker.parent, ignore_errors=True)
