"""What the agent cannot see (issue #12 item 5): the supervisor's network
feedback charges the TCP bytes the kernel counted on the job's sockets
(sock_diag, per socket) beyond the agent's count, and its holds keep a
statically linked sender near the network cap; a job the agent sees is not
charged twice.

The oracle is the other end of the connection, outside discnice: a
receiver that records its byte count over time.  discnice's report is never
the judge.

Why the static sender runs over a 100 Mbit/s link between namespaces (root;
bench/netns_link.py) and not over loopback: the duty cycle lets a job go
for a tick at a time, and a static sender on loopback moves 2-3 GB/s -
several MiB in the millisecond it runs free - so at 1 MiB/s the receiver
sees steps of several MiB seconds apart (the average over the job's life
still comes to the cap: every byte is charged; discnice(1) says so).  Over
a 100 Mbit/s link one release moves about a send buffer's worth, measured
at most 1.5 MiB.
"""
import bisect
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import netns_link  # noqa: E402

MiB = 1 << 20
PY = sys.executable
SINK_PORT = 5391

# Records (seconds since its first byte, total bytes) as it reads, until
# EOF or DURATION seconds; writes them as JSON to OUT.
SINK = r"""
import json, socket, sys, time
port, duration, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port))
srv.listen(1)
print("ready", flush=True)
c, _ = srv.accept()
c.settimeout(0.2)
t0, n, samples = None, 0, []
while t0 is None or time.monotonic() - t0 < duration:
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
json.dump(samples, open(out, "w"))
"""


def _count_at(samples, t):
    i = bisect.bisect_right([s[0] for s in samples], t) - 1
    return samples[i][1] if i >= 0 else 0


def _rate(samples, lo, hi):
    return (_count_at(samples, hi) - _count_at(samples, lo)) / (hi - lo)


@pytest.fixture
def link():
    why = netns_link.why_not()
    if why:
        pytest.skip(why)
    with netns_link.Bottleneck(rate="100mbit", latency_ms=50,
                               tag=f"u{os.getpid() % 100000}") as lk:
        yield lk


