"""Socket calls the agent delays, and the program's own time limits (issue
#12 item 4): an event loop waiting in epoll_pwait2, and blocking sends and
receives on sockets with SO_SNDTIMEO / SO_RCVTIMEO.

The program is tests/programs/net_timeo.c, on loopback.  The oracles: the
other end of the socket, in this test process and never regulated (its byte
count and the bytes themselves), and what each call returned to the program
and how long it took by the program's clock.  Without the agent's care the
epoll_pwait2 loop spun on the agent's EAGAINs (1.8 million for 24 sends,
measured on the build before this change), and a 16 KiB send with a 200 ms
SO_SNDTIMEO under an 8 kB/s cap took 2 s.
"""
import socket
import threading
import time

import pytest

# A call with a 200 ms socket timeout returns within it and this margin:
# the agent's sleep is cut at the deadline, then the kernel's call and a
# noisy shared machine.
MARGIN_MS = 300


def pattern(n):
    """net_timeo.c's bytes: byte i is (i * 7 + i // 251) mod 256."""
    return bytes((i * 7 + i // 251) & 0xFF for i in range(n))


class Sink:
    """Accept one TCP connection on loopback and count what arrives."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.data = bytearray()
        self.last = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        c, _ = self.sock.accept()
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            self.data += b
            self.last = time.monotonic()
        c.close()

    def wait(self):
        self.thread.join(60)
        assert not self.thread.is_alive(), "the sink never saw the end"
        self.sock.close()
        return bytes(self.data)


def _check_cap(r, nbytes, cap, elapsed, what):
    """No faster than the cap allows: one piece (4 KiB at these caps, or an
    eighth of the budget) may go at once."""
    least = 0.9 * (nbytes - max(4096, cap / 8)) / cap
    if elapsed < least:
        r.fail(f"{what}: {nbytes} B in {elapsed:.2f} s = {nbytes / elapsed:,.0f} B/s, "
               f"over the cap {cap:,} B/s")


@pytest.mark.parametrize("mode", ["epoll2", "epoll2-inf", "epoll2-mask"])
def test_epoll_pwait2_sender_neither_blocks_nor_spins(env, mode):
    """A non-blocking sender waiting in epoll_pwait2 (5 s, or no limit):
    held to the cap, and its EAGAINs are as many as its sends - the wait
    sleeps until the window has room, as epoll_wait's does
    (test_net.py test_nonblocking_epoll_sender_neither_blocks_nor_spins).
    epoll2-mask: a SIGALRM every 30 ms that the wait's sigmask blocks never
    ends the wait with EINTR (the agent's sleep, part of the wait, is under
    that mask too; under the thread's own it saw ~100 EINTRs in 3 s)."""
    nbytes, cap = 3_000_000, 1_000_000
    sink = Sink()
    t0 = time.monotonic()
    r = env.run([str(env.program("net_timeo")), mode, str(sink.port), str(nbytes)],
                extra_args=["--send-rate", "1M"])
    r.check_exit(0)
    got = sink.wait()
    if got != pattern(nbytes):
        r.fail(f"the sink got {len(got)} bytes, not the {nbytes} sent")
    _check_cap(r, nbytes, cap, sink.last - t0, mode)
    calls, waits, *interrupted = map(int, r.stdout.split())
    if waits > calls + 50:
        r.fail(f"{waits} EAGAIN for {calls} sends: the loop spun")
    if interrupted and interrupted[0]:
        r.fail(f"epoll_pwait2 returned EINTR {interrupted[0]} times for a signal its "
               "sigmask blocks")


@pytest.mark.parametrize("mode", ["sndtimeo", "sndtimeo-sig"])
def test_send_with_sndtimeo_returns_within_it(env, mode):
    """Blocking 16 KiB sends with SO_SNDTIMEO = 200 ms under an 8 kB/s cap
    (a 4 KiB piece every 0.5 s: the window is full at every call).  Each
    call returns within the timeout, with a short count or -1/EAGAIN as the
    kernel's own send at its timeout (tcp_sendmsg), never after seconds;
    the counts are true (the sink got exactly what the program counted)
    and the cap still holds.  Under a SIGALRM every 30 ms (sndtimeo-sig),
    a handler that ends the agent's sleep gives EINTR or the count so far,
    as the kernel does for a socket call with a timeout - never a lost or
    doubled byte."""
    cap, timeout_ms = 8000, 200
    sink = Sink()
    t0 = time.monotonic()
    r = env.run([str(env.program("net_timeo")), mode, str(sink.port), str(timeout_ms)],
                extra_args=["--send-rate", "8k"])
    r.check_exit(0)
    got = sink.wait()
    sent, full, short, eagain, longest_ms = map(int, r.stdout.split())
    if got != pattern(sent):
        r.fail(f"the program counted {sent} bytes sent; the sink got {len(got)} "
               "(or other bytes)")
    if longest_ms > timeout_ms + MARGIN_MS:
        r.fail(f"a send took {longest_ms} ms with SO_SNDTIMEO = {timeout_ms} ms")
    if short + eagain == 0:
        r.fail("no send came back short or with EAGAIN/EINTR: the timeout was never reached")
    _check_cap(r, sent, cap, sink.last - t0, "sends with SO_SNDTIMEO")


@pytest.mark.parametrize("mode", ["rcvtimeo", "rcvtimeo-waitall"])
def test_receive_with_rcvtimeo_returns_within_it(env, mode):
    """Blocking 16 KiB receives with SO_RCVTIMEO = 100 ms under an 8 kB/s
    cap, from an unregulated sender that has everything queued at once.
    Each call returns within the timeout (a receive the window has no room
    for returns -1/EAGAIN, as the kernel's at its timeout with nothing
    received), no byte is lost or reordered (the program checks each), and
    the cap holds (the time to take it all).  With MSG_WAITALL the call
    returns what it has at the timeout, as tcp_recvmsg does."""
    nbytes, cap, timeout_ms = 24_000, 8000, 100
    ls = socket.create_server(("127.0.0.1", 0))

    def serve():
        c, _ = ls.accept()
        c.sendall(pattern(nbytes))
        c.close()
    threading.Thread(target=serve, daemon=True).start()
    t0 = time.monotonic()
    r = env.run([str(env.program("net_timeo")), mode, str(ls.getsockname()[1]),
                 str(timeout_ms)], extra_args=["--recv-rate", "8k"])
    elapsed = time.monotonic() - t0
    ls.close()
    r.check_exit(0)
    received, eagain, longest_ms = map(int, r.stdout.split())
    if received != nbytes:
        r.fail(f"the program received {received} of {nbytes} bytes")
    if longest_ms > timeout_ms + MARGIN_MS:
        r.fail(f"a receive took {longest_ms} ms with SO_RCVTIMEO = {timeout_ms} ms")
    if eagain == 0:
        r.fail("no receive timed out: the window never held one back")
    _check_cap(r, nbytes, cap, elapsed, "receives with SO_RCVTIMEO")


RESET_EXPECTED = {"write": b"first: partial yes\nsecond: ECONNRESET\n",
                  "recv": b"first: partial yes\nrecv: BYE\nrecv: ECONNRESET\n",
                  "timestamps": b"write: all\n"}


@pytest.mark.parametrize("mode,cap", [("write", "2MiB/s"), ("write", "300KB/s"),
                                      ("recv", "2MiB/s"), ("recv", "300KB/s"),
                                      ("timestamps", "2MiB/s")])
def test_a_reset_mid_send_is_left_for_the_next_call(env, mode, cap):
    """A 10 MB blocking write cut into pieces (tests/programs/net_reset.c,
    SIGPIPE at its default), as without discnice: the peer resetting after
    1 MB - a partial count, then ECONNRESET for the next write, exit 0
    (before, a new-user pass: the piece that met the reset took the
    socket's error, and the next write got EPIPE and SIGPIPE, exit 141);
    the peer writing "BYE" before its reset - the reads get it, then
    ECONNRESET (the error a piece took waits for the queued data); and a
    socket with SO_TIMESTAMPING, whose error queue shows as EPOLLERR and is
    no failure - the write returns all of it (a review: it stopped after
    the first piece)."""
    prog = str(env.program("net_reset"))
    plain = env.run_plain([prog, mode])
    assert plain.rc == 0 and plain.stdout == RESET_EXPECTED[mode], plain.dump()
    r = env.run([prog, mode], extra_args=["--send-rate", cap])
    r.check_exit(0)
    r.check_output_equals(plain.stdout)


VECTORED_SENDER = r"""
import os, selectors, socket, sys
port, total, chunk, call = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s = socket.create_connection(("127.0.0.1", port))
s.setblocking(False)
sel = selectors.DefaultSelector()
sel.register(s, selectors.EVENT_WRITE)
data = bytes(i % 251 for i in range(total))
sent = waits = 0
while sent < total:
    end = min(total, sent + chunk)
    half = (sent + end) // 2
    parts = [data[sent:half], data[half:end]]
    try:
        sent += os.writev(s.fileno(), parts) if call == "writev" else s.sendmsg(parts)
    except BlockingIOError:
        sel.select(5)
        waits += 1
s.close()
print(waits)
"""


@pytest.mark.parametrize("call", ["writev", "sendmsg"])
def test_nonblocking_vectored_sends_hold_the_cap_without_spinning(env, call):
    """A non-blocking writev or sendmsg of 2 MB (two iovecs) waiting in
    select between calls, at 1 MiB/s: the receiver's bytes are the job's,
    they take the time the cap says, and the loop waits about once per
    call.  Before (a new-user pass): such calls went whole, more than the
    window remembers - 4 MB writevs at 1 MiB/s ran at 4 MiB/s - and smaller
    ones were refused again right after each wait: 1.2 million waits,
    3.8 s of CPU in 7.6 s."""
    total, chunk, cap = 6_000_000, 2_000_000, 1 << 20
    script = env.path(f"vectored-{call}.py")
    script.write_text(VECTORED_SENDER)
    sink = Sink()
    t0 = time.monotonic()
    r = env.run(["python3", str(script), str(sink.port), str(total), str(chunk), call],
                extra_args=["--send-rate", "1MiB/s"])
    data = sink.wait()
    elapsed = (sink.last or time.monotonic()) - t0
    r.check_exit(0)
    if data != bytes(i % 251 for i in range(total)):
        r.fail(f"the receiver got {len(data)} bytes, not the job's {total}")
    _check_cap(r, total, cap, elapsed, f"non-blocking {call}")
    waits = int(r.stdout)
    if waits > 1000:
        r.fail(f"{waits} waits for {total} bytes: the event loop spun")
