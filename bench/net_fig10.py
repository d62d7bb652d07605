"""Rate-windows Fig 10 analogue (§5.2; issue #12 "Fig 10 analogue"): three
web servers on one host, capped at 1.5, 3 and 6 MB/s, each driven by a
client that requests the same file again and again (keep-alive), with large
files (1.7 MB) and small ones (71 KB).  Achieved rates against the caps.

The servers are nginx (master and one worker each) run under
`discnice run --send-rate CAP` (and, beside it, under `trickle -s -u`),
on loopback; the clients are wrk (one thread, two connections each), and the
rate is wrk's own count of the bytes it read over its run: the client's
count, never discnice's.  nginx runs with `sendfile off` (it then sends with
writev) in the main table: discnice does not hold a non-blocking sendfile
(bench/net_repro/sendfile_nonblock.py); one row shows `sendfile on`.

The paper's servers shared a ~11 MB/s network (100 Mbit/s Ethernet);
loopback here is thousands of MB/s, so only the caps bind.  With --link the
servers run in a namespace (dnbench-host) and the clients in another
(dnbench-net), joined by a veth pair with a 100 Mbit/s tbf out of the
servers (bench/net_fig9.py's setup; always deleted), and a row of
uncapped servers shows what the link gives.

usage: net_fig10.py [--quick] [--link]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import net_fig9  # noqa: E402
import net_trickle as nt  # noqa: E402

TMP = "/tmp/dnbench-fig10"
CAPS = [1_500_000, 3_000_000, 6_000_000]
SIZES = [("1.7 MB", 1_700_000), ("71 KB", 71_000)]
PAPER = ("Paper (Fig 10, text of §5.2): Apache servers capped at 1.5, 3 and 6 MB/s on a ~11 MB/s "
         "network; \"the maximum bandwidth achieved with the large files is 11.5MB, and 8.6MB with "
         "the small files\"; the small-file streams (especially the largest) fall below their "
         "threshold, which the paper calls not a failing: rate windows guarantee not-to-exceed, "
         "not at-least.  The per-server bars are in the figure only.")

UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}


def wrk_bytes(out):
    """wrk's 'N requests in T s, X.YZMB read' line: (bytes, seconds, requests)."""
    m = re.search(r"(\d+) requests in ([\d.]+)(m?s|m), ([\d.]+)([KMGT]?B) read", out)
    if not m:
        return None
    secs = float(m.group(2)) * {"s": 1, "ms": 1e-3, "m": 60}[m.group(3)]
    return float(m.group(4)) * UNITS[m.group(5)], secs, int(m.group(1))


