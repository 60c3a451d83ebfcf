"""What a piece of work costs the machine, measured so that other work on it does not change the figure."""

from __future__ import annotations

import gc
import os
import threading
import time


def _thread_clock(tid: int) -> int:
    """The CPU-time clock of thread ``tid`` of this process (Linux's encoding of a per-thread clock id:
    ``~tid << 3`` with the per-thread bit and the scheduler clock, as glibc builds it)."""
    return (~tid << 3) | 6


def _other_threads() -> dict[int, int]:
    """Nanoseconds of CPU each other thread of this process has used so far (Linux; empty elsewhere)."""
    try:
        tids = [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return {}
    current = threading.get_native_id()
    used: dict[int, int] = {}
    for tid in tids:
        if tid == current:
            continue
        try:
            used[tid] = time.clock_gettime_ns(_thread_clock(tid))
        except OSError:  # ended since the listing
            continue
    return used


class CpuMeter:
    """CPU time spent on the work done since this meter was made: by this thread, by threads that work
    started, and by the child processes it waited for (ffmpeg).

    Tests that bound what an input may cost compare this, not wall time: what a request costs the server is
    what an attacker can multiply, and CPU time does not grow when other work shares the machine (a loaded
    CI runner stretched the wall time of cheap work past fixed limits). Threads that were already running
    when the meter started (metrics flushers, pools and whatever an earlier test left behind) are not this
    work's cost: their CPU meanwhile is taken back out of the process's total. A thread that ends while the
    meter runs cannot be read any more, so its time stays in (the figure can only err high).

    Objects that existed when the meter started are frozen (``gc.freeze``) until :meth:`seconds` is first
    called: a garbage collection that the measured work's allocations trigger then scans what that work
    made, not the whole heap of the test process (which grows with every module the suite has imported:
    a full collection there cost 0.2-1 s and was counted against whatever request triggered it)."""

    def __init__(self) -> None:
        gc.freeze()
        self._frozen = True
        self._others = _other_threads()
        self._start = self._total()

    @staticmethod
    def _total() -> float:
        children = os.times()
        return time.process_time() + children.children_user + children.children_system

    def seconds(self) -> float:
        total = self._total() - self._start
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
        now = _other_threads()
        elsewhere = sum(max(0, now[tid] - before) for tid, before in self._others.items() if tid in now)
        return max(0.0, total - elsewhere / 1e9)
