"""The run's context: mode, machine, the files every experiment reads, and
where results and plots go."""
import os
import shutil
import subprocess
import time

from . import util
from .util import common

MiB = common.MiB


class Sizes:
    """What --quick shrinks (and what the full run uses)."""

    def __init__(self, quick):
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


class Context:
    """Everything an experiment needs; built once by evaluate.py."""

    DD_MIB = 1024

    def __init__(self, quick):
        self.quick = quick
        self.sizes = Sizes(quick)
        self.dir = os.path.join(common.SCRATCH, "eval")
        os.makedirs(self.dir, exist_ok=True)
        self.majmin, self.disk = self._disk()
        self.results = common.results_path("evaluation")
        self.stem = self.results[:-len("-evaluation.md")]
        self.cache = {}
        self.notes = []          # targets missed, said plainly at the top of the file

    def _disk(self):
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
        self.seq_fg = common.make_file(self.path(f"seq-{s.seq_fg // MiB}M"), s.seq_fg)
        self.rsync_src = common.make_file(self.path(f"rsync-src-{s.rsync_src // MiB}M"), s.rsync_src)
        self.tar_fg = self.archive("usr-include.tar", "/usr/include")
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
        """Sequential bandwidth: dd of the first GiB of the cold rsync source (bytes/s)."""
        common.make_cold(self.rsync_src)
        t0 = time.monotonic()
        subprocess.run(["dd", f"if={self.rsync_src}", "of=/dev/null", "bs=1M", f"count={self.DD_MIB}"],
                       check=True, stderr=subprocess.DEVNULL)
        return self.DD_MIB * MiB / (time.monotonic() - t0)

    def fresh_dir(self, name):
        path = self.path(name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def machine_lines(self):
        return common.machine_lines() + [
            f"Disk {self.disk} ({self.majmin}): measured sequential bandwidth "
            f"{self.disk_bps:,.0f} B/s ({self.disk_bps / util.MB:.0f} MB/s; cold `dd bs=1M` of "
            f"{self.DD_MIB} MiB; a virtio disk whose host may cache, so this "
            "varies from run to run)."]