def test_static_sender_held_at_the_cap(env, link, tmp_path):
    """A statically linked sender (LD_PRELOAD cannot reach it) under
    --net-rate 1MiB/s over a 100 Mbit/s link: the receiver's count over
    seconds 2-12 is within 15 % of the cap.  Why 15 %: the duty cycle lets
    the job go a tick at a time, and each release moves up to a send
    buffer (measured <= 1.5 MiB here), 15 % of the 10 MiB the window
    spans; the first 2 s hold the burst before the first tick."""
    cap, seconds = 1 * MiB, 13
    out = tmp_path / "sink.json"
    sink = subprocess.Popen(link.prefix(link.rcv) + [PY, "-c", SINK, str(SINK_PORT),
                                                      str(seconds), str(out)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert "ready" in sink.stdout.readline()
        sender = [env.program("static_tcp_peer"), "send", SINK_PORT, 1 << 40,
                  netns_link.RCV_ADDR]
        argv = [str(env.discnice_bin), "run", "--quiet", "--net-rate", "1MiB/s", "--"]
        job = subprocess.Popen(link.prefix(link.snd) + argv + [str(a) for a in sender],
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
        sink.wait(timeout=seconds + 30)
    finally:
        for p in (sink,):
            if p.poll() is None:
                p.kill()
                p.wait()
    job.terminate()
    _, err = job.communicate(timeout=30)
    samples = json.load(open(out))
    assert samples, f"nothing arrived; discnice said: {err}"
    rate = _rate(samples, 2, 12)
    per_s = " ".join(f"{_count_at(samples, k) / MiB:.2f}" for k in range(seconds))
    assert abs(rate / cap - 1) <= 0.15, (
        f"{rate / MiB:.3f} MiB/s over seconds 2-12 against a cap of 1 MiB/s "
        f"(MiB received at each second: {per_s})")


GO = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go")
                            else None)
# Go's net package: a non-blocking socket, write() until EAGAIN, then the
# goroutine parks and the netpoller's thread waits in epoll_pwait - the way
# restic and rclone send.
GO_SEND = r"""package main

import (
	"net"
	"os"
	"strconv"
)

func main() {
	c, err := net.Dial("tcp", os.Args[1])
	if err != nil {
		panic(err)
	}
	left, _ := strconv.Atoi(os.Args[2])
	buf := make([]byte, 1<<16)
	for left > 0 {
		n := len(buf)
		if left < n {
			n = left
		}
		w, err := c.Write(buf[:n])
		if err != nil {
			panic(err)
		}
		left -= w
	}
	c.(*net.TCPConn).CloseWrite()
	c.Read(buf)
}
"""


@pytest.fixture
def go_send(tmp_path):
    if not GO:
        pytest.skip("needs Go to build a static program")
    d = tmp_path / "gosend"
    d.mkdir()
    (d / "main.go").write_text(GO_SEND)
    (d / "go.mod").write_text("module gosend\n\ngo 1.20\n")
    genv = dict(os.environ, CGO_ENABLED="0", GOCACHE=str(tmp_path / "gocache"),
                GOFLAGS="-mod=mod")
    cp = subprocess.run([GO, "build", "-o", str(d / "gosend"), "."], cwd=d, env=genv,
                        capture_output=True, timeout=300)
    if cp.returncode != 0:
        pytest.skip(f"go build failed: {cp.stderr.decode(errors='replace')[-300:]}")
    return d / "gosend"


def test_static_go_sender_held_at_the_cap(env, link, go_send, tmp_path):
    """A static Go sender (non-blocking socket, netpoller in epoll_pwait)
    of 14 MiB under --net-rate 1MiB/s over a 100 Mbit/s link: every byte
    arrives (holds interrupt its writes and waits; none may be lost or
    doubled), it exits 0, and the receiver's count over seconds 2-12 is
    within 15 % of the cap (why 15 %: test_static_sender_held_at_the_cap)."""
    total, cap = 14 * MiB, 1 * MiB
    out = tmp_path / "sink.json"
    sink = subprocess.Popen(link.prefix(link.rcv) + [PY, "-c", SINK, str(SINK_PORT), "60",
                                                      str(out)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert "ready" in sink.stdout.readline()
        argv = [str(env.discnice_bin), "run", "--quiet", "--net-rate", "1MiB/s", "--"]
        job = subprocess.run(link.prefix(link.snd) + argv +
                             [str(go_send), f"{netns_link.RCV_ADDR}:{SINK_PORT}", str(total)],
                             capture_output=True, text=True, timeout=120)
        sink.wait(timeout=30)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    assert job.returncode == 0, job.stderr
    samples = json.load(open(out))
    assert samples and samples[-1][1] == total, (
        f"the receiver got {samples[-1][1] if samples else 0} of {total} bytes")
    rate = _rate(samples, 2, 12)
    per_s = " ".join(f"{_count_at(samples, k) / MiB:.2f}" for k in range(15))
    assert abs(rate / cap - 1) <= 0.15, (
        f"{rate / MiB:.3f} MiB/s over seconds 2-12 against a cap of 1 MiB/s "
        f"(MiB received at each second: {per_s})")


# The far end of a receive: sends BYTES on the first connection to PORT,
# then closes.
SOURCE = r"""
import socket, sys
port, left = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port))
srv.listen(1)
print("ready", flush=True)
c, _ = srv.accept()
block = b"y" * 65536
while left:
    left -= c.send(block[:min(left, len(block))])
c.close()
"""


def test_static_receiver_held_on_average(env, link, tmp_path):
    """A statically linked receiver of 16 MiB over a 100 Mbit/s link under
    --net-rate 1MiB/s: by its own clock (it logs CLOCK_MONOTONIC and its
    count every 64 KiB; no discnice count is read), the transfer takes at
    least 16 / 1.15 s.  Only the average is judged: the kernel admits a
    receive buffer's worth (megabytes, autotuned) between holds, and the
    receiver reads it the moment it is let go - the supervisor charges
    those bytes as they arrive (bytes_received), so none goes unpaid.
    The receiver is at the far end, so that the data crosses the 100
    Mbit/s queue (the way back is an unshaped veth): over a path faster
    than a tick, what the peer still buffers arrives within a tick of the
    last release, and a receiver that reads it and exits before the next
    tick leaves it unpaid (discnice(1) LIMITS; with the receiver on the
    near side a CI run averaged 1.87 MiB/s)."""
    total, cap = 16 * MiB, 1 * MiB
    log = tmp_path / "recv.log"
    source = subprocess.Popen(link.prefix(link.snd) + [PY, "-c", SOURCE, str(SINK_PORT),
                                                        str(total)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert "ready" in source.stdout.readline()
        receiver = [env.program("static_tcp_peer"), "recv", SINK_PORT, 0, netns_link.SND_ADDR,
                    log]
        report = tmp_path / "report.json"
        argv = [str(env.discnice_bin), "run", "--quiet", "--net-rate", "1MiB/s", "--report",
                str(report), "--"]
        job = subprocess.run(link.prefix(link.rcv) + argv + [str(a) for a in receiver],
                             capture_output=True, text=True, timeout=120)
        source.wait(timeout=30)
    finally:
        if source.poll() is None:
            source.kill()
            source.wait()
    assert job.returncode == 0, job.stderr
    assert int(job.stdout) == total, f"received {job.stdout.strip()} of {total} bytes"
    points = [tuple(map(float, line.split())) for line in open(log)]
    seconds = points[-1][0] - points[0][0]
    got = points[-1][1] - points[0][1]
    # What discnice says it charged, and the receiver's own timeline, only
    # to explain a failure.
    fed = json.loads(report.read_text()).get("feedback_net_received_bytes")
    timeline = " ".join(f"{t - points[0][0]:.2f}:{c / MiB:.1f}" for t, c in points[::16])
    assert got / seconds <= 1.15 * cap, (
        f"{got / MiB:.2f} MiB in {seconds:.2f} s = {got / seconds / MiB:.3f} MiB/s "
        f"against a cap of 1 MiB/s (discnice charged {fed} received bytes; "
        f"s:MiB {timeline})")
    assert got / seconds >= 0.5 * cap, f"stuck: {got / seconds / MiB:.3f} MiB/s"


class Receiver:
    """Loopback: accept one connection and record (time, count)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.samples = []
        self.t0 = None  # the test's clock at the first byte
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        c, _ = self.sock.accept()
        n = 0
        while True:
            b = c.recv(1 << 16)
            if not b:
                break
            now = time.monotonic()
            if self.t0 is None:
                self.t0 = now
            n += len(b)
            self.samples.append((now - self.t0, n))
        c.close()

    def wait(self):
        self.thread.join(60)
        assert not self.thread.is_alive(), "the receiver never saw the end"
        return self.samples


SENDER = r"""
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
left, block = int(sys.argv[2]), b"x" * 65536
while left:
    left -= s.send(block[:min(left, len(block))])
s.close()
"""


@pytest.mark.parametrize("how", ["send", "write"])
def test_visible_sender_not_charged_twice(env, how):
    """A dynamically linked sender (the agent counts its sends) under
    --net-rate 1MiB/s on loopback: with the feedback reading the same
    bytes from the kernel, the receiver's rate over seconds 1-9 stays
    within 3 % of the cap (a double charge would halve it)."""
    cap = 1 * MiB
    rx = Receiver()
    script = SENDER if how == "send" else SENDER.replace(
        "s.send(block[:min(left, len(block))])",
        "__import__('os').write(s.fileno(), block[:min(left, len(block))])")
    r = env.run([PY, "-c", script, rx.port, 10 * MiB], extra_args=["--net-rate", "1MiB/s"],
                timeout=60)
    r.check_exit(0)
    samples = rx.wait()
    assert samples[-1][1] == 10 * MiB
    rate = _rate(samples, 1, 9)
    if abs(rate / cap - 1) > 0.03:
        r.fail(f"{rate / MiB:.3f} MiB/s over seconds 1-9 against a cap of 1 MiB/s")


def test_io_uring_sender_held_on_average(env):
    """A dynamically linked sender whose sends go through io_uring
    (IORING_OP_SEND; the agent is loaded but never sees them) of 160 MiB
    under --net-rate 16MiB/s on loopback: every byte arrives, it exits 0,
    and from its first byte at the receiver to its exit it averages at
    most 1.15 x 16 MiB/s (the window lets one budget go at the start:
    1.11 x).  The average only, over the job's life: loopback moves a
    megabyte a millisecond, so a release that waits for the supervisor's
    next tick - on 2 CPUs shared with the receiver, up to ~15 ms - sends
    tens of MiB before the hold, which the job pays for later, held while
    nothing is left to send.  By the receiver's clock alone, first to last
    byte, this machine measured 16.0-21.2 MiB/s (1.00-1.33 x; all of it
    charged, the holds summing to the 10 s the cap asks), and over the
    job's life 15.96-16.16 MiB/s: the receiver's bound is checked at 1.5 x
    only, against bytes that are never charged."""
    total, cap = 160 * MiB, 16 * MiB
    rx = Receiver()
    r = env.run([env.program("uring_tcp_send"), rx.port, total],
                extra_args=["--net-rate", "16MiB/s"], timeout=120)
    _uring_sender_held(r, rx, total, cap, "")


def _uring_sender_held(r, rx, total, cap, when):
    """uring_tcp_send's run r: every byte arrived at rx; no faster than
    1.15 x cap from the first byte to the job's exit (r.end, the test's
    clock), and than 1.5 x cap from first to last byte."""
    if r.rc == 77:
        pytest.skip("io_uring is unavailable here (ENOSYS or kernel.io_uring_disabled)")
    r.check_exit(0)
    samples = rx.wait()
    assert samples[-1][1] == total, f"the receiver got {samples[-1][1]} of {total} bytes"
    life, seconds = r.end - rx.t0, samples[-1][0]
    if total / life > 1.15 * cap or total / seconds > 1.5 * cap:
        r.fail(f"{total / MiB:.0f} MiB: {total / life / MiB:.2f} MiB/s from the first byte to "
               f"the job's exit ({life:.2f} s), {total / seconds / MiB:.2f} MiB/s to the last "
               f"byte ({seconds:.2f} s), against a cap of {cap / MiB:.0f} MiB/s{when}")


def test_io_uring_sender_held_by_a_cap_set_later(env):
    """The network's feedback is made when a network cap first comes
    (tool_regulate.c start_network()), here by `discnice set` on a run
    started with none: the io_uring sender above, started a second after
    the set, sends 160 MiB no faster on average than 1.15 x 16 MiB/s by the
    receiver's clock, and every byte arrives."""
    total, cap = 160 * MiB, 16 * MiB
    cls = env.class_name("net-later")
    rx = Receiver()
    job = env.start(["sh", "-c", f'sleep 1.5; exec "$0" "$@"', env.program("uring_tcp_send"),
                     rx.port, total], extra_args=["--class", cls, "--rate", "inf"])
    time.sleep(0.5)
    env.discnice(["set", cls, "--net-rate", "16MiB/s"]).check_exit(0)
    _uring_sender_held(job.finish(timeout=120), rx, total, cap, " set while the job ran")

