"""Foreground beside background (paper §2.1 and §6.5): the campaign E1 and
E6 both report from.

A foreground (`sequential`: cold read of a large file; `tar`: unpack an
archive of /usr/include) runs alone or beside `rsync -a` of a cold 2 GiB
file to a scratch directory, the rsync being uncontrolled, nice 19,
ionice -c3 under BFQ, kernel-throttled (cgroup-v1 blkio) or under
`discnice run --rate CAP`.  The background starts 0.3 s before the
foreground and is stopped when the foreground ends; its achieved rate is
its kernel-counted bytes over its lifetime.  Every case runs once per
repetition, repetitions alternate, and figures are medians.
"""
import contextlib
import shutil
import time

from . import kernel, util
from .util import common

WARMUP_S = 0.3


class Foreground:
    """A foreground job: name, the paper's name for it, and how to run it cold."""

    def __init__(self, ctx, name):
        self.ctx, self.name = ctx, name

    def before(self):
        """Make the input cold and the output fresh; returns the argv."""
        if self.name == "sequential":
            common.make_cold(self.ctx.seq_fg)
            return [common.MICROBENCH, "sequential", self.ctx.seq_fg]
        common.make_cold(self.ctx.tar_fg)
        out = self.ctx.fresh_dir("tar-out")
        return ["tar", "xf", self.ctx.tar_fg, "-C", out]

    def after(self):
        shutil.rmtree(self.ctx.path("tar-out"), ignore_errors=True)


class Case:
    """One background condition: kind in alone, alone-bfq, rsync, nice19,
    ionice-bfq, throttle, discnice; cap in bytes/s for the last two."""

    def __init__(self, kind, cap=None, label=None):
        self.kind, self.cap = kind, cap
        self.label = label or (f"{kind} {cap / util.MB:g} MB/s" if cap else kind)

    @property
    def key(self):
        return (self.kind, self.cap)

    def unavailable(self, ctx):
        """Why this case is not run here, or None."""
        if self.kind in ("ionice-bfq", "alone-bfq") and not ctx.sizes.bfq:
            return "emulated disk: BFQ sits below its throttle, see the disk check"
        return None

    def environment(self, ctx):
        """The kernel setting this case needs, held while it runs."""
        if self.kind in ("ionice-bfq", "alone-bfq"):
            return kernel.scheduler(ctx.disk, "bfq")
        if self.kind == "throttle" and ctx.emulated:
            return _split_throttle(ctx, self.cap, self.cap)
        if self.kind == "throttle-rw":
            return _split_throttle(ctx, self.cap / 2, self.cap / 2)
        if self.kind == "throttle":
            return kernel.blkio_throttle(ctx.majmin, self.cap)
        return contextlib.nullcontext()

    def argv(self, ctx, procs=None):
        """The background command, or None when the foreground runs alone."""
        dest = ctx.fresh_dir("rsync-dest")
        rsync = ["rsync", "-a", ctx.rsync_src, dest + "/"]
        return {
            "alone": None,
            "alone-bfq": None,
            "rsync": rsync,
            "nice19": ["nice", "-n", "19", *rsync],
            "ionice-bfq": ["ionice", "-c3", *rsync],
            # The wrapper joins the cgroup first, so rsync and its children start inside it.
            "throttle": ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs or "", *rsync],
            "throttle-rw": ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs or "", *rsync],
            "discnice": [common.DISCNICE, "run", "--quiet", "--rate", str(int(self.cap or 0)), "--", *rsync],
        }[self.kind]


@contextlib.contextmanager
def _split_throttle(ctx, read_cap, write_cap):
    """The kernel throttle on the emulated disk.  cgroup-v1 blkio throttling
    is flat (measured by bench/loopfs.py --check): a child group's I/O is not
    counted against the root group's HDD rule, so a child at CAP beside the
    root's 50 MB/s would make a 50 + CAP MB/s disk.  The disk's budget is
    split instead: the child gets CAP (and CAP's share of the IOPS), the
    root the rest - the same total a hierarchical throttle would give while
    the rsync uses its cap, which it does.

    v1 rules are per direction and the rsync's writes reach the disk through
    the root group's flusher (no cgroup writeback in v1): at read_cap =
    write_cap = CAP the rsync moves CAP read + CAP written, twice what
    `discnice --rate CAP` allows; "throttle-rw" (CAP/2 each) moves as much."""
    fs = ctx.loopfs
    share = read_cap / fs.throttle["read_bps"]
    iops = max(1, round(fs.throttle["read_iops"] * share)) if "read_iops" in fs.throttle else None
    cut = {"read_bps": read_cap, "write_bps": write_cap, "read_iops": iops, "write_iops": iops}
    rest = {k: v - cut[k] for k, v in fs.throttle.items()}
    with fs.rules(**rest), kernel.blkio_throttle(ctx.majmin, read_cap, iops, write_cap) as procs:
        yield procs


