"""What a piece of work costs the machine, measured so that other work on it does not change the figure."""

from __future__ import annotations

import os
import time


def cpu_seconds() -> float:
    """CPU time of this process (every thread) plus that of the child processes it has waited for (ffmpeg).

    Tests that bound what an input may cost compare differences of this, not of wall time: what a request
    costs the server is what an attacker can multiply, and CPU time does not grow when other work shares
    the machine (a loaded CI runner stretched the wall time of cheap work past fixed limits)."""
    children = os.times()
    return time.process_time() + children.children_user + children.children_system
