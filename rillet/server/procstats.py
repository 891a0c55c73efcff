"""Process figures (/varz, $SYS statsz): resident memory, CPU percentage, core counts."""
from __future__ import annotations

import os
import resource
import time

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size now (``/proc/self/statm``), or the peak RSS where /proc is missing."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return ru if os.uname().sysname == "Darwin" else ru * 1024


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


class CPUMeter:
    """CPU use in percent of one core, over the last second or so (like nats-server's pse, one decimal).

    nats-server samples in the background once a second; here each reading compares with the previous
    one that is at least ``min_window`` old, so a burst of /varz requests does not read noise.
    """

    def __init__(self, min_window: float = 1.0) -> None:
        self.min_window = min_window
        self._wall = time.monotonic()
        self._cpu = _cpu_seconds()
        self._pcpu = 0.0
        self._first = True

    def percent(self) -> float:
        now = time.monotonic()
        cpu = _cpu_seconds()
        dt = now - self._wall
        if self._first or dt >= self.min_window:
            if dt > 0:
                self._pcpu = round(max(cpu - self._cpu, 0.0) / dt * 100.0, 1)
            self._first = False
            self._wall, self._cpu = now, cpu
        return self._pcpu


def cores() -> int:
    return os.cpu_count() or 1


def usable_cores() -> int:
    """What GOMAXPROCS would be: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or cores()
    except (AttributeError, OSError):
        return cores()


def system_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * _PAGE
    except (ValueError, OSError, AttributeError):
        return 0


def disk_available(path: str) -> int:
    """75% of the space available where ``path`` is (or would be), like nats-server; 1TB if unknown."""
    p = os.path.abspath(path)
    while p and not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    try:
        st = os.statvfs(p)
        return st.f_bavail * st.f_frsize // 4 * 3
    except (OSError, AttributeError):
        return 1024 ** 4


def open_fds() -> int:
    """How many file descriptors the process has open (0 where /proc/self/fd cannot be read)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # (less the one listdir opened)
    except OSError:
        return 0
