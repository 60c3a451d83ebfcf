"""The speaker-prompt cache under real concurrency: PostgreSQL, Redis, real worker processes."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import select

from models import Voice
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.e2e.flow import BOOK, wait_terminal
from tests.support.apps import app_on, tome_of
from tests.support.audio import speak
from webapi.cli import mint_key
from webapi.extensions import Tome
from worker import counters
from worker.audio import write_wav_atomic
from worker.config import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


@pytest.fixture
def pg_app(pg_settings: Settings) -> Iterator[Flask]:
    settings = pg_settings.with_overrides(
        voice_build_lease_seconds=3, sweep_interval_seconds=1.0, queued_grace_seconds=2
    )
    with app_on(settings) as app:
        yield app


def _settings(app: Flask) -> Settings:
    settings: Settings = tome_of(app).settings
    return settings


def _counter(app: Flask, name: str) -> float:
    state = tome_of(app)
    state.sessions.remove()
    return counters.read_all(state.sessions()).get((name, "espeak"), 0.0)


def _voice_status(app: Flask, voice_id: str) -> str | None:
    state: Tome = tome_of(app)
    state.sessions.remove()
    return state.sessions.scalar(select(Voice.cache_status).where(Voice.id == uuid.UUID(voice_id)))


def _wait_status(app: Flask, voice_id: str, wanted: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _voice_status(app, voice_id)
        if status in wanted:
            return status
        time.sleep(0.02)
    raise TimeoutError(f"voice {voice_id} never reached {wanted}; it is {_voice_status(app, voice_id)}")


def _long_reference(folder: Path, seconds: float = 100.0) -> tuple[bytes, str]:
    """A long recording, so that encoding it takes long enough to kill the worker in the middle."""
    sentence = "The tide came in across the flats and the birds rose calling into the grey morning air."
    text = " ".join([sentence] * max(1, int(seconds / 5)))
    wave, rate = speak(text)
    path = folder / "long.wav"
    write_wav_atomic(path, wave[: int(119 * rate)], rate)
    return path.read_bytes(), text


def test_twenty_concurrent_rebuild_requests_make_exactly_one_build(
    pg_app: Flask, reference_audio: tuple[bytes, str], start_worker: Callable[..., Any]
) -> None:
    client = pg_app.test_client()
    user = bearer(mint_key(pg_app, "alice", "k", admin=False))
    admin = bearer(mint_key(pg_app, "root", "k", admin=True))
    voice = upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1]).json
    worker = start_worker(_settings(pg_app), concurrency=2)
    _wait_status(pg_app, voice["id"], {"ready"})
    assert _counter(pg_app, counters.BUILDS) == 1
    worker.stop()  # requests race in the database alone; the worker comes back afterwards

    barrier = threading.Barrier(20)
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()

    def ask() -> None:
        local = pg_app.test_client()
        barrier.wait()
        response = local.post(f"/v1/admin/voices/{voice['id']}/cache", json={"force": True}, headers=admin)
        with lock:
            answers.append({"status": response.status_code, **(response.json or {})})

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [a["status"] for a in answers] == [202] * 20
    assert sum(a["queued"] for a in answers) == 1

    start_worker(_settings(pg_app), concurrency=2)
    _wait_status(pg_app, voice["id"], {"ready"})
    time.sleep(2)  # every duplicate build message gets its chance to (wrongly) build again
    assert _counter(pg_app, counters.BUILDS) == 2


def test_render_encodes_once_and_each_process_reads_the_file_at_most_once(
    pg_app: Flask, reference_audio: tuple[bytes, str], start_worker: Callable[..., Any]
) -> None:
    # The app's 3 s build lease is for the lease tests; here a build outlasting it on a loaded machine would
    # be taken over and counted twice, which is what leases are for, not what this test is about.
    settings = _settings(pg_app).with_overrides(chunks_per_task=1, voice_build_lease_seconds=120)
    workers = [start_worker(settings, concurrency=2), start_worker(settings, concurrency=1)]
    client = pg_app.test_client()
    user = bearer(mint_key(pg_app, "alice", "k", admin=False))
    assert upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1]).status_code == 202
    job = submit_job(client, user, "narrator", title="Book", script=BOOK, script_format="markdown").json
    finished = wait_terminal(client, user, job["id"])
    assert finished["status"] == "succeeded"
    processes = sum(len(w.child_pids()) for w in workers)
    chunks = finished["progress"]["chunks_total"]
    for worker in workers:  # a pool process writes its batched cache counters when it exits
        worker.stop()
    assert _counter(pg_app, counters.BUILDS) == 1
    misses, hits = _counter(pg_app, counters.MISSES), _counter(pg_app, counters.HITS)
    assert 1 <= misses <= processes, (misses, processes)
    assert misses + hits == chunks, "one prompt lookup per render task (one chunk per task here)"


def test_build_killed_mid_encode_is_retried_after_its_lease(
    pg_app: Flask, tmp_path: Path, start_worker: Callable[..., Any]
) -> None:
    client = pg_app.test_client()
    user = bearer(mint_key(pg_app, "alice", "k", admin=False))
    audio, text = _long_reference(tmp_path)
    doomed = start_worker(_settings(pg_app), concurrency=1)
    voice = upload_voice(client, user, audio, ref_text=text).json
    _wait_status(pg_app, voice["id"], {"processing"})
    for pid in [*doomed.child_pids(), doomed.proc.pid]:
        os.kill(pid, signal.SIGKILL)
    doomed.proc.wait()
    assert _voice_status(pg_app, voice["id"]) == "processing", "the build was killed before it finished"
    assert _counter(pg_app, counters.BUILDS) == 0

    start_worker(_settings(pg_app), concurrency=1, beat=True)
    _wait_status(pg_app, voice["id"], {"ready"}, timeout=120)
    assert _counter(pg_app, counters.BUILDS) == 1
    folder = _settings(pg_app).storage.data_dir / "voices" / voice["id"]
    assert len(list(folder.glob("prompt-*.safetensors"))) == 1


def test_voice_deleted_during_its_build_stays_deleted_and_leaves_no_files(
    pg_app: Flask, tmp_path: Path, start_worker: Callable[..., Any]
) -> None:
    client = pg_app.test_client()
    user = bearer(mint_key(pg_app, "alice", "k", admin=False))
    audio, text = _long_reference(tmp_path)
    start_worker(_settings(pg_app), concurrency=1)
    voice = upload_voice(client, user, audio, ref_text=text).json
    _wait_status(pg_app, voice["id"], {"processing"})
    assert client.delete(f"/v1/voices/{voice['id']}", headers=user).status_code == 204
    folder = _settings(pg_app).storage.data_dir / "voices" / voice["id"]
    deadline = time.monotonic() + 60
    while _counter(pg_app, counters.BUILDS) < 1:  # the build finishes, then must throw its result away
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    assert client.get(f"/v1/voices/{voice['id']}", headers=user).status_code == 404
    assert _voice_status(pg_app, voice["id"]) != "ready"
    assert not folder.exists() or not list(folder.iterdir()), list(folder.iterdir())
