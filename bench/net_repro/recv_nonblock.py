"""Reproducer (discnice bug, issue #12): a NON-BLOCKING stream receiver runs
about +10 % over --recv-rate (curl +9 %, an edge-triggered epoll server
+12 % in bench/net_trickle.py part C); a blocking one holds the cap.

    python3 bench/net_repro/recv_nonblock.py [build/discnice]

The job (under discnice run --recv-rate 2MiB/s) connects to an unregulated
sender in this script and reads 16 MiB with recv(1 MiB), blocking or
non-blocking under select(); the sender times the transfer up to the job's
close (after it read everything).  Expected: both about 2.00 MiB/s.  Seen:
blocking 2.00, non-blocking about 2.2 MiB/s.

Cause (as read, src/agent/io_net.c receive_may_go and charge_recv): a
non-blocking receive is let through when the window has room for ONE byte
(throttle_net_delay(1, 0) == 0), then reads up to a whole piece (an eighth
of the window's budget) and charges it at once without waiting.  The window
thus ends up over-full by up to one piece each time, and the excess is
never slept off: it just ages out of the window (which forgets what is
older than its span).  A sender's refusal asks for room for its whole
piece; the receive could ask the same, or cut its length to the window's
room.
"""
import select
import socket
import subprocess
import sys
import threading
import time

N = 16 << 20
CAP = 2 << 20


def job(mode, port):
    s = socket.create_connection(("127.0.0.1", port))
    if mode == "nonblock":
        s.setblocking(False)
    n = 0
    while True:
        try:
            b = s.recv(1 << 20)
        except BlockingIOError:
            select.select([s], [], [], 5)
            continue
        if not b:
            break
        n += len(b)
    s.close()
    assert n == N, n


def main():
    discnice = sys.argv[1] if len(sys.argv) > 1 else "build/discnice"
    for mode in ("block", "nonblock"):
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        got = {}

        def tx():
            c, _ = ls.accept()
            t0 = time.monotonic()
            c.sendall(b"x" * N)
            c.shutdown(socket.SHUT_WR)
            while c.recv(65536):  # the job's close: it has read everything
                pass
            got["secs"] = time.monotonic() - t0
        t = threading.Thread(target=tx)
        t.start()
        subprocess.run([discnice, "run", "--quiet", "--recv-rate", str(CAP), "--", sys.executable,
                        __file__, "--job", mode, str(ls.getsockname()[1])], check=True)
        t.join()
        print(f"{mode:9s} recv: {N / got['secs'] / 2**20:.3f} MiB/s against a cap of {CAP / 2**20:.3f} MiB/s "
              f"({100 * (N / got['secs'] / CAP - 1):+.1f} %)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        job(sys.argv[2], int(sys.argv[3]))
    else:
        main()
