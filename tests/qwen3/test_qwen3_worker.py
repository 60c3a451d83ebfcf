"""End to end with the ``qwen3-tts`` engine: a two-voice job through real Celery worker processes.

The worker loads the tiny checkpoint (built here) through the real ``from_pretrained`` path, warms it up at
process start, builds each voice's prompt once, and renders the job. Then:
- a second job in the same worker process hits the in-process prompt cache: no encode, no file read;
- a new worker process rendering one chunk per task (not batches) encodes nothing either (it reads each
  prompt file once) and reproduces the first job's chunks, because every chunk samples from its own seed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from tests.api.helpers import upload_voice
from tests.e2e.flow import check_output, wait_terminal
from tests.support.apps import app_on, tome_of
from tests.support.audio import reference_wav
from tests.support.engine_jobs import prompt_counts, render
from tests.support.factories import submit_job
from webapi.cli import mint_key
from worker import counters
from worker.audio import read_wav
from worker.config import Settings, load_settings

pytestmark = pytest.mark.e2e


SCRIPT = """# The Crossing

<!-- voice: narrator -->
The ferry left the harbour at dawn. Nobody on deck said a word.

<!-- voice: captain -->
"Hold on to the rail," said the captain. "The sea is rough today."

<!-- voice: narrator -->
And so it was, all the way to the island.
"""

# Lossless, so that the output check can find every chunk's samples at its place: the tiny checkpoint's
# random weights make noise-like audio, whose waveform an MP3 encoder does not keep.
FLAC = {"format": "flac"}

# Chunks and their voices, as the script above makes them (heading, narrator, captain, narrator).
VOICES = ["narrator", "narrator", "captain", "narrator"]


@pytest.fixture
def engine_env(tiny_dir: Path) -> dict[str, str]:
    """The engine's settings: given to this process's app (the API builds the engine to size chunks) and
    to the workers through their environment."""
    return {
        "TOME_QWEN3_MODEL_DIR": str(tiny_dir),
        "TOME_QWEN3_DEVICE": "cpu",
        "TOME_QWEN3_MAX_NEW_TOKENS": "40",
    }


def _counts(app: Flask) -> dict[str, float]:
    return prompt_counts(app, "qwen3-tts")


def _chunk_audio(app: Flask, job_id: str) -> list[tuple[str, np.ndarray]]:
    from models import Chunk

    sessions = tome_of(app).sessions
    chunks = sessions.scalars(
        select(Chunk).where(Chunk.job_id == uuid.UUID(job_id)).order_by(Chunk.seq)
    ).all()
    return [(str(c.voice_id), read_wav(Path(str(c.audio_path)))[0]) for c in chunks]


def _render(client: FlaskClient, user: dict[str, str], title: str) -> dict[str, Any]:
    return render(client, user, "qwen3-tts", title=title, script=SCRIPT, output=FLAC)


def test_two_voice_job_renders_through_real_workers_and_reuses_prompts(
    tmp_path: Path,
    engine_env: dict[str, str],
    start_worker: Callable[..., Any],
) -> None:
    # Counters written as they happen (no batching): they are read while the worker runs.
    settings: Settings = load_settings(
        engine_env, data_dir=tmp_path / "var", engine="qwen3-tts", metrics_flush_seconds=0
    )
    with app_on(settings) as app:
        client = app.test_client()
        user = {"Authorization": f"Bearer {mint_key(app, owner='alice', name='test', admin=False)}"}
        voice_ids = {}
        for name, text in [
            ("narrator", "The old lighthouse keeper climbed the stairs every evening."),
            ("captain", "Ships came in with the tide, and left again before the storm."),
        ]:
            folder = tmp_path / name
            folder.mkdir()
            audio, transcript = reference_wav(folder, text)
            uploaded = upload_voice(client, user, audio, name=name, ref_text=transcript)
            assert uploaded.status_code == 202, uploaded.json
            voice_ids[name] = uploaded.json["id"]

        first_worker = start_worker(settings, extra_env=engine_env)
        first = _render(client, user, "Crossing")
        check_output(app, client, user, first)
        assert "engine qwen3-tts warmed up" in first_worker.log()
        rendered = _chunk_audio(app, first["id"])
        assert [voice for voice, _ in rendered] == [voice_ids[name] for name in VOICES]
        assert all(samples.size > 0 for _, samples in rendered)
        after_first = _counts(app)
        assert after_first[counters.BUILDS] == 2  # one encode per voice
        assert after_first[counters.MISSES] <= 2  # each prompt file read at most once by the one process

        # Same worker process: the prompts come from its LRU. No encode, no file read.
        _render(client, user, "Again")
        after_second = _counts(app)
        assert after_second[counters.BUILDS] == 2
        assert after_second[counters.MISSES] == after_first[counters.MISSES]
        assert after_second[counters.HITS] > after_first.get(counters.HITS, 0.0)

        # A new process rendering one chunk per task: prompts read from their files, never encoded, and
        # every chunk reproduces its first rendering (batched before, alone now).
        first_worker.stop()
        start_worker(settings.with_overrides(chunks_per_task=1), extra_env=engine_env)
        third = _render(client, user, "Third")
        after_third = _counts(app)
        assert after_third[counters.BUILDS] == 2
        assert after_third[counters.MISSES] == after_second[counters.MISSES] + 2
        for (voice, batched), (again, alone) in zip(rendered, _chunk_audio(app, third["id"]), strict=True):
            assert voice == again
            assert batched.shape == alone.shape
            np.testing.assert_allclose(batched, alone, atol=1e-4)


def _script(name: str) -> str:
    """Three chapters, each a heading and a paragraph: six chunks, none another job's (no reuse)."""
    return "\n\n".join(
        f"# {name}, part {part}\n\n{name} walked down to the harbour for the {part} time, and waited."
        for part in ("first", "second", "third")
    )


