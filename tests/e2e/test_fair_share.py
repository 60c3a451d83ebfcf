"""One fair share of the workers for speech, books and the control tasks, on the real stack: the API under
gunicorn (as `make run` serves it), a render worker of two pool processes that takes neither control
tasks nor stitches, the control and stitch workers beside it (make run's split), on SQLite and the
filesystem broker and on PostgreSQL and Redis, all on 127.0.0.1.
``espeak-paced`` gives each chunk a GPU's time, so that the render slots, not this machine's two cores,
are what the owners share.

- A speech flood: alice loops POST /v1/audio/speech on several threads for a bounded time. bob's book
  (one render batch) still finishes within twice its idle time (measured first, in the same test),
  carol's speech still starts within a few times its idle first-byte time, and alice gets 200s, or 429
  with Retry-After once she has her TOME_SPEECH_PER_OWNER in flight: never a 5xx.
- A big book: while alice's book fills the render slots and the in-flight bound, bob's small book (its
  start on the control worker, its batch sent to the front of the queue by the first of alice's render
  tasks to end, its stitch on the stitch worker) finishes within twice its idle time, on the median of
  five books sent at different moments of alice's batches.

Ratios against the idle run of the same test, with waits on conditions: no figure of this machine's.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from flask import Flask

from models import Job
from tests.api.helpers import upload_voice
from tests.support.api_server import Server, running_api
from tests.support.apps import app_on, tome_of
from tests.support.services import Services, postgres_database
from webapi.cli import mint_key
from worker.config import Settings, load_settings
from worker.processes import (
    CONTROL_CONCURRENCY,
    STITCH_CONCURRENCY,
    WorkerProcess,
    api_command,
    render_queues,
)

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # ratios of idle and loaded runs: run alone

FLOOD_THREADS = 4
FLOOD_SECONDS = 60.0  # at most; the flood stops as soon as the loaded runs are measured
FLOOD_PAUSE = 0.5  # a flooder that does not honour Retry-After (1 s), but does not spin either
WAIT = 120.0
CHUNKS_PER_TASK = 2
CHUNK_SECONDS = 0.4  # espeak-paced: a GPU engine's pace
# Nothing running is preempted: a batch sent to the front still waits for one render task to end.
TASK_SECONDS = CHUNKS_PER_TASK * CHUNK_SECONDS
BEHIND_RUNS = 5  # bob's books behind alice's big book, and as many idle ones to compare (medians)
# bob's book under the flood: one batch, as many chunks as one pool process renders at once. A book of
# more batches runs them side by side on an idle stack, and on its owner's share of the processes under
# load: twice as long on two processes shared by two owners, which is the fair share, not a starvation.
BOOK = CHUNKS_PER_TASK


@dataclass
class Stack:
    app: Flask
    server: Server
    settings: Settings
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def headers(self, owner: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[owner]}"}

    def job(self, job_id: str) -> Job:
        with tome_of(self.app).runtime.sessions() as session:
            job = session.get(Job, uuid.UUID(job_id))
            assert job is not None
            return job


@pytest.fixture(scope="module", params=["embedded", pytest.param("postgres", marks=pytest.mark.postgres)])
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    reference_audio: tuple[bytes, str],
) -> Iterator[Stack]:
    """SQLite and the filesystem broker, or PostgreSQL and Redis (a fresh database, a private queue)."""
    folder = tmp_path_factory.mktemp("fair-share")
    fair = {
        "data_dir": folder / "var",
        "engine": "espeak-paced",
        "paced_seconds_per_chunk": CHUNK_SECONDS,
        "chunks_per_task": CHUNKS_PER_TASK,
        "speech_per_owner": 2,
    }
    with contextlib.ExitStack() as scope:
        if request.param == "postgres":
            services: Services = request.getfixturevalue("services")
            url = scope.enter_context(postgres_database(services.pg_url))
            queue = f"tome-test-{os.urandom(4).hex()}"
            settings = load_settings({}, database_url=url, broker_url=services.redis_url, queue=queue, **fair)
        else:
            settings = load_settings({}, **fair)
        yield from _stack(settings, folder, reference_audio)


def _stack(settings: Settings, folder: Path, reference_audio: tuple[bytes, str]) -> Iterator[Stack]:
    with app_on(settings) as app:
        render = WorkerProcess(settings, folder, concurrency=2, queues=render_queues(settings))
        control = WorkerProcess(
            settings, folder, concurrency=CONTROL_CONCURRENCY, queues=[settings.broker.control_queue_name]
        )
        stitch = WorkerProcess(
            settings, folder, concurrency=STITCH_CONCURRENCY, queues=[settings.broker.stitch_queue_name]
        )
        try:
            # the API starts while the workers do (it needs none of them to answer /healthz)
            with running_api(settings, folder, lambda bind: api_command(bind, workers=2)) as server:
                render.wait_ready()
                control.wait_ready()
                stitch.wait_ready()
                built = Stack(app, server, settings)
                client = app.test_client()
                for owner in ("alice", "bob", "carol"):
                    built.keys[owner] = mint_key(app, owner=owner, name="k", admin=False)
                    headers = built.headers(owner)
                    voice = upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
                    assert voice.status_code == 202, voice.json
                    _until(
                        lambda h=headers, v=voice.json["id"]: (
                            client.get(f"/v1/voices/{v}", headers=h).json["cache_status"] == "ready"
                        ),
                        "a voice's prompt was not built",
                    )
                _book(built, "bob", "warm", BOOK)  # the first run of each path pays for imports and caches
                _first_byte(built, "carol", "Warming up.")
                yield built
        finally:  # killed by their PIDs: nothing is checked after the tests (a warm stop is seconds each)
            for worker in (stitch, control, render):
                worker.stop(timeout=0)


def _until(condition: object, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _script(tag: str, paragraphs: int) -> str:
    """A book of ``paragraphs`` chunks whose text is its own (no chunk reused from another run)."""
    return "\n\n".join(f"The {tag} keeper wrote line {n} of the log." for n in range(paragraphs))


def _submit(stack: Stack, owner: str, tag: str, paragraphs: int) -> tuple[str, float]:
    body = {
        "title": tag,
        "voice": "narrator",
        "script": _script(tag, paragraphs),
        "qa": {"enabled": False},
        "output": {"format": "wav"},  # the stitch's CPU, which two busy cores stretch, kept small
    }
    sent = time.monotonic()
    response = httpx.post(f"{stack.url}/v1/jobs", json=body, headers=stack.headers(owner), timeout=60)
    assert response.status_code == 202, response.text
    return str(response.json()["id"]), time.monotonic() - sent


def _book(stack: Stack, owner: str, tag: str, paragraphs: int) -> tuple[float, float]:
    """A book's time from its job row's creation to its success (the server's clock), and the POST's."""
    job_id, post = _submit(stack, owner, tag, paragraphs)
    _until(lambda: stack.job(job_id).status in ("succeeded", "failed", "cancelled"), f"book {tag} hung")
    job = stack.job(job_id)
    assert job.status == "succeeded", job.error
    assert job.chunks_total == paragraphs
    assert job.finished_at is not None
    return (job.finished_at - job.created_at).total_seconds(), post


def _first_byte(stack: Stack, owner: str, text: str) -> float:
    """Seconds from sending a speech request to its first audio byte (the rest is read too)."""
    sent = time.monotonic()
    body = {"voice": "narrator", "input": text, "response_format": "pcm"}
    url = f"{stack.url}/v1/audio/speech"
    with httpx.stream("POST", url, json=body, headers=stack.headers(owner), timeout=WAIT) as response:
        assert response.status_code == 200, response.read()
        first = None
        for piece in response.iter_raw():
            if first is None and piece:
                first = time.monotonic() - sent
    assert first is not None
    return first


class Flood:
    """``FLOOD_THREADS`` threads of one owner, each looping POST /v1/audio/speech until stopped."""

    def __init__(self, stack: Stack, owner: str) -> None:
        self.stack, self.owner = stack, owner
        self.statuses: Counter[int] = Counter()
        self.retry_after: list[str | None] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, args=(n,)) for n in range(FLOOD_THREADS)]

    def __enter__(self) -> Flood:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=WAIT)

    def _loop(self, n: int) -> None:
        deadline = time.monotonic() + FLOOD_SECONDS
        url = f"{self.stack.url}/v1/audio/speech"
        with httpx.Client(timeout=WAIT) as client:
            while not self._stop.is_set() and time.monotonic() < deadline:
                body = {"voice": "narrator", "input": f"Flood {n}, again.", "response_format": "pcm"}
                try:
                    response = client.post(url, json=body, headers=self.stack.headers(self.owner))
                except httpx.HTTPError as exc:
                    with self._lock:
                        self.errors.append(repr(exc))
                    continue
                with self._lock:
                    self.statuses[response.status_code] += 1
                    if response.status_code == 429:
                        self.retry_after.append(response.headers.get("retry-after"))
                if response.status_code != 200:
                    self._stop.wait(FLOOD_PAUSE)

    def count(self, status: int) -> int:
        with self._lock:
            return self.statuses[status]


def test_a_speech_flood_leaves_other_owners_their_share(stack: Stack) -> None:
    idle_book, idle_post = _book(stack, "bob", "quiet", BOOK)
    idle_first = statistics.median(_first_byte(stack, "carol", f"Quiet line {n}.") for n in range(3))
    with Flood(stack, "alice") as flood:
        _until(lambda: flood.count(200) >= 2 and flood.count(429) >= 1, "the flood did not get going")
        loaded_book, loaded_post = _book(stack, "bob", "flooded", BOOK)
        loaded_first = statistics.median(_first_byte(stack, "carol", f"Loud line {n}.") for n in range(3))
    print(
        f"speech flood ({FLOOD_THREADS} threads): bob's {BOOK}-chunk book {idle_book:.2f} s idle, "
        f"{loaded_book:.2f} s flooded; its POST {idle_post:.3f} s / {loaded_post:.3f} s; carol's first "
        f"byte {idle_first:.3f} s / {loaded_first:.3f} s; alice's answers {dict(flood.statuses)}"
    )
    assert not flood.errors, flood.errors[:3]
    assert set(flood.statuses) <= {200, 429}, flood.statuses  # never a 5xx
    assert flood.statuses[200] >= 2
    assert flood.retry_after
    assert all(value is not None and int(value) >= 1 for value in flood.retry_after)
    assert loaded_book <= 2 * idle_book, (idle_book, loaded_book)
    assert loaded_first <= 8 * idle_first, (idle_first, loaded_first)


def _staggered() -> Iterator[int]:
    """0 .. BEHIND_RUNS - 1, each after a pause of that many BEHIND_RUNS-ths of a render task."""
    for n in range(BEHIND_RUNS):
        time.sleep(n * TASK_SECONDS / BEHIND_RUNS)
        yield n


def test_a_small_book_does_not_wait_behind_another_owners_big_book(stack: Stack) -> None:
    # Medians of BEHIND_RUNS runs each: nothing running is preempted, so each of bob's batches waits for
    # one of alice's to end (between nothing and TASK_SECONDS, as her batches happen to be placed when
    # it is sent), and one run's hops on two cores shared with other work can take a second more. Each
    # book is sent a different fraction of a batch after the last one ended: back to back, bob's books
    # lock onto her batches' phase (his next one arrives just after his last batch's process took one of
    # hers), which measures that one phase every time instead of a book arriving at any moment.
    idle = [_book(stack, "bob", f"small {n}", BOOK)[0] for n in _staggered()]
    big, _ = _submit(stack, "alice", "big", 200)
    try:
        _until(lambda: stack.job(big).chunks_done >= 8, "the big book did not start rendering")
        loaded = [_book(stack, "bob", f"behind {n}", BOOK)[0] for n in _staggered()]
        done = stack.job(big).chunks_done
    finally:
        httpx.post(f"{stack.url}/v1/jobs/{big}/cancel", headers=stack.headers("alice"), timeout=60)
    idle_small, loaded_small = statistics.median(idle), statistics.median(loaded)
    print(
        f"big book: bob's {BOOK}-chunk book {idle_small:.2f} s idle, {loaded_small:.2f} s behind alice's "
        f"200-chunk book (medians of {BEHIND_RUNS}: {', '.join(f'{t:.2f}' for t in idle)} idle, "
        f"{', '.join(f'{t:.2f}' for t in loaded)} behind; {loaded_small / idle_small:.2f}x, means "
        f"{statistics.mean(loaded) / statistics.mean(idle):.2f}x; at {done}/200 when it finished; load "
        f"{os.getloadavg()[0]:.1f})"
    )
    assert done < 200, "the big book was over before the small one was measured"
    # Within twice its idle time: its start on the control worker and its stitch on the stitch worker, never
    # behind a render batch; only its one batch waits, for the first of alice's batches in flight to end
    # (whose task then sends bob's to the front of the queue and takes it).
    assert loaded_small <= 2 * idle_small, (idle, loaded)
