#!/usr/bin/env python3
"""Description: what the agent cannot see (issue #12 item 5) - programs the
agent never enters, held at a network cap by the supervisor's feedback
(sock_diag per TCP socket) and duty cycle, judged by the other end's count.

    make bench-net-unseen              # root for the link rows; ~3 min
    python3 bench/net_unseen.py [--runs N] [--cap MiB/s] [--out FILE]

Rows (each run N times, alternating; the median and the range printed):
  static C sender, 100 Mbit/s link   tests/programs/static_tcp_peer send, endless;
                                     the receiver's rate over seconds 2-12
  static Go sender, 100 Mbit/s link  net.Conn.Write (netpoller), endless; the same
  static C receiver, 100 Mbit/s link 16 MiB; the job's own average (it logs its
                                     count by CLOCK_MONOTONIC)
  static C sender, loopback          endless; seconds 2-12, and the largest
                                     one-second step the receiver saw
  dynamic Python sender, loopback    (the agent sees it) 10 MiB; seconds 1-9
  static C sender, link, feedback off  the reference: what escapes without
The link is bench/netns_link.py's (two namespaces and a router, tbf 100mbit,
50 ms queue).  No discnice count is read.
"""
import argparse
import bisect
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import netns_link  # noqa: E402

BUILD = os.path.join(ROOT, "build")
DISCNICE = os.path.join(BUILD, "discnice")
STATIC = os.path.join(BUILD, "tests", "programs", "static_tcp_peer")
MiB = 1 << 20
PORT = 5397
GO = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go")
                            else None)

SINK = r"""
import json, socket, sys, time
port, duration, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port)); srv.listen(1)
print("ready", flush=True)
c, _ = srv.accept(); c.settimeout(0.2)
t0, n, samples = None, 0, []
while t0 is None or time.monotonic() - t0 < duration:
    try:
        b = c.recv(1 << 16)
    except socket.timeout:
        continue
    if not b:
        break
    now = time.monotonic(); t0 = t0 or now; n += len(b); samples.append((now - t0, n))
json.dump(samples, open(out, "w"))
"""

SOURCE = r"""
import socket, sys
port, left = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port)); srv.listen(1)
print("ready", flush=True)
c, _ = srv.accept(); block = b"y" * 65536
while left:
    left -= c.send(block[:min(left, len(block))])
c.close()
"""

GO_SEND = """package main

import (
	"net"
	"os"
)

func main() {
	c, err := net.Dial("tcp", os.Args[1])
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 1<<16)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}
"""

PY_SEND = r"""
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
left, block = int(sys.argv[2]), b"x" * 65536
while left:
    left -= s.send(block[:min(left, len(block))])
s.close()
"""


def count_at(samples, t):
    i = bisect.bisect_right([s[0] for s in samples], t) - 1
    return samples[i][1] if i >= 0 else 0


def rate(samples, lo, hi):
    return (count_at(samples, hi) - count_at(samples, lo)) / (hi - lo)


def biggest_step(samples, seconds):
    return max(count_at(samples, k + 1) - count_at(samples, k) for k in range(int(seconds)))


def discnice(cap, feedback=True):
    argv = [DISCNICE, "run", "--quiet", "--net-rate", f"{cap}MiB/s"]
    return argv + ([] if feedback else ["--feedback", "off"]) + ["--"]


def link_send(cap, program, seconds, tmp, feedback=True):
    """An endless sender in the near namespace, the sink in the far one."""
    out = os.path.join(tmp, "sink.json")
    with netns_link.Bottleneck(rate="100mbit", latency_ms=50, tag=f"b{os.getpid() % 100000}") as lk:
        sink = subprocess.Popen(lk.prefix(lk.rcv) + [sys.executable, "-c", SINK, str(PORT),
                                                      str(seconds), out],
                                stdout=subprocess.PIPE, text=True)
        sink.stdout.readline()
        job = subprocess.Popen(lk.prefix(lk.snd) + discnice(cap, feedback) + program,
                               stderr=subprocess.DEVNULL)
        sink.wait(timeout=seconds + 30)
        job.terminate()
        job.wait(timeout=30)
    return json.load(open(out))


