"""The command line: bad input, exit statuses, programs the agent cannot reach."""
import os
import shutil
import subprocess

import pytest

# Bad invocations of `discnice run`, each with the text its one error line
# must contain (the offending value, or what is missing).
BAD_INVOCATIONS = [
    (["--rate", "5Q"], "5Q"),
    (["--rate", "-1"], "-1"),
    (["--rate", "0"], "'0'"),
    (["--rate", "99999999999999999999999"], "99999999999999999999999"),
    (["--read-rate", "fast"], "fast"),
    (["--bogus-option", "--rate", "5M"], "--bogus-option"),
    (["--rate"], "--rate"),                     # option without its value
    (["--rate", "5M", "--window", "0"], "'0'"),
    (["--rate", "5M", "--class", "a/b"], "a/b"),
    (["--rate", "5M", "--quiet=yes"], "'--quiet' takes no value"),   # a flag given a value
    (["-Z", "--rate", "5M"], "'-Z'"),
]
HINT = "Try 'discnice "  # then the command's name and '--help'


def _check_usage_error(r, must_name):
    """Exit 2 and exactly one diagnostic line ("discnice: ..."), naming the
    value; the only other line allowed is the curl-style hint to try --help."""
    if r.rc != 2:
        r.fail("expected exit status 2 for a usage error")
    lines = r.stderr_lines()
    diag = [l for l in lines if not l.startswith(HINT)]
    if len(diag) != 1:
        r.fail(f"expected exactly one error line on stderr, got {len(diag)}")
    if not diag[0].startswith("discnice: "):
        r.fail("the error line is not prefixed with 'discnice: '")
    if must_name not in diag[0]:
        r.fail(f"the error line does not name {must_name!r}")
    if r.stdout:
        r.fail("a usage error wrote to stdout")


def test_cli_errors(env):
    """Bad options, a missing command and a missing cap exit 2 with one line
    naming the problem, and never start the job; an unknown command exits 127
    and a non-executable file 126."""
    marker = env.path("cli-marker")
    for args, must_name in BAD_INVOCATIONS:
        if marker.exists():
            marker.unlink()
        cmd = ["run"] + args + (["--", "touch", str(marker)] if args != ["--rate"] else [])
        r = env.discnice(cmd)
        _check_usage_error(r, must_name)
        if marker.exists():
            r.fail("the job ran although the options were bad")

    # A cap is required, and the job is not run without one.
    r = env.discnice(["run", "--", "touch", str(marker)])
    _check_usage_error(r, "cap")
    if marker.exists():
        r.fail("the job ran although no cap was given")

    # A cap but no command.
    r = env.discnice(["run", "--rate", "5M"])
    _check_usage_error(r, "no command")
    r = env.discnice(["run", "--rate", "5M", "--"])
    _check_usage_error(r, "no command")

    # Bad values in the environment defaults are usage errors too.
    r = env.discnice(["run", "--", "touch", str(marker)], env={"DISCNICE_RATE": "5Q"})
    _check_usage_error(r, "5Q")
    if marker.exists():
        r.fail("the job ran although DISCNICE_RATE was bad")
    # ... unless the command line gives that option: it wins, and the
    # default it replaces is not read.
    r = env.discnice(["run", "--quiet", "--rate", "1M", "--", "touch", str(marker)],
                     env={"DISCNICE_RATE": "5Q"})
    r.check_exit(0)
    if not marker.exists():
        r.fail("the job did not run with --rate given beside a bad DISCNICE_RATE")
    marker.unlink()
    # attach the same way (it read the variable anyway, and refused).
    sleeper = subprocess.Popen(["sleep", "1"])
    try:
        r = env.discnice(["attach", "--quiet", "--rate", "1M", str(sleeper.pid)],
                         env={"DISCNICE_RATE": "5Q"}, timeout=30)
        r.check_exit(0)
        r = env.discnice(["attach", str(sleeper.pid)], env={"DISCNICE_RATE": "5Q"})
        _check_usage_error(r, "DISCNICE_RATE")
    finally:
        sleeper.kill()
        sleeper.wait()
    # Numbers are written as users write them: hex, a sign or spaces, which
    # strtod and strtoul take, are not numbers of seconds or of counts.
    for args, must_name in ((["--window", "0x1", "--rate", "1M"], "0x1"),
                            (["--window", " 1", "--rate", "1M"], "' 1'"),
                            (["--policy", "manners", "--manners-bootstrap", "+5"], "+5")):
        r = env.discnice(["run"] + args + ["--", "touch", str(marker)])
        _check_usage_error(r, must_name)
    r = env.discnice(["run", "--", "touch", str(marker)],
                     env={"DISCNICE_WINDOW": "0x1", "DISCNICE_RATE": "1M"})
    _check_usage_error(r, "DISCNICE_WINDOW")
    for argv in (["top", "--interval", "0x1"], ["top", "--count", "+1"],
                 ["memprobe", "--threshold", "+5"], ["memprobe", "--hold", "inf"]):
        r = env.discnice(argv)
        if r.rc != 2 or len([l for l in r.stderr_lines() if not l.startswith("Try ")]) != 1:
            r.fail(f"{argv} was taken as a number")
    if marker.exists():
        r.fail("the job ran although a number was bad")
    # A rate under one byte a second is named as such.
    r = env.discnice(["run", "--rate", "0.5", "--", "touch", str(marker)])
    _check_usage_error(r, "less than 1 B/s")
    # --exec refuses feedback and says where it came from.
    r = env.discnice(["run", "--exec", "--rate", "1M", "--", "touch", str(marker)],
                     env={"DISCNICE_FEEDBACK": "on"})
    _check_usage_error(r, "DISCNICE_FEEDBACK")
    if marker.exists():
        r.fail("the job ran although --exec was refused")

    # Command not found: 127, as env(1) and the shells.
    r = env.discnice(["run", "--quiet", "--rate", "inf", "--", "discnice-no-such-command-xyz"])
    if r.rc != 127:
        r.fail("expected 127 for a command that is not found")
    if "discnice-no-such-command-xyz" not in r.stderr.decode(errors="replace"):
        r.fail("the error does not name the missing command")
    r = env.discnice(["run", "--quiet", "--rate", "inf", "--", str(env.path("no/such/file"))])
    if r.rc != 127:
        r.fail("expected 127 for a path that does not exist")

    # Found but not executable: 126.
    script = env.path("not-executable.sh")
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(script, 0o644)
    r = env.discnice(["run", "--quiet", "--rate", "inf", "--", str(script)])
    if r.rc != 126:
        r.fail("expected 126 for a file without execute permission")
    r = env.discnice(["run", "--quiet", "--rate", "inf", "--", str(env.scratch)])
    if r.rc != 126:
        r.fail("expected 126 for a directory")
    if marker.exists():
        r.fail("a non-executable command ran")


