"""A filesystem of its own on a loop device, for the disk-side oracle.

/sys/block/loopN/stat counts exactly what the filesystem on loopN sends to
its disk, undisturbed by the rest of the machine (Documentation/block/stat.rst:
field 7 = sectors written, field 3 = sectors read, 512-byte sectors).  Needs
root (losetup, mount); `LoopFs.unavailable()` says why not, for a skip.

    with LoopFs(size_mib=2048, tag="wb") as fs:
        fs.mountpoint ...; fs.written_bytes() ...

An emulated disk of fixed speed (issue #9 §7): `throttle=` sets the cgroup
v1 root group's blkio.throttle.{read,write}_{bps,iops}_device for the loop
device, so every process on the machine shares, for example, 50 MB/s and
150 IOPS - HDD-like, where the VM's own disk is cached by its host:

    with LoopFs(size_mib=8192, tag="e6", throttle=HDD) as fs: ...

Always torn down: throttle removed, unmount, detach, delete the image, also
on exceptions, Ctrl-C, SIGTERM and SIGHUP (turned into KeyboardInterrupt /
SystemExit while the disk exists, in the main thread), with those signals
blocked during the teardown itself so a second Ctrl-C cannot cut it short.
What a SIGKILL leaves behind (the directory records its owner's pid) the next
LoopFs sweeps away: `LoopFs.sweep_stale()`.

`python3 bench/loopfs.py --check` measures what the emulated disk does
(one and two readers, a reader in a child blkio group with and without its
own cap, ionice -c3 under BFQ) and prints it.  Stdlib only: tests and
benchmarks import it.
"""
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

BLKIO = "/sys/fs/cgroup/blkio"
# A 7200-rpm disk, roughly: what the MS Manners and DiscNice papers ran on.
HDD = {"read_bps": 50_000_000, "write_bps": 50_000_000, "read_iops": 150, "write_iops": 150}


OWNER = "owner.pid"
TEARDOWN_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _majmin(device):
    try:
        with open(f"/sys/block/{os.path.basename(device)}/dev") as f:
            return f.read().strip()
    except OSError:
        return None


def _device_of_image(image):
    """The loop device whose backing file is image, or None."""
    out = subprocess.run(["losetup", "-j", image], capture_output=True, text=True).stdout
    return out.split(":", 1)[0] if out.strip() else None


def _teardown(mountpoint, device, directory):
    if mountpoint and os.path.ismount(mountpoint):
        subprocess.run(["umount", mountpoint], check=False, capture_output=True)
        if os.path.ismount(mountpoint):
            subprocess.run(["umount", "-l", mountpoint], check=False, capture_output=True)
    if device:
        subprocess.run(["losetup", "-d", device], check=False, capture_output=True)
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


