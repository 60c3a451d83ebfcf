"""POST /v1/audio/speech against the real stack: the API under gunicorn (gevent, as `make run` serves it),
a Celery worker process, the filesystem broker and SQLite, all on 127.0.0.1.

- Streaming: the first bytes reach the client before the worker has rendered the last chunk (the job's
  ``finished_at``, written right after its last chunk), read incrementally with httpx.
- The official ``openai`` client, its base URL pointed at Tome, gets audio that decodes, and its own
  error classes for Tome's 404.
- A client that hangs up mid-stream leaves no ffmpeg process and a cancelled job.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import openai
import pytest
from flask import Flask
from flask.testing import FlaskClient

from models import Job, JobStatus
from tests.api.helpers import upload_voice
from tests.support.api_server import Server, running_api
from tests.support.apps import app_on, tome_of
from webapi.cli import mint_key
from worker.audio import decode_to_pcm
from worker.config import load_settings
from worker.processes import WorkerProcess, api_command

pytestmark = pytest.mark.e2e

# Twelve paragraphs: a first sentence alone, then batches of up to eight chunks.
LONG = "\n\n".join(
    f"Chapter {n} of the log. The keeper wrote down the wind, the tide and every ship that passed "
    "the harbour wall that day, and the lamp burned on until the morning came grey over the water."
    for n in range(1, 13)
)


@dataclass
class Stack:
    app: Flask
    server: Server
    key: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def job(self, job_id: str) -> Job:
        with tome_of(self.app).runtime.sessions() as session:
            job = session.get(Job, uuid.UUID(job_id))
            assert job is not None
            return job


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, reference_audio: tuple[bytes, str]) -> Iterator[Stack]:
    """One worker of 2 processes, the API with one gevent worker, and alice's voice, built: shared by the
    tests of this module (starting them is most of their time)."""
    folder = tmp_path_factory.mktemp("speech-e2e")
    settings = load_settings({}, data_dir=folder / "var")
    with app_on(settings) as app:
        worker = WorkerProcess(settings, folder, concurrency=2)
        try:
            worker.wait_ready()
            key = mint_key(app, owner="alice", name="speech", admin=False)
            with running_api(settings, folder, lambda bind: api_command(bind, workers=1)) as server:
                built = Stack(app, server, key)
                _voice(app.test_client(), built.headers, reference_audio)
                yield built
        finally:
            worker.stop()


def _voice(client: FlaskClient, headers: dict[str, str], reference: tuple[bytes, str]) -> None:
    voice = upload_voice(client, headers, reference[0], name="narrator", ref_text=reference[1]).json
    deadline = time.monotonic() + 60
    while client.get(f"/v1/voices/{voice['id']}", headers=headers).json["cache_status"] != "ready":
        assert time.monotonic() < deadline, "the voice's prompt was not built"
        time.sleep(0.1)


def test_audio_streams_before_the_last_chunk_is_rendered(stack: Stack, tmp_path: Path) -> None:
    body = {"model": "tts-1", "voice": "narrator", "input": LONG, "response_format": "mp3"}
    data = bytearray()
    first: datetime | None = None
    sent = time.monotonic()
    first_after = 0.0
    url = f"{stack.url}/v1/audio/speech"
    with httpx.stream("POST", url, json=body, headers=stack.headers, timeout=60) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["transfer-encoding"] == "chunked"
        assert response.headers["content-type"] == "audio/mpeg"
        for piece in response.iter_raw():
            if first is None:
                first, first_after = datetime.now(UTC), time.monotonic() - sent
            data.extend(piece)
        job_id = response.headers["tome-job-id"]
    assert first is not None
    job = stack.job(job_id)
    assert job.status == JobStatus.SUCCEEDED
    assert job.chunks_total >= 10
    assert job.finished_at is not None
    # the worker marks the job succeeded right after its last chunk: audio was flowing before that
    assert first < job.finished_at, (first, job.finished_at, first_after)
    path = tmp_path / "speech.mp3"
    path.write_bytes(data)
    seconds = len(decode_to_pcm(path, 24_000)) / 24_000
    assert 0.5 < seconds / float(job.estimated_seconds or 1) < 2.0


def test_the_openai_client_speaks_with_a_tome_voice(stack: Stack, tmp_path: Path) -> None:
    tts = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.key, max_retries=0)
    with tts.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts",
        voice="narrator",
        input="The lamp was lit at dusk, as every night. Nobody came.",
        response_format="wav",
        instructions="Calm and slow.",
        speed=1.25,
    ) as response:
        path = tmp_path / "openai.wav"
        response.stream_to_file(path)
    seconds = len(decode_to_pcm(path, 24_000)) / 24_000
    assert 1.0 < seconds < 8.0
    pcm = tts.audio.speech.create(
        model="tts-1", voice={"id": "narrator"}, input="Hello.", response_format="pcm"
    )
    assert len(pcm.content) > 24_000 * 2 * 0.3  # 16-bit mono at 24 kHz: more than 0.3 s
    with pytest.raises(openai.NotFoundError) as missing:
        tts.audio.speech.create(model="tts-1", voice="alloy", input="Hello.")
    assert missing.value.status_code == 404
    stranger = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="not-a-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.audio.speech.create(model="tts-1", voice="narrator", input="Hello.")


def _ffmpeg_under(pid: int) -> list[int]:
    """ffmpeg processes among the descendants of ``pid``."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
            todo.extend(children)
            for child in children:
                try:
                    if Path(f"/proc/{child}/comm").read_text().strip() == "ffmpeg":
                        found.append(child)
                except OSError:
                    continue
    return found


def test_a_client_that_hangs_up_leaves_nothing_running(stack: Stack) -> None:
    body = {"voice": "narrator", "input": LONG, "response_format": "wav"}
    url = f"{stack.url}/v1/audio/speech"
    with httpx.stream("POST", url, json=body, headers=stack.headers, timeout=60) as response:
        assert response.status_code == 200
        next(response.iter_raw())
        job_id = response.headers["tome-job-id"]
    # closed after the first bytes: the API notices at its next write to the socket
    pid = stack.server.proc.pid
    deadline = time.monotonic() + 15
    while stack.job(job_id).status == JobStatus.RUNNING or _ffmpeg_under(pid):
        assert time.monotonic() < deadline, (stack.job(job_id).status, _ffmpeg_under(pid))
        time.sleep(0.1)
    job = stack.job(job_id)
    assert job.status == JobStatus.CANCELLED, job.status
    assert job.chunks_done < job.chunks_total
    # The worker may still be storing a chunk of the batch it had in hand when the job was cancelled: that
    # write re-creates the job's folder for a moment, then removes its file and the folder again
    # (worker.jobs.speech._store). What must hold is that nothing is left once it has.
    folder = tome_of(stack.app).settings.layout.job_dir(job.id)
    while folder.exists():
        assert time.monotonic() < deadline + 15, sorted(p.name for p in folder.rglob("*"))
        time.sleep(0.1)
