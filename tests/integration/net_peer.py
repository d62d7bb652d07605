"""Description: the job side of tests/integration/test_net.py - socket
programs run under `discnice run` (the receiver side is the test itself, the
independent oracle).  Data is a deterministic stream (seeded), so both ends
compute the same SHA-256 without shipping it.

usage: net_peer.py MODE FAMILY PORT BYTES [N]
  tcp-send      blocking sendall() of BYTES on one connection
  tcp-threads   N threads, each its own connection, BYTES/N each
  tcp-fork      N forked children, each its own connection, BYTES/N each
  tcp-write     os.write() (write(2)) in 1 MiB calls
  tcp-nonblock  non-blocking socket driven by epoll (EPOLLOUT), 256 KiB sends
  tcp-recv      connect and recv() until EOF (blocking); print count and sha
  tcp-recv-nonblock  the same on a non-blocking socket, waiting in select()
  tcp-sendfile-nonblock  sendfile() of BYTES from a file to a non-blocking
                socket, waiting in select() (nginx's way)
  epoll-server  listen on PORT (0: any; prints it), accept one connection,
                read it non-blocking under edge-triggered epoll until EOF;
                print count and sha
  udp-send      BYTES in datagrams of N bytes (default 1200), blocking
  unix-pair     BYTES through a socketpair(AF_UNIX) between two threads
"""
import hashlib
import os
import select
import socket
import sys
import threading


def stream(n, seed=0):
    """n deterministic bytes (a counter hashed in 32-byte blocks)."""
    out = bytearray()
    block = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d:%d" % (seed, block)).digest() * 2048
        block += 1
    return bytes(out[:n])


def family(name):
    return socket.AF_INET6 if name == "6" else socket.AF_INET


def host(name):
    return "::1" if name == "6" else "127.0.0.1"


def connect(fam, port):
    s = socket.socket(family(fam), socket.SOCK_STREAM)
    s.connect((host(fam), port))
    return s


def main():
    mode, fam, port, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    extra = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    if mode == "tcp-send":
        s = connect(fam, port)
        s.sendall(stream(nbytes))
        s.close()
    elif mode == "tcp-write":
        s = connect(fam, port)
        data = memoryview(stream(nbytes))
        while data:
            n = os.write(s.fileno(), data[: 1 << 20])
            data = data[n:]
        s.close()
    elif mode in ("tcp-threads", "tcp-fork"):
        each = nbytes // extra
        if mode == "tcp-threads":
            def send(i):
                s = connect(fam, port)
                s.sendall(stream(each, seed=i))
                s.close()
            threads = [threading.Thread(target=send, args=(i,)) for i in range(extra)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            pids = []
            for i in range(extra):
                pid = os.fork()
                if pid == 0:
                    try:
                        s = connect(fam, port)
                        s.sendall(stream(each, seed=i))
                        s.close()
                    finally:
                        os._exit(0)
                pids.append(pid)
            for pid in pids:
                _, status = os.waitpid(pid, 0)
                if status:
                    sys.exit(1)
    elif mode == "tcp-nonblock":
        s = connect(fam, port)
        s.setblocking(False)
        ep = select.epoll()
        ep.register(s.fileno(), select.EPOLLOUT)
        data = memoryview(stream(nbytes))
        calls = waits = 0
        while data:
            try:
                n = s.send(data[: 256 << 10])
                calls += 1
                data = data[n:]
            except BlockingIOError:
                waits += 1
                ep.poll(5)
        s.close()
        print(calls, waits)
    elif mode == "tcp-sendfile-nonblock":
        # sendfile(2) from a file of BYTES to a non-blocking socket, waiting
        # in select() on EAGAIN, as nginx does (sendfile on).
        import tempfile
        with tempfile.TemporaryFile() as f:
            f.write(stream(nbytes))
            f.flush()
            s = connect(fam, port)
            s.setblocking(False)
            off = 0
            while off < nbytes:
                try:
                    off += os.sendfile(s.fileno(), f.fileno(), off, nbytes - off)
                except BlockingIOError:
                    select.select([], [s], [], 5)
            s.close()
    elif mode == "tcp-recv-nonblock":
        # recv() on a non-blocking socket, waiting in select() on EAGAIN.
        s = connect(fam, port)
        s.setblocking(False)
        h, n = hashlib.sha256(), 0
        while True:
            try:
                b = s.recv(1 << 20)
            except BlockingIOError:
                select.select([s], [], [], 5)
                continue
            if not b:
                break
            n += len(b)
            h.update(b)
        print(n, h.hexdigest())
    elif mode == "tcp-recv":
        s = connect(fam, port)
        h, n = hashlib.sha256(), 0
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            n += len(b)
            h.update(b)
        print(n, h.hexdigest())
    elif mode == "epoll-server":
        ls = socket.socket(family(fam), socket.SOCK_STREAM)
        ls.bind((host(fam), port))
        ls.listen(1)
        print(ls.getsockname()[1], flush=True)
        c, _ = ls.accept()
        c.setblocking(False)
        ep = select.epoll()
        ep.register(c.fileno(), select.EPOLLIN | select.EPOLLET)
        h, n, done = hashlib.sha256(), 0, False
        while not done:
            ep.poll(5)
            while True:  # edge-triggered: read until the kernel says EAGAIN
                try:
                    b = c.recv(1 << 20)
                except BlockingIOError:
                    break
                if not b:
                    done = True
                    break
                n += len(b)
                h.update(b)
        print(n, h.hexdigest(), flush=True)
    elif mode == "udp-send":
        size = extra or 1200
        s = socket.socket(family(fam), socket.SOCK_DGRAM)
        data = stream(nbytes)
        for i in range(0, nbytes, size):
            s.sendto(data[i:i + size], (host(fam), port))
        s.sendto(b"", (host(fam), port))  # the end
    elif mode == "unix-pair":
        a, b = socket.socketpair()
        got = []

        def reader():
            n = 0
            while n < nbytes:
                chunk = b.recv(1 << 16)
                if not chunk:
                    break
                n += len(chunk)
            got.append(n)
        t = threading.Thread(target=reader)
        t.start()
        a.sendall(stream(nbytes))
        t.join()
        print(got[0])
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
