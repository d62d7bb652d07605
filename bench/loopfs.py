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
on exceptions.  Stdlib only: tests and benchmarks import it.
"""
import os
import shutil
import subprocess
import tempfile

BLKIO = "/sys/fs/cgroup/blkio"
# A 7200-rpm disk, roughly: what the MS Manners and DiscNice papers ran on.
HDD = {"read_bps": 50_000_000, "write_bps": 50_000_000, "read_iops": 150, "write_iops": 150}


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
        self.dir = tempfile.mkdtemp(prefix=f"discnice-{self.tag}-", dir=self.base)
        try:
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
            subprocess.run([f"mkfs.{self.fstype}", "-q", "-F"] + extra + [self.device], check=True,
                           capture_output=True)
            self.mountpoint = os.path.join(self.dir, "mnt")
            os.mkdir(self.mountpoint)
            subprocess.run(["mount", self.device, self.mountpoint], check=True,
                           capture_output=True)
            os.chmod(self.mountpoint, 0o1777)
            subprocess.run(["sync", "-f", self.mountpoint], check=False)
            for key, value in self.throttle.items():
                self._set_throttle(key, int(value))
                self.throttled.append(key)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def majmin(self):
        with open(f"/sys/block/{self.name}/dev") as f:
            return f.read().strip()

    def _set_throttle(self, key, value):
        """blkio.throttle.KEY_device of the root group; 0 removes the rule."""
        with open(f"{BLKIO}/blkio.throttle.{key}_device", "w") as f:
            f.write(f"{self.majmin()} {value}\n")

    def close(self):
        for key in self.throttled:
            try:
                self._set_throttle(key, 0)
            except OSError:
                pass
        self.throttled = []
        if self.mountpoint and os.path.ismount(self.mountpoint):
            subprocess.run(["umount", self.mountpoint], check=False, capture_output=True)
            if os.path.ismount(self.mountpoint):
                subprocess.run(["umount", "-l", self.mountpoint], check=False, capture_output=True)
        if self.device:
            subprocess.run(["losetup", "-d", self.device], check=False, capture_output=True)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.mountpoint = self.device = self.dir = None

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
