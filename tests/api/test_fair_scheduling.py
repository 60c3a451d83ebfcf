"""Fair scheduling (worker.jobs.scheduler): one owner's backlog never holds another owner's small job
behind it, chunks in flight stay bounded, and an admin-set key priority weighs an owner's share."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select, update

from models import ApiKey, Chunk, Job, unit_of_work, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker.jobs import state
from worker.jobs.scheduler import schedule, to_front
from worker.task_names import BUILD_VOICE, RENDER_CHUNKS, START_JOB


def _book(paragraphs: int) -> str:
    return "\n\n".join(f"Paragraph number {i} of the long book." for i in range(paragraphs))


def _owner(app: Flask, name: str, audio: bytes) -> tuple[FlaskClient, dict[str, str]]:
    client, headers = app.test_client(), bearer(mint_key(app, owner=name, name="k", admin=False))
    uploaded = upload_voice(client, headers, audio)
    assert uploaded.status_code == 202
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [uploaded.json["id"]])
    inline.run()
    return client, headers


def _start(app: Flask, client: FlaskClient, headers: dict[str, str], script: str, inline: Inline) -> str:
    job = submit_job(client, headers, "narrator", script=script)
    assert job.status_code == 202, job.json
    inline.enqueue(START_JOB, [job.json["id"]])
    job_id: str = job.json["id"]
    return job_id


def _done(app: Flask, job_id: str) -> int:
    sessions = tome_of(app).sessions
    sessions.remove()
    job = sessions.get(Job, uuid.UUID(job_id))
    assert job is not None
    return job.chunks_done


def _in_flight(app: Flask) -> int:
    sessions = tome_of(app).sessions
    sessions.remove()
    return int(
        sessions.scalar(
            select(func.count()).where(
                Chunk.enqueued_at.is_not(None), Chunk.status.in_(["pending", "running"])
            )
        )
        or 0
    )


def test_a_small_job_does_not_wait_behind_another_owners_book(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(chunks_per_task=2, render_tasks_in_flight=2)
    alice, bob = _owner(app, "alice", reference_audio[0]), _owner(app, "bob", reference_audio[0])
    inline = Inline(tome_of(app).runtime)
    book = _start(app, *alice, _book(60), inline)
    inline.run(max_messages=1)  # alice's book starts and fills the render queue
    small = _start(app, *bob, "Just one line.", inline)
    max_in_flight = 0
    while _done(app, small) == 0:
        assert inline.run(max_messages=1) == 1, "bob's job must not need the queue to drain"
        max_in_flight = max(max_in_flight, _in_flight(app))
    # Bob's start waits behind the two render tasks in flight, his chunk takes the next free slot and waits
    # behind the tasks in flight again: about 3 rounds of 2 x 2 chunks, not the whole book (60: what a
    # first-come-first-served queue gave him).
    assert _done(app, book) <= 3 * 2 * 2, _done(app, book)
    assert max_in_flight <= 2 * 2
    inline.run()
    assert _done(app, book) == 60


def test_priority_weighs_an_owners_share(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(chunks_per_task=1, render_tasks_in_flight=4)
    alice, carol = _owner(app, "alice", reference_audio[0]), _owner(app, "carol", reference_audio[0])
    sessions = tome_of(app).sessions
    sessions.execute(update(ApiKey).where(ApiKey.owner == "carol").values(priority=3))
    sessions.commit()
    inline = Inline(tome_of(app).runtime)
    jobs = {"alice": _start(app, *alice, _book(20), inline), "carol": _start(app, *carol, _book(20), inline)}
    rt = tome_of(app).runtime
    with unit_of_work(rt.sessions) as session:  # both running before any chunk is sent
        for job_id in jobs.values():
            state.start_job(session, uuid.UUID(job_id), utcnow())
    sent: list[tuple[str, list[Any]]] = []
    schedule(rt, lambda n, a: sent.append((n, a)))
    owner_of = {v: k for k, v in jobs.items()}
    renders = [owner_of[str(args[0])] for name, args in sent if name == RENDER_CHUNKS]
    assert len(renders) == 4
    assert renders.count("carol") == 3, renders  # three slots for every one of alice's
    assert renders.count("alice") == 1, renders


def test_only_a_new_owners_first_batch_goes_to_the_front(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """The batches queued before a new owner's first one would run first; that one goes to the front
    (``to_front`` while it is sent), its next ones and the busy owner's in arrival order."""
    app = make_app(chunks_per_task=2, render_tasks_in_flight=2)
    alice, bob = _owner(app, "alice", reference_audio[0]), _owner(app, "bob", reference_audio[0])
    inline = Inline(tome_of(app).runtime)
    jobs = {"alice": _start(app, *alice, _book(20), inline), "bob": _start(app, *bob, _book(20), inline)}
    owner_of = {v: k for k, v in jobs.items()}
    rt = tome_of(app).runtime
    sent: list[tuple[str, bool]] = []

    def record(name: str, args: list[Any]) -> None:
        if name == RENDER_CHUNKS:
            sent.append((owner_of[str(args[0])], to_front()))

    with unit_of_work(rt.sessions) as session:
        state.start_job(session, uuid.UUID(jobs["alice"]), utcnow())
    schedule(rt, record)
    assert sent == [("alice", True), ("alice", False)]  # her first batch; the second waits behind it
    with unit_of_work(rt.sessions) as session:
        state.start_job(session, uuid.UUID(jobs["bob"]), utcnow())
        session.execute(update(Chunk).where(Chunk.enqueued_at.is_not(None)).values(status="done"))
        session.execute(update(Job).where(Job.id == uuid.UUID(jobs["alice"])).values(chunks_done=4))
    sent.clear()
    schedule(rt, record)
    # two free slots, one each (alice's job started first); alice has rendered, so hers waits its turn;
    # bob is new: his goes to the front
    assert sent == [("alice", False), ("bob", True)]
    assert not to_front()  # reset after each send


