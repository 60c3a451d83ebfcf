"""Where the CPU went while a test timed something: the CPU seconds of named process trees (a process and
its live descendants, read from /proc) and of the whole machine over a window. Linux only; a process that
ended counts for nothing (its time is not read back)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _own_seconds(pid: int) -> float:
    """utime + stime of one process, in seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def descendants(pid: int) -> list[int]:
    """The live children of ``pid``, their children and so on."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found


def tree_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants."""
    return sum(_own_seconds(p) for p in [pid, *descendants(pid)])


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy since boot (all processes, the kernel's too)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) / _TICK


@dataclass(frozen=True)
class CpuWindow:
    """The CPU seconds each named tree and the machine spent over ``wall`` seconds."""

    wall: float
    trees: Mapping[str, float]
    machine: float

    def describe(self) -> str:
        parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in self.trees.items())
        return f"{self.wall:.2f} s wall; CPU s: {parts}; whole machine {self.machine:.2f}"


class CpuMeter:
    """``start()``, then ``stop()`` gives the :class:`CpuWindow` between the two for the process trees
    (name -> root pid) and the single processes (name -> pid, without their children) named at
    construction."""

    def __init__(self, trees: Mapping[str, int], processes: Mapping[str, int] | None = None) -> None:
        self._trees = dict(trees)
        self._processes = dict(processes or {})
        self._start: tuple[float, dict[str, float], float] | None = None

    def _now(self) -> tuple[float, dict[str, float], float]:
        seconds = {n: tree_seconds(p) for n, p in self._trees.items()}
        seconds.update({n: _own_seconds(p) for n, p in self._processes.items()})
        return time.monotonic(), seconds, machine_busy_seconds()

    def start(self) -> None:
        self._start = self._now()

    def stop(self) -> CpuWindow:
        assert self._start is not None, "start() first"
        wall0, trees0, machine0 = self._start
        wall1, trees1, machine1 = self._now()
        return CpuWindow(wall1 - wall0, {n: trees1[n] - trees0[n] for n in trees1}, machine1 - machine0)
