"""Waiting for a quiet machine before a timed run (the bench scripts share it)."""

import os
import time
from typing import Tuple


def _cpu_jiffies() -> Tuple[int, int]:
    """(total, idle) jiffies of the machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]


def settle(limit_s: float = 20.0, window_s: float = 0.25, busy_cpus: float = 0.25) -> float:
    """Waits until the machine is quiet (less than ``busy_cpus`` CPUs busy over
    a ``window_s`` window), at most ``limit_s``; returns the seconds waited.

    What a previous run left behind would otherwise be paid by the next: after
    the hook benchmark's every-step configuration, for instance, the collector
    compacts what it took for about 3 s at ~70 % of a core. The dirty pages
    a previous run left in the page cache are written back first (``sync``):
    the kernel's writeback of a run that saved 500 MB would otherwise run
    during the next one, on any CPU."""
    start = time.monotonic()
    os.sync()
    ncpu = os.cpu_count() or 1
    before = _cpu_jiffies()
    while time.monotonic() - start < limit_s:
        time.sleep(window_s)
        after = _cpu_jiffies()
        total, idle = after[0] - before[0], after[1] - before[1]
        before = after
        if total > 0 and (1.0 - idle / total) * ncpu < busy_cpus:
            break
    return time.monotonic() - start