def test_help(env):
    """--help exits 0, prints to stdout and explains that k/M/G are powers of
    1000 and Ki/Mi/Gi powers of 1024."""
    for args in (["run", "--help"], ["run", "-h"]):
        r = env.discnice(args)
        r.check_exit(0)
        text = r.stdout.decode()
        for word in ("1000", "1024", "--rate", "--read-rate", "--write-rate", "--report"):
            if word not in text:
                r.fail(f"run --help does not mention {word!r}")
    r = env.discnice(["--help"])
    r.check_exit(0)


@pytest.mark.parametrize("args", (["--help"], ["--version"], ["ls", "--json"],
                                  ["run", "--help"], ["benice", "--help"], ["refresh", "--help"],
                                  ["top", "--count", "1", "--interval", "0.1"],
                                  ["memprobe", "--max", "8MiB"],
                                  ["calibrate", "--show"], ["refresh", "--dry-run", "DIR"],
                                  ["gbp", "FILE"]))
@pytest.mark.parametrize("out", ("full", "closed"))
def test_output_lost_is_not_success(env, args, out):
    """A command whose result cannot be written (stdout on /dev/full, or
    closed) says so and exits 125, never 0 with the result lost - as
    coreutils' close_stdout() does.  (ls --json: plain ls prints nothing
    where there is no class, and then nothing is lost.)"""
    d = env.path("lost-output")
    d.mkdir(exist_ok=True)
    (d / "a").write_text("a\n")
    argv = [str(env.discnice_bin)] + [str(d) if a == "DIR" else str(d / "a") if a == "FILE" else a
                                      for a in args]
    xdg = env.path("lost-output-state")
    xdg.mkdir(exist_ok=True)
    e = dict(os.environ, XDG_STATE_HOME=str(xdg))
    if out == "full":
        with open("/dev/full", "wb") as full:
            p = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, env=e, timeout=60)
    else:
        p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=e,
                           timeout=60, pass_fds=(), preexec_fn=lambda: os.close(1))
    err = p.stderr.decode()
    if args[:2] == ["calibrate", "--show"] and p.returncode == 1:
        pytest.skip("no calibration file to show here")
    assert p.returncode == 125, f"{args} with stdout {out}: exit {p.returncode}, stderr {err!r}"
    assert "writing standard output" in err, err
    assert len(err.strip().splitlines()) == 1, err
    # Why, not "write error" (benice's and refresh's long help texts met
    # the error in a flush of their own, before the last one).
    why = "No space left on device" if out == "full" else "Bad file descriptor"
    assert why in err, err