def start_nginx_link(tool, cap, d, sendfile):
    """nginx under the tool in dnbench-host, listening on its veth address."""
    os.makedirs(d, exist_ok=True)
    port = nt.free_port()
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(nt.NGINX_CONF.format(d=d, port=port, root=f"{TMP}/www", sendfile="on" if sendfile else "off")
                .replace("127.0.0.1", net_fig9.HOST_IP))
    prefix = nt.wrap(tool, send=cap) if tool != "plain" else []
    p = subprocess.Popen(["ip", "netns", "exec", net_fig9.HOST_NS] + prefix +
                         ["nginx", "-c", f"{d}/nginx.conf", "-p", d],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(100):
            if subprocess.run(["ip", "netns", "exec", net_fig9.NET_NS, "curl", "-sf", "-o", "/dev/null",
                               f"http://{net_fig9.HOST_IP}:{port}/"], capture_output=True).returncode in (0, 22):
                break
            time.sleep(0.05)
    except BaseException:
        common.stop_group(p)  # never leave a server behind
        raise
    return p, port


def one_config(tool, fname, seconds, sendfile, link=False):
    """Three servers under `tool` at CAPS, three wrk clients at once."""
    servers = []
    host = net_fig9.HOST_IP if link else "127.0.0.1"
    client_pre = ["ip", "netns", "exec", net_fig9.NET_NS] if link else []
    try:
        for i, cap in enumerate(CAPS):
            d = f"{TMP}/srv{i}-{tool}"
            start = start_nginx_link(tool, cap, d, sendfile) if link else \
                nt.start_nginx(tool, cap, f"{TMP}/www", d, sendfile)
            servers.append((start, d))
        clients = [subprocess.Popen(client_pre + ["wrk", "-t1", "-c2", f"-d{seconds}s",
                                                  f"http://{host}:{port}/{fname}"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for (_, port), _ in servers]
        results = []
        for c in clients:
            out, _ = c.communicate(timeout=seconds + 60)
            results.append(wrk_bytes(out))
        return results
    finally:
        for (p, _), d in servers:
            common.stop_group(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 s per configuration instead of 20")
    ap.add_argument("--link", action="store_true",
                    help="servers and clients in two namespaces over a 100 Mbit/s tbf link (root)")
    args = ap.parse_args()
    for prog in ("nginx", "wrk", "trickle"):
        if not shutil.which(prog):
            sys.exit(f"bench: {prog} is not installed (apt-get install nginx-light wrk trickle)")
    seconds = 8 if args.quick else 20
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(f"{TMP}/www")
    for name, size in SIZES:
        common.make_file(f"{TMP}/www/{size}.bin", size)
    configs = [("discnice", False), ("trickle", False)] + ([("plain", False)] if args.link else [])
    lines = ["# Rate-windows Fig 10 analogue: three capped web servers (issue #12)", "",
             *common.machine_lines(),
             f"nginx (sendfile off unless said), wrk -t1 -c2 -d{seconds}s per server, all three at once; " +
             ("a 100 Mbit/s (12.5 MB/s) tbf link between two namespaces" if args.link else "loopback") +
             f"; `make bench-net-fig10 ARGS='{' --quick' if args.quick else ''}{' --link' if args.link else ''}'`", "",
             PAPER, "",
             "Achieved = wrk's bytes read / its run time.  Error against the cap each tool was given "
             "(trickle: nearest whole KiB/s, -u N = N * 1024 B/s).  Targets (issue #12): a stream "
             "within ±3 % of its cap; not-to-exceed (the paper's polarity).", "",
             "| file | tool | cap 1.5 MB/s | cap 3 MB/s | cap 6 MB/s | sum (caps 10.5) | requests/s |",
             "|---|---|---|---|---|---|---|"]
    worst = []
    try:
        if args.link:
            net_fig9.setup()
        for fname, size in SIZES:
            for tool, sendfile in configs + ([("discnice", True)] if size > 1_000_000 else []):
                res = one_config(tool, f"{size}.bin", seconds, sendfile, args.link)
                cells, total, reqs = [], 0.0, 0.0
                for cap, r in zip(CAPS, res):
                    if r is None:
                        cells.append("wrk failed")
                        continue
                    rate = r[0] / r[1]
                    total += rate
                    reqs += r[2] / r[1]
                    if tool == "plain":
                        cells.append(f"{rate / 1e6:.2f} (no cap)")
                        continue
                    err = 100 * (rate / nt.target(tool, cap) - 1)
                    cells.append(f"{rate / 1e6:.2f} ({err:+.1f} %)")
                    if tool == "discnice" and not sendfile:
                        worst.append((fname, cap, err))
                label = tool + (", sendfile on" if sendfile else "")
                lines.append(f"| {fname} | {label} | " + " | ".join(cells) +
                             f" | {total / 1e6:.2f} | {reqs:.0f} |")
                print(lines[-1], flush=True)
    finally:
        if args.link:
            net_fig9.teardown()
        shutil.rmtree(TMP, ignore_errors=True)
    bad = [f"{f} at {c / 1e6:g} MB/s {e:+.1f} %" for f, c, e in worst if abs(e) > 3]
    over = [f"{f} at {c / 1e6:g} MB/s {e:+.1f} %" for f, c, e in worst if e > 3]
    lines += ["", "Rates in MB/s (10^6 B/s).", "",
              "- discnice (sendfile off) within ±3 % of every cap: " +
              ("**met**" if not bad else "**NOT met**: " + ", ".join(bad)),
              "- discnice never over its cap by more than 3 % (the paper's not-to-exceed): " +
              ("**met**" if not over else "**NOT met**: " + ", ".join(over)), ""]
    text = "\n".join(lines) + "\n"
    common.write_results(os.path.join(common.RESULTS, f"2026-11-23-net-fig10{'-link' if args.link else ''}"
                                                      f"{'-quick' if args.quick else ''}.md"), text)


if __name__ == "__main__":
    main()
