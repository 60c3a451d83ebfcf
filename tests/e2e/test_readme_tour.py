"""The README's five-minute tour, replayed as written against the stack `make run` starts.

The tour's ``console`` blocks are read from README.md and their commands run verbatim, in order, in one
shell (so that what one line exports the next sees), from a folder that holds what a checkout holds for
them (``.venv`` and ``scripts/``). The only substitution is the one the README itself asks of its reader:
the port in ``TOME_URL``, since the stack runs on a free port here (``make run PORT=...`` does the same).
The stack is started as ``make run`` starts it (scripts/run_embedded.py in that folder, TOME_API_PORT set),
and stopped as Ctrl-C stops it: SIGINT to that process alone, which must stop quietly.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.api_server import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README_URL = "http://127.0.0.1:8000"
LISTEN_TIMEOUT = 300.0
TOUR_TIMEOUT = 240.0


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)  # output lines the README shows under the command


def tour_steps(readme: str) -> list[Step]:
    """The commands of the tour's ``console`` blocks, continuation lines joined, each with the output lines
    the README prints under it."""
    section = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    steps: list[Step] = []
    for block in re.findall(r"```console\n(.*?)```", section, flags=re.DOTALL):
        continuing = False
        for line in block.splitlines():
            if continuing:
                steps[-1].command += "\n" + line
            elif line.startswith("$ "):
                steps.append(Step(line[2:]))
            elif line.strip():
                steps[-1].expected.append(line)
            continuing = line.endswith("\\")
    return steps


def test_the_tour_parses_into_the_commands_a_reader_types() -> None:
    steps = tour_steps((ROOT / "README.md").read_text(encoding="utf-8"))
    commands = [step.command for step in steps]
    assert commands[0].startswith("make run")
    assert any(c.startswith("curl ") and "\n" in c for c in commands), "a continued line is one command"
    # The port is written once, where the reader sets it; every other line follows TOME_URL.
    assert [c for c in commands if "8000" in c] == [next(c for c in commands if "TOME_URL=" in c)]


def test_readme_tour_runs_as_written(tmp_path: Path) -> None:
    steps = tour_steps((ROOT / "README.md").read_text(encoding="utf-8"))
    assert steps[0].command.startswith("make run")
    venv = Path(sys.executable).parent.parent
    assert (venv / "bin" / "tome").exists(), "the tour needs the project installed (its `tome` command)"
    (tmp_path / ".venv").symlink_to(venv)
    (tmp_path / "scripts").symlink_to(ROOT / "scripts")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    stack_log = tmp_path / "make-run.log"
    with stack_log.open("wb") as log:
        stack = subprocess.Popen(
            [sys.executable, "scripts/run_embedded.py"],
            cwd=tmp_path,
            env={**env, "TOME_API_PORT": str(port)},
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
    try:
        deadline = time.monotonic() + LISTEN_TIMEOUT
        while f"tome: listening on {url}" not in stack_log.read_text(errors="replace"):
            assert stack.poll() is None, stack_log.read_text(errors="replace")
            assert time.monotonic() < deadline, stack_log.read_text(errors="replace")
            time.sleep(0.2)
        results = run_in_one_shell(
            [step.command.replace(README_URL, url) for step in steps[1:]], tmp_path, env
        )
        for step, (rc, out, err) in zip(steps[1:], results, strict=False):
            assert rc == 0, f"{step.command}\nexit {rc}\n{out}\n{err}\n{stack_log.read_text()[-4000:]}"
            for line in step.expected:
                assert line in out.splitlines(), f"{step.command}: expected {line!r} in\n{out}"
        assert len(results) == len(steps) - 1, "every command ran"
    finally:
        # Ctrl-C: the terminal's SIGINT reaches make run's process alone (its children have their own group).
        stack.send_signal(signal.SIGINT)
        rc = stack.wait(timeout=60)
    stopped = stack_log.read_text(errors="replace")
    assert rc == 0, stopped[-3000:]
    assert "Traceback" not in stopped, stopped[-6000:]
    assert "KeyboardInterrupt" not in stopped

    # What the tour promises it made.
    assert (tmp_path / "sample.wav").read_bytes()[:4] == b"RIFF"
    assert (tmp_path / "book.m4b").read_bytes()[4:8] == b"ftyp"
    welcome = (tmp_path / "welcome.mp3").read_bytes()
    assert welcome[:3] == b"ID3" or welcome[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"), welcome[:64]


def run_in_one_shell(commands: list[str], folder: Path, env: dict[str, str]) -> list[tuple[int, str, str]]:
    """Run ``commands`` in order in one bash (exports carry over), stopping at the first that fails; each
    command's exit status, stdout and stderr."""
    script = []
    for n, command in enumerate(commands):
        script.append(f"{{\n{command}\n}} >.tour/out.{n} 2>.tour/err.{n}\nrc=$?\necho $rc >.tour/rc.{n}")
        script.append('[ "$rc" = 0 ] || exit "$rc"')
    (folder / ".tour").mkdir()
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=folder, env=env, timeout=TOUR_TIMEOUT, check=False)
    results = []
    for n in range(len(commands)):
        if not (folder / ".tour" / f"rc.{n}").exists():
            break
        results.append(
            (
                int((folder / ".tour" / f"rc.{n}").read_text()),
                (folder / ".tour" / f"out.{n}").read_text(errors="replace"),
                (folder / ".tour" / f"err.{n}").read_text(errors="replace"),
            )
        )
    return results
