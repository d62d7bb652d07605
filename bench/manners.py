#!/usr/bin/env python3
"""MS Manners' experiments (Douceur & Bolosky, SOSP'99, §9), on this machine.

    make bench-manners [ARGS="--quick" | ARGS="--only 9.2-cpu,9.4"]

Two contention scenarios, both chosen to be deterministic enough on a noisy
VM:
  cpu   foreground and background pinned to one CPU (taskset -c 0): the
        foreground is sha256sum of a cached file, the background sha1sum of
        cached files for ever (its progress: the bytes it reads);
  disk  an emulated disk of fixed speed (bench/loopfs.py: ext4 on a loop
        device under the v1 root group's blkio throttle, 50 MB/s, 150 IOPS;
        root): the foreground is tar of a cold tree piped to wc, the
        background a real deduplicator, jdupes -r, over a cold tree of
        duplicate pairs (it hashes every byte).

The forms of regulation (§9.2): uncontrolled, nice 19, `discnice benice`
(rchar + wchar of the job's tree), `discnice run --policy manners` (the job's
own file I/O, suspended at its next I/O call) and the library in an
instrumented job (examples/manners/checksum.py through the ctypes binding),
each where it is built.  Every figure comes from the kernel or the wall clock:
the foreground's time, the background's rchar in /proc/PID/io.

Experiments:
  9.2  the foreground's slowdown beside each form, >= 10 alternating runs
       (box plots);
  9.3  idle overhead: the background's progress alone under each form,
       against uncontrolled;
  9.4  a duty-cycle and progress trace beside a bursty foreground, and the
       suspension overshoot after each burst, with --manners-quiet (ours)
       and without (the paper's);
  9.6  calibration from a heavily loaded start: the time until the target
       is within 10 % of the one calibrated alone, --manners-calibration
       quick (ours) and paper.
The results go to bench/results/DATE-HOST-manners.md and PNG plots.
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import MiB  # noqa: E402
from loopfs import HDD, LoopFs  # noqa: E402

DISCNICE = common.DISCNICE
ROOT = common.ROOT
CAL_S = 8.0          # the background runs alone this long before the foreground
BOOTSTRAP = "12"     # testpoints (250 ms each) of calibration for run and benice
PIN = ["taskset", "-c", "0"]

# ---------------------------------------------------------------- processes


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children(p):
            out.append(c)
            todo.append(c)
    return out


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def rchar(pid):
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def worker_of(proc, names, timeout=10.0):
    """The pid of the background's working process (by name), at or below
    proc; not a child that has yet to exec (it is still this script)."""
    own = cmdline(os.getpid())
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for p in [proc.pid] + descendants(proc.pid):
            line = cmdline(p)
            if comm(p) in names and line and line != own:
                time.sleep(0.05)  # an exec racing with the look: look again
                if comm(p) in names and cmdline(p) == line:
                    return p
        time.sleep(0.02)
    return None


def start(argv, **kw):
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True, **kw)


def stop(proc):
    """SIGTERM the background's supervisor (it ends its job and lets go of
    anything it stopped), then the whole group."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def timed(argv, **kw):
    t0 = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.monotonic() - t0


# ---------------------------------------------------------------- the forms

def have_benice():
    return subprocess.run([DISCNICE, "benice", "--help"], capture_output=True).returncode == 0


def library_job():
    """The instrumented example job, when the library and its binding are built."""
    lib = os.path.join(common.BUILD, "libmanners.so.0")
    script = os.path.join(ROOT, "examples", "manners", "checksum_files.py")
    if os.path.exists(lib) and os.path.exists(script):
        return lib, script
    return None


