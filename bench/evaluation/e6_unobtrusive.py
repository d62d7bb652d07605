"""E6 — Unobtrusiveness of background applications (paper §6.5, Tables 9-10),
beside the kernel's own controls: nice 19, ionice -c3 under BFQ and the
cgroup-v1 blkio throttle at the same caps as discnice."""
import numpy as np

from . import contention, util

# Tables 9 and 10: seconds and "increasing rate" (time / time alone).
PAPER = {
    "sequential": {"alone": (4.18, "—"), 1: (4.81, "106%"), 3: (5.91, "143%"), 5: (8.27, "201%"),
                   "nice19": (17.26, "413%"), "rsync": (17.49, "418%")},
    "tar": {"alone": (4.47, "—"), 1: (5.02, "112%"), 3: (6.73, "151%"), 5: (9.15, "205%"),
            "nice19": (12.82, "287%"), "rsync": (13.10, "293%")},
}
TARGET = 1.10       # discnice slowdown / kernel-throttle slowdown
NOISE = 0.02        # slowdowns both under 2 points: equal within noise


def run(ctx):
    data = contention.campaign(ctx)
    paper_caps, scaled = contention.caps(ctx)
    if ctx.emulated:
        fs = ctx.loopfs
        controls = (
            "Controls of the rsync: `nice -n 19`; the kernel throttle = a cgroup-v1 child group with "
            f"`blkio.throttle.{{read,write}}_bps_device` = \"{ctx.majmin} CAP\" and CAP's share of the "
            f"{fs.throttle.get('read_iops', 0)} IOPS, the root group's HDD rules lowered by as much while it "
            "runs (v1 throttling is flat: without the split the throttled rsync would get CAP on top of "
            "the disk's 50 MB/s; see the disk check) (the rsync joins the group before exec); "
            "`discnice run --rate CAP` (reads + writes together). `ionice -c3` under BFQ is not run: "
            "the throttle that makes this disk slow sits above the I/O scheduler, so BFQ's queue never "
            "fills (disk check: an idle-class reader got as much as a plain one). "
            f"Caps: {', '.join(f'{c / util.MB:g}' for c in paper_caps + scaled)} MB/s (the emulated disk "
            "is about the paper's ~47 MB/s, so its 1, 3, 5 MB/s apply as they are)")
    else:
        controls = (
            "Controls of the rsync: `nice -n 19`; `ionice -c3` with the "
            f"BFQ scheduler (switched on for the run, {ctx.disk}'s original scheduler restored after; its "
            "slowdown is against the foreground alone under BFQ); the kernel throttle = cgroup v1 "
            f"`blkio.throttle.read_bps_device` and `write_bps_device` = \"{ctx.majmin} CAP\" (the "
            "rsync joins the group before exec); `discnice run --rate CAP` (reads + writes together). "
            f"Caps: the paper's 1, 3, 5 MB/s and 1 %, 3 %, 5 % of the measured "
            f"{ctx.disk_bps / util.MB:.0f} MB/s = {', '.join(f'{c / util.MB:g}' for c in scaled)} MB/s")
    lines = ["## E6 — Unobtrusiveness beside the kernel's controls (Tables 9-10)", "",
             f"Same foregrounds and rsync as E1. {controls} "
             "(MB = 10^6 B). Slowdown = median(time beside) / median(time alone) - 1. The rsync is "
             "stopped when the foreground ends; \"rsync achieved\" = its kernel-counted read+write bytes "
             "over its lifetime.", ""]
    for table_no, name in ((9, "sequential"), (10, "tar")):
        lines += [f"**Table {table_no}** — `{name}` beside a controlled rsync", ""]
        lines += util.table(["background", "paper [s]", "paper rate", "ours: rate", "ours: slowdown",
                             "rsync achieved", "achieved / cap"], _rows(data[name], PAPER[name], ctx))
        lines.append("")
    lines += _headline(ctx, data, paper_caps + scaled)
    lines.append(f"![E6 slowdowns]({_plot(ctx, data, paper_caps + scaled)})")
    lines.append("")
    return lines


