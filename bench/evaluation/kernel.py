"""The kernel's own controls, borrowed for a while and always given back:
the BFQ I/O scheduler (for ionice -c3) and a cgroup-v1 blkio throttle."""
import contextlib
import os

BLKIO = "/sys/fs/cgroup/blkio"
GROUP = os.path.join(BLKIO, "discnice-bench")


class Unavailable(Exception):
    """This machine lacks what a comparison needs; the message says why."""


def current_scheduler(disk):
    with open(f"/sys/block/{disk}/queue/scheduler") as f:
        text = f.read()
    for word in text.split():
        if word.startswith("["):
            return word.strip("[]"), text
    return text.strip(), text


@contextlib.contextmanager
def scheduler(disk, name):
    """Switch the disk's I/O scheduler to name; restore the original after."""
    path = f"/sys/block/{disk}/queue/scheduler"
    original, text = current_scheduler(disk)
    if name not in text.replace("[", " ").replace("]", " ").split():
        raise Unavailable(f"no {name} scheduler for {disk}")
    try:
        with open(path, "w") as f:
            f.write(name)
        yield
    finally:
        with open(path, "w") as f:
            f.write(original)


@contextlib.contextmanager
def blkio_throttle(majmin, bps, iops=None, write_bps=None):
    """A cgroup-v1 blkio group capping reads and writes of majmin at bps each
    (writes at write_bps if given; and at iops each, if given); yields the
    cgroup.procs path a process writes its pid to. Removed after."""
    if not os.path.exists(os.path.join(BLKIO, "blkio.throttle.read_bps_device")):
        raise Unavailable("no cgroup-v1 blkio throttle mounted")
    if os.path.isdir(GROUP):
        _remove(GROUP)
    try:
        os.mkdir(GROUP)
    except OSError as e:
        raise Unavailable(f"cannot create {GROUP}: {e.strerror}")
    try:
        rules = {"read_bps_device": bps, "write_bps_device": write_bps or bps}
        if iops:
            rules.update(read_iops_device=iops, write_iops_device=iops)
        for what, value in rules.items():
            with open(os.path.join(GROUP, f"blkio.throttle.{what}"), "w") as f:
                f.write(f"{majmin} {int(value)}")
        yield os.path.join(GROUP, "cgroup.procs")
    finally:
        _remove(GROUP)


def _remove(group):
    """Move any process left behind to the root group, then remove the group."""
    try:
        with open(os.path.join(group, "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:
            try:
                with open(os.path.join(BLKIO, "cgroup.procs"), "w") as f:
                    f.write(pid)
            except OSError:
                pass
        os.rmdir(group)
    except OSError:
        pass