def forms(args):
    """name -> function(background argv, scenario) -> argv."""
    out = {
        "uncontrolled": lambda bg, scen: bg,
        "nice 19": lambda bg, scen: ["nice", "-n", "19"] + bg,
    }
    if have_benice():
        # --persist off (and --manners-persist off below): every run
        # calibrates afresh, as the paper's experiments did; a target kept
        # from the previous run would skip the bootstrap being measured.
        out["benice"] = lambda bg, scen: [DISCNICE, "benice", "--quiet", "--bootstrap", BOOTSTRAP,
                                          "--probation", "0", "--persist", "off",
                                           "--"] + bg
    out["run --policy manners"] = lambda bg, scen: [
        DISCNICE, "run", "--quiet", "--policy", "manners", "--manners-bootstrap", BOOTSTRAP,
        "--manners-persist", "off",
        "--"] + bg
    lib = library_job()
    if lib:
        libpath, script = lib
        # The library form replaces the background by the instrumented job
        # over the same files (its metrics: bytes and files checksummed;
        # a testpoint per MiB, processed every 0.1 s).
        out["library"] = lambda bg, scen: PIN_IF(bg) + [
            "env", f"MANNERS_LIBRARY={libpath}", "MANNERS_BOOTSTRAP=" + BOOTSTRAP,
            "MANNERS_PROBATION=0", "MANNERS_PERSIST=0",
            f"PYTHONPATH={os.path.join(ROOT, 'python')}",
            "python3", script, "--passes", "0", scen.bg_dir]
        # "library NAME=VALUE ..." (e.g. "library MANNERS_DISK_RISE=0"):
        # the library with settings of its own (manners(3)), only when asked.
        def library_with(extra):
            return lambda bg, scen: PIN_IF(bg) + [
                "env", f"MANNERS_LIBRARY={libpath}", "MANNERS_BOOTSTRAP=" + BOOTSTRAP,
                "MANNERS_PROBATION=0", "MANNERS_PERSIST=0", *extra,
                f"PYTHONPATH={os.path.join(ROOT, 'python')}",
                "python3", script, "--passes", "0", scen.bg_dir]
        for name in (args.forms.split(",") if args.forms else []):
            words = name.split()
            if words[:1] == ["library"] and len(words) > 1 and all(
                    "=" in w and w.startswith("MANNERS_") for w in words[1:]):
                out[name.strip()] = library_with(words[1:])
        # Its own baseline (§9.3): the same job with regulation off.
        out["library, regulation off"] = lambda bg, scen: PIN_IF(bg) + [
            "env", f"MANNERS_LIBRARY={libpath}", "MANNERS_ENABLE=0", "MANNERS_PERSIST=0",
            f"PYTHONPATH={os.path.join(ROOT, 'python')}",
            "python3", script, "--passes", "0", scen.bg_dir]
    if args.forms:
        keep = [f.strip() for f in args.forms.split(",")]
        # "benice OPTIONS" (e.g. "benice --poll-min 0.1"): benice with
        # options of its own, to try a setting beside the default.
        for name in keep:
            if name.startswith("benice ") and "benice" in out:
                out[name] = (lambda extra: lambda bg, scen: [
                    DISCNICE, "benice", "--quiet", "--bootstrap", BOOTSTRAP, "--probation", "0",
                    "--persist", "off", *extra, "--"] + bg)(name.split()[1:])
            # "run --policy manners OPTIONS" (e.g. "... --manners-disk-rise
            # off"): the same for the supervisor's form.
            elif name.startswith("run --policy manners "):
                out[name] = (lambda extra: lambda bg, scen: [
                    DISCNICE, "run", "--quiet", "--policy", "manners", "--manners-bootstrap",
                    BOOTSTRAP, "--manners-persist", "off", *extra,
                    "--"] + bg)(name.split()[3:])
        missing = [k for k in keep if k not in out]
        if missing:
            # Never a table silently short of a form that was asked for.
            sys.exit(f"manners.py: --forms: unknown or not built here: {', '.join(missing)} "
                     f"(known: {', '.join(out)}, \"benice OPTIONS\", "
                     f"\"run --policy manners OPTIONS\", \"library MANNERS_NAME=VALUE ...\")")
        out = {k: v for k, v in out.items() if k in keep}
    return out


def PIN_IF(bg):
    return PIN if bg[:3] == PIN else []


# ---------------------------------------------------------------- scenarios

class CpuScenario:
    name = "cpu"
    title = "CPU: foreground and background pinned to one CPU"
    fg_desc = "sha256sum of a cached 256 MiB file, 10 times (taskset -c 0)"
    bg_desc = "sha1sum of cached files, for ever (taskset -c 0)"
    workers = {"sha1sum", "python3", "python"}
    bg_ended = 0  # runs whose background ended before the foreground (slowdown())
    # --fg-scale: the foreground this many times as long.  The paper's
    # foreground ran 300 s (§9.2); ours 8 s, in which a form's fixed cost -
    # the testpoints it takes to judge the first contention poor - weighs
    # about 37 times as much.
    fg_times = 10

    def __init__(self, scratch, scale=1):
        self.fg_times = 10 * scale
        if scale != 1:
            self.fg_desc = f"sha256sum of a cached 256 MiB file, {self.fg_times} times (taskset -c 0)"
        self.scratch = scratch
        os.makedirs(scratch, exist_ok=True)
        self.fg_file = common.make_file(os.path.join(scratch, "fg.dat"), 256 * MiB)
        self.bg_dir = os.path.join(scratch, "bg")
        os.makedirs(self.bg_dir, exist_ok=True)
        self.bg_files = [common.make_file(os.path.join(self.bg_dir, f"bg{i}.dat"), 64 * MiB)
                         for i in range(4)]

    def prepare(self):
        for f in [self.fg_file] + self.bg_files:  # cached, both of them
            with open(f, "rb") as fh:
                while fh.read(8 * MiB):
                    pass

    def background(self):
        # One process for ever: 4 files x 500 = 128 GiB to checksum.
        return PIN + ["sha1sum"] + self.bg_files * 500

    def foreground(self):
        return timed(PIN + ["sha256sum"] + [self.fg_file] * self.fg_times)