def _cell_rate(cells, key, base=("alone", None)):
    return contention.fg_median(cells[key]) / contention.fg_median(cells[base])


def _rows(cells, paper, ctx):
    rows = []

    def add(key, label, paper_key=None, base=("alone", None)):
        cell = cells[key]
        ps, pr = paper.get(paper_key, (None, "—"))
        pcol = f"{ps:.2f}" if ps else "—"
        if cell["na"] or not cell["runs"]:
            rows.append([label, pcol, pr, f"n/a ({cell['na']})", "n/a", "n/a", "n/a"])
            return
        ratio = _cell_rate(cells, key, base)
        cap = cell["case"].cap
        achieved = contention.bg_rate(cell) if key[0] not in ("alone", "alone-bfq") else None
        rows.append([label, pcol, pr, f"{100 * ratio:.0f}%",
                     "—" if achieved is None else util.pct(ratio - 1),
                     "—" if achieved is None else util.mbps(achieved),
                     f"{achieved / cap:.2f}" if cap and achieved is not None else "—"])

    add(("alone", None), "w/o rsync", "alone")
    paper_caps, scaled = contention.caps(ctx)
    for cap in paper_caps + scaled:
        mb = cap / util.MB
        pk = round(mb) if cap in paper_caps else None
        add(("discnice", cap), f"discnice rsync ({mb:g} MB/s)", pk)
        add(("throttle", cap), f"kernel-throttled rsync ({mb:g} MB/s)")
        if ("throttle-rw", cap) in cells:
            add(("throttle-rw", cap), f"kernel-throttled rsync ({mb / 2:g} MB/s read + {mb / 2:g} MB/s write)")
    add(("nice19", None), "low-priority rsync (nice 19)", "nice19")
    add(("alone-bfq", None), "w/o rsync, BFQ scheduler")
    add(("ionice-bfq", None), "rsync ionice -c3 (BFQ; vs alone BFQ)", base=("alone-bfq", None))
    add(("rsync", None), "uncontrolled rsync", "rsync")
    return rows


def _headline(ctx, data, all_caps):
    """discnice's slowdown over the kernel throttle's, per cap; target <= 1.1x."""
    rows, met_all, met_equal = [], True, True
    equal = all(("throttle-rw", c) in data["sequential"] for c in all_caps)
    for name in ("sequential", "tar"):
        cells = data[name]
        for cap in all_caps:
            kt = cells[("throttle", cap)]
            if kt["na"] or not kt["runs"]:
                rows.append([name, f"{cap / util.MB:g}", "", f"n/a ({kt['na']})", "n/a", "n/a"])
                continue
            sd = contention.slowdown(cells, ("discnice", cap))
            sk = contention.slowdown(cells, ("throttle", cap))
            spreads = [_runs_range(cells, ("discnice", cap)), _runs_range(cells, ("throttle", cap))]
            if sk > NOISE:
                ratio = sd / sk
                ok = ratio <= TARGET
                rcol = f"{ratio:.2f}x"
            else:
                ok = sd <= NOISE
                rcol = "— (kernel slowdown < 2 points)"
            met_all &= ok
            row = [name, f"{cap / util.MB:g}", util.pct(sd), util.pct(sk), rcol,
                   "met" if ok else "**MISSED**", *spreads, _runs_range(cells, ("alone", None))]
            if equal:
                key = ("throttle-rw", cap)
                se = contention.slowdown(cells, key)
                ok_e = sd / se <= TARGET if se > NOISE else sd <= NOISE
                met_equal &= ok_e
                row += [util.pct(se), f"{sd / se:.2f}x" if se > NOISE else "— (< 2 points)",
                            "met" if ok_e else "**MISSED**", _runs_range(cells, key)]
            rows.append(row)
    noise = max(contention.spread(data[n]) for n in ("sequential", "tar"))
    conclusive = noise == noise and noise <= 0.10
    lines = ["**Headline** — discnice's slowdown ÷ the kernel throttle's at the same cap (target ≤ "
             f"{TARGET:.1f}x; when the kernel's slowdown is under {NOISE * 100:.0f} points the ratio is "
             f"meaningless and both must be under {NOISE * 100:.0f} points). Paper: +6 %, +43 %, +101 % at "
             "1, 3, 5 MB/s vs +318 % uncontrolled.", ""]
    header = ["foreground", "cap [MB/s]", "discnice slowdown", "kernel-throttle slowdown",
              "ratio", "target", "discnice runs [s]", "kernel runs [s]", "alone runs [s]"]
    if equal:
        header += ["kernel, CAP/2 read + CAP/2 write: slowdown", "ratio (equal bytes)", "target (equal bytes)",
                   "its runs [s]"]
    lines += util.table(header, rows)
    lines += ["", "Runs: min..max (n) of the foreground's seconds; the slowdowns are of the medians.",
              f"Noise floor (spread of the alone runs): "
              f"{'n/a (one repetition)' if noise != noise else util.pct(noise)}.",
              f"Headline target (≤ {TARGET:.1f}x at every cap): "
              + (util.verdict(met_all) if conclusive else
                 f"**inconclusive** (ratios {'met' if met_all else 'missed'} as measured, but the alone runs "
                 f"differ by more than 10 %: the differences are within noise)") + "."]
    if equal:
        lines.append("Against the kernel throttle moving as many bytes as discnice's rsync (CAP/2 read + "
                     "CAP/2 write; v1 caps each direction, discnice the sum): "
                     + (util.verdict(met_equal) if conclusive else "**inconclusive**") + ".")
    lines.append("")
    if not conclusive:
        ctx.miss("E6 headline: inconclusive on this run — the foreground-alone runs vary more than the "
                 "controls differ (noise floor in the E6 section)"
                 + ("; use `make bench` (3 repetitions)" if ctx.quick else ""))
    elif not met_all:
        ctx.miss("E6 headline: discnice's foreground slowdown is more than 1.1x the kernel throttle's "
                 "at some cap (see the E6 headline table)")
    return lines


