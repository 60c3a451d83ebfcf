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
(pytest's 5, "no tests selected", counts as passed: ``PYTEST_ARGS`` may name tests of one kind only).
``PYTEST_ARGS`` (from the environment) goes to both pytest runs; given, it replaces the serial files."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

NO_TESTS_COLLECTED = 5


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


def parts(args: argparse.Namespace, pytest_args: Sequence[str]) -> list[Part]:
    python = [sys.executable, "-m", "pytest"]
    ok = frozenset({0, NO_TESTS_COLLECTED})
    serial_targets = list(pytest_args) or list(args.serial_files)
    return [
        Part(
            "serial",
            [*python, *shlex.split(args.serial), "-m", "serial", *serial_targets],
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
        preexec_fn=lower_priority if part.idle else None,  # noqa: PLW1509 - one thread here, before any other
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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    pytest_args = shlex.split(os.environ.get("PYTEST_ARGS", ""))
    running = parts(args, pytest_args)
    with tempfile.TemporaryDirectory(prefix="tome-make-test-") as folder:
        try:
            for part in running:
                start(part, Path(folder))
            wait_all(running)
        except KeyboardInterrupt:  # the terminal sent SIGINT to every part too: let them end their way
            for part in running:
                if part.proc is not None:
                    part.finish(part.proc.wait())
            report(running)
            return 130
        return report(running)


if __name__ == "__main__":
    sys.exit(main())
