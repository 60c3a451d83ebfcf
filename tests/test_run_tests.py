"""scripts/run_tests.py, `make test`'s runner: lint and the parallel part at the idle CPU priority beside the
serial part, every part's outcome reported, the exit status failing when any part failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parent.parent / "scripts" / "run_tests.py"
sys.path.insert(0, str(RUNNER.parent))

import run_tests  # noqa: E402


def _policy_of_child(idle: bool, tmp_path: Path) -> int:
    part = run_tests.Part(
        "probe", [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"], idle=idle
    )
    run_tests.start(part, tmp_path)
    assert part.proc is not None
    assert part.proc.wait(timeout=30) == 0
    assert part.log is not None
    part.log.seek(0)
    return int(part.log.read())


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_idle_parts_run_at_the_idle_priority_and_the_serial_part_keeps_its_own(tmp_path: Path) -> None:
    assert _policy_of_child(True, tmp_path) == os.SCHED_IDLE
    # Not lowered: what this process has (the parallel part of `make test` itself runs at the idle one).
    assert _policy_of_child(False, tmp_path) == os.sched_getscheduler(0)


def test_parts_are_what_make_asks_for() -> None:
    args = run_tests.build_parser().parse_args(
        [
            "--make=gmake",
            "--parallel=-n 4 --durations=30",
            "--serial=--durations=30",
            "tests/a.py",
            "tests/b.py",
        ]
    )
    serial, lint, parallel = run_tests.parts(args, [])
    assert (serial.idle, lint.idle, parallel.idle) == (False, True, True)
    assert serial.argv[-4:] == ["-m", "serial", "tests/a.py", "tests/b.py"]
    assert lint.argv == ["gmake", "--no-print-directory", "lint"]
    assert parallel.argv[3:] == ["-n", "4", "--durations=30", "-m", "not serial"]
    assert parallel.stream
    assert not serial.stream
    # A whole run that selects no test fails; only where PYTEST_ARGS narrowed it is that a pass.
    assert serial.passing == parallel.passing == frozenset({0})
    # PYTEST_ARGS goes to both runs and replaces the serial files.
    serial, _, parallel = run_tests.parts(args, ["-k", "voices and not slow"])
    assert serial.argv[-4:] == ["-m", "serial", "-k", "voices and not slow"]
    assert parallel.argv[-2:] == ["-k", "voices and not slow"]
    assert serial.passing == parallel.passing == frozenset({0, run_tests.NO_TESTS_COLLECTED})


def test_a_failing_lint_fails_the_run_and_every_part_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    fake_make = tmp_path / "fake-make"
    fake_make.write_text('#!/bin/sh\necho "lint was asked for: $*"\nexit 3\n')
    fake_make.chmod(0o755)
    tests = tmp_path / "suite"
    tests.mkdir()
    (tests / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    monkeypatch.setenv("PYTEST_ARGS", f"-p no:cacheprovider {tests}")
    assert run_tests.main([f"--make={fake_make}", "--parallel=-q", "--serial=-q"]) == 1
    out = capfd.readouterr().out
    assert "lint was asked for: --no-print-directory lint" in out
    assert "make test: lint FAILED (exit status 3)" in out
    assert "make test: parallel passed" in out
    # The one test is not marked serial: that run selects nothing (pytest's 5), which is not a failure.
    assert "make test: serial passed" in out
    assert "1 passed" in out

    fake_make.write_text("#!/bin/sh\nexit 0\n")
    (tests / "test_two.py").write_text("def test_two():\n    assert 1 + 1 == 3\n")
    assert run_tests.main([f"--make={fake_make}", "--parallel=-q", "--serial=-q"]) == 1
    out = capfd.readouterr().out
    assert "make test: lint passed" in out
    assert "make test: parallel FAILED (exit status 1)" in out


def test_sigterm_stops_every_part_and_still_prints_the_logs(tmp_path: Path) -> None:
    """CI cancelling the run sends SIGTERM to the runner alone: it passes SIGINT on (pytest then runs its
    teardowns), waits for every part and prints what lint and the serial part said."""
    fake_make = tmp_path / "fake-make"
    make_pid = tmp_path / "make.pid"
    fake_make.write_text(f"#!/bin/sh\necho $$ > {make_pid}\necho lint started\nexec sleep 60\n")
    fake_make.chmod(0o755)
    running = tmp_path / "running"
    tests = tmp_path / "suite"
    tests.mkdir()
    (tests / "test_slow.py").write_text(
        "import pathlib, time\n"
        f"def test_slow():\n    pathlib.Path({str(running)!r}).touch()\n    time.sleep(60)\n"
    )
    env = {**os.environ, "PYTEST_ARGS": f"-p no:cacheprovider {tests}"}
    runner = subprocess.Popen(
        [sys.executable, str(RUNNER), f"--make={fake_make}", "--parallel=-q", "--serial=-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        # As a shell's background job (CI's), and as under pytest-xdist: SIGINT ignored, inherited.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509
    )
    try:
        deadline = time.monotonic() + 60
        while not (running.exists() and make_pid.exists()):
            assert runner.poll() is None, runner.communicate()[0]
            assert time.monotonic() < deadline, "the slow test never started"
            time.sleep(0.1)
        started = time.monotonic()
        runner.send_signal(signal.SIGTERM)
        out, _ = runner.communicate(timeout=90)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 130, out
    assert time.monotonic() - started < 30, out  # told at once, not after the parts' own ending time
    assert "make test: stopping (Stop SIGTERM)" in out
    assert "lint started" in out  # the captured log, printed
    assert "make test: parallel FAILED" in out
    with pytest.raises(ProcessLookupError):  # the fake lint was stopped and reaped
        os.kill(int(make_pid.read_text()), 0)
