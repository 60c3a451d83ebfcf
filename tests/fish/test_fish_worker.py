"""End to end with the ``fish-speech`` engine: a job through real Celery worker processes.

The worker loads the tiny checkpoint (built here) through the engine's real loading path, warms it up at
process start, encodes the voice's reference into DAC codes once, and renders every chunk from those
cached codes; a second job in a new worker process reads the prompt file and encodes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from tests.api.helpers import upload_voice
from tests.fish.tiny_checkpoint import build_tiny_checkpoint
from tests.support.apps import app_on, tome_of
from tests.support.audio import reference_wav
from tests.support.engine_jobs import prompt_counts, render
from webapi.cli import mint_key
from worker import counters
from worker.audio import read_wav
from worker.config import Settings, load_settings

pytestmark = pytest.mark.e2e

SCRIPT = """# The Crossing

The ferry left the harbour at dawn.

Nobody on deck said a word.
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("fish-e2e") / "tiny-s1")


@pytest.fixture
def engine_env(model_dir: Path) -> dict[str, str]:
    """The engine's settings: given to this process's app (the API builds the engine to size chunks) and
    to the workers through their environment."""
    return {
        "TOME_FISH_MODEL_DIR": str(model_dir),
        "TOME_FISH_DEVICE": "cpu",
        "TOME_FISH_MAX_NEW_TOKENS": "12",
    }


def _counts(app: Flask) -> dict[str, float]:
    return prompt_counts(app, "fish-speech")


def _render(client: FlaskClient, user: dict[str, str], title: str) -> dict[str, Any]:
    return render(client, user, "fish-speech", title=title, script=SCRIPT, output={"format": "flac"})


def test_a_job_renders_through_real_workers_with_one_prompt_build(
    tmp_path: Path, engine_env: dict[str, str], start_worker: Callable[..., Any]
) -> None:
    from models import Chunk, Voice

    settings: Settings = load_settings(engine_env, data_dir=tmp_path / "var", engine="fish-speech")
    with app_on(settings) as app:
        client = app.test_client()
        user = {"Authorization": f"Bearer {mint_key(app, owner='alice', name='test', admin=False)}"}
        audio, transcript = reference_wav(
            tmp_path, "The old lighthouse keeper climbed the stairs every evening."
        )
        uploaded = upload_voice(client, user, audio, name="narrator", ref_text=transcript)
        assert uploaded.status_code == 202, uploaded.json

        worker = start_worker(settings, extra_env=engine_env)
        first = _render(client, user, "Crossing")
        assert "engine fish-speech warmed up" in worker.log()
        sessions = tome_of(app).sessions
        chunks = sessions.scalars(select(Chunk).where(Chunk.job_id == uuid.UUID(first["id"]))).all()
        assert len(chunks) == 3
        for chunk in chunks:
            samples, rate = read_wav(Path(str(chunk.audio_path)))
            assert rate == 44100
            assert samples.size > 0
        voice = sessions.get(Voice, uuid.UUID(uploaded.json["id"]))
        assert voice is not None
        assert voice.cache_status == "ready"
        assert str(voice.cache_key).startswith("fish-speech/fish-speech/prompt-v1/0.1.0/")
        worker.stop()  # counters are flushed by the process: read them once it has stopped
        assert _counts(app)[counters.BUILDS] == 1

        # A new worker process: the prompt file is read, never encoded again.
        second_worker = start_worker(settings, extra_env=engine_env)
        _render(client, user, "Again")
        second_worker.stop()
        assert _counts(app)[counters.BUILDS] == 1
