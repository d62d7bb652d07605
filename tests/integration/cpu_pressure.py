"""/proc/pressure/cpu for the tests of the quick polls' rise (manners/quiet.h):
whether the kernel has it, and the share of a stretch in which some task
waited for a CPU, machine-wide."""
from __future__ import annotations

import time


def _some_us() -> int | None:
    try:
        with open("/proc/pressure/cpu") as f:
            line = f.readline()
    except OSError:
        return None
    if not line.startswith("some ") or "total=" not in line:
        return None
    return int(line.split("total=")[1])


def readable() -> bool:
    return _some_us() is not None


def share(seconds: float) -> float:
    """The stall share over the next `seconds` (0.0 where unreadable)."""
    a, t = _some_us(), time.monotonic()
    time.sleep(seconds)
    b, u = _some_us(), time.monotonic()
    if a is None or b is None:
        return 0.0
    return (b - a) / 1e6 / (u - t)


# A rise needs a stretch below the regulators' quarter before the rival:
# under other load already above it, none is seen (nor needed).
QUIET_BEFORE = 0.10
