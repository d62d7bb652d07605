#!/usr/bin/env python3
"""Network cap accuracy (issue #12 Targets: streams within +-3 % over 10 s,
UDP within +-5 %), judged by the receiver's own count on loopback.

    make bench-net-accuracy            # the 13 caps of the README table
    python3 bench/net_accuracy.py [--seconds S] [KIND:CAP ...]   KIND: tcp, tcp6, udp

For each cap, `discnice run --send-rate CAP` runs tests/integration/net_peer.py
(a blocking sendall, or datagrams of 1200 bytes) for S seconds' worth of
bytes at the cap; an unregulated receiver in this script times the bytes
after its first arrival (the first piece may go at once: it is not part of
the rate) and prints the achieved rate against the cap.
"""
import argparse
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISCNICE = os.path.join(ROOT, "build", "discnice")
PEER = os.path.join(ROOT, "tests", "integration", "net_peer.py")
DEFAULT = ["tcp:200KB/s", "tcp:1MB/s", "tcp:1MiB/s", "tcp6:4MiB/s", "tcp:20MB/s", "tcp:20MiB/s",
           "tcp:50MB/s", "tcp:64MB/s", "tcp:64MiB/s", "tcp:100MiB/s",
           "udp:1MB/s", "udp:2MiB/s", "udp:8MiB/s"]
UNITS = {"KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}


def parse(cap):
    for unit, scale in sorted(UNITS.items(), key=lambda kv: -len(kv[0])):
        if cap.endswith(unit + "/s"):
            return float(cap[: -len(unit) - 2]) * scale
    raise SystemExit(f"net_accuracy: cannot read the cap {cap!r} (use e.g. 20MiB/s)")


def job(kind, cap, port, nbytes):
    mode = ["udp-send", "4", str(port), str(nbytes), "1200"] if kind == "udp" else \
           ["tcp-send", "6" if kind == "tcp6" else "4", str(port), str(nbytes)]
    return subprocess.Popen([DISCNICE, "run", "-q", "--send-rate", cap, "--",
                             sys.executable, PEER] + mode)


def measure(kind, cap, seconds):
    rate = parse(cap)
    nbytes = int(rate * seconds)
    if kind == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind(("127.0.0.1", 0))
        s.settimeout(2)
        p = job(kind, cap, s.getsockname()[1], nbytes)
        conn = s
    else:
        fam = socket.AF_INET6 if kind == "tcp6" else socket.AF_INET
        ls = socket.socket(fam, socket.SOCK_STREAM)
        ls.bind(("::1" if kind == "tcp6" else "127.0.0.1", 0))
        ls.listen(1)
        p = job(kind, cap, ls.getsockname()[1], nbytes)
        conn, _ = ls.accept()
        ls.close()
    got = after_first = 0
    t0 = t1 = None
    try:
        while True:
            b = conn.recv(1 << 20)
            if not b:
                break
            now = time.monotonic()
            got += len(b)
            if t0 is None:
                t0 = now
            else:
                after_first += len(b)
                t1 = now
    except socket.timeout:
        pass  # UDP: the sender is done
    conn.close()
    if p.wait() != 0:
        raise SystemExit(f"net_accuracy: the job failed at {cap}")
    return got, nbytes, after_first / (t1 - t0) / rate - 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("caps", nargs="*", default=DEFAULT)
    args = ap.parse_args()
    print(f"| socket | cap | bytes received / sent | rate vs cap | target | met |")
    print(f"|---|---:|---:|---:|---:|:---:|")
    worst = {}
    for item in args.caps:
        kind, cap = item.split(":")
        got, sent, err = measure(kind, cap, args.seconds)
        limit = 0.05 if kind == "udp" else 0.03
        met = abs(err) <= limit
        print(f"| {kind} | {cap} | {got:,} / {sent:,} | {err * 100:+.2f} % | "
              f"±{limit * 100:.0f} % | {'yes' if met else 'NO'} |", flush=True)
        worst[kind] = max(worst.get(kind, 0), abs(err))
    print("\nworst: " + ", ".join(f"{k} {v * 100:.2f} %" for k, v in worst.items()))


if __name__ == "__main__":
    main()