class LoopFs:
    def __init__(self, size_mib=1024, tag="loopfs", fstype="ext4", direct_io=True, base=None,
                 throttle=None):
        self.size_mib, self.tag, self.fstype, self.direct_io = size_mib, tag, fstype, direct_io
        self.throttle, self.throttled = throttle or {}, []
        self.base = base or os.environ.get("DISCNICE_LOOPFS_DIR", "/var/tmp")
        self.dir = self.image = self.mountpoint = self.device = None

    @staticmethod
    def unavailable(throttle=False):
        """None if a loop filesystem (throttled: an emulated disk) can be
        made here, else the reason."""
        if throttle and not os.path.exists(f"{BLKIO}/blkio.throttle.read_bps_device"):
            return f"no cgroup v1 blkio throttle ({BLKIO})"
        if os.geteuid() != 0:
            return "needs root (losetup, mount)"
        for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
            if not shutil.which(tool):
                return f"needs {tool}"
        if not os.path.exists("/dev/loop-control"):
            return "no loop device support (/dev/loop-control)"
        return None

    def __enter__(self):
        self.sweep_stale(self.base)
        self._signals_on()
        try:
            self.dir = tempfile.mkdtemp(prefix=f"discnice-{self.tag}-", dir=self.base)
            with open(os.path.join(self.dir, OWNER), "w") as f:
                f.write(f"{os.getpid()}\n")
            self.image = os.path.join(self.dir, "disk.img")
            with open(self.image, "wb") as f:
                f.truncate(self.size_mib << 20)
            args = ["losetup", "--find", "--show"]
            if self.direct_io:
                args.append("--direct-io=on")
            self.device = subprocess.run(args + [self.image], check=True, capture_output=True,
                                         text=True).stdout.strip()
            # Initialise inode tables and journal now: ext4lazyinit would
            # otherwise zero them in the background while a benchmark counts
            # the device's writes (16 MiB on a 1 GiB image).
            extra = (["-E", "lazy_itable_init=0,lazy_journal_init=0"]
                     if self.fstype.startswith("ext") else [])
            force = "-F" if self.fstype.startswith("ext") else "-f"  # mkfs.btrfs, mkfs.xfs: -f
            subprocess.run([f"mkfs.{self.fstype}", "-q", force] + extra + [self.device], check=True,
                           capture_output=True)
            self.mountpoint = os.path.join(self.dir, "mnt")
            os.mkdir(self.mountpoint)
            subprocess.run(["mount", self.device, self.mountpoint], check=True,
                           capture_output=True)
            os.chmod(self.mountpoint, 0o1777)
            subprocess.run(["sync", "-f", self.mountpoint], check=False)
            if self.throttle:       # recorded first: sweep_stale resets what a SIGKILL left
                with open(os.path.join(self.dir, "throttled"), "w") as f:
                    f.write(f"{self.majmin()}\n")
            for key, value in self.throttle.items():
                self.throttled.append(key)
                self._set_throttle(key, int(value))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def majmin(self):
        with open(f"/sys/block/{self.name}/dev") as f:
            return f.read().strip()

    @contextlib.contextmanager
    def rules(self, **values):
        """Change some root-group rules for a while (0 lifts one), restored
        after: e.g. lift the emulation while inputs are written, or leave
        room for a child group's own rule (v1 throttling is flat: a child
        group's I/O is not counted against the root group's rules - see
        --check)."""
        old = {k: self.throttle.get(k, 0) for k in values}
        try:
            for key, value in values.items():
                if key not in self.throttled:
                    self.throttled.append(key)
                self._set_throttle(key, int(value))
            yield
        finally:
            for key, value in old.items():
                self._set_throttle(key, int(value))

    def _set_throttle(self, key, value):
        """blkio.throttle.KEY_device of the root group; 0 removes the rule."""
        with open(f"{BLKIO}/blkio.throttle.{key}_device", "w") as f:
            f.write(f"{self.majmin()} {value}\n")

    def close(self):
        """Tear everything down; idempotent, and not interruptible by
        SIGINT/SIGTERM/SIGHUP (blocked meanwhile, delivered after)."""
        old = signal.pthread_sigmask(signal.SIG_BLOCK, TEARDOWN_SIGNALS)
        try:
            for key in self.throttled:
                try:
                    self._set_throttle(key, 0)
                except OSError:
                    pass
            self.throttled = []
            _teardown(self.mountpoint, self.device, self.dir)
            self.mountpoint = self.device = self.dir = None
        finally:
            self._signals_off()
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    # SIGTERM and SIGHUP would end Python without running __exit__: while a
    # disk exists they raise in the main thread instead (SIGINT already does).
    def _signals_on(self):
        self._saved = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                self._saved[sig] = signal.signal(sig, _raise_exit)

    def _signals_off(self):
        for sig, handler in getattr(self, "_saved", {}).items():
            signal.signal(sig, handler)
        self._saved = {}

    @staticmethod
    def sweep_stale(base=None):
        """Remove what a killed LoopFs left under base: every discnice-*
        directory whose recorded owner is dead (throttle rules of its device
        reset, unmounted, detached, deleted).  Directories without an owner
        file (older code, or someone else's) are left alone.  Returns the
        directories removed."""
        base = base or os.environ.get("DISCNICE_LOOPFS_DIR", "/var/tmp")
        removed = []
        try:
            names = os.listdir(base)
        except OSError:
            return removed
        for name in names:
            d = os.path.join(base, name)
            try:
                with open(os.path.join(d, OWNER)) as f:
                    pid = int(f.read())
            except (OSError, ValueError):
                continue
            if not name.startswith("discnice-") or _alive(pid):
                continue
            mnt, img = os.path.join(d, "mnt"), os.path.join(d, "disk.img")
            device = _device_of_image(img)
            try:
                with open(os.path.join(d, "throttled")) as f:
                    majmin = f.read().strip()
            except OSError:
                majmin = None
            if majmin and device and _majmin(device) == majmin:
                for key in HDD:
                    try:
                        with open(f"{BLKIO}/blkio.throttle.{key}_device", "w") as f:
                            f.write(f"{majmin} 0\n")
                    except OSError:
                        pass
            _teardown(mnt, device, d)
            removed.append(d)
        return removed

    @property
    def name(self):
        return os.path.basename(self.device)

    def stat(self):
        """The device's /sys/block/NAME/stat fields, as ints."""
        with open(f"/sys/block/{self.name}/stat") as f:
            return [int(x) for x in f.read().split()]

    def written_bytes(self):
        return self.stat()[6] * 512

    def read_bytes(self):
        return self.stat()[2] * 512

    def path(self, *parts):
        return os.path.join(self.mountpoint, *parts)

    def drop_cache(self):
        """Forget the page cache of this filesystem only: remount."""
        subprocess.run(["sync", "-f", self.mountpoint], check=True)
        subprocess.run(["mount", "-o", "remount", self.mountpoint], check=True,
                       capture_output=True)
        subprocess.run(["umount", self.mountpoint], check=True, capture_output=True)
        subprocess.run(["mount", self.device, self.mountpoint], check=True, capture_output=True)