def test_chunks_of_two_jobs_share_one_running_batch(
    tmp_path: Path,
    engine_env: dict[str, str],
    start_worker: Callable[..., Any],
) -> None:
    """TOME_QWEN3_PULL_CHUNKS (on by default): the scheduler sends one chunk at a time (one render task in
    flight, one chunk a task), and each task fills its engine's other three slots with the next chunks
    the fair scheduler gives (either owner's job) while its own renders. Both jobs succeed, every chunk
    is done at its first attempt, its audio stored under the token of that attempt; chunks of a job were
    pulled into another task's batch."""
    from models import Chunk, ChunkStatus

    env = {**engine_env, "TOME_QWEN3_MAX_BATCH": "4"}
    settings: Settings = load_settings(
        env, data_dir=tmp_path / "var", engine="qwen3-tts", chunks_per_task=1, render_tasks_in_flight=1
    )
    with app_on(settings) as app:
        client = app.test_client()
        jobs: dict[str, tuple[dict[str, str], str]] = {}
        for owner in ("alice", "bob"):
            user = {"Authorization": f"Bearer {mint_key(app, owner=owner, name='test', admin=False)}"}
            folder = tmp_path / owner
            folder.mkdir()
            audio, transcript = reference_wav(folder, "The old lighthouse keeper climbed the stairs.")
            uploaded = upload_voice(client, user, audio, name="narrator", ref_text=transcript)
            assert uploaded.status_code == 202, uploaded.json
            job = submit_job(
                client,
                user,
                "narrator",
                title=owner,
                script=_script(owner),
                script_format="markdown",
                output=FLAC,
            )
            assert job.status_code == 202, job.json
            jobs[owner] = (user, job.json["id"])

        worker = start_worker(settings, extra_env=env)
        for user, job_id in jobs.values():
            done = wait_terminal(client, user, job_id, timeout=300)
            check_output(app, client, user, done)
        assert "pulled into the running batch" in worker.log()
        sessions = tome_of(app).sessions
        chunks = sessions.scalars(
            select(Chunk).where(Chunk.job_id.in_([uuid.UUID(j) for _, j in jobs.values()]))
        ).all()
        assert len(chunks) == 12
        layout = settings.layout
        for chunk in chunks:
            assert chunk.status == ChunkStatus.DONE.value
            assert chunk.attempts == 1, chunk.seq
            assert chunk.attempt_token is not None
            assert (
                Path(str(chunk.audio_path)).name
                == layout.chunk_audio(chunk.job_id, chunk.seq, chunk.attempt_token).name
            )
