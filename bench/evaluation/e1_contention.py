"""E1 — Disk I/O is obtrusive (paper §2.1, Tables 1-2, Figs. 1-3).

The foreground alone, beside uncontrolled rsync and beside rsync at
nice 19; per-second disk rates of the device and of each process tree."""
import os

from . import contention, util

# Tables 1 and 2: (seconds, "increasing rate" = time / time alone).
PAPER = {
    "sequential": {"alone": (4.18, "—"), "rsync": (17.49, "418%"), "nice19": (17.26, "413%")},
    "tar": {"alone": (4.47, "—"), "rsync": (13.10, "293%"), "nice19": (12.82, "287%")},
}
ROWS = [("alone", "w/o rsync"), ("rsync", "w/ rsync"), ("nice19", "w/ low-priority rsync (nice 19)")]


def run(ctx):
    data = contention.campaign(ctx)
    lines = ["## E1 — Contention: disk I/O is obtrusive (Tables 1-2, Figs. 1-3)", "",
             f"Foregrounds: `sequential` = cold read of a {ctx.sizes.seq_fg >> 20} MiB file (microbench, "
             f"64 KiB reads; paper 200 MB); `tar` = `tar xf` of a {_mb(ctx.tar_fg)} archive of all of "
             f"/usr/include (paper 50 MB). Background: `rsync -a` of a cold "
             f"{ctx.sizes.rsync_src >> 20} MiB file to a scratch directory (paper: 600 MB to remote storage), "
             f"started {contention.WARMUP_S} s before the foreground and stopped when it ends. "
             f"Medians of {ctx.sizes.reps} alternating repetition(s); rate = time / time alone (the paper's "
             f"\"increasing rate\").", ""]
    for table_no, name in ((1, "sequential"), (2, "tar")):
        lines += [f"**Table {table_no}** — `{name}` beside rsync", ""]
        lines += util.table(["situation", "paper [s]", "paper rate", "ours: rate", "ours: slowdown",
                             "ours: rsync achieved"], _rows(data[name], PAPER[name]))
        lines.append("")
    for name in ("sequential", "tar"):
        lines.append(f"![E1 {name}]({_plot(ctx, data[name], name)})")
    s_unc = contention.slowdown(data["sequential"], ("rsync", None))
    s_nice = contention.slowdown(data["sequential"], ("nice19", None))
    if ctx.emulated:
        disk = (f"This emulated disk ({ctx.disk_bps / util.MB:.1f} MB/s measured) is about the paper's "
                "~47 MB/s, and every process shares its bandwidth and IOPS")
    else:
        disk = (f"This disk is ~{ctx.disk_bps / 47e6:.0f}x the paper's, so one rsync leaves it far less "
                "saturated")
    lines += ["", f"Reading: uncontrolled rsync slows `sequential` by {util.pct(s_unc)} "
              f"(paper +318%); beside rsync at nice 19 it is {util.pct(s_nice)} (paper +313%). {disk}; see "
              "the E6 noise floor before reading single differences.", ""]
    return lines


def _mb(path):
    return f"{os.path.getsize(path) / util.MB:.0f} MB"


def _rows(cells, paper):
    rows = []
    for kind, label in ROWS:
        cell = cells[(kind, None)]
        ratio = contention.fg_median(cell) / contention.fg_median(cells[("alone", None)])
        ps, pr = paper[kind]
        bg = "—" if kind == "alone" else util.mbps(contention.bg_rate(cell))
        rows.append([label, f"{ps:.2f}", pr, f"{100 * ratio:.0f}%",
                     "—" if kind == "alone" else util.pct(ratio - 1), bg])
    return rows


def _plot(ctx, cells, name):
    """Fig. 1 (disk rates per second) and Fig. 2 (CPU) for the first repetition."""
    fig, axes = util.figure(2, 3, f"E1 (Figs. 1-2): {name} vs rsync, rates per second (0.2 s bins if short)")
    for col, (kind, label) in enumerate(ROWS):
        run = cells[(kind, None)]["runs"][0]
        s = run["samples"]
        ax = axes[0][col]
        util.rate_axes(ax, label)
        step = util.auto_step(s)
        util.step_plot(ax, *util.per_second(s, ["disk_r", "disk_w"], step=step), color="black",
                       label=f"device {ctx.disk} (r+w)")
        util.step_plot(ax, *util.per_second(s, "fg", step=step), color="tab:blue", label=f"{name} (/proc io)")
        if kind != "alone":
            util.step_plot(ax, *util.per_second(s, "bg", step=step), color="tab:orange", label="rsync (/proc io)")
        for m in ("fg_start", "fg_end"):
            ax.axvline(run["marks"][m], color="grey", linestyle=":", linewidth=1)
        ax.legend(fontsize=6)
        cax = axes[1][col]
        cax.plot(*util.cpu_share(s, step), color="tab:green")
        cax.set_ylim(0, 100)
        cax.set_title(f"CPU busy, {label}", fontsize=9)
        cax.set_ylabel("% of 2 CPUs", fontsize=8)
        cax.set_xlabel("elapsed [s]", fontsize=8)
        cax.grid(alpha=0.3)
    return util.save(fig, ctx, f"e1-{name}")
