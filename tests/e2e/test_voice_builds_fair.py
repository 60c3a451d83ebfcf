"""Voice builds on the real stack (the API under gunicorn's gevent worker, real Celery worker processes; the
embedded stack, and PostgreSQL with Redis):
one owner's long references neither stall another tenant's requests while they are analysed, nor take
every worker process while they build; and every build is counted in its owner's usage.

The engine is espeak-paced with builds made slow (``TOME_PACED_SECONDS_PER_BUILD``), as a neural speaker
encoder on a long reference is; sent all at once, alice's builds would hold both worker processes and
bob's one-chunk job would wait for them. Alice's voices are French: the transcript check of a build (the
embedded recogniser knows English only) is skipped, so her builds cost this shared machine no CPU."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from scipy.signal import resample_poly
from sqlalchemy import func, select

from models import CacheStatus, Voice
from tests.api.helpers import submit_job
from tests.conftest import bearer
from tests.e2e.flow import wait_terminal
from tests.support.api_server import request, running_api
from tests.support.apps import app_on, tome_of
from tests.support.audio import TRANSCRIPT, speak
from tests.support.cpu import CpuMeter, CpuWindow
from webapi.cli import mint_key
from worker.config import Settings
from worker.processes import api_command

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # ratios of idle and busy runs: run alone

# Three builds of alice's (more than the worker's two processes) of 5 s each, one at a time: 15 s in which
# bob's job (about a second) runs, with room for the uploads' spread.
BUILD_SECONDS = 5.0
REFERENCES = 3
REFERENCE_SECONDS = 60.0


def _long_reference(folder: Path, seconds: float) -> bytes:
    """``seconds`` of espeak speech, as a 48 kHz stereo WAV (the heaviest a reference may be per second)."""
    wave, rate = speak(TRANSCRIPT)
    repeats = int(seconds * rate / len(wave)) + 1
    speech = np.tile(wave, repeats)[: int(seconds * rate)]
    high = resample_poly(speech, 48_000, rate).astype(np.float32)
    path = folder / f"long-{seconds:.0f}.wav"
    sf.write(path, np.stack([high, high], axis=1), 48_000, subtype="PCM_16")
    return path.read_bytes()


def _multipart(fields: dict[str, str], audio: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="audio"; filename="r.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n".encode()
        + audio
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def _upload(port: int, key: str, name: str, audio: bytes, language: str = "en") -> tuple[int, dict[str, Any]]:
    body, content_type = _multipart({"name": name, "ref_text": TRANSCRIPT, "language": language}, audio)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": content_type}
    answer = request(port, "POST", "/v1/voices", headers, body, timeout=120)
    return answer.status, json.loads(answer.body)


def _usage_latency(port: int, key: str) -> float:
    answer = request(port, "GET", "/v1/usage", {"Authorization": f"Bearer {key}"}, timeout=30)
    assert answer.status == 200, answer.body
    return answer.seconds


def _eventually(what: str, done: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.fixture(params=["embedded", pytest.param("postgres", marks=pytest.mark.postgres)])
def stack_settings(request: pytest.FixtureRequest) -> Settings:
    """SQLite and the filesystem broker, or PostgreSQL and Redis (a fresh database, a private queue)."""
    settings: Settings = request.getfixturevalue("settings" if request.param == "embedded" else "pg_settings")
    return settings


def test_long_references_neither_stall_other_tenants_nor_take_every_worker_and_are_counted(
    stack_settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    slow = stack_settings.with_overrides(
        engine="espeak-paced",
        paced_seconds_per_chunk=0.2,
        paced_seconds_per_build=BUILD_SECONDS,
    )
    assert (slow.voices.builds_per_owner, slow.voices.builds_in_flight) == (1, 2)  # the defaults under test
    audio = _long_reference(tmp_path, REFERENCE_SECONDS)
    with app_on(slow) as app, running_api(slow, tmp_path, lambda bind: api_command(bind, workers=1)) as api:
        client = app.test_client()
        alice_key = mint_key(app, "alice", "k", admin=False)
        bob_key = mint_key(app, "bob", "k", admin=False)
        bob = bearer(bob_key)
        # Bob's voice through the API under test (its analyser process starts here, before any timing).
        status, voice = _upload(api.port, bob_key, "narrator", reference_audio[0])
        assert status == 202, voice
        worker = start_worker(slow, concurrency=2)
        _eventually(
            "bob's voice never became ready",
            lambda: client.get(f"/v1/voices/{voice['id']}", headers=bob).json["cache_status"] == "ready",
        )

        # Where the CPU goes while bob's job runs: the API, each worker pool process, this test process
        # (bob's submit and polls, the watcher below) and the whole machine (everyone's load).
        meter = CpuMeter(
            {"api": api.proc.pid},
            {"test": os.getpid(), "worker": worker.proc.pid}
            | {f"pool-{i}": pid for i, pid in enumerate(sorted(worker.child_pids()))},
        )
        windows: list[CpuWindow] = []

        def one_chunk_job() -> float:
            meter.start()
            started = time.monotonic()
            job = submit_job(client, bob, "narrator", script="Just one line.", output={"format": "wav"})
            assert job.status_code == 202, job.json
            assert wait_terminal(client, bob, job.json["id"], timeout=120)["status"] == "succeeded"
            elapsed = time.monotonic() - started
            windows.append(meter.stop())
            return elapsed

        idle_job = min(one_chunk_job() for _ in range(2))
        idle_usage = statistics.median(_usage_latency(api.port, bob_key) for _ in range(10))

        # Alice's long references, all at once, while bob reads his usage and watches alice's builds.
        # Bob stops reading his usage once the uploads are in: his job's time during alice's builds is
        # then measured with nothing of his own running beside it, as his idle jobs were (his usage
        # requests cost as much CPU as the job's own tasks, which on a loaded machine stretches the job
        # by itself: docs/limits.md, "Voice builds and reference uploads").
        latencies: list[float] = []
        most_building = 0
        stop, uploaded = threading.Event(), threading.Event()
        sessions = tome_of(app).sessions

        def watch() -> None:
            nonlocal most_building
            while not stop.is_set():
                if not uploaded.is_set():
                    latencies.append(_usage_latency(api.port, bob_key))
                building = sessions.scalar(
                    select(func.count()).where(
                        Voice.owner == "alice", Voice.cache_status == CacheStatus.PROCESSING
                    )
                )
                sessions.remove()
                most_building = max(most_building, int(building or 0))
                time.sleep(0.2 if uploaded.is_set() else 0.05)  # a build takes seconds

        answers: list[tuple[int, dict[str, Any]]] = []

        def upload(i: int) -> None:
            answers.append(_upload(api.port, alice_key, f"long {i}", audio, language="fr"))

        uploads = [threading.Thread(target=upload, args=(i,)) for i in range(REFERENCES)]
        watcher = threading.Thread(target=watch)
        watcher.start()
        alice = bearer(alice_key)
        try:
            for thread in uploads:
                thread.start()
            for thread in uploads:
                thread.join(timeout=180)
            assert [status for status, _ in answers] == [202] * REFERENCES, answers
            uploaded.set()
            busy_usage = list(latencies)
            busy_job = one_chunk_job()  # alice's builds are still running or waiting
            still_waiting = sessions.scalar(
                select(func.count()).where(Voice.owner == "alice", Voice.cache_status != CacheStatus.READY)
            )
            sessions.remove()
            _eventually(
                "alice's voices never all became ready",
                lambda: all(
                    client.get(f"/v1/voices/{body['id']}", headers=alice).json["cache_status"] == "ready"
                    for _, body in answers
                ),
                timeout=REFERENCES * BUILD_SECONDS * 6,
            )
        finally:
            stop.set()
            watcher.join(timeout=30)
        usage = client.get("/v1/usage", headers=alice).json

    print(
        f"voice builds: bob's 1-chunk job {idle_job:.2f} s idle, {busy_job:.2f} s during alice's builds "
        f"({still_waiting} of hers unbuilt then); bob's GET /v1/usage median {idle_usage * 1000:.0f} ms "
        "idle, "
        f"max {max(busy_usage) * 1000:.0f} ms and median {statistics.median(busy_usage) * 1000:.0f} ms over "
        f"{len(busy_usage)} requests during {REFERENCES} parallel {REFERENCE_SECONDS:.0f} s uploads; "
        f"alice's builds in usage: {usage['voice_builds_24h']}"
    )
    for name, window in zip(("idle 1", "idle 2", "busy"), windows, strict=True):
        print(f"bob's job, {name}: {window.describe()}")
    assert still_waiting, "alice's builds ended before bob's job: the test measured nothing"
    assert most_building == 1, most_building  # one build of hers at a time: the rest waited
    assert busy_job < 2 * idle_job + 1.0, (busy_job, idle_job)
    assert max(busy_usage) < 1.0, busy_usage
    assert statistics.median(busy_usage) < 10 * idle_usage + 0.1, (busy_usage, idle_usage)
    builds = usage["voice_builds_24h"]
    assert builds["count"] == REFERENCES, builds
    assert builds["seconds"]["used"] >= REFERENCES * BUILD_SECONDS, builds
    assert builds["audio_seconds"] == pytest.approx(REFERENCES * REFERENCE_SECONDS, abs=1), builds
