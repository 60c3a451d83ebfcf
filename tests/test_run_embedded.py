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
        (
            {"TOME_ENGINE": "espeak-paced"},
            "unknown TTS engine 'espeak-paced' (available: espeak, fish-speech",
        ),
        ({"TOME_ENGINE_MODULES": "no_such_engines"}, "cannot import engine module 'no_such_engines'"),
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


def _load_run_embedded() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_embedded", ROOT / "scripts" / "run_embedded.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_secret_key_is_made_once_private_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.config import load_settings

    run_embedded = _load_run_embedded()
    monkeypatch.delenv("TOME_SECRET_KEY", raising=False)
    settings = load_settings({"TOME_DATA_DIR": str(tmp_path)})
    first = run_embedded.ensure_secret_key(settings)  # type: ignore[attr-defined]
    path = tmp_path / "secret.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(first.security.secret_key) >= 32
    assert first.security.secret_key == path.read_text().strip()
    assert os.environ["TOME_SECRET_KEY"] == first.security.secret_key  # the children inherit it
    monkeypatch.delenv("TOME_SECRET_KEY")
    again = run_embedded.ensure_secret_key(settings)  # type: ignore[attr-defined]
    assert again.security.secret_key == first.security.secret_key  # kept: stored tokens stay readable


def test_a_set_secret_key_is_used_and_a_short_one_refused(tmp_path: Path) -> None:
    from worker.config import ConfigError, load_settings

    run_embedded = _load_run_embedded()
    given = load_settings({"TOME_DATA_DIR": str(tmp_path), "TOME_SECRET_KEY": "k" * 40})
    assert run_embedded.ensure_secret_key(given).security.secret_key == "k" * 40  # type: ignore[attr-defined]
    assert not (tmp_path / "secret.key").exists()
    with pytest.raises(ConfigError, match="TOME_SECRET_KEY must be at least 32"):
        load_settings({"TOME_SECRET_KEY": "short"})
