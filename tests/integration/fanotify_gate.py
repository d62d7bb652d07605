"""A gate in the kernel for races between two system calls of a program
under test, made deterministic with fanotify permission events: the
program's open(2) (FAN_OPEN_PERM) or read(2) (FAN_ACCESS_PERM) of a marked
file waits in the kernel (fs/notify/fanotify/fanotify.c:
fanotify_get_response) until the gate answers, and the gate answers only
after its action has run - a file replaced by a FIFO, a file grown -
between the program's look and its next step.  No FUSE, no sleeps, no
hooks in the program.

Needs CAP_SYS_ADMIN (fanotify_init with FAN_CLASS_CONTENT) and a kernel
with CONFIG_FANOTIFY_ACCESS_PERMISSIONS; `available()` says whether both
are there.

The action must not itself open or read the marked file (the gate's own
thread would wait for its own answer); write through a descriptor opened
before the gate, rename, mkfifo - those raise no permission event.
"""
from __future__ import annotations

import ctypes
import os
import select
import struct
import threading

FAN_CLOEXEC, FAN_CLASS_CONTENT = 0x1, 0x4
FAN_MARK_ADD = 0x1
FAN_OPEN_PERM, FAN_ACCESS_PERM = 0x00010000, 0x00020000
FAN_ALLOW = 0x1
AT_FDCWD = -100
_META = struct.Struct("=IBBHQii")   # struct fanotify_event_metadata, 24 bytes

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                ctypes.c_char_p]


def _init():
    fd = _libc.fanotify_init(FAN_CLOEXEC | FAN_CLASS_CONTENT, os.O_RDONLY)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"fanotify_init: {os.strerror(e)}")
    return fd


def available() -> str | None:
    """None if a gate can be made here, else why not."""
    try:
        fd = _init()
    except OSError as e:
        return str(e)
    try:
        if _libc.fanotify_mark(fd, FAN_MARK_ADD, FAN_OPEN_PERM, AT_FDCWD, b"/") < 0:
            return f"fanotify_mark FAN_OPEN_PERM: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(fd)
    return None


class Gate:
    """with Gate(path, FAN_ACCESS_PERM, action, after=1): the after-th event
    on path from another process than this one runs action() before it is
    answered; every event is allowed.  `fired` says whether it ran."""

    def __init__(self, path, mask, action, after=1):
        self.path, self.mask, self.action, self.after = os.fsencode(path), mask, action, after
        self.fired = False
        self.error = None
        self._seen = 0
        self._stop = threading.Event()

    def __enter__(self):
        self._fd = _init()
        if _libc.fanotify_mark(self._fd, FAN_MARK_ADD, self.mask, AT_FDCWD, self.path) < 0:
            e = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(e, f"fanotify_mark: {os.strerror(e)}")
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return self

    def _serve(self):
        me = os.getpid()
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if not ready:
                continue
            buf = os.read(self._fd, 4096)
            at = 0
            while at + _META.size <= len(buf):
                length, _vers, _res, _mlen, mask, fd, pid = _META.unpack_from(buf, at)
                at += length
                try:
                    if pid != me and mask & self.mask:
                        self._seen += 1
                        if self._seen == self.after:
                            try:
                                self.action()
                                self.fired = True
                            except Exception as e:   # reported by __exit__
                                self.error = e
                finally:
                    if fd >= 0:
                        os.write(self._fd, struct.pack("=iI", fd, FAN_ALLOW))
                        os.close(fd)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        os.close(self._fd)   # answers anything still pending: allowed
        if self.error and not exc[0]:
            raise self.error
        return False
