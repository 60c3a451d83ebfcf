"""``make test``: lint, the parallel part of the suite and its serial part, all three at once.

The tests marked ``serial`` compare the timings of processes they start (an API, Celery workers): they
must not share the CPU with other work. They run at the normal CPU priority; lint and the parallel part
run at the idle one (Linux's ``SCHED_IDLE``; ``nice 19`` where there is none), which is given a core only
when no normal process wants it. So the serial tests see the CPU as if the machine were theirs, and lint
and the parallel part take the cores the serial tests leave idle while they wait on their own processes
(most of two cores, over their three minutes): ``make test`` ends about when the parallel part does,
where lint, then the parallel part, then the serial part took the sum (docs/benchmarks.md, "Test suite
time"). Disk and the shared PostgreSQL and Redis servers are not prioritised; the serial tests' timings
measured beside the parallel part match their timings alone (the same page).

The parallel part's output streams to the terminal; lint's and the serial part's are kept in files and
printed after it (a line says when each ends, and how). The exit status is 0 when every part passed
(where ``PYTEST_ARGS`` names tests of one kind only, pytest's 5, "no tests selected", counts as passed).
``PYTEST_ARGS`` (from the environment, split as a shell splits words, without expanding globs or
variables) goes to both pytest runs; given, it replaces the serial files. The serial part's output is
kept in a file, so ``-s`` or ``--pdb`` there looks like a hang: run pytest itself for those.
Ctrl-C or SIGTERM stops every part (each gets time to run its teardowns) and still prints the logs."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

NO_TESTS_COLLECTED = 5
# After Ctrl-C, which the terminal sends to every part too: how long they get to end their way (pytest runs
# its teardowns: the workers, API servers and browsers the tests started are stopped). Then, as after a
# SIGTERM sent to this process alone, SIGINT, and how long they get after it; then SIGTERM, and then kill.
ENDING_S = 60.0
AFTER_SIGINT_S = 60.0
AFTER_SIGTERM_S = 10.0


class Stop(Exception):
    """SIGTERM (CI cancelling the run, a timeout): stop the parts as Ctrl-C would."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


@dataclass
class Part:
    name: str
    argv: list[str]
    idle: bool
    stream: bool = False
    passing: frozenset[int] = frozenset({0})
    log: IO[bytes] | None = None
    proc: subprocess.Popen[bytes] | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    code: int | None = None

    def finish(self, code: int) -> None:
        self.code = code
        self.ended = time.monotonic()


def lower_priority() -> None:
    """Run this process (and, inherited, everything it starts) only on CPU nobody else wants."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux: the lowest nice level is the nearest thing
        os.nice(19)


def _child_setup(idle: bool) -> None:
    """In each part, before it runs: SIGINT back to its default, so that the SIGINT this runner sends
    stops the part even where the runner was started with SIGINT ignored (a shell's background job
    ignores it, and the command it runs inherits that); then the idle priority, for ``idle`` parts."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if idle:
        lower_priority()


def parts(args: argparse.Namespace, pytest_args: Sequence[str]) -> list[Part]:
    python = [sys.executable, "-m", "pytest"]
    # "No tests selected" passes only where PYTEST_ARGS narrowed the run: a whole run that collects
    # nothing is a failure.
    ok = frozenset({0, NO_TESTS_COLLECTED}) if pytest_args else frozenset({0})
    serial_targets = list(pytest_args) or list(args.serial_files)
    # The serial part keeps its own cache folder: both runs write their failures (--lf) at the end.
    serial_cache = ["-o", "cache_dir=.pytest_cache/serial"]
    return [
        Part(
            "serial",
            [*python, *shlex.split(args.serial), *serial_cache, "-m", "serial", *serial_targets],
            idle=False,
            passing=ok,
        ),
        Part("lint", [args.make, "--no-print-directory", "lint"], idle=True),
        Part(
            "parallel",
            [*python, *shlex.split(args.parallel), "-m", "not serial", *pytest_args],
            idle=True,
            stream=True,
            passing=ok,
        ),
    ]


