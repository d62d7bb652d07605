"""E4 — Effectiveness of DiscNice's modules (paper §6.2, Fig. 12, Tables 5-6).

The four-phase benchmark (random read x10, stride read, region write,
create-delete), chained in one `sh -c`, under the five `--predict`
configurations at 5 MB/s; then Table 6: a foreground `sequential` beside
that benchmark held at 3 MB/s, both jobs' times."""
import os
import time

from . import util
from .util import MB, common

CONFIGS = [("none", "All-off"), ("cache", "CacheD"), ("readahead", "ReadP"),
           ("cache+readahead", "CacheD&readP"), ("all", "All-on")]
PHASES = ["random", "stride", "region-write", "create-delete"]
PAPER_T6 = {"none": (371.47, 601.49), "cache": (386.13, 484.45), "readahead": (371.90, 629.12),
            "cache+readahead": (375.26, 448.40), "all": (375.32, 414.57)}
CAP = 5 * MB
CAP_T6 = 3 * MB
MARKS = "/dev/shm/discnice-eval-phases"


def bench_cmd(ctx):
    """The four phases as one shell job; a timestamp (on tmpfs, no disk I/O)
    before and after each phase."""
    s, mb = ctx.sizes, common.MICROBENCH
    rnd = common.make_file(ctx.path(f"e4-rand-{s.e4_file >> 20}M"), s.e4_file)
    region = common.make_file(ctx.path(f"e4-region-{s.e4_file >> 20}M"), s.e4_file, fill=b"r")
    script = ('m() { date +%s.%N >> "$0"; }; m; "$1" random "$2" 10 && m && "$1" stride "$2" && m && '
              '"$1" region-write "$3" "$5" && m && "$1" create-delete "$4" "$5" && m')
    return [rnd, region], ["sh", "-c", script, MARKS, mb, rnd, region, ctx.dir, str(s.e4_count)]


def _prepare(inputs):
    for p in inputs:
        common.make_cold(p)
    if os.path.exists(MARKS):
        os.unlink(MARKS)
    util.settle()


def _phase_times():
    with open(MARKS) as f:
        ts = [float(x) for x in f.read().split()]
    os.unlink(MARKS)
    return [b - a for a, b in zip(ts, ts[1:])]


def run(ctx):
    inputs, cmd = bench_cmd(ctx)
    solo = {}
    for cfg, _ in [("uncontrolled", None)] + CONFIGS:
        _prepare(inputs)
        dn = None if cfg == "uncontrolled" else ["--rate", str(CAP), "--predict", cfg]
        r, samples, marks, elapsed = util.run_traced(ctx, cmd, dn)
        solo[cfg] = {"report": r, "samples": samples, "elapsed": elapsed, "phases": _phase_times()}
    lines = ["## E4 — Module ablation (Fig. 12, Tables 5-6)", "",
             f"Four-phase benchmark: random read of a {ctx.sizes.e4_file >> 20} MiB file 10 passes (x pages/10 "
             f"4 KiB preads), stride read of it, region write (10 KB at offset 0, {ctx.sizes.e4_count}x), "
             f"create-delete of a 10 KB file {ctx.sizes.e4_count}x (paper: 200 MB, 10,000x). "
             f"`discnice run --rate {CAP / MB:g}M --predict CONFIG`.", ""]
    lines += _table5(ctx, solo)
    lines.append(f"![E4 Fig 12]({_plot(ctx, solo)})")
    lines += [""] + _table6(ctx, inputs, cmd)
    return lines


def _table5(ctx, solo):
    rows = []
    for cfg, paper in [("uncontrolled", "(no discnice)")] + CONFIGS:
        d = solo[cfg]
        r = d["report"]
        ok_w, total_w = util.job_windows(d["samples"], CAP)
        job = (r["actual_read_bytes"] + r["actual_write_bytes"]) / r["elapsed_s"] if r else None
        rows.append([f"`{cfg}`", paper, f"{d['elapsed']:.2f} s",
                     " / ".join(f"{t:.2f}" for t in d["phases"]),
                     f"{job / CAP:.2f}" if job else "—",
                     _over(ok_w, total_w) if r and total_w else "—",
                     f"{r['slept_s']:.2f} s" if r else "—"])
    t = {c: solo[c]["elapsed"] for c, _ in CONFIGS}
    fastest = min(t, key=t.get)
    ok_w, total_w = util.job_windows(solo["all"]["samples"], CAP)
    ok = fastest == "all" and (not total_w or ok_w / total_w >= 0.95)
    if not ok:
        ctx.miss(f"E4: `all` is not both the fastest configuration and within 1.1x the cap in ≥95 % of "
                 f"1-s windows (fastest: `{fastest}`)")
    return ["**Table 5 / Fig. 12** — the five configurations at 5 MB/s (one run each).", ""] + util.table(
        ["--predict", "paper name", "total time", "phase times [s] (random / stride / region / create-delete)",
         "job avg (kernel) / cap", "1-s windows > 1.1x cap", "slept"], rows) + [
        "", "Paper (Fig. 12, qualitative): all-off over-throttles the random phase and overshoots in stride; "
        "CacheD fixes random, not stride; ReadP fixes stride, not random; CacheD&readP over-throttles the "
        "writes; All-on is the fastest and stays under the cap.",
        f"Target (All-on fastest and ≥ 95 % of its 1-s windows ≤ 1.1x cap): {util.verdict(ok)} "
        f"(fastest: `{fastest}`).", ""]