def test_exit_status(env):
    """The job's exit status is discnice's, and a job killed by signal N
    gets discnice killed by N (issue #8 item 7: a shell sees 128+N); the
    report records exit status 128+N and the signal."""
    r = env.run(["sh", "-c", "exit 7"], rate="inf")
    r.check_exit(7)
    r.check_report()
    r = env.run(["sh", "-c", "exit 0"], rate="10M")
    r.check_exit(0)

    r = env.run(["sh", "-c", "kill -TERM $$"], rate="inf")
    if r.rc != -15:
        r.fail(f"discnice ended with {r.rc}, not killed by SIGTERM like its job")
    if r.check_report().get("exit_status") != 143:
        r.fail("report 'exit_status' should be 143 for a job killed by SIGTERM")
    if r.check_report().get("signal") != 15:
        r.fail("report 'signal' should be 15 for a job killed by SIGTERM")


def test_static_binary_warns(env):
    """A statically linked program cannot be reached by LD_PRELOAD: discnice
    says so (with --feedback off it runs UNREGULATED; by default it is
    regulated from outside) and still runs it with its exit status."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = env.path("static_hello.c")
    prog = env.path("static_hello")
    src.write_text('#include <stdio.h>\nint main(void){puts("hello static");return 0;}\n')
    try:
        cp = subprocess.run([cc, "-static", "-O1", "-o", str(prog), str(src)],
                            capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot build a static binary: {e}")
    if cp.returncode != 0:
        pytest.skip("cc -static does not link here (no static libc?)")
    r = env.run([prog], rate="5M", extra_args=["--feedback", "off"])
    r.check_exit(0)
    r.check_output_equals(b"hello static\n")
    err = r.stderr.decode(errors="replace")
    if "statically linked" not in err or "UNREGULATED" not in err:
        r.fail("no warning that the static program runs UNREGULATED")
    # With feedback (the default) it is regulated from outside, and says how.
    r = env.run([prog], rate="5M")
    r.check_exit(0)
    r.check_output_equals(b"hello static\n")
    err = r.stderr.decode(errors="replace")
    if "statically linked" not in err or "ptrace" not in err:
        r.fail("no warning that the static program is regulated from outside only")


def test_summary_says_when_a_slack_cap_left_nothing_predicted(env):
    """A cap far above the job (4GiB/s, slack from the first tick: the
    agent dozes, the feedback counts) predicts nothing; the summary says
    why instead of 'predicted 0 B, kernel says N (-100.00%)', which read
    as a broken model."""
    f = env.make_file(env.path("slack-summary.dat"), 16 * 1024 * 1024)
    env.drop_cache(f)
    r = env.discnice(["run", "--rate", "4GiB/s", "--", "cat", str(f)])
    r.check_exit(0)
    err = r.stderr.decode(errors="replace")
    if "-100.00%" in err or "not predicted (the cap was far above" not in err:
        r.fail("the summary does not say that the slack cap left the job unpredicted")


def test_a_chunk_larger_than_the_windows_budget_is_said(env):
    """--chunk 1G at 16MiB/s was taken silently: each piece is slept for
    whole and then reaches the disk at full speed (nothing for 13 s, then
    12x the cap in one second).  Still allowed - the average holds - but
    said once; a chunk within the budget is not."""
    r = env.discnice(["run", "-q", "--write-rate", "16MiB/s", "--chunk", "1G", "--", "true"])
    r.check_exit(0)
    lines = r.stderr_lines()
    assert len(lines) == 1 and "--chunk 1.00 GB is more than one window of the cap" in lines[0], \
        r.dump()
    r = env.discnice(["run", "-q", "--write-rate", "16MiB/s", "--chunk", "1MiB", "--", "true"])
    r.check_exit(0)
    assert not r.stderr_lines(), r.dump()


def test_yield_summary_names_the_policy(env):
    """Under --policy yield the caps hold only while others read: the
    summary said "171.41 MiB/s (cap: total 5.00 MiB/s)", which read as a
    broken cap.  It names the policy and the time held at the cap."""
    r = env.discnice(["run", "--policy", "yield", "--rate", "5MiB/s", "--", "true"])
    r.check_exit(0)
    line = r.stderr_lines()[-1]
    assert "while others read, --policy yield: held at it" in line, r.dump()


def test_summary_splits_reads_and_writes_under_a_one_way_cap(env):
    """A read-only job under a write cap printed "49.21 MB/s (cap: write
    1.00 MB/s)", which read as a cap broken fifty times over.  Under a
    read or write cap the summary gives each direction's rate."""
    src = env.make_file(env.path("split/src.dat"), 4 << 20)
    env.drop_cache(src)
    r = env.discnice(["run", "--write-rate", "1M", "--", "cat", str(src)])
    r.check_exit(0)
    line = r.stderr_lines()[-1]
    assert "write 0 B/s; cap: write 1.00 MB/s" in line, r.dump()
