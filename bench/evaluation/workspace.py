"""The run's context: mode, machine, the files every experiment reads, and
where results and plots go."""
import contextlib
import os
import shutil
import subprocess
import time

from . import util
from .util import common

MiB = common.MiB


class Sizes:
    """What --quick shrinks (and what the full run uses); --emulated scales
    E1/E4/E6 to a 50 MB/s, 150 IOPS disk (about the paper's)."""

    def __init__(self, quick, emulated=False):
        self.reps = 1 if quick else 3                 # alternating repetitions of each contention case
        self.seq_fg = 2048 * MiB                      # E1/E6 foreground `sequential` (paper: 200 MB)
        self.rsync_src = 4096 * MiB                   # E1/E6 background: rsync -a of one cold file
        self.e6_caps = (0, 2) if quick else (0, 1, 2)  # which of the 1/3/5 MB/s and 1/3/5 % caps
        self.trace_s = 3 if quick else 15             # E3: seconds each micro run lasts at the cap
        self.e3_grep_tree = "/usr/include/c++" if quick else "/usr/include"
        self.e3_tar_dirs = ["linux"] if quick else None   # None: all of /usr/include
        self.e3_make_cap = 2 * util.MB if quick else 500_000
        self.e4_file = (8 if quick else 200) * MiB   # four-phase benchmark (paper: 200 MB, 10,000)
        self.e4_count = 400 if quick else 10000
        self.overhead_runs = 1 if quick else 5
        self.e6_caps_mb = None                        # explicit caps (MB/s) instead of paper + scaled
        self.bfq = True                               # run the ionice -c3 / BFQ cases
        if emulated:
            # The paper's sizes: its disk did ~47 MB/s, the emulated one 50 MB/s.
            self.seq_fg = (32 if quick else 200) * MiB
            self.rsync_src = (96 if quick else 600) * MiB
            self.e6_caps_mb = (5,) if quick else (1, 5, 10)
            # Random 4 KiB reads of a cold file are IOPS-bound (150/s): keep
            # the four-phase benchmark to ~10-20 s, like Table 6's pairs.
            self.e4_file = (4 if quick else 16) * MiB
            self.e4_count = 200 if quick else 2000
            # BFQ sits below the throttle that makes the disk slow: its queue
            # never fills, ionice -c3 has nothing to order (loopfs --check).
            self.bfq = False


class Context:
    """Everything an experiment needs; built once by evaluate.py."""

    DD_MIB = 1024

    def __init__(self, quick, loopfs=None, results=None):
        """loopfs: an emulated disk (bench/loopfs.py LoopFs, throttled) that
        holds the workspace instead of the scratch directory's disk."""
        self.quick = quick
        self.loopfs = loopfs
        self.emulated = loopfs is not None
        self.sizes = Sizes(quick, self.emulated)
        os.makedirs(common.SCRATCH, exist_ok=True)      # reports and temporary files
        self.dir = loopfs.path("eval") if loopfs else os.path.join(common.SCRATCH, "eval")
        os.makedirs(self.dir, exist_ok=True)
        self.majmin, self.disk = self._disk()
        kind = "evaluation-emulated" if self.emulated else "evaluation"
        self.results = results or common.results_path(kind)
        tail = f"-{kind}.md" if self.results.endswith(f"-{kind}.md") else ".md"
        self.stem = self.results[:-len(tail)] + ("-emulated" if self.emulated else "")
        self.cache = {}
        self.notes = []          # targets missed, said plainly at the top of the file
        self.check_lines = []    # what loopfs --check measured (emulated)

    def _disk(self):
        if self.loopfs:
            return self.loopfs.majmin(), self.loopfs.name
        major, minor, name = common.device_of(common.SCRATCH)
        dev = util.common.read_sys(f"/sys/block/{name}/dev", f"{major}:{minor}")
        return dev, name

    def plot_path(self, name):
        return f"{self.stem}-{name}.png"

    def path(self, name):
        return os.path.join(self.dir, name)

    def miss(self, what):
        self.notes.append(what)

    # ------------------------------------------------------------ files

    def prepare(self):
        """Create (once) the inputs the experiments share; measure the disk."""
        s = self.sizes
        # The emulation is lifted while the inputs are written (not measured).
        lift = (self.loopfs.rules(**{k: 0 for k in self.loopfs.throttle}) if self.loopfs
                else contextlib.nullcontext())
        with lift:
            self.seq_fg = common.make_file(self.path(f"seq-{s.seq_fg // MiB}M"), s.seq_fg)
            self.rsync_src = common.make_file(self.path(f"rsync-src-{s.rsync_src // MiB}M"), s.rsync_src)
            self.tar_fg = self.archive("usr-include.tar", "/usr/include")
            os.sync()
        self.disk_bps = self.measure_disk()

    def archive(self, name, top, dirs=None):
        """A tar of real files under top (dirs: a subset), made once."""
        path = self.path(name)
        if not os.path.exists(path):
            members = [d for d in (dirs or os.listdir(top)) if os.path.exists(os.path.join(top, d))]
            subprocess.run(["tar", "cf", path + ".tmp", "-C", top, *members], check=True,
                           stderr=subprocess.DEVNULL)
            os.rename(path + ".tmp", path)
        return path

    def measure_disk(self):
        """Sequential bandwidth: dd of the first GiB (at most) of the cold rsync source (bytes/s)."""
        self.dd_mib = min(self.DD_MIB, self.sizes.rsync_src // MiB)
        common.make_cold(self.rsync_src)
        t0 = time.monotonic()
        subprocess.run(["dd", f"if={self.rsync_src}", "of=/dev/null", "bs=1M", f"count={self.dd_mib}"],
                       check=True, stderr=subprocess.DEVNULL)
        return self.dd_mib * MiB / (time.monotonic() - t0)

    def fresh_dir(self, name):
        path = self.path(name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def machine_lines(self):
        if self.emulated:
            fs = self.loopfs
            rules = ", ".join(f"{k} {v:,}" for k, v in fs.throttle.items())
            sched = common.read_sys(f"/sys/block/{self.disk}/queue/scheduler")
            return common.machine_lines() + [
                f"Emulated disk {self.disk} ({self.majmin}): ext4 on a {fs.size_mib} MiB image on the "
                f"disk above, `losetup --direct-io=on`, cgroup-v1 root group "
                f"`blkio.throttle.*_device` = {rules} (bench/loopfs.py, HDD); scheduler {sched}, "
                f"read_ahead_kb {common.read_sys(f'/sys/block/{self.disk}/queue/read_ahead_kb')}. "
                f"Measured sequential bandwidth {self.disk_bps:,.0f} B/s "
                f"({self.disk_bps / util.MB:.1f} MB/s; cold `dd bs=1M` of {self.dd_mib} MiB)."]
        return common.machine_lines() + [
            f"Disk {self.disk} ({self.majmin}): measured sequential bandwidth "
            f"{self.disk_bps:,.0f} B/s ({self.disk_bps / util.MB:.0f} MB/s; cold `dd bs=1M` of "
            f"{self.dd_mib} MiB; a virtio disk whose host may cache, so this "
            "varies from run to run)."]