def start(part: Part, folder: Path) -> None:
    if not part.stream:
        part.log = (folder / f"{part.name}.log").open("w+b")
    part.started = time.monotonic()
    part.proc = subprocess.Popen(
        part.argv,
        stdout=part.log,
        stderr=subprocess.STDOUT if part.log else None,
        preexec_fn=functools.partial(_child_setup, part.idle),  # noqa: PLW1509 - one thread here
    )


def outcome(part: Part) -> str:
    assert part.code is not None
    assert part.ended is not None
    verdict = "passed" if part.code in part.passing else f"FAILED (exit status {part.code})"
    return f"make test: {part.name} {verdict} in {part.ended - part.started:.0f} s"


def wait_all(running: list[Part]) -> None:
    """Wait for every part; say when each captured one ends (the streamed one's output says it)."""
    waiting = list(running)
    while waiting:
        for part in list(waiting):
            assert part.proc is not None
            code = part.proc.poll()
            if code is None:
                continue
            part.finish(code)
            waiting.remove(part)
            if not part.stream:
                print(f"\n{outcome(part)}; its output follows the parallel part's", flush=True)
        if waiting:
            time.sleep(0.5)


def report(running: list[Part]) -> int:
    for part in running:
        if part.log is None:
            continue
        part.log.seek(0)
        print(f"\n{'=' * 30} {part.name} {'=' * 30}", flush=True)
        sys.stdout.buffer.write(part.log.read())
        sys.stdout.flush()
        part.log.close()
    print()
    for part in running:
        if part.code is not None:
            print(outcome(part))
    return 0 if all(part.code in part.passing for part in running) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--make", default="make", help="the make that runs `lint`")
    parser.add_argument("--parallel", default="", help="pytest options of the parallel part")
    parser.add_argument("--serial", default="", help="pytest options of the serial part")
    parser.add_argument("serial_files", nargs="*", help="the files that mark a test serial")
    return parser


def stop_all(running: list[Part], *, signalled: bool) -> None:
    """Stop every part still running and wait for it: ``signalled`` (Ctrl-C reached the parts too) lets
    them end their way first; then SIGINT (what Ctrl-C sends), SIGTERM, and kill, each after a wait."""
    steps: list[tuple[signal.Signals | None, float]] = [(None, ENDING_S)] if signalled else []
    steps += [(signal.SIGINT, AFTER_SIGINT_S), (signal.SIGTERM, AFTER_SIGTERM_S)]
    for sent, grace in steps:
        alive = [part.proc for part in running if part.proc is not None and part.proc.poll() is None]
        for proc in alive:
            if sent is not None:
                proc.send_signal(sent)
        deadline = time.monotonic() + grace
        for proc in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for part in running:
        if part.proc is None:
            continue
        if part.proc.poll() is None:
            part.proc.kill()
        if part.code is None:
            part.finish(part.proc.wait())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    pytest_args = shlex.split(os.environ.get("PYTEST_ARGS", ""))
    running = parts(args, pytest_args)
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    with tempfile.TemporaryDirectory(prefix="tome-make-test-") as folder:
        try:
            for part in running:
                start(part, Path(folder))
            wait_all(running)
        except (KeyboardInterrupt, Stop, OSError) as stopped:
            print(f"\nmake test: stopping ({type(stopped).__name__} {stopped})", file=sys.stderr, flush=True)
            signalled = isinstance(stopped, KeyboardInterrupt)
            while True:
                try:
                    stop_all(running, signalled=signalled)
                    break
                except (KeyboardInterrupt, Stop):  # asked again: SIGINT now, no ending time
                    signalled = False
            report(running)
            return 1 if isinstance(stopped, OSError) else 130
        finally:
            signal.signal(signal.SIGTERM, previous)
        return report(running)


if __name__ == "__main__":
    sys.exit(main())
