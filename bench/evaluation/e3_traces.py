"""E3 — Throttling traces (paper Figs. 11, 13, 14).

Disk rate over time with and without discnice, the cap drawn: micro
(sequential, random, stride, create at 5 MB/s) and macro (grep -r at
3 MB/s, tar at 5 MB/s, make at 500 KB/s).  Rates: the device's
(/proc/diskstats) and the job's (its process tree's /proc/PID/io), sampled
every 100 ms and averaged per second as the paper does; for writes also the
device's average over write-back intervals (Fig. 14).  Write workloads end
with a sync inside the sampled window so their write-back is seen."""
import math
import os
import shutil

from . import e2_prediction, util
from .util import MB, common

MICRO_CAP = 5 * MB


def workloads(ctx):
    """(name, kind, cap, setup -> argv, writes?) for Figs. 11 and 13."""
    s = ctx.sizes
    budget = int(MICRO_CAP * s.trace_s)
    mib = common.MiB
    seq = common.make_file(ctx.path(f"e3-seq-{budget // mib}M"), budget // mib * mib)
    rnd_size = (128 if ctx.quick else 512) * mib
    rnd = common.make_file(ctx.path(f"e3-rand-{rnd_size // mib}M"), rnd_size)
    passes = max(1, round(-10 * math.log(max(1e-3, 1 - budget / rnd_size))))
    stride = common.make_file(ctx.path(f"e3-stride-{3 * budget // mib}M"), 3 * budget // mib * mib)
    create = ctx.path("e3-create.out")
    tar = ctx.archive("e3-tar.tar" if ctx.quick else "usr-include.tar", "/usr/include", s.e3_tar_dirs)
    src = e2_prediction.make_source(ctx)
    mb = common.MICROBENCH

    def cold(path, argv):
        def setup():
            common.make_cold(path)
            return argv
        return setup

    def create_setup():
        if os.path.exists(create):
            os.unlink(create)
        util.settle()
        return [mb, "create", create, str(budget // mib)]

    def grep_setup():
        common.make_tree_cold(s.e3_grep_tree)
        return ["grep", "-r", "-c", "epoch", s.e3_grep_tree]

    def tar_setup():
        return e2_prediction.tar_cold_argv(ctx, tar, "e3-tar-out")

    def make_setup():
        return e2_prediction.make_cold_argv(ctx, src, "e3-make-build")

    return [
        ("sequential", "micro", MICRO_CAP, cold(seq, [mb, "sequential", seq]), False),
        ("random", "micro", MICRO_CAP, cold(rnd, [mb, "random", rnd, str(passes)]), False),
        ("stride", "micro", MICRO_CAP, cold(stride, [mb, "stride", stride]), False),
        ("create", "micro", MICRO_CAP, create_setup, True),
        ("grep -r", "macro", 3 * MB, grep_setup, False),
        ("tar", "macro", 5 * MB, tar_setup, True),
        ("make", "macro", s.e3_make_cap, make_setup, True),
    ]


def run(ctx):
    runs = []
    for name, kind, cap, setup, writes in workloads(ctx):
        plain = util.run_traced(ctx, setup(), sync_after=writes)
        ctrl = util.run_traced(ctx, setup(), ["--rate", str(int(cap))], sync_after=writes)
        runs.append({"name": name, "kind": kind, "cap": cap, "writes": writes, "plain": plain, "ctrl": ctrl})
    os.unlink(ctx.path("e3-create.out"))
    for stale in ("e3-tar-out", "e3-make-build"):
        shutil.rmtree(ctx.path(stale), ignore_errors=True)
    util.settle()
    rows, ok_all = [], True
    for r in runs:
        row, ok = _row(r)
        rows.append(row)
        ok_all &= ok
    if not ok_all:
        ctx.miss("E3: some throttled job's kernel-counted average is above 1.05x the cap, or "
                 "under 95 % of its 1-s read windows are within 1.1x the cap")
    plots = [_plot_traces(ctx, [r for r in runs if r["kind"] == "micro"], "e3-micro",
                          "E3 (Fig. 11): micro-benchmarks, cap 5 MB/s"),
             _plot_traces(ctx, [r for r in runs if r["kind"] == "macro"], "e3-macro",
                          "E3 (Fig. 13): macro-benchmarks under discnice"),
             _plot_flush(ctx, [r for r in runs if r["writes"]])]
    return ["## E3 — Throttling traces (Figs. 11, 13, 14)", "",
            f"Each workload uncontrolled, then under `discnice run --rate CAP` (the paper's caps; make at "
            f"{runs[-1]['cap'] / 1000:g} kB/s{' in quick mode, paper 500 kB/s' if ctx.quick else ''}). "
            f"Micro sizes: ~{ctx.sizes.trace_s} s of I/O at the cap. Job = kernel /proc/PID/io of the job's "
            "process tree; device = /proc/diskstats of "
            f"{ctx.disk} (includes write-back after the job, and anything else on the disk). Paper: "
            "qualitative (\"successfully throttles\"; write spikes at buffer flushes that average under the "
            "cap).", ""] + util.table(
        ["workload", "cap", "time uncontrolled", "time discnice", "job avg (kernel) / cap",
         "1-s job windows ≤ 1.1x cap", "device avg incl. write-back / cap", "max flush-interval avg / cap"],
        rows) + ["", f"Targets (job average ≤ 1.05x cap; ≥ 95 % "
                     f"of 1-s windows ≤ 1.1x cap for reads): {util.verdict(ok_all)}.", ""] + [
        f"![{p}]({p})" for p in plots] + [""]


def _row(r):
    rep, samples, _, elapsed = r["ctrl"]
    cap = r["cap"]
    job = (rep["actual_read_bytes"] + rep["actual_write_bytes"]) / rep["elapsed_s"]
    ok_avg = job / cap <= 1.05      # under it is allowed: make is CPU-bound

    ok_w, total_w = util.job_windows(samples, cap)
    ok_win = r["writes"] or not total_w or ok_w / total_w >= 0.95
    dev = (samples[-1]["disk_r"] + samples[-1]["disk_w"]) / max(samples[-1]["t"], 1e-3)
    flushes = util.flush_intervals(samples) if r["writes"] else []
    fmax = max((f[2] for f in flushes), default=None)
    return [r["name"], f"{cap / MB:g} MB/s", f"{r['plain'][3]:.2f} s", f"{elapsed:.2f} s",
            f"{job / cap:.3f}" + ("" if ok_avg else " **MISSED**"),
            (f"{100 * ok_w / total_w:.0f}% ({ok_w}/{total_w})" if total_w else "n/a (run < 1 s)")
            + ("" if ok_win else " **MISSED**"),
            f"{dev / cap:.3f}", f"{fmax / cap:.2f}" if fmax is not None else "—"], ok_avg and ok_win


def _plot_traces(ctx, runs, name, title):
    cols = 2 if len(runs) == 4 else len(runs)
    fig, axes = util.figure((len(runs) + cols - 1) // cols, cols, title)
    for ax, r in zip(axes.flat, runs):
        util.rate_axes(ax, f"{r['name']} (cap {r['cap'] / MB:g} MB/s)", r["cap"])
        for key, style, label in (("plain", dict(color="grey", linestyle=":"), "device, uncontrolled"),
                                  ("ctrl", dict(color="black"), "device, discnice")):
            s = r[key][1]
            util.step_plot(ax, *util.per_second(s, ["disk_r", "disk_w"], step=util.auto_step(s)),
                           label=label, **style)
        s = r["ctrl"][1]
        util.step_plot(ax, *util.per_second(s, "job", step=util.auto_step(s)), color="tab:blue",
                       linewidth=0.8, label="job /proc io, discnice")
        ax.axvline(r["ctrl"][2]["end"], color="tab:blue", linestyle=":", linewidth=0.8)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6)
    return util.save(fig, ctx, name)


def _plot_flush(ctx, runs):
    """Fig. 14: the device's write rate averaged between write-back bursts."""
    fig, axes = util.figure(1, len(runs), "E3 (Fig. 14): device writes averaged over write-back intervals")
    for ax, r in zip(axes[0], runs):
        s = r["ctrl"][1]
        util.rate_axes(ax, f"{r['name']} under discnice (cap {r['cap'] / MB:g} MB/s)", r["cap"])
        util.step_plot(ax, *util.per_second(s, "disk_w", step=util.auto_step(s)), color="lightgrey",
                       label="device writes per second")
        for i, (a, b, rate) in enumerate(util.flush_intervals(s)):
            ax.hlines(rate / MB, a, b, color="tab:purple", linewidth=2,
                      label="average over write-back interval" if i == 0 else None)
        ax.axvline(r["ctrl"][2]["end"], color="tab:blue", linestyle=":", linewidth=0.8, label="job ends; sync")
        ax.legend(fontsize=6)
    return util.save(fig, ctx, "e3-flush")
