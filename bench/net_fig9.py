"""Rate-windows Fig 9 analogue (§5.1; issue #12 "Fig 9 analogue"): a guest
job uploads a 90 MB checkpoint while the host's web server is driven by a
load generator, over one 100 Mbit/s link (the paper's Ethernet, ~11 MB/s).
The host web server's throughput over time, with the checkpoint
uncontrolled (Fig 9a), under a fixed cap (`discnice run --send-rate`), and
in yield mode (Fig 9b: `--policy yield --send-rate`, the cap applied only
while the host's other traffic - the web server's, seen in dnbench-host's
/proc/net/dev less the job's own - is above --net-yield-above).

Two network namespaces the bench creates and always deletes:
dnbench-host (10.77.0.1: nginx, the host's web server, plain; the guest's
upload, regulated) and dnbench-net (10.77.0.2: the checkpoint's receiver and
the web clients), joined by a veth pair whose host end has a tbf qdisc of
100 Mbit/s.  Both counts are taken at the far end, in dnbench-net, by this
script's own receiver and load generator (Python threads there): bytes of
checkpoint received and bytes of web response bodies received, per 0.5 s.

usage: net_fig9.py [--quick] [--cap RATE]
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import http.client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HOST_NS, NET_NS = "dnbench-host", "dnbench-net"
HOST_IP, NET_IP = "10.77.0.1", "10.77.0.2"
TMP = "/tmp/dnbench-fig9"
SINK_PORT, WEB_PORT = 9000, 8080
BIN = 0.5


# ------------------------------------------------ the far end (in dnbench-net)
def remote(args):
    """Receive one checkpoint connection and run the web load from
    load_start to load_end (seconds after t0); print the timeline."""
    t0 = float(args.t0)
    ckpt, web = [], []           # (time, bytes) events
    lock = threading.Lock()
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((NET_IP, SINK_PORT))
    ls.listen(1)
    ls.settimeout(args.duration + 5)
    print("ready", flush=True)

    def sink():
        try:
            c, _ = ls.accept()
        except OSError:
            return
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            with lock:
                ckpt.append((time.monotonic() - t0, len(b)))
        c.close()

    def client():
        while time.monotonic() - t0 < args.load_start:
            time.sleep(0.01)
        conn = None
        while time.monotonic() - t0 < args.load_end:
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(HOST_IP, WEB_PORT, timeout=10)
                conn.request("GET", "/page.bin")
                r = conn.getresponse()
                while True:
                    b = r.read(65536)
                    if not b:
                        break
                    with lock:
                        web.append((time.monotonic() - t0, len(b)))
                    if time.monotonic() - t0 >= args.load_end:
                        break
                if not r.isclosed():
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                conn = None
                time.sleep(0.05)

    threads = [threading.Thread(target=sink, daemon=True)]
    threads += [threading.Thread(target=client, daemon=True) for _ in range(args.conns)]
    for t in threads:
        t.start()
    while time.monotonic() - t0 < args.duration:
        time.sleep(0.1)
    with lock:
        print(json.dumps({"ckpt": ckpt, "web": web}), flush=True)


# ------------------------------------------------------------- the bench side
def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def setup():
    teardown()
    sh("ip", "netns", "add", HOST_NS)
    sh("ip", "netns", "add", NET_NS)
    sh("ip", "link", "add", "dnbench-h0", "netns", HOST_NS, "type", "veth", "peer", "name", "dnbench-n0",
       "netns", NET_NS)
    for ns, dev, ip in ((HOST_NS, "dnbench-h0", HOST_IP), (NET_NS, "dnbench-n0", NET_IP)):
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    # the bottleneck: 100 Mbit/s out of the host, a queue of ~20 ms
    sh("tc", "-n", HOST_NS, "qdisc", "add", "dev", "dnbench-h0", "root", "tbf", "rate", "100mbit",
       "burst", "64kb", "latency", "20ms")


def teardown():
    for ns in (HOST_NS, NET_NS):
        sh("ip", "netns", "del", ns, check=False)


NGINX_CONF = """daemon off;
master_process on;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  server {{ listen {ip}:{port}; root {d}/www; }}
}}
"""


def start_web():
    os.makedirs(f"{TMP}/www", exist_ok=True)
    with open(f"{TMP}/www/page.bin", "wb") as f:
        f.write(os.urandom(1_700_000))
    with open(f"{TMP}/nginx.conf", "w") as f:
        f.write(NGINX_CONF.format(d=TMP, ip=HOST_IP, port=WEB_PORT))
    p = subprocess.Popen(["ip", "netns", "exec", HOST_NS, "nginx", "-c", f"{TMP}/nginx.conf", "-p", TMP],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(0.5)
    return p


def one_mode(mode, cap, ckpt_bytes, load, duration, conns):
    """mode: 'alone' (no checkpoint), 'uncontrolled', 'cap', 'yield'."""
    t0 = time.monotonic() + 1.0
    far = subprocess.Popen(["ip", "netns", "exec", NET_NS, sys.executable, os.path.abspath(__file__),
                            "--remote", "--t0", repr(t0), "--load-start", str(load[0]), "--load-end",
                            str(load[1]), "--duration", str(duration), "--conns", str(conns)],
                           stdout=subprocess.PIPE, text=True)
    assert far.stdout.readline().strip() == "ready"
    guest = None
    while time.monotonic() < t0:
        time.sleep(0.005)
    if mode != "alone":
        import common
        job = [os.path.join(common.BUILD, "bench", "net_bulk"), "send", NET_IP, str(SINK_PORT),
               str(ckpt_bytes), str(64 << 10)]
        if mode == "cap":
            job = [common.DISCNICE, "run", "--quiet", "--send-rate", str(cap), "--"] + job
        elif mode == "yield":
            job = [common.DISCNICE, "run", "--quiet", "--policy", "yield", "--send-rate",
                   str(cap), "--"] + job
        guest = subprocess.Popen(["ip", "netns", "exec", HOST_NS] + job, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
    out, _ = far.communicate(timeout=duration + 30)
    if guest:
        if guest.poll() is None:
            common.stop_group(guest)  # the checkpoint did not finish within the run
        guest.wait()
    return json.loads(out.strip().splitlines()[-1])


def bins(events, duration):
    n = int(duration / BIN)
    out = [0] * n
    for t, b in events:
        k = int(t / BIN)
        if 0 <= k < n:
            out[k] += b
    return [x / BIN for x in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 45 MB checkpoint, 26 s per mode")
    ap.add_argument("--cap", type=float, default=2e6, help="the guest's fixed cap, B/s (default 2 MB/s)")
    ap.add_argument("--remote", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--t0", help=argparse.SUPPRESS)
    ap.add_argument("--load-start", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--load-end", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--duration", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--conns", type=int, default=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.remote:
        return remote(args)
    import common
    if os.geteuid() != 0:
        sys.exit("bench: net_fig9 needs root (network namespaces, tc)")
    # the web load starts while even the uncontrolled checkpoint runs
    ckpt = 45_000_000 if args.quick else 90_000_000
    duration = 26.0 if args.quick else 50.0
    load = (1.5, 13.0) if args.quick else (3.0, 33.0)
    modes = ["alone", "uncontrolled", "cap", "yield"]
    series = {}
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    web = None
    try:
        setup()
        web = start_web()
        for mode in modes:
            series[mode] = one_mode(mode, args.cap, ckpt, load, duration, 2)
            print(f"bench: {mode}: checkpoint {sum(b for _, b in series[mode]['ckpt']):,} B, "
                  f"web {sum(b for _, b in series[mode]['web']):,} B", flush=True)
    finally:
        if web:
            common.stop_group(web)
        teardown()
        shutil.rmtree(TMP, ignore_errors=True)

    binned = {m: (bins(series[m]["ckpt"], duration), bins(series[m]["web"], duration)) for m in modes}
    lines = ["# Rate-windows Fig 9 analogue: a guest's checkpoint upload beside the host's web server "
             "(issue #12)", "", *common.machine_lines(),
             f"Link: veth with tbf 100 Mbit/s (12.5 MB/s) out of the host; checkpoint {ckpt / 1e6:.0f} MB "
             f"from t = 0 (net_bulk send, 64 KiB calls); web load: 2 keep-alive clients fetching a "
             f"1.7 MB page from nginx from t = {load[0]:g} to {load[1]:g} s; fixed cap "
             f"{args.cap / 1e6:g} MB/s (`discnice run --send-rate`), and yield mode with the same cap "
             f"(`--policy yield`, default thresholds 256/64 KiB/s).  Counted at the far end.  "
             f"`make bench-net-fig9{' ARGS=--quick' if args.quick else ''}`", "",
             "Paper (§5.1, Fig 9): unthrottled, the 90 MB checkpoint \"severely reduces available "
             "bandwidth for the host workload\" until it finishes; throttled (yield mode, Fig 9b), the "
             "checkpoint takes most of the link only until the web server starts, then drops to the "
             "guest class's threshold, and resumes the higher rate once the web server is idle.", ""]
    # summary: the web's rate while loaded
    lo, hi = int(load[0] / BIN) + 2, int(load[1] / BIN)
    lines += ["| mode | web MB/s, whole load | web MB/s while the checkpoint runs | web then vs alone | "
              "checkpoint MB/s then | checkpoint done at |", "|---|---|---|---|---|---|"]

    def mean(xs):
        return sum(xs) / len(xs) if xs else 0.0
    alone_w = binned["alone"][1]
    for m in modes:
        if m not in binned:
            lines.append(f"| {m} | - | - | - | - | - |")
            continue
        c, w = binned[m]
        total = sum(b for _, b in series[m]["ckpt"])
        done = max((t for t, _ in series[m]["ckpt"]), default=0.0)
        # bins with the load on and (but for 'alone') the checkpoint still running
        end = hi if m == "alone" else min(hi, int(done / BIN))
        both = range(lo, end)
        w_both = mean([w[k] for k in both])
        a_both = mean([alone_w[k] for k in both])
        done_s = ("-" if m == "alone" else f"{done:.1f} s" if total >= ckpt else
                  f"not done ({total / 1e6:.0f} of {ckpt / 1e6:.0f} MB in {duration:g} s)")
        lines.append(f"| {m} | {mean(w[lo:hi]) / 1e6:.2f} | {w_both / 1e6:.2f} "
                     f"({len(both) * BIN:g} s) | {100 * w_both / a_both if a_both else 0:.0f} % | "
                     f"{mean([c[k] for k in both]) / 1e6:.2f} | {done_s} |")
    lines += ["", f"Host web throughput and checkpoint over time (MB/s, 2 s averages; web load from "
              f"{load[0]:g} to {load[1]:g} s):", "",
              "| t (s) | web alone | web, ckpt uncontrolled | ckpt uncontrolled | web, ckpt capped | "
              "ckpt capped | web, ckpt yield | ckpt yield |", "|---|---|---|---|---|---|---|---|"]
    step = int(2 / BIN)
    for k in range(0, int(duration / BIN), step):
        def avg(xs):
            return sum(xs[k:k + step]) / step / 1e6
        lines.append(f"| {k * BIN:.0f}-{(k + step) * BIN:.0f} | {avg(binned['alone'][1]):.2f} | "
                     f"{avg(binned['uncontrolled'][1]):.2f} | {avg(binned['uncontrolled'][0]):.2f} | "
                     f"{avg(binned['cap'][1]):.2f} | {avg(binned['cap'][0]):.2f} | "
                     f"{avg(binned['yield'][1]):.2f} | {avg(binned['yield'][0]):.2f} |")
    text = "\n".join(lines) + "\n"
    common.write_results(os.path.join(common.RESULTS,
                                      f"2026-11-23-net-fig9{'-quick' if args.quick else ''}.md"), text)


if __name__ == "__main__":
    main()