def caps(ctx):
    """The paper's 1, 3, 5 MB/s and 1 %, 3 %, 5 % of the measured disk bandwidth
    (emulated disk: the caps its Sizes name, as (those of the paper's, others))."""
    if ctx.sizes.e6_caps_mb:
        paper = [c * util.MB for c in ctx.sizes.e6_caps_mb if c in (1, 3, 5)]
        return paper, [c * util.MB for c in ctx.sizes.e6_caps_mb if c not in (1, 3, 5)]
    pick = ctx.sizes.e6_caps
    paper = [c * util.MB for i, c in enumerate((1, 3, 5)) if i in pick]
    scaled = [round(ctx.disk_bps * f / 100_000) * 100_000 for i, f in enumerate((0.01, 0.03, 0.05)) if i in pick]
    return paper, [c for c in scaled if c not in paper]      # 1 % of 500 MB/s is the paper's 5 MB/s


def cases(ctx):
    paper, scaled = caps(ctx)
    out = [Case("alone"), Case("rsync", label="rsync (uncontrolled)"), Case("nice19", label="rsync nice 19"),
           Case("alone-bfq", label="alone (BFQ)"), Case("ionice-bfq", label="rsync ionice -c3 (BFQ)")]
    for i, cap in enumerate(paper + scaled):
        out += [Case("throttle", cap), Case("discnice", cap)]
        if ctx.emulated:        # the kernel throttle moving as many bytes as discnice
            out.append(Case("throttle-rw", cap, label=f"throttle {cap / util.MB:g} MB/s as CAP/2 read + CAP/2 write"))
        if i == len(paper) - 1:
            out.append(Case("alone"))       # the baseline twice per repetition: its noise shows
    return out


def run_case(ctx, fg, case):
    """One foreground run beside one background; a dict of what was measured."""
    argv = fg.before()
    common.make_cold(ctx.rsync_src)
    util.settle()
    bg = proc = None
    with case.environment(ctx) as procs, util.Sampler(ctx.disk) as sampler:
        try:
            bg_cmd = case.argv(ctx, procs)
            bg = util.spawn(bg_cmd) if bg_cmd else None
            t_bg = time.monotonic()
            if bg:
                sampler.watch("bg", bg.pid)
                time.sleep(WARMUP_S)
            sampler.mark("fg_start")
            t0 = time.monotonic()
            proc = util.spawn(argv)
            sampler.watch("fg", proc.pid)
            rc = proc.wait()
            fg_s = time.monotonic() - t0
            sampler.mark("fg_end")
            bg_done = bool(bg) and bg.poll() is not None
        finally:
            # Also on Ctrl-C: nothing of ours may hold the (emulated) disk.
            for p in (proc, bg):
                if p:
                    util.stop(p)
        bg_s = time.monotonic() - t_bg
    if rc != 0:
        raise RuntimeError(f"foreground {argv} failed ({rc})")
    fg.after()
    shutil.rmtree(ctx.path("rsync-dest"), ignore_errors=True)
    util.settle()
    bg_bytes = sum(sampler.last("bg")) if bg_cmd else 0
    return {"fg_s": fg_s, "bg_bytes": bg_bytes, "bg_s": bg_s, "bg_done": bg_done,
            "samples": sampler.samples, "marks": sampler.marks}


def campaign(ctx):
    """All foregrounds x all cases x reps (alternating); cached on ctx.
    Returns {fg name: {case key: {"case", "runs": [...], "na": reason}}}."""
    if "contention" in ctx.cache:
        return ctx.cache["contention"]
    fgs = [Foreground(ctx, "sequential"), Foreground(ctx, "tar")]
    all_cases = cases(ctx)
    out = {fg.name: {c.key: {"case": c, "runs": [], "na": None} for c in all_cases} for fg in fgs}
    print(f"  contention: {len(all_cases)} cases x {len(fgs)} foregrounds x {ctx.sizes.reps} rep(s)", flush=True)
    for fg in fgs:
        for c in all_cases:
            out[fg.name][c.key]["na"] = c.unavailable(ctx)
    for rep in range(ctx.sizes.reps):
        for fg in fgs:
            for c in all_cases:
                cell = out[fg.name][c.key]
                if cell["na"]:
                    continue
                try:
                    cell["runs"].append(run_case(ctx, fg, c))
                except kernel.Unavailable as e:
                    cell["na"] = str(e)
            print(f"  contention rep {rep + 1}/{ctx.sizes.reps}: {fg.name} done", flush=True)
    ctx.cache["contention"] = out
    return out


def fg_median(cell):
    return util.median([r["fg_s"] for r in cell["runs"]])


def bg_rate(cell):
    """Median achieved background rate (kernel bytes / its lifetime)."""
    return util.median([r["bg_bytes"] / r["bg_s"] for r in cell["runs"] if r["bg_s"] > 0])


def slowdown(cells, key, base=("alone", None)):
    """median(time beside) / median(time alone) - 1."""
    return fg_median(cells[key]) / fg_median(cells[base]) - 1


def spread(cells, key=("alone", None)):
    """Relative spread (max/min - 1) of a case's runs: the noise floor."""
    ts = [r["fg_s"] for r in cells[key]["runs"]]
    return max(ts) / min(ts) - 1 if len(ts) > 1 else float("nan")