def test_the_keys_cli_sets_a_priority(app: Flask) -> None:
    runner = app.test_cli_runner()
    created = runner.invoke(args=["tome-keys", "create", "--owner", "hal", "--priority", "5"])
    assert created.exit_code == 0, created.output
    sessions = tome_of(app).sessions
    key = sessions.scalars(select(ApiKey).where(ApiKey.owner == "hal")).one()
    assert key.priority == 5
    assert runner.invoke(args=["tome-keys", "priority", str(key.id), "7"]).exit_code == 0
    sessions.remove()
    assert sessions.get(ApiKey, key.id).priority == 7  # type: ignore[union-attr]
    assert runner.invoke(args=["tome-keys", "priority", str(key.id), "0"]).exit_code != 0
    assert runner.invoke(args=["tome-keys", "priority", "not-an-id", "3"]).exit_code != 0
    assert "p7" in runner.invoke(args=["tome-keys", "list"]).output


def test_a_job_made_without_a_key_is_scheduled_at_weight_one(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """Jobs inserted by tools rather than the API (the benchmark does) have no key: they still render."""
    app = make_app()
    client, headers = _owner(app, "alice", reference_audio[0])
    inline = Inline(tome_of(app).runtime)
    job_id = _start(app, client, headers, _book(3), inline)
    sessions = tome_of(app).sessions
    sessions.execute(update(Job).where(Job.id == uuid.UUID(job_id)).values(api_key_id=None))
    sessions.commit()
    inline.run()
    assert _done(app, job_id) == 3


def test_make_bench_runs_its_in_process_job() -> None:
    """`make bench` builds its job without the API; a small run must finish, not hang or fail. The sections
    with tests of their own at a tiny size (stitch, storage, chapters, speech, orchestration: tests/unit and
    tests/e2e ``test_bench_*``) are skipped here; run at their defaults they are the benchmark itself."""
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--chunks", "8", "--workers", "0", "--qwen3-device", "skip",
         "--preview-words", "2000", "--stitch-hours", "0", "--storage-minutes", "0", "--chapters-words", "0",
         "--speech-voices", "0", "--orchestration-chunks", "0"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "FAILED" not in result.stdout
    assert "encodes=1" in result.stdout