def _over(ok_w, total_w):
    """Share of 1-s windows above the tolerance, as "4% (1/26)"."""
    return f"{100 * (total_w - ok_w) / total_w:.0f}% ({total_w - ok_w}/{total_w})"


def _table6(ctx, inputs, cmd):
    """Foreground sequential beside the benchmark at 3 MB/s, per configuration."""
    order = ["alone"] + [c for c, _ in CONFIGS] + ["alone"]      # the baseline at both ends
    res = {c: {"fg": [], "bg": []} for c in order}
    for _ in range(ctx.sizes.reps):
        for cfg in order:
            fg_s, bg_s = _pair(ctx, inputs, cmd, None if cfg == "alone" else cfg)
            res[cfg]["fg"].append(fg_s)
            res[cfg]["bg"].append(bg_s)
    alone = util.median(res["alone"]["fg"])
    bg_all = util.median(res["all"]["bg"])
    rows = []
    for cfg, paper in CONFIGS:
        fg, bg = util.median(res[cfg]["fg"]), util.median(res[cfg]["bg"])
        ps, pb = PAPER_T6[cfg]
        rows.append([paper, f"`{cfg}`", f"{ps:.2f}", f"{pb:.2f}", f"{pb / PAPER_T6['all'][1]:.2f}",
                     util.pct(fg / alone - 1), f"{bg / bg_all:.2f}"])
    return [f"**Table 6** — foreground `sequential` ({ctx.sizes.seq_fg >> 20} MiB, cold) beside the "
            f"four-phase benchmark at {CAP_T6 / MB:g} MB/s, started 0.5 s earlier; the benchmark runs to its "
            f"end. Medians of {ctx.sizes.reps} run(s) (alone: 2 per repetition); foreground slowdown vs alone, "
            f"benchmark time vs All-on's "
            f"({bg_all:.2f} s here).", ""] + util.table(
        ["config", "--predict", "paper sequential [s]", "paper bench [s]", "paper bench / All-on",
         "ours: sequential slowdown", "ours: bench / All-on"], rows) + [""]


def _pair(ctx, inputs, cmd, cfg):
    """(foreground seconds, background seconds) for one configuration."""
    _prepare(inputs)
    common.make_cold(ctx.seq_fg)
    bg = None
    try:
        if cfg:
            bg = util.spawn([common.DISCNICE, "run", "--quiet", "--rate", str(CAP_T6), "--predict", cfg,
                             "--", *cmd])
            t_bg = time.monotonic()
            time.sleep(0.5)
        fg_s = util.timed([common.MICROBENCH, "sequential", ctx.seq_fg])
        bg_s = 0.0
        if bg:
            bg.wait()
            bg_s = time.monotonic() - t_bg
            os.unlink(MARKS)
    finally:
        if bg:                  # Ctrl-C: nothing of ours may hold the (emulated) disk
            util.stop(bg)
    return fg_s, bg_s


def _plot(ctx, solo):
    fig, axes = util.figure(2, 3, f"E4 (Fig. 12): four-phase benchmark at {CAP / MB:g} MB/s")
    for ax, (cfg, paper) in zip(axes.flat, [("uncontrolled", "no discnice")] + CONFIGS):
        d = solo[cfg]
        s = d["samples"]
        util.rate_axes(ax, f"{paper} (--predict {cfg})" if cfg != "uncontrolled" else "uncontrolled", CAP)
        util.step_plot(ax, *util.per_second(s, ["disk_r", "disk_w"], step=util.auto_step(s)), color="grey",
                       linestyle=":", label="device")
        util.step_plot(ax, *util.per_second(s, "job", step=util.auto_step(s)), color="tab:blue",
                       label="job /proc io")
        t = 0.0
        for name, dt in zip(PHASES, d["phases"]):
            t += dt
            ax.axvline(t, color="tab:green", linewidth=0.6)
            ax.text(t - dt / 2, ax.get_ylim()[1] * 0.9, name[:6], fontsize=6, ha="center")
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6)
    return util.save(fig, ctx, "e4-ablation")
