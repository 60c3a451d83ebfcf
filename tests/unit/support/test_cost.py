"""The CPU meter the cost tests rely on: it counts the work measured, not what other threads do meanwhile."""

from __future__ import annotations

import gc
import threading
import time

from tests.support.cost import CpuMeter


def _spin(seconds: float) -> None:
    """Burn about ``seconds`` of this thread's CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_work_in_this_thread_is_counted() -> None:
    meter = CpuMeter()
    _spin(0.2)
    assert 0.18 <= meter.seconds() < 1.0


def test_a_thread_that_was_already_running_is_not_counted() -> None:
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            _spin(0.01)

    other = threading.Thread(target=busy, daemon=True)
    other.start()
    try:
        time.sleep(0.05)
        meter, process_before = CpuMeter(), time.process_time()
        # The other thread burns 0.3 s of CPU while this one sleeps; waited for by the CPU it used, not
        # by the clock, so a loaded machine (the other thread scheduled less) only makes it take longer.
        deadline = time.monotonic() + 60
        while time.process_time() - process_before < 0.3 and time.monotonic() < deadline:
            time.sleep(0.02)
        cost = meter.seconds()
        process = time.process_time() - process_before
    finally:
        stop.set()
        other.join()
    assert process >= 0.3  # the process total, which the meter corrects, did count it
    assert cost < 0.1, cost


def test_a_thread_the_work_starts_is_counted() -> None:
    meter = CpuMeter()
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            _spin(0.01)

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        # Read while it still runs (it spins until told to stop); waited for by the CPU the process used,
        # not by the clock, so a loaded machine only makes it take longer.
        process_before, deadline = time.process_time(), time.monotonic() + 60
        while time.process_time() - process_before < 0.1 and time.monotonic() < deadline:
            time.sleep(0.005)
        seen = meter.seconds()
    finally:
        stop.set()
        worker.join()
    assert seen > 0.05, seen
    assert meter.seconds() >= seen


def test_a_collection_the_work_triggers_does_not_scan_the_heap_that_was_there_before() -> None:
    """The test process's heap (every module the suite imported) is not the measured work's: a full
    collection during the work scans only what the work allocated."""
    heap = [[i] for i in range(2_000_000)]  # containers the collector must visit
    started = time.process_time()
    gc.collect()
    whole = time.process_time() - started
    meter = CpuMeter()
    gc.collect()
    cost = meter.seconds()
    del heap
    assert whole > 0.02, whole  # the heap is big enough for its scan to show
    assert cost < whole / 4, (cost, whole)
    assert gc.get_freeze_count() == 0  # the heap is collectable again once the work is measured