def link_receive(cap, total, tmp, shaped=True):
    """shaped: the source at the near end, the receiver at the far one, so
    the data crosses the 100 Mbit/s queue; else the other way round, over
    the unshaped veth way back (gigabytes per second)."""
    log = os.path.join(tmp, "recv.log")
    with netns_link.Bottleneck(rate="100mbit", latency_ms=50, tag=f"r{os.getpid() % 100000}") as lk:
        src_ns, rcv_ns, addr = ((lk.snd, lk.rcv, netns_link.SND_ADDR) if shaped
                                else (lk.rcv, lk.snd, netns_link.RCV_ADDR))
        source = subprocess.Popen(lk.prefix(src_ns) + [sys.executable, "-c", SOURCE, str(PORT),
                                                        str(total)],
                                  stdout=subprocess.PIPE, text=True)
        source.stdout.readline()
        subprocess.run(lk.prefix(rcv_ns) + discnice(cap) +
                       [STATIC, "recv", str(PORT), "0", addr, log],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180)
        source.wait(timeout=30)
    points = [tuple(map(float, line.split())) for line in open(log)]
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def loopback_receive_samples(program_for_port, cap, seconds, endless):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    samples, stop = [], [False]

    def drain():
        c, _ = srv.accept()
        c.settimeout(0.2)
        n, t0 = 0, None
        while not stop[0]:
            try:
                b = c.recv(1 << 16)
            except socket.timeout:
                continue
            if not b:
                break
            now = time.monotonic()
            t0 = t0 or now
            n += len(b)
            samples.append((now - t0, n))
        c.close()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    job = subprocess.Popen(discnice(cap) + program_for_port(port), stderr=subprocess.DEVNULL)
    if endless:
        time.sleep(seconds)
        job.terminate()
    job.wait(timeout=seconds + 60)
    stop[0] = True
    t.join(10)
    return samples


def build_go(tmp):
    if not GO:
        return None
    d = os.path.join(tmp, "gosend")
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "main.go"), "w").write(GO_SEND)
    open(os.path.join(d, "go.mod"), "w").write("module gosend\n\ngo 1.20\n")
    env = dict(os.environ, CGO_ENABLED="0", GOCACHE=os.path.join(tmp, "gocache"),
               GOFLAGS="-mod=mod")
    r = subprocess.run([GO, "build", "-o", "gosend", "."], cwd=d, env=env, capture_output=True)
    return os.path.join(d, "gosend") if r.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--cap", type=float, default=1.0, help="MiB/s (default 1)")
    ap.add_argument("--out", help="also write the table to this file")
    a = ap.parse_args()
    if not os.path.exists(STATIC):
        raise SystemExit("net_unseen: build/tests/programs/static_tcp_peer missing (make programs)")
    cap = a.cap * MiB
    why = netns_link.why_not()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        gosend = build_go(tmp) if not why else None
        cases = []
        if not why:
            cases += [
                ("static C sender, 100 Mbit/s link, s 2-12",
                 lambda: rate(link_send(a.cap, [STATIC, "send", str(PORT), str(1 << 40),
                                                netns_link.RCV_ADDR], 13, tmp), 2, 12)),
                ("static C receiver 16 MiB, 100 Mbit/s link, its own average",
                 lambda: link_receive(a.cap, 16 * MiB, tmp)),
                ("static C receiver 16 MiB, unshaped veth, its own average",
                 lambda: link_receive(a.cap, 16 * MiB, tmp, shaped=False)),
            ]
            if gosend:
                cases.append(("static Go sender, 100 Mbit/s link, s 2-12",
                              lambda: rate(link_send(a.cap, [gosend, f"{netns_link.RCV_ADDR}:{PORT}"],
                                                     13, tmp), 2, 12)))
        loop_static = lambda port: [STATIC, "send", str(port), str(1 << 40)]  # noqa: E731
        cases += [
            ("static C sender, loopback, s 2-12",
             lambda: rate(loopback_receive_samples(loop_static, a.cap, 13, True), 2, 12)),
            ("dynamic Python sender (agent), loopback, s 1-9",
             lambda: rate(loopback_receive_samples(
                 lambda port: [sys.executable, "-c", PY_SEND, str(port), str(int(10 * cap))],
                 a.cap, 10, False), 1, 9)),
        ]
        steps = []
        for r in range(a.runs):
            for name, fn in cases:
                rows.setdefault(name, []).append(fn())
            s = loopback_receive_samples(loop_static, a.cap, 13, True)
            steps.append(biggest_step(s, 12))
        if not why:
            off = link_send(a.cap, [STATIC, "send", str(PORT), str(1 << 40),
                                    netns_link.RCV_ADDR], 5, tmp, feedback=False)
            rows["static C sender, link, --feedback off (reference), s 1-4"] = [rate(off, 1, 4)]
    lines = [f"# discnice: programs the agent cannot see, held at --net-rate {a.cap:g}MiB/s",
             "", f"{a.runs} alternating runs per row; rate = the other end's count "
             "(or the job's own clock), median [min-max]", "",
             "| case | MiB/s | / cap |", "| --- | --- | --- |"]
    for name, vals in rows.items():
        med = statistics.median(vals)
        lines.append(f"| {name} | {med / MiB:.3f} [{min(vals) / MiB:.3f}-{max(vals) / MiB:.3f}]"
                     f" | {med / cap:.3f} |")
    lines += ["", f"loopback static sender: largest one-second step the receiver saw, "
              f"median {statistics.median(steps) / MiB:.2f} MiB (cap {a.cap:g} MiB/s)"]
    if why:
        lines += ["", f"link rows skipped: {why}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
