"""Reproducer (discnice bug, issue #12): sendfile() to a NON-BLOCKING socket
is not held to --send-rate / --net-rate.  nginx (sendfile on) serves at
loopback speed under `discnice run --send-rate 1MiB/s`.

    build/discnice run --send-rate 1MiB/s -- python3 bench/net_repro/sendfile_nonblock.py JOB PORT
is what main() below does; run it as
    python3 bench/net_repro/sendfile_nonblock.py [build/discnice]
It prints the rate the (unregulated) receiver saw for a blocking and a
non-blocking sender of 4 MB by os.sendfile at a cap of 1 MiB/s.  Expected:
both about 1.0 MiB/s.  Seen: blocking ~1.0 MiB/s, non-blocking ~hundreds of
MiB/s.

Cause (as read, src/agent/io_net.c io_net_copy_begin): a refused non-blocking
copy "still goes, as debt", but nothing sets the thread's net_owed (refuse()
is not called), so io_net_before_wait() has nothing to pay at the program's
next poll/epoll_wait and the debt is never slept off; the next sendfile is
refused again and goes again, as more debt.
"""
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time

N = 4_000_000


def job(mode, port, path):
    s = socket.create_connection(("127.0.0.1", port))
    fd = os.open(path, os.O_RDONLY)
    if mode == "nonblock":
        s.setblocking(False)
    off = 0
    while off < N:
        try:
            off += os.sendfile(s.fileno(), fd, off, N - off)
        except BlockingIOError:
            select.select([], [s], [], 5)
    s.close()


def main():
    discnice = sys.argv[1] if len(sys.argv) > 1 else "build/discnice"
    with tempfile.NamedTemporaryFile() as f:
        f.write(os.urandom(N))
        f.flush()
        for mode in ("block", "nonblock"):
            ls = socket.socket()
            ls.bind(("127.0.0.1", 0))
            ls.listen(1)
            port = ls.getsockname()[1]
            got = {}

            def rx():
                c, _ = ls.accept()
                n, first, last = 0, None, None
                while True:
                    b = c.recv(1 << 20)
                    if not b:
                        break
                    last = time.monotonic()
                    first = first or last
                    n += len(b)
                got.update(n=n, secs=last - first)
            t = threading.Thread(target=rx)
            t.start()
            subprocess.run([discnice, "run", "--quiet", "--send-rate", "1MiB/s", "--", sys.executable,
                            __file__, "--job", mode, str(port), f.name], check=True)
            t.join()
            print(f"{mode:9s} sendfile: {got['n']} B at {got['n'] / got['secs'] / 2**20:8.2f} MiB/s "
                  f"(cap 1.00 MiB/s)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        job(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
