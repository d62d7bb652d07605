"""discnice_manners - Python binding of libmanners (MS Manners testpoints).

A background job calls :func:`testpoint` every so often with the progress it
made since its previous call; the call returns when the job may go on, later
when its progress rate says something more important is using the machine
(MS Manners §4, §7.1).  See manners(3).

    import discnice_manners as manners
    for chunk in chunks:
        work(chunk)
        manners.testpoint(0, [len(chunk), 0])

The library is found by, in order: the ``MANNERS_LIBRARY`` environment
variable (a path), the path ``make install`` wrote below, then the dynamic
loader's search for ``libmanners.so.0``.  Errors raise :class:`MannersError`
(an ``OSError`` carrying the errno).  Unless ``MANNERS_PROGRAM`` is set, the
state file is named after the main script (``sys.argv[0]``), not after the
python interpreter, so each script keeps its own targets.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno as _errno
import numbers
import operator
import os
import sys
from typing import Iterable

__all__ = ["MannersError", "Stats", "testpoint", "set_priority", "leave",
           "config_set", "config_get", "stats", "save", "METRICS_MAX", "PHASES_MAX",
           "PROGRESS_MAX"]

# Rewritten by `make install` to where it installed the library.
_INSTALLED_LIBRARY = None

METRICS_MAX = 8
PHASES_MAX = 64
PROGRESS_MAX = 2.0 ** 53     # the largest value one testpoint takes (manners.h)


class MannersError(OSError):
    """A libmanners call returned -errno."""


class Stats(ctypes.Structure):
    """struct manners_stats of include/discnice/manners.h."""
    _fields_ = [
        ("size", ctypes.c_uint64),
        ("testpoints", ctypes.c_uint64),
        ("processed", ctypes.c_uint64),
        ("compared", ctypes.c_uint64),
        ("judged_good", ctypes.c_uint64),
        ("judged_poor", ctypes.c_uint64),
        ("discarded", ctypes.c_uint64),
        ("suspended_ns", ctypes.c_int64),
        ("probation_ns", ctypes.c_int64),
        ("blocked_ns", ctypes.c_int64),
        ("target_ns", ctypes.c_int64),
        ("last_run_ns", ctypes.c_int64),
        ("last_judgment", ctypes.c_int32),
        ("regulating", ctypes.c_int32),
        ("priority", ctypes.c_int32),
        ("shared", ctypes.c_int32),
        ("regulated_threads", ctypes.c_uint32),
        ("loaded_phases", ctypes.c_uint32),
        ("forgiven", ctypes.c_uint64),
        ("busy_processed", ctypes.c_uint64),
        ("pressure_rises", ctypes.c_uint64),
        ("disk_rises", ctypes.c_uint64),
        ("shortened", ctypes.c_uint64),
    ]

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name, _ in self._fields_}


def _load() -> ctypes.CDLL:
    candidates = []
    if os.environ.get("MANNERS_LIBRARY"):
        candidates.append(os.environ["MANNERS_LIBRARY"])
    if _INSTALLED_LIBRARY:
        candidates.append(_INSTALLED_LIBRARY)
    candidates.append("libmanners.so.0")
    found = ctypes.util.find_library("manners")
    if found:
        candidates.append(found)
    errors = []
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(f"{name}: {e}")
    raise ImportError("libmanners.so.0 not found (set MANNERS_LIBRARY): " + "; ".join(errors))


_lib = _load()
_lib.manners_testpoint.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
_lib.manners_set_priority.argtypes = [ctypes.c_int]
_lib.manners_leave.argtypes = []
_lib.manners_config_set.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_lib.manners_config_get.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
_lib.manners_stats.argtypes = [ctypes.POINTER(Stats), ctypes.c_size_t]
_lib.manners_save.argtypes = []
_lib.manners_resume.argtypes = []
for _f in (_lib.manners_testpoint, _lib.manners_set_priority, _lib.manners_leave,
           _lib.manners_config_set, _lib.manners_config_get, _lib.manners_stats,
           _lib.manners_save, _lib.manners_resume):
    _f.restype = ctypes.c_int
# A signal ends a wait in the library (-EINTR), so that Python runs its
# handler at once; testpoint() then resumes the wait.
_lib.manners_config_set(b"interruptible", b"1")


def _run_signal_handlers() -> None:
    """Python's handlers of the signals that came, now (KeyboardInterrupt
    raises from here): PyErr_CheckSignals, through ctypes.pythonapi, which
    raises what a handler raised.  Where there is no pythonapi (not
    CPython), a bytecode loop's back-edge, where the interpreter runs them
    too."""
    api = getattr(ctypes, "pythonapi", None)
    if api is not None and hasattr(api, "PyErr_CheckSignals"):
        api.PyErr_CheckSignals()
        return
    for _ in range(2):
        pass


def _check(rc: int, what: str) -> int:
    if rc < 0:
        raise MannersError(-rc, f"{what}: {os.strerror(-rc)}")
    return rc


_C_INT_MIN, _C_INT_MAX = -(1 << 31), (1 << 31) - 1


def _c_int(value, what: str) -> int:
    """An integer the C int parameter holds: ctypes would silently keep the
    low 32 bits of a larger one (index 2**32 became 0), and int() would cut
    a float.  TypeError for a non-integer, OverflowError out of range."""
    value = operator.index(value)  # TypeError for 1.5, "1", None
    if not _C_INT_MIN <= value <= _C_INT_MAX:
        raise OverflowError(f"{what} {value} is out of the range of a C int")
    return value


def _c_string(text, what: str) -> bytes:
    """A str for a C string: ctypes passes bytes and would end it at its
    first NUL, so "hung\\0x" would set "hung".  Encoded as os.fsencode()
    does, so that a path os.listdir() gave (undecodable bytes as
    surrogates) names the same file."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str, not {type(text).__name__}")
    if "\0" in text:
        raise ValueError(f"{what} contains a NUL character: {text!r}")
    return os.fsencode(text)