class DiskScenario:
    name = "disk"
    title = "disk: an emulated 50 MB/s, 150 IOPS disk (loop device, blkio throttle)"
    fg_desc = "tar cf - of a cold 96 MiB tree (24 x 4 MiB) | wc -c"
    bg_desc = "jdupes -r of a cold 1 GiB tree of 128 duplicate pairs of 4 MiB files"
    workers = {"jdupes", "python3", "python"}
    fg_files = 24
    bg_ended = 0  # runs whose background ended before the foreground

    @staticmethod
    def bg_pairs(scale=1):
        """Duplicate pairs in the background's tree: 128 (1 GiB) up to a
        foreground of 10 s (--fg-scale 5), then as many more as keep an
        uncontrolled jdupes busy beside a longer one; a background that
        ends before the foreground would flatter every form."""
        return 128 * max(1, -(-scale // 5))

    @staticmethod
    def image_mib(scale=1):
        """The loop image: the background, the foreground, headroom."""
        return DiskScenario.bg_pairs(scale) * 8 + 512 + 96 * scale

    def __init__(self, fs, scale=1):
        self.fs = fs
        # --fg-scale: a tree N times as large, read cold (each run evicts it).
        self.fg_files = 24 * scale
        pairs = self.bg_pairs(scale)
        if scale != 1:
            self.fg_desc = (f"tar cf - of a cold {96 * scale} MiB tree ({self.fg_files} x 4 MiB) "
                            "| wc -c")
        if pairs != 128:
            self.bg_desc = (f"jdupes -r of a cold {pairs * 8 // 1024} GiB tree of {pairs} "
                            "duplicate pairs of 4 MiB files")
        self.fg_dir = fs.path("fg")
        self.bg_dir = fs.path("bg")
        with fs.rules(read_bps=0, write_bps=0, read_iops=0, write_iops=0):
            os.makedirs(self.fg_dir, exist_ok=True)
            os.makedirs(self.bg_dir, exist_ok=True)
            for i in range(self.fg_files):
                common.make_file(os.path.join(self.fg_dir, f"f{i:03d}"), 4 * MiB)
            for i in range(pairs):
                a = common.make_file(os.path.join(self.bg_dir, f"a{i:03d}"), 4 * MiB)
                b = os.path.join(self.bg_dir, f"b{i:03d}")
                if not os.path.exists(b):
                    shutil.copyfile(a, b)
        self.bg_files = sorted(os.path.join(self.bg_dir, n) for n in os.listdir(self.bg_dir))
        subprocess.run(["sync"], check=False)

    def prepare(self):
        common.make_tree_cold(self.fg_dir)
        common.make_tree_cold(self.bg_dir)

    def background(self):
        return ["jdupes", "-r", "-q", self.bg_dir]

    def foreground(self):
        return timed(["sh", "-c", f"tar cf - -C {self.fg_dir} . | wc -c"])


# ---------------------------------------------------------------- §9.2

def slowdown(scenario, form_argv):
    """One run: the background alone for CAL_S, then the foreground timed
    beside it.  Returns (foreground seconds, None) or (None, why)."""
    scenario.prepare()
    bg = start(form_argv(scenario.background(), scenario))
    try:
        time.sleep(CAL_S)
        if bg.poll() is not None:
            return None, f"the background ended early (exit {bg.returncode})"
        t = scenario.foreground()
        if bg.poll() is not None:
            # Counted, and said under the table: the foreground ran its
            # end alone.
            scenario.bg_ended += 1
            print(f"  the background ended before the foreground (exit {bg.returncode})",
                  flush=True)
        return t, None
    finally:
        stop(bg)


BASELINES = {"library": "library, regulation off"}  # §9.3: against the same job unregulated


def experiment_9_2(scenario, fs, reps, out):
    print(f"\n== §9.2 {scenario.title}", flush=True)
    fs = {k: v for k, v in fs.items() if k not in BASELINES.values()}
    alone, beside = [], {name: [] for name in fs}
    for rep in range(reps):
        scenario.prepare()
        alone.append(scenario.foreground())
        names = list(fs)
        names = names[rep % len(names):] + names[:rep % len(names)]  # rotate the order
        for name in names:
            t, why = slowdown(scenario, fs[name])
            if t is None:
                print(f"  {name}: {why}", flush=True)
                continue
            beside[name].append(t)
        print(f"  rep {rep + 1}/{reps}: alone {alone[-1]:.2f} s; " +
              ", ".join(f"{n} {beside[n][-1]:.2f}" for n in fs if beside[n]), flush=True)
    out["9.2"][scenario.name] = {"alone": alone, "beside": beside}
    return rows_9_2(alone, beside), alone, beside


def rows_9_2(alone, beside):
    """(form, median slowdown, min, max, runs) against the median alone."""
    base = statistics.median(alone)
    rows = []
    for name, ts in beside.items():
        if not ts:
            rows.append((name, None, None, None, 0))
            continue
        sl = [t / base - 1 for t in ts]
        rows.append((name, statistics.median(sl), min(sl), max(sl), len(ts)))
    return rows


# ---------------------------------------------------------------- §9.3

def experiment_9_3(scenario, fs, reps, window, out):
    """The background alone: its progress over `window` seconds under each
    form, against uncontrolled (alternating, medians)."""
    print(f"\n== §9.3 idle overhead, {scenario.name}", flush=True)
    got = {name: [] for name in fs}
    for rep in range(reps):
        for name in fs:
            scenario.prepare()
            bg = start(fs[name](scenario.background(), scenario))
            try:
                pid = worker_of(bg, scenario.workers)
                if pid is None:
                    continue
                time.sleep(1.0)
                r0, t0 = rchar(pid), time.monotonic()
                time.sleep(window)
                r1, t1 = rchar(pid), time.monotonic()
                if r0 is not None and r1 is not None:
                    got[name].append((r1 - r0) / (t1 - t0))
            finally:
                stop(bg)
        print(f"  rep {rep + 1}/{reps}: " + ", ".join(
            f"{n} {got[n][-1] / MiB:.0f} MiB/s" for n in fs if got[n]), flush=True)
    out["9.3"][scenario.name] = got
    return rows_9_3(got)


def rows_9_3(got):
    """(form, median progress MiB/s, overhead against its baseline as the
    ratio of the two medians, overhead as the median of the per-rep ratios
    (None when a run is missing, so that reps no longer pair), runs).  The
    per-rep ratio compares runs made minutes apart, not the whole session:
    the judged figure."""
    rows = []
    for n, v in got.items():
        base_name = BASELINES.get(n, "uncontrolled")
        base_v = got.get(base_name)
        if not v or not base_v:
            continue
        base = statistics.median(base_v)
        paired = (1 - statistics.median(x / b for x, b in zip(v, base_v))
                  if len(v) == len(base_v) else None)
        rows.append((n, statistics.median(v) / MiB, 1 - statistics.median(v) / base, paired, len(v)))
    return rows


# ---------------------------------------------------------------- §9.4

def experiment_9_4(scenario, out, quiet, bursts=3, on_s=10.0, off_s=12.0, limit="60"):
    """run --policy manners beside a bursty foreground (a CPU hog pinned to
    the same CPU): the background's progress every 100 ms, and how long
    after each burst it reads again (the suspension overshoot)."""
    scenario.prepare()
    argv = [DISCNICE, "run", "--quiet", "--policy", "manners", "--manners-bootstrap", BOOTSTRAP,
            "--manners-persist", "off", "--manners-limit", limit, "--manners-quiet", quiet, "--"] + scenario.background()
    bg = start(argv)
    trace, marks = [], []
    try:
        pid = worker_of(bg, scenario.workers)
        t0 = time.monotonic()

        def sample_until(t_end):
            while time.monotonic() < t_end:
                trace.append((time.monotonic() - t0, rchar(pid) or 0))
                time.sleep(0.1)

        sample_until(t0 + CAL_S)
        for _ in range(bursts):
            begin = time.monotonic() - t0
            hog = subprocess.Popen(PIN + ["sh", "-c", "while :; do :; done"])
            sample_until(time.monotonic() + on_s)
            hog.kill()
            hog.wait()
            end = time.monotonic() - t0
            marks.append((begin, end))
            sample_until(time.monotonic() + off_s)
    finally:
        stop(bg)
    overshoot = []
    for begin, end in marks:
        last = next((r for t, r in trace if t >= end), None)
        resumed = next((t for t, r in trace if t > end and last is not None and r > last), None)
        overshoot.append(None if resumed is None else resumed - end)
    out["9.4"][quiet] = {"trace": trace, "bursts": marks, "overshoot": overshoot}
    return trace, marks, overshoot


# ---------------------------------------------------------------- §9.6

def target_of(supervisor_pid):
    ls = subprocess.run([DISCNICE, "ls", "--json"], capture_output=True, text=True).stdout
    for c in json.loads(ls or "[]"):
        for r in c.get("runs", []):
            if r.get("pid") == supervisor_pid and "manners_s_per_gib_read" in r:
                return r["manners_s_per_gib_read"]
    return None


def calibration_run(scenario, calibration, loaded_s, after_s):
    """run --policy manners started while a hog loads its CPU for loaded_s;
    its target (s per GiB read) every 0.5 s until after_s past the load."""
    scenario.prepare()
    hog = subprocess.Popen(PIN + ["sh", "-c", "while :; do :; done"]) if loaded_s else None
    argv = [DISCNICE, "run", "--quiet", "--policy", "manners", "--manners-bootstrap", BOOTSTRAP,
            "--manners-persist", "off", "--manners-calibration", calibration, "--"] + scenario.background()
    bg = start(argv)
    t0 = time.monotonic()
    trace = []
    try:
        end = t0 + loaded_s + after_s
        while time.monotonic() < end:
            if hog and time.monotonic() - t0 >= loaded_s:
                hog.kill()
                hog.wait()
                hog = None
            trace.append((time.monotonic() - t0, target_of(bg.pid)))
            time.sleep(0.5)
    finally:
        if hog:
            hog.kill()
            hog.wait()
        stop(bg)
    return trace


def experiment_9_6(scenario, out, loaded_s, after_s):
    print("\n== §9.6 calibration from a loaded start", flush=True)
    ideal_trace = calibration_run(scenario, "paper", 0, 30)
    ideal = next((v for _, v in reversed(ideal_trace) if v), None)
    print(f"  alone: target {ideal} s/GiB", flush=True)
    res = {"ideal": ideal, "loaded_s": loaded_s}
    for calibration in ("quick", "paper"):
        trace = calibration_run(scenario, calibration, loaded_s, after_s)
        # The background may finish its work before the trace ends: from
        # then on `ls` has no target for it.  Judge the samples while it ran.
        while trace and trace[-1][1] is None:
            trace.pop()
        within = None
        if ideal:
            for i, (t, v) in enumerate(trace):
                if t >= loaded_s and all(w and abs(w - ideal) / ideal <= 0.10
                                         for _, w in trace[i:]):
                    within = t - loaded_s
                    break
        first = next((v for _, v in trace if v), None)
        res[calibration] = {"trace": trace, "within_s": within, "first": first}
        print(f"  {calibration}: start target {first} s/GiB; within 10 % of ideal "
              f"{'never' if within is None else f'{within:.1f} s'} after the load ended",
              flush=True)
    out["9.6"] = res
    return res


# ---------------------------------------------------------------- a run's log

def parse_log(path):
    """What a run printed, back into its data: the tables of a run whose
    last step failed (the plots) can be written from its log."""
    import ast
    import re
    item = re.compile(r"(?:, )?(.+?) (\d+(?:\.\d+)?)(?: MiB/s)?(?=, |$)")
    data = {"9.2": {}, "9.3": {}, "9.4": {}, "9.6": {}}
    section = None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("== §9.2 CPU"):
                section = ("9.2", "cpu")
                data["9.2"]["cpu"] = {"alone": [], "beside": {}}
            elif line.startswith("== §9.2 disk"):
                section = ("9.2", "disk")
                data["9.2"]["disk"] = {"alone": [], "beside": {}}
            elif line.startswith("== §9.3"):
                section = ("9.3", "cpu")
                data["9.3"]["cpu"] = {}
            elif line.startswith("== §9.6"):
                section = ("9.6", None)
            m = re.match(r"  rep \d+/\d+: (?:alone ([\d.]+) s; )?(.*)$", line)
            if m and section and section[0] == "9.2":
                d = data["9.2"][section[1]]
                d["alone"].append(float(m.group(1)))
                for name, value in item.findall(m.group(2)):
                    d["beside"].setdefault(name, []).append(float(value))
            elif m and section and section[0] == "9.3":
                for name, value in item.findall(m.group(2)):
                    data["9.3"]["cpu"].setdefault(name, []).append(float(value) * MiB)
            m = re.match(r"  quiet (\d): overshoot (\[.*\])$", line)
            if m:
                data["9.4"][m.group(1)] = {"overshoot": ast.literal_eval(m.group(2)),
                                           "trace": [], "bursts": []}
            m = re.match(r"  alone: target ([\d.]+|None) s/GiB", line)
            if m:
                data["9.6"]["ideal"] = None if m.group(1) == "None" else float(m.group(1))
            m = re.match(r"  (quick|paper): start target ([\d.]+|None) s/GiB; within 10 % of "
                         r"ideal (never|[\d.]+ s) after", line)
            if m:
                data["9.6"][m.group(1)] = {
                    "first": None if m.group(2) == "None" else float(m.group(2)),
                    "within_s": None if m.group(3) == "never" else float(m.group(3)[:-2]),
                    "trace": []}
    return data


# ---------------------------------------------------------------- output

def fmt_pct(x):
    return "—" if x is None else f"{x * 100:+.1f} %"


def plot(out, stem):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    for scen, data in out["9.2"].items():
        names = [n for n, ts in data["beside"].items() if ts]
        base = statistics.median(data["alone"])
        fig, ax = plt.subplots(figsize=(8, 4))
        series = [[t / base - 1 for t in data["beside"][n]] for n in names]
        try:
            ax.boxplot(series, tick_labels=names)  # matplotlib >= 3.9
        except TypeError:
            ax.boxplot(series, labels=names)
        ax.axhline(0.05, color="green", linestyle="--", linewidth=1, label="target +5 %")
        ax.set_ylabel("foreground slowdown")
        ax.set_title(f"MS Manners §9.2, {scen} scenario")
        ax.legend()
        fig.tight_layout()
        p = f"{stem}-9.2-{scen}.png"
        fig.savefig(p)
        plt.close(fig)
        made.append(p)
    if any(d.get("trace") for d in out["9.4"].values()):
        fig, axes = plt.subplots(len(out["9.4"]), 1, figsize=(9, 3 * len(out["9.4"])),
                                 squeeze=False)
        for ax, (quiet, d) in zip(axes[:, 0], out["9.4"].items()):
            tr = d["trace"]
            ts = [t for t, _ in tr][1:]
            rates = [(tr[i][1] - tr[i - 1][1]) / max(tr[i][0] - tr[i - 1][0], 1e-3) / MiB
                     for i in range(1, len(tr))]
            ax.plot(ts, rates, linewidth=0.8, label="background progress (MiB/s read)")
            for b, e in d["bursts"]:
                ax.axvspan(b, e, color="red", alpha=0.15)
            ax.set_title(f"§9.4 --manners-quiet {quiet} (red: foreground burst)")
            ax.set_xlabel("s")
            ax.legend(loc="upper right")
        fig.tight_layout()
        p = f"{stem}-9.4.png"
        fig.savefig(p)
        plt.close(fig)
        made.append(p)
    if out["9.6"] and out["9.6"].get("quick", {}).get("trace"):
        d = out["9.6"]
        fig, ax = plt.subplots(figsize=(8, 4))
        for cal in ("quick", "paper"):
            tr = [(t, v) for t, v in d[cal]["trace"] if v]
            ax.plot([t for t, _ in tr], [v for _, v in tr], label=f"--manners-calibration {cal}")
        if d["ideal"]:
            ax.axhline(d["ideal"], color="black", linestyle=":", label="calibrated alone")
        ax.axvspan(0, d["loaded_s"], color="red", alpha=0.1, label="loaded")
        ax.set_ylabel("target: s per GiB read")
        ax.set_xlabel("s")
        ax.legend()
        fig.tight_layout()
        p = f"{stem}-9.6.png"
        fig.savefig(p)
        plt.close(fig)
        made.append(p)
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 repetitions, short traces (~10 min)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", default="", help="comma list of 9.2-cpu,9.2-disk,9.3,9.4,9.6")
    ap.add_argument("--forms", default="", help="comma list of forms to run; \"benice OPTIONS\" "
                    "adds benice with options of its own, e.g. \"benice --poll-min 0.1\"; "
                    "\"run --policy manners OPTIONS\" the same for run")
    ap.add_argument("--fg-scale", type=int, default=1, metavar="N",
                    help="each scenario's foreground N times as long (the paper's ran 300 s)")
    ap.add_argument("--tag", default="", metavar="NAME",
                    help="name the results DATE-HOST-manners-NAME.md (default: fg-scaleN when "
                         "--fg-scale is given), so that a partial run keeps the day's full one")
    ap.add_argument("--from-log", default="", metavar="LOG",
                    help="write the tables of an earlier run from what it printed (LOG), "
                         "running nothing")
    args = ap.parse_args()
    logged = parse_log(args.from_log) if args.from_log else None
    # SIGTERM and SIGHUP unwind like Ctrl-C, so that every background and
    # the emulated disk are stopped and torn down (the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    reps = 3 if args.quick else args.reps
    only = set(args.only.split(",")) if args.only else {"9.2-cpu", "9.2-disk", "9.3", "9.4", "9.6"}
    if not logged and subprocess.run(PIN + ["true"]).returncode != 0:
        sys.exit("bench: taskset cannot pin to CPU 0")
    m = common.machine()
    out = {"9.2": {}, "9.3": {}, "9.4": {}, "9.6": {}}
    fs = forms(args)
    lines = [f"# MS Manners experiments (SOSP'99 §9)\n",
             f"Machine: {m['host']}, Linux {m['kernel']}, {m['cpus']} CPUs, {m['date']}\n",
             f"Command: `make bench-manners{' ARGS=' + shlex.quote(shlex.join(sys.argv[1:])) if sys.argv[1:] else ''}`; "
             f"forms: {', '.join(fs)}; the background runs alone {CAL_S:.0f} s (calibration: "
             f"{BOOTSTRAP} testpoints of bootstrap) before the foreground starts.\n"]
    if logged:
        fs = {n: None for sec in logged["9.2"].values() for n in sec["beside"]}
        lines[2] = (f"Command: `make bench-manners`; forms: {', '.join(fs)}; the background runs "
                    f"alone {CAL_S:.0f} s ({BOOTSTRAP} testpoints of bootstrap) before the "
                    "foreground starts.  Tables written from that run's log with "
                    f"`bench/manners.py --from-log` (its plotting step failed; no plots).\n")
        only = {k for k, present in (("9.2-cpu", "cpu" in logged["9.2"]),
                                     ("9.2-disk", "disk" in logged["9.2"]),
                                     ("9.3", bool(logged["9.3"])), ("9.4", bool(logged["9.4"])),
                                     ("9.6", bool(logged["9.6"]))) if present}
        out = {"9.2": logged["9.2"], "9.3": logged["9.3"], "9.4": logged["9.4"],
               "9.6": logged["9.6"]}
    scratch = os.path.join(common.SCRATCH, "manners")
    cpu = CpuScenario(scratch, args.fg_scale) if not logged else CpuScenario.__new__(CpuScenario)
    if "9.2-cpu" in only:
        if logged:
            alone = logged["9.2"]["cpu"]["alone"]
            rows = rows_9_2(alone, logged["9.2"]["cpu"]["beside"])
            reps = len(alone)
        else:
            rows, alone, _ = experiment_9_2(cpu, fs, reps, out)
        lines += [f"\n## §9.2 foreground slowdown: {cpu.title}\n",
                  f"Foreground: {cpu.fg_desc}; alone median {statistics.median(alone):.2f} s "
                  f"(spread {min(alone):.2f}-{max(alone):.2f} s). Background: {cpu.bg_desc}. "
                  f"{reps} alternating repetitions, order rotated.\n",
                  "| background | median slowdown | min .. max | runs | target <= +5 % |",
                  "|---|---:|---:|---:|---|"]
        for name, med, lo, hi, n in rows:
            verdict = "" if med is None or name in ("uncontrolled", "nice 19") else (
                "met" if med <= 0.05 else "NOT met")
            lines.append(f"| {name} | {fmt_pct(med)} | {fmt_pct(lo)} .. {fmt_pct(hi)} | {n} | "
                         f"{verdict} |")
        lines.append("\nPaper (§9.2): uncontrolled +90 %, under MS Manners +7 to +12 %.\n")
    if "9.2-disk" in only:
        why = None if logged else (LoopFs.unavailable(throttle=True) or (
            None if shutil.which("jdupes") else "needs jdupes (Debian: jdupes)"))
        if logged:
            alone = logged["9.2"]["disk"]["alone"]
            rows = rows_9_2(alone, logged["9.2"]["disk"]["beside"])
            reps = len(alone)
            disk = DiskScenario.__new__(DiskScenario)
        if why:
            lines.append(f"\n## §9.2 disk scenario: not run ({why})\n")
            print(f"bench: disk scenario skipped: {why}", file=sys.stderr)
        else:
            if not logged:
                with LoopFs(size_mib=DiskScenario.image_mib(args.fg_scale), tag="manners",
                            throttle=HDD) as lfs:
                    disk = DiskScenario(lfs, args.fg_scale)
                    rows, alone, _ = experiment_9_2(disk, fs, reps, out)
            lines += [f"\n## §9.2 foreground slowdown: {disk.title}\n",
                      f"Foreground: {disk.fg_desc}; alone median {statistics.median(alone):.2f} s "
                      f"(spread {min(alone):.2f}-{max(alone):.2f} s). Background: {disk.bg_desc}. "
                      f"{reps} alternating repetitions, order rotated; every file evicted "
                      "before each run.\n",
                      "| background | median slowdown | min .. max | runs | target <= +5 % |",
                      "|---|---:|---:|---:|---|"]
            for name, med, lo, hi, n in rows:
                verdict = "" if med is None or name in ("uncontrolled", "nice 19") else (
                    "met" if med <= 0.05 else "NOT met")
                lines.append(f"| {name} | {fmt_pct(med)} | {fmt_pct(lo)} .. {fmt_pct(hi)} | {n} "
                             f"| {verdict} |")
            if disk.bg_ended:
                lines.append(f"\nIn {disk.bg_ended} run(s) the background ended before the "
                             "foreground, which ran its end alone.\n")
    if "9.3" in only:
        rows = (rows_9_3(logged["9.3"]["cpu"]) if logged
                else experiment_9_3(cpu, fs, max(3, reps // 2), 10.0, out))
        lines += ["\n## §9.3 idle overhead (cpu scenario's background alone)\n",
                  "Progress = the background's rchar over 10 s, from 1 s after its start; "
                  "alternating runs; overhead against uncontrolled, and for the library "
                  "against the same instrumented job with MANNERS_ENABLE=0: the median of the "
                  "per-repetition ratios (judged), and the ratio of the two medians. "
                  "Target <= 1 % (paper: BeNice 1.5 %).\n",
                  "| form | progress [MiB/s] | overhead, per-rep ratios | ratio of medians | runs "
                  "| target <= 1 % |",
                  "|---|---:|---:|---:|---:|---|"]
        for name, rate, ov, paired, n in rows:
            if name in BASELINES.values():
                lines.append(f"| {name} | {rate:.0f} | (the library's baseline) | | {n} | |")
                continue
            judged = paired if paired is not None else ov
            verdict = "" if name in ("uncontrolled", "nice 19") else (
                "met" if judged <= 0.01 else "NOT met")
            lines.append(f"| {name} | {rate:.0f} | "
                         f"{'n/a (a run missing)' if paired is None else f'{paired * 100:+.2f} %'} | "
                         f"{ov * 100:+.2f} % | {n} | {verdict} |")
    if "9.4" in only:
        lines += ["\n## §9.4 duty cycle, progress and suspension overshoot\n",
                  "`run --policy manners --manners-limit 60` (cpu scenario's background) beside "
                  "a CPU hog on its CPU in bursts of 10 s every 22 s; overshoot = time from a "
                  "burst's end until the background's rchar grows again. Target: median <= 2 s "
                  "(paper: 220 s in its trace).\n",
                  "| --manners-quiet | overshoot per burst [s] | median | target <= 2 s |",
                  "|---|---|---:|---|"]
        for quiet in ("1", "0"):
            over = (logged["9.4"][quiet]["overshoot"] if logged else
                    experiment_9_4(cpu, out, quiet, bursts=2 if args.quick else 3)[2])
            vals = [o for o in over if o is not None]
            med = statistics.median(vals) if vals else None
            verdict = "" if quiet == "0" else ("met" if med is not None and med <= 2 else "NOT met")
            lines.append(f"| {quiet} {'(ours)' if quiet == '1' else '(the paper)'} | "
                         f"{', '.join('never' if o is None else f'{o:.1f}' for o in over)} | "
                         f"{'—' if med is None else f'{med:.1f}'} | {verdict} |")
            if not logged:
                print(f"  quiet {quiet}: overshoot {over}", flush=True)
    if "9.6" in only:
        loaded, after = (30, 60) if args.quick else (60, 180)
        res = logged["9.6"] if logged else experiment_9_6(cpu, out, loaded, after)
        lines += ["\n## §9.6 calibration from a heavily loaded start\n",
                  f"`run --policy manners` started while a CPU hog shares its CPU for {loaded} s; "
                  f"its target (s per GiB read, `discnice ls --json`) every 0.5 s until {after} s "
                  "after the load; ideal = the target of a run alone for 30 s. Target: within 10 % "
                  "of the ideal in <= 5 min (paper: hours to days).\n",
                  "| calibration | target at start [s/GiB] | within 10 % of ideal after the load "
                  "ended | target <= 300 s |", "|---|---:|---:|---|"]
        for cal in ("quick", "paper"):
            d = res[cal]
            w = d["within_s"]
            lines.append(f"| {cal} | {d['first'] if d['first'] is None else round(d['first'], 3)} "
                         f"| {'not within ' + str(after) + ' s' if w is None else f'{w:.1f} s'} | "
                         f"{'met' if w is not None and w <= 300 else 'NOT met'} |")
        lines.append(f"\nIdeal: {res['ideal']} s/GiB.\n")
    os.makedirs(common.RESULTS, exist_ok=True)
    tag = args.tag or (f"fg-scale{args.fg_scale}" if args.fg_scale != 1 else "")
    prefix = os.path.join(common.RESULTS, f"{m['date'][:10]}-{m['host']}")
    path = f"{prefix}-manners{'-' + tag if tag else ''}.md"
    # The numbers first: a plot that fails must not lose an hour's run.
    with open(f"{path[:-3]}.json", "w") as f:
        json.dump(out, f, default=str)
    try:
        for p in plot(out, path[:-3]):
            lines.append(f"\n![{os.path.basename(p)}]({os.path.basename(p)})")
    except Exception as e:  # noqa: BLE001 - a plot is not worth the tables
        lines.append(f"\n(plots not made: {type(e).__name__}: {e})")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    main()
