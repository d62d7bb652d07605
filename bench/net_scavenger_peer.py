"""Description: the programs of bench/net_scavenger.py and
tests/integration/test_net_scavenger.py, each run inside one network
namespace (`ip netns exec NS python3 net_scavenger_peer.py MODE ...`).

  sink PORT OUT        accept connections; count each one's bytes in 100 ms
                       bins (wall clock, time.time()) and its SHA-256; on
                       SIGTERM/SIGINT write them to OUT as JSON and exit
  echo PORT            TCP echo server (the foreground's far end)
  upload HOST PORT SECONDS [MODE]
                       bulk upload for SECONDS: MODE blocking (default,
                       sendall of 64 KiB) or epoll (non-blocking, EPOLLOUT);
                       prints the bytes sent and their SHA-256
  probe HOST PORT SECONDS INTERVAL OUT
                       the foreground: one 64-byte request, wait for its
                       64-byte answer, every INTERVAL s; writes
                       [[wall_time, rtt_s], ...] to OUT
"""
import hashlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time

BIN = 0.1


def sink(port, out):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # A receive window as large as a WAN server's: with the kernel's
    # autotuning the window follows what arrives per (sub-ms) RTT and the
    # sender could never fill the bottleneck's queue; a real uplink's far
    # end, tens of ms away, offers megabytes.  SO_RCVBUFFORCE needs
    # CAP_NET_ADMIN (the bench and the tests run as root).
    for opt in (getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF):
        try:
            srv.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
            break
        except OSError:
            continue
    srv.bind(("0.0.0.0", port))
    srv.listen(16)
    conns = []
    lock = threading.Lock()

    def drain(c, rec):
        h = hashlib.sha256()
        while True:
            try:
                data = c.recv(1 << 16)
            except OSError:
                break
            if not data:
                break
            h.update(data)
            b = int(time.time() / BIN)
            with lock:
                rec["bins"][b] = rec["bins"].get(b, 0) + len(data)
                rec["bytes"] += len(data)
        with lock:
            rec["sha256"] = h.hexdigest()
            rec["closed"] = True
        c.close()

    def accept():
        while True:
            try:
                c, addr = srv.accept()
            except OSError:
                return
            rec = {"peer": "%s:%d" % addr, "bins": {}, "bytes": 0, "sha256": None, "closed": False}
            with lock:
                conns.append(rec)
            threading.Thread(target=drain, args=(c, rec), daemon=True).start()

    def finish(*_):
        # A sender that closed may still have megabytes in its socket
        # buffer and the bottleneck's queue: wait (up to 20 s) for every
        # connection's EOF before counting.
        deadline = time.time() + 20
        while time.time() < deadline:
            with lock:
                if all(r["closed"] for r in conns):
                    break
            time.sleep(0.1)
        with lock:
            data = [{"peer": r["peer"], "bytes": r["bytes"], "sha256": r["sha256"],
                     "closed": r["closed"],
                     "bins": [[k * BIN, v] for k, v in sorted(r["bins"].items())]} for r in conns]
        with open(out + ".tmp", "w") as f:
            json.dump(data, f)
        os.rename(out + ".tmp", out)
        os._exit(0)

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    threading.Thread(target=accept, daemon=True).start()
    print("ready", flush=True)
    while True:
        signal.pause()


def echo(port):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(4)
    print("ready", flush=True)

    def serve(c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = c.recv(4096)
            if not data:
                return
            c.sendall(data)

    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def chunk(i):
    return hashlib.sha256(b"%d" % i).digest() * 2048  # 64 KiB, deterministic


def connect(host, port):
    """A connection with the congestion control DN_PEER_CC names, if any
    (bench/netns_link.py: cubic, which a namespace cannot make its
    default here; asking per socket needs CAP_NET_ADMIN, else the
    namespace's default stays)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    cc = os.environ.get("DN_PEER_CC")
    if cc:
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        except OSError:
            pass
    s.connect((host, port))
    return s


def upload(host, port, seconds, mode="blocking"):
    s = connect(host, port)
    h = hashlib.sha256()
    sent = 0
    end = time.time() + seconds
    i = 0
    if mode == "blocking":
        while time.time() < end:
            data = chunk(i)
            s.sendall(data)
            h.update(data)
            sent += len(data)
            i += 1
    else:
        s.setblocking(False)
        ep = select.epoll()
        ep.register(s.fileno(), select.EPOLLOUT)
        pending = memoryview(b"")
        while time.time() < end or pending:
            if not pending:
                if time.time() >= end:
                    break
                data = chunk(i)
                h.update(data)
                i += 1
                pending = memoryview(data)
            try:
                n = s.send(pending)
                sent += n
                pending = pending[n:]
            except BlockingIOError:
                ep.poll(1.0)
        ep.close()
        s.setblocking(True)
    s.shutdown(socket.SHUT_WR)
    s.close()
    print(sent, h.hexdigest(), flush=True)


def probe(host, port, seconds, interval, out):
    s = connect(host, port)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = b"x" * 64
    samples = []
    end = time.time() + seconds
    nxt = time.time()
    while time.time() < end:
        t0 = time.time()
        s.sendall(msg)
        got = 0
        while got < len(msg):
            data = s.recv(len(msg) - got)
            if not data:
                raise SystemExit("echo server closed")
            got += len(data)
        samples.append([t0, time.time() - t0])
        nxt += interval
        delay = nxt - time.time()
        if delay > 0:
            time.sleep(delay)
        else:
            nxt = time.time()
    s.close()
    with open(out, "w") as f:
        json.dump(samples, f)


def main():
    mode = sys.argv[1]
    if mode == "sink":
        sink(int(sys.argv[2]), sys.argv[3])
    elif mode == "echo":
        echo(int(sys.argv[2]))
    elif mode == "upload":
        upload(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
               sys.argv[5] if len(sys.argv) > 5 else "blocking")
    elif mode == "probe":
        probe(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
    else:
        raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    main()