# ------------------------------------------------------------------ --check

@contextlib.contextmanager
def child_group(name, majmin=None, read_bps=0):
    """A cgroup-v1 blkio child of the root group (optionally with its own
    read_bps rule on majmin); yields its cgroup.procs path; removed after."""
    group = os.path.join(BLKIO, name)
    if not os.path.isdir(group):
        os.mkdir(group)
    try:
        if read_bps:
            with open(os.path.join(group, "blkio.throttle.read_bps_device"), "w") as f:
                f.write(f"{majmin} {int(read_bps)}\n")
        yield os.path.join(group, "cgroup.procs")
    finally:
        try:
            with open(os.path.join(group, "cgroup.procs")) as f:
                for pid in f.read().split():
                    with contextlib.suppress(OSError), open(os.path.join(BLKIO, "cgroup.procs"), "w") as g:
                        g.write(pid)
            os.rmdir(group)
        except OSError:
            pass


def _cold(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _reader(path, mib, procs=None, ionice=False, direct=False):
    """Start a cold `dd bs=1M count=MIB` (buffered unless direct), in the
    group procs if given."""
    cmd = ["dd", f"if={path}", "of=/dev/null", "bs=1M", f"count={mib}", "status=none"]
    if direct:
        cmd.append("iflag=direct")
    if ionice:
        cmd = ["ionice", "-c3"] + cmd
    if procs:
        cmd = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs] + cmd
    _cold(path)
    return subprocess.Popen(cmd), time.monotonic()


def _rates(readers, mib):
    """Wait for (Popen, t0, MiB) triples; MB/s of each (10^6 B)."""
    end = [None] * len(readers)
    while None in end:                  # each one's own end, not the order we wait in
        for i, (p, _, _) in enumerate(readers):
            if end[i] is None and p.poll() is not None:
                end[i] = time.monotonic()
        time.sleep(0.005)
    return [n * (1 << 20) / (e - t0) / 1e6 for (_, t0, n), e in zip(readers, end)]


