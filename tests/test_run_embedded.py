"""`make run`'s script refuses an engine it cannot build before it starts anything, naming what to set
(the stack it starts, its listening line and its quiet Ctrl-C: tests/e2e/test_readme_tour.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        ({"TOME_ENGINE": "qwen3-tts"}, "set TOME_QWEN3_MODEL_DIR"),
        ({"TOME_ENGINE": "fish-speech", "TOME_FISH_MODEL_DIR": "/nonexistent"}, "lacks config.json"),
        ({"TOME_API_PORT": "70000"}, "TOME_API_PORT must be a TCP port"),
    ],
)
def test_an_engine_or_setting_it_cannot_use_is_said_before_anything_starts(
    tmp_path: Path, engine: dict[str, str], said: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_embedded.py")],
        cwd=tmp_path,
        env={**env, **engine},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert said in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "var").exists()  # no database, key or broker folder was made