def _runs_range(cells, key):
    ts = [r["fg_s"] for r in cells[key]["runs"]]
    return f"{min(ts):.2f}..{max(ts):.2f} ({len(ts)})" if ts else "—"


def _plot(ctx, data, all_caps):
    fig, axes = util.figure(1, 2, "E6 (Tables 9-10): foreground slowdown and background rate", 3.4, 6.5)
    keys = [("nice19", None), ("ionice-bfq", None), ("rsync", None)]
    labels = ["nice19", "ionice BFQ", "uncontrolled"]
    for cap in all_caps:
        keys += [("discnice", cap), ("throttle", cap)]
        labels += [f"dn {cap / util.MB:g}", f"kt {cap / util.MB:g}"]
    x = np.arange(len(keys))
    ax = axes[0][0]
    for i, name in enumerate(("sequential", "tar")):
        cells = data[name]
        vals = [100 * (_cell_rate(cells, k, ("alone-bfq", None) if k[0] == "ionice-bfq" else ("alone", None)) - 1)
                if cells[k]["runs"] else 0 for k in keys]      # n/a cases (emulated: BFQ) show as 0
        ax.bar(x + (i - 0.5) * 0.4, vals, 0.4, label=name)
    ax.set_xticks(x, labels, rotation=70, fontsize=7)
    ax.set_ylabel("foreground slowdown [%]", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    ax = axes[0][1]
    cells = data["sequential"]
    for kind, color in (("discnice", "tab:blue"), ("throttle", "tab:red")):
        pts = [(cap / util.MB, contention.bg_rate(cells[(kind, cap)]) / util.MB)
               for cap in all_caps if cells[(kind, cap)]["runs"]]
        if pts:
            ax.plot(*zip(*sorted(pts)), "o-", color=color, label=f"{kind} rsync (beside sequential)")
    top = max(all_caps) / util.MB
    ax.plot([0, top], [0, top], "k--", linewidth=1, label="= cap")
    ax.set_xlabel("cap [MB/s]", fontsize=8)
    ax.set_ylabel("rsync achieved [MB/s]", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return util.save(fig, ctx, "e6-unobtrusive")