def _setting_text(value) -> bytes:
    """A setting's value as manners(3) reads it: True and False as 1 and 0
    (str(True) is "True", which no setting takes), a number as its
    decimal text, a path (str, bytes or os.PathLike) as its bytes."""
    if isinstance(value, bool):
        return b"1" if value else b"0"
    # Any real number: numpy's integers are no int, a Fraction no float.
    if isinstance(value, numbers.Integral):
        return _c_string(str(int(value)), "config_set: value")
    if isinstance(value, numbers.Real):
        return _c_string(repr(float(value)), "config_set: value")
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, bytes):
        if b"\0" in value:
            raise ValueError(f"config_set: value contains a NUL byte: {value!r}")
        return value
    if isinstance(value, str):
        return _c_string(value, "config_set: value")
    raise TypeError(f"config_set: value must be str, bytes, a path, a number or a bool, "
                    f"not {type(value).__name__}")


def testpoint(index: int, progress: Iterable[float]) -> None:
    """Progress of each metric since this thread's previous testpoint; blocks
    until the thread may go on.  Raises MannersError(EINVAL, ...) for a bad
    count or value (negative, NaN, infinite or above PROGRESS_MAX),
    MannersError(ENOSPC, ...) when too many indexes are used;
    TypeError for progress that is not an iterable of real numbers (a str or
    bytes is one, of characters: "12" would be the metrics 1 and 2, b"12"
    49 and 50), OverflowError for an index out of the range of a C int."""
    index = _c_int(index, "testpoint: index")
    if isinstance(progress, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"testpoint: progress must be numbers, not {type(progress).__name__}")
    values = []
    for v in progress:
        if not isinstance(v, numbers.Real):
            raise TypeError(f"testpoint: progress must be numbers, not {type(v).__name__}")
        values.append(float(v))
    if not 1 <= len(values) <= METRICS_MAX:
        raise MannersError(_errno.EINVAL, f"testpoint: {len(values)} metrics")
    array = (ctypes.c_double * len(values))(*values)
    # ctypes releases the GIL for the call: other Python threads run while
    # this one is suspended.  -EINTR (the binding sets "interruptible"): a
    # signal came during the wait, which ended there so that Python can run
    # its handlers now - Ctrl-C raises KeyboardInterrupt at once, not when a
    # suspension of minutes is over - and then the rest is waited out, as
    # Python retries a call a handler interrupted (PEP 475).
    rc = _lib.manners_testpoint(index, len(values), array)
    while rc == -_errno.EINTR:
        _run_signal_handlers()
        rc = _lib.manners_resume()
    _check(rc, "testpoint")


def set_priority(priority: int) -> None:
    """This thread's priority among regulated threads, -8 .. 8."""
    _check(_lib.manners_set_priority(_c_int(priority, "set_priority: priority")),
           "set_priority")


def leave() -> None:
    """This thread stops being regulated until its next testpoint."""
    _check(_lib.manners_leave(), "leave")


def config_set(name: str, value) -> None:
    """A setting by name (manners(3)); MannersError ENOENT, EINVAL or
    ENAMETOOLONG;
    TypeError for a name that is not a str or a value that is not a str,
    bytes, path, number or bool; ValueError for a NUL in either.  A bool
    is 1 or 0."""
    name_c = _c_string(name, "config_set: name")
    value_c = _setting_text(value)
    _check(_lib.manners_config_set(name_c, value_c), f"config_set {name}")


def config_get(name: str) -> str:
    """A setting's value as text; as config_set for the name."""
    name_c = _c_string(name, "config_get: name")
    buffer = ctypes.create_string_buffer(1024)
    _check(_lib.manners_config_get(name_c, buffer, len(buffer)), f"config_get {name}")
    return os.fsdecode(buffer.value)


def stats() -> Stats:
    """This thread's regulation so far."""
    s = Stats()
    _check(_lib.manners_stats(ctypes.byref(s), ctypes.sizeof(s)), "stats")
    return s


def save() -> None:
    """Write the targets to the state file now."""
    _check(_lib.manners_save(), "save")


# Not for code from -c, -m at start-up or standard input ("-"): there is no
# script to name, and "$PWD/-" would name the state file after a directory.
if not os.environ.get("MANNERS_PROGRAM") and sys.argv and sys.argv[0] not in ("", "-c", "-m", "-"):
    try:
        config_set("program", os.path.abspath(sys.argv[0]))
    except MannersError:
        pass