def check(throttle=None, mib=100):
    """Measure the emulated disk; returns a list of (what, result) lines."""
    throttle = throttle or HDD
    lines = []
    with LoopFs(size_mib=1024, tag="check", throttle=throttle) as fs:
        files = []
        for i in range(2):
            path = fs.path(f"f{i}")
            with open(path, "wb") as f:
                for _ in range(mib):
                    f.write(os.urandom(1 << 20))
                os.fsync(f.fileno())
            files.append(path)
        mm = fs.majmin()
        sched = open(f"/sys/block/{fs.name}/queue/scheduler").read().strip()
        lines.append(("device", f"{fs.device} ({mm}), scheduler: {sched}, root rules: {throttle}"))
        p = _reader(files[0], mib)
        lines.append(("one cold reader, root group", f"{_rates([(*p, mib)], mib)[0]:.1f} MB/s"))
        a, b = _reader(files[0], mib), _reader(files[1], mib)
        ra, rb = _rates([(*a, mib), (*b, mib)], mib)
        lines.append(("two cold readers at once, root group", f"{ra:.1f} + {rb:.1f} MB/s"))
        with child_group("discnice-loopfs-check", mm, 5_000_000) as procs:
            p = _reader(files[0], 25, procs)
            lines.append(("child group, own rule 5 MB/s", f"{_rates([(*p, 25)], 25)[0]:.1f} MB/s"))
            a, b = _reader(files[0], 25, procs), _reader(files[1], mib)
            ra, rb = _rates([(*a, 25), (*b, mib)], mib)
            lines.append(("child 5 MB/s + a root-group reader at once", f"child {ra:.1f}, root {rb:.1f} MB/s"))
        # The split the kernel-throttle comparison uses: root HDD - cap, child cap.
        with child_group("discnice-loopfs-check", mm, 5_000_000) as procs, \
                fs.rules(read_bps=throttle["read_bps"] - 5_000_000):
            a, b = _reader(files[0], 25, procs), _reader(files[1], mib, direct=True)
            ra, rb = _rates([(*a, 25), (*b, mib)], mib)
            lines.append(("split: child 5 MB/s + root (45 MB/s) O_DIRECT reader",
                          f"child {ra:.1f}, root {rb:.1f} MB/s"))
            a, b = _reader(files[0], 25, procs), _reader(files[1], mib)
            ra, rb = _rates([(*a, 25), (*b, mib)], mib)
            lines.append(("split: child 5 MB/s + root (45 MB/s) buffered reader",
                          f"child {ra:.1f}, root {rb:.1f} MB/s"))
        with child_group("discnice-loopfs-check", mm, 500_000_000) as procs:
            p = _reader(files[0], mib, procs)
            lines.append(("child group, own rule 500 MB/s (above the root's)",
                          f"{_rates([(*p, mib)], mib)[0]:.1f} MB/s"))
        with child_group("discnice-loopfs-check") as procs:
            p = _reader(files[0], mib, procs)
            lines.append(("child group, no rule of its own", f"{_rates([(*p, mib)], mib)[0]:.1f} MB/s"))
        path = f"/sys/block/{fs.name}/queue/scheduler"
        original = open(path).read().split("[")[1].split("]")[0]
        if "bfq" in open(path).read():
            try:
                with open(path, "w") as f:
                    f.write("bfq")
                a, b = _reader(files[0], mib), _reader(files[1], mib, ionice=True)
                ra, rb = _rates([(*a, mib), (*b, mib)], mib)
                lines.append(("BFQ: plain reader + ionice -c3 reader at once",
                              f"plain {ra:.1f}, idle-class {rb:.1f} MB/s"))
            finally:
                with open(path, "w") as f:
                    f.write(original)
        else:
            lines.append(("BFQ", f"not offered for {fs.name}: {sched}"))
    return lines


if __name__ == "__main__":
    if sys.argv[1:] != ["--check"]:
        sys.exit("usage: python3 bench/loopfs.py --check   (root: measures the emulated disk)")
    why = LoopFs.unavailable(throttle=True)
    if why:
        sys.exit(f"loopfs: {why}")
    for what, result in check():
        print(f"{what:55} {result}", flush=True)
