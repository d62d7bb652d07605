"""A swap file and a memory cgroup v1 with a limit, for the MAC benchmark
(bench/graybox_mac.py; graybox-icl §4.3).  The same setup as
tests/integration/test_graybox_mac.py, for benchmarks (stdlib only).

This machine has no swap, and without swap there is no paging to see - only
the OOM killer - so the benchmark makes both itself, as root:

    with SwapFile(2048) as swap, MemoryCgroup("discnice-gbmac-bench", 1 << 30) as cg:
        subprocess.run(cg.argv(["prog", ...]))      # runs inside the cgroup
        cg.limit - cg.usage()                       # the truth MAC is judged by

Always torn down, also on exceptions, Ctrl-C, SIGTERM and SIGHUP (turned
into KeyboardInterrupt / SystemExit while either exists), with those
signals blocked during the teardown itself: the cgroup's processes are
killed and it is removed; the swap file is swapped off and deleted.  What a
SIGKILL leaves behind, the next run sweeps: a cgroup of the same name, and
swap files of this prefix whose owner (in the name) is gone.
"""
import contextlib
import glob
import os
import re
import signal
import subprocess
import time

MEMCG = "/sys/fs/cgroup/memory"
TEARDOWN_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
SWAP_PREFIX = "discnice-gbmac-swap."


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


class _Signals:
    """SIGTERM/SIGHUP raise SystemExit in the main thread while active."""
    def __init__(self):
        self.saved = {}

    def on(self):
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self.saved[sig] = signal.signal(sig, _raise_exit)

    def off(self):
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        self.saved = {}


def unavailable():
    """None if swap and a memory cgroup can be set up here, else why not."""
    if os.geteuid() != 0:
        return "needs root (swapon, memory cgroup)"
    if not os.path.exists(os.path.join(MEMCG, "memory.limit_in_bytes")):
        return f"no cgroup v1 memory controller at {MEMCG}"
    for tool in ("mkswap", "swapon", "swapoff", "fallocate"):
        if not any(os.access(os.path.join(d, tool), os.X_OK)
                   for d in os.environ.get("PATH", "/usr/sbin:/sbin").split(":") + ["/sbin",
                                                                                    "/usr/sbin"]):
            return f"needs {tool}"
    return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SwapFile:
    """A swap file of size_mib in base (default /var/tmp), swapped on."""
    def __init__(self, size_mib, base="/var/tmp"):
        self.size_mib, self.base = size_mib, base
        self.path = os.path.join(base, f"{SWAP_PREFIX}{os.getpid()}")
        self.on = False
        self._signals = _Signals()

    @classmethod
    def sweep_stale(cls, base="/var/tmp"):
        for path in glob.glob(os.path.join(base, SWAP_PREFIX + "*")):
            m = re.search(r"\.(\d+)$", path)
            if m and not _alive(int(m.group(1))):
                subprocess.run(["swapoff", path], capture_output=True)
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def __enter__(self):
        self.sweep_stale(self.base)
        self._signals.on()
        try:
            subprocess.run(["fallocate", "-l", f"{self.size_mib}MiB", self.path], check=True)
            os.chmod(self.path, 0o600)
            subprocess.run(["mkswap", self.path], check=True, capture_output=True)
            r = subprocess.run(["swapon", self.path], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"swapon {self.path}: {r.stderr.strip()}")
            self.on = True
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def used_bytes(self):
        """This file's used swap, from /proc/swaps (KiB)."""
        with open("/proc/swaps") as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields and fields[0] == self.path:
                    return int(fields[3]) * 1024
        return 0

    def close(self):
        old = signal.pthread_sigmask(signal.SIG_BLOCK, TEARDOWN_SIGNALS)
        try:
            if self.on:
                # swapoff brings every swapped page back into memory; the
                # cgroup is gone by now, so its pages are, too.
                subprocess.run(["swapoff", self.path], capture_output=True)
                self.on = False
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        finally:
            self._signals.off()
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


class MemoryCgroup:
    """A cgroup v1 memory group with a hard limit (bytes), swappiness 60."""
    def __init__(self, name, limit):
        self.name, self.limit = name, limit
        self.path = os.path.join(MEMCG, name)
        self._signals = _Signals()

    def __enter__(self):
        self._signals.on()
        try:
            if os.path.isdir(self.path):       # left by a SIGKILLed run
                self._remove()
            os.mkdir(self.path)
            self._write("memory.limit_in_bytes", self.limit)
            self._write("memory.swappiness", 60)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return int(f.read().split()[0])

    def usage(self):
        return self.read("memory.usage_in_bytes")

    def stat(self):
        with open(os.path.join(self.path, "memory.stat")) as f:
            return {k: int(v) for k, v in (line.split() for line in f.read().splitlines())}

    def oom_kills(self):
        with open(os.path.join(self.path, "memory.oom_control")) as f:
            for line in f.read().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def pids(self):
        with contextlib.suppress(OSError), open(os.path.join(self.path, "cgroup.procs")) as f:
            return [int(p) for p in f.read().split()]
        return []

    def argv(self, argv):
        """argv run inside the cgroup: the shell joins it, then execs."""
        return ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh"] + \
               [str(a) for a in argv]

    def _remove(self):
        # Only our own processes are in here: the group is ours by name.
        for _ in range(100):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)

    def close(self):
        old = signal.pthread_sigmask(signal.SIG_BLOCK, TEARDOWN_SIGNALS)
        try:
            if os.path.isdir(self.path):
                self._remove()
        finally:
            self._signals.off()
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
