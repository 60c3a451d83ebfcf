"""Chapters as soon as they are done: a chapter whose chunks are all rendered is stitched, listed with
its state and url on the job, downloadable and announced by a webhook while later chapters still render;
the book is then joined from the chapters' files. Messages run one at a time (tests.support.inline), so
the test sees the job between them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import mutagen
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from models import ApiKey, JobChapter, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.inline import Inline
from tests.support.receiver import Receiver
from tests.support.s3 import both_backends
from webapi.cli import mint_key
from worker import webhooks
from worker.audio.ffmpeg import decode_to_pcm
from worker.sweeper import sweep
from worker.task_names import BUILD_VOICE, DELIVER_CHAPTER_WEBHOOK, RENDER_CHUNKS, START_JOB, STITCH_CHAPTER

storage_overrides = both_backends  # every test here runs on the local directory and on S3


SENTENCES = [f"Sentence {n} of the chapter, spoken slowly and clearly." for n in range(1, 7)]
TITLES = ["Dawn", "Noon; [CHAPTER] =#", "Dusk"]
BOOK = "\n\n".join(f"# {title}\n\n" + " ".join(SENTENCES) for title in TITLES)


def _job(client: FlaskClient, user: dict[str, str], job_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/jobs/{job_id}", headers=user)
    assert response.status_code == 200
    return dict(response.json or {})


def _start(
    app: Flask, client: FlaskClient, user: dict[str, str], audio: bytes, **body: Any
) -> tuple[Inline, str]:
    voice = upload_voice(client, user, audio)
    assert voice.status_code == 202
    job = submit_job(client, user, "narrator", script=BOOK, script_format="markdown", **body)
    assert job.status_code == 202, job.json
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.enqueue(START_JOB, [job.json["id"]])
    return inline, str(job.json["id"])


def _run_until(inline: Inline, done: Callable[[], bool], limit: int = 500) -> None:
    for _ in range(limit):
        if done():
            return
        assert inline.run(max_messages=1) == 1, "the queue ran dry first"
    raise AssertionError("never happened")


def test_first_chapter_is_downloadable_while_later_ones_render(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], tmp_path: Path
) -> None:
    app = make_app(chunks_per_task=1, render_tasks_in_flight=1)
    client = app.test_client()
    user = bearer(mint_key(app, "early", "k", admin=False))
    inline, job_id = _start(app, client, user, reference_audio[0], output={"format": "mp3"})

    def first_ready() -> bool:
        chapters = _job(client, user, job_id)["chapters"]
        return bool(chapters) and chapters[0]["state"] == "ready"

    _run_until(inline, first_ready)
    job = _job(client, user, job_id)
    assert job["status"] == "running"
    assert [c["state"] for c in job["chapters"]][1:] != ["ready", "ready"], "later chapters still render"
    assert job["chapters"][-1]["state"] == "pending"
    assert any(name == RENDER_CHUNKS for name, _ in inline.queue), "chunks of later chapters are queued"
    assert job["progress"]["chunks_done"] < job["progress"]["chunks_total"]
    first = job["chapters"][0]
    assert first["title"] == "Dawn"
    assert first["duration"] > 2
    (listed,) = first["files"]
    assert first["url"] == listed["url"] == f"/v1/jobs/{job_id}/files/chapter-001.mp3"
    # the book is not there yet; the chapter is, through the files listing and its own url
    assert client.get(f"/v1/jobs/{job_id}/audio", headers=user).status_code == 409
    files = client.get(f"/v1/jobs/{job_id}/files", headers=user).json["files"]
    assert [f["name"] for f in files] == ["chapter-001.mp3"]
    response = client.get(first["url"], headers=user)
    assert response.status_code == 200
    assert response.mimetype == "audio/mpeg"
    path = tmp_path / "chapter-001.mp3"
    path.write_bytes(response.data)
    tags = mutagen.File(path, easy=True)
    assert tags["title"] == ["Dawn"]
    assert tags["tracknumber"] == ["1/3"]
    assert decode_to_pcm(path, 24_000).size / 24_000 == pytest.approx(first["duration"], abs=0.1)
    ranged = client.get(first["url"], headers={**user, "Range": "bytes=0-99"})
    assert ranged.status_code == 206
    assert ranged.data == response.data[:100]
    # only listed names are served: no other file of the job's folder, nothing outside it
    for name in ("chapter-002.mp3", "..%2F..%2Fjobs", "chapter-001.mp3%00", "manifest.json"):
        assert client.get(f"/v1/jobs/{job_id}/files/{name}", headers=user).status_code == 404, name
    # another owner sees nothing of it
    other = bearer(mint_key(app, "someone-else", "k", admin=False))
    assert client.get(first["url"], headers=other).status_code == 404
    assert client.get(f"/v1/jobs/{job_id}/files", headers=other).status_code == 404

    inline.run()
    done = _job(client, user, job_id)
    assert done["status"] == "succeeded"
    assert [c["state"] for c in done["chapters"]] == ["ready"] * 3
    assert [c["title"] for c in done["chapters"]] == TITLES
    # the book replaced the chapter files (no split asked): one file, chapters inside, no chapter urls
    assert all(c["url"] is None for c in done["chapters"])
    names = [f["name"] for f in client.get(f"/v1/jobs/{job_id}/files", headers=user).json["files"]]
    assert not any(n.startswith("chapter-") for n in names)
    assert client.get(first["url"], headers=user).status_code == 404
    assert not any(
        p.name.startswith("chapter-") for p in tome_of(app).runtime.layout.job_dir(job_id).rglob("*")
    )
    stitched = [name for name, _ in inline.sent if name == STITCH_CHAPTER]
    assert len(stitched) == 3


def test_split_chapters_stay_and_the_book_is_their_join(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app()
    client = app.test_client()
    user = bearer(mint_key(app, "split", "k", admin=False))
    inline, job_id = _start(
        app, client, user, reference_audio[0], output={"format": "m4b", "split": "chapter"}
    )
    inline.run()
    done = _job(client, user, job_id)
    assert done["status"] == "succeeded"
    urls = [c["url"] for c in done["chapters"]]
    assert urls == [f"/v1/jobs/{job_id}/files/chapter-{n:03d}.m4b" for n in (1, 2, 3)]
    assert all(client.get(url, headers=user).status_code == 200 for url in urls)
    # joined, not encoded again: each chapter's AAC priming and padding (at most 2 frames of 1024
    # samples) stays between the chapters
    extra = done["output"]["duration"] - sum(c["duration"] for c in done["chapters"])
    assert 0 <= extra < 3 * 2048 / 22_050
    # each chapter's start in the book is where the chapters before it end
    starts = [c["start"] for c in done["chapters"]]
    assert starts[0] == 0
    assert 0 <= starts[1] - done["chapters"][0]["duration"] < 2048 / 22_050


def test_each_chapter_sends_a_signed_chapter_ready_webhook(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], receiver: Receiver
) -> None:
    app = make_app(webhook_allow_private=True)
    client = app.test_client()
    user = bearer(mint_key(app, "hooked", "k", admin=False))
    receiver.status = 500
    inline, job_id = _start(app, client, user, reference_audio[0], webhook_url=receiver.url)
    inline.run()
    assert _job(client, user, job_id)["status"] == "succeeded"
    events = [json.loads(body) for _, body in receiver.requests]
    ready = [e for e in events if e["event"] == "job.chapter_ready"]
    assert [e["chapter"]["position"] for e in ready] == [1, 2, 3]
    assert [e["chapter"]["title"] for e in ready] == TITLES
    assert ready[0]["chapter"]["files"][0]["url"] == f"/v1/jobs/{job_id}/files/chapter-001.mp3"
    assert events[-1]["event"] == "job.succeeded"
    secret = tome_of(app).sessions.scalar(select(ApiKey.webhook_secret).where(ApiKey.owner == "hooked"))
    assert secret
    headers, body = receiver.requests[0]
    assert webhooks.verify(secret, body, headers[webhooks.SIGNATURE_HEADER])
    # the receiver failed them all: the sweeper sends them again once due, each delivered once
    rt = tome_of(app).runtime
    assert webhooks.deliver_chapter(rt, uuid.UUID(job_id), 0) == "not_due", "backoff is respected"
    receiver.status = 204
    state = tome_of(app)
    state.sessions.execute(update(JobChapter).values(webhook_next_at=utcnow() - timedelta(seconds=1)))
    state.sessions.commit()
    sweep(rt, inline.enqueue)
    inline.run()
    resent = [json.loads(b) for _, b in receiver.requests[len(events) :]]
    assert sorted(e["chapter"]["position"] for e in resent if e["event"] == "job.chapter_ready") == [1, 2, 3]
    assert [n for n, _ in inline.sent].count(DELIVER_CHAPTER_WEBHOOK) >= 6
    assert webhooks.deliver_chapter(rt, uuid.UUID(job_id), 0) == "not_due", "delivered once"


def _drop_chapter_stitches(inline: Inline) -> int:
    """Run every message but the chapter stitches, which are lost (their workers died after the claim)."""
    dropped = 0
    while inline.queue:
        if inline.queue[0][0] == STITCH_CHAPTER:
            inline.queue.popleft()
            dropped += 1
        else:
            inline.run(max_messages=1)
    return dropped


def _expire_chapter_leases(app: Flask) -> None:
    state = tome_of(app)
    state.sessions.execute(update(JobChapter).values(lease_until=utcnow() - timedelta(seconds=1)))
    state.sessions.commit()


def test_a_chapter_whose_worker_died_is_stitched_again_by_the_sweeper(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app()
    client = app.test_client()
    user = bearer(mint_key(app, "lost", "k", admin=False))
    inline, job_id = _start(app, client, user, reference_audio[0])
    assert _drop_chapter_stitches(inline) == 3
    job = _job(client, user, job_id)
    assert job["status"] == "running", "the book waits for its chapters"
    assert [c["state"] for c in job["chapters"]] == ["stitching"] * 3
    rt = tome_of(app).runtime
    report = sweep(rt, inline.enqueue)
    assert report.chapters_reissued == 0, "leases not expired yet: nothing is sent twice"
    _expire_chapter_leases(app)
    report = sweep(rt, inline.enqueue)
    assert report.chapters_reissued == 3
    inline.run()
    done = _job(client, user, job_id)
    assert done["status"] == "succeeded"
    assert [r.attempts for r in state_rows(app, job_id)] == [2, 2, 2]


def test_a_chapter_never_claimed_is_claimed_by_the_sweeper(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app()
    client = app.test_client()
    user = bearer(mint_key(app, "unclaimed", "k", admin=False))
    inline, job_id = _start(app, client, user, reference_audio[0])
    _drop_chapter_stitches(inline)
    state = tome_of(app)  # as if the render that finished each chapter died before its claim
    state.sessions.execute(update(JobChapter).values(status="pending", token=None, lease_until=None))
    state.sessions.commit()
    report = sweep(state.runtime, inline.enqueue)
    assert report.chapters_started == 3
    inline.run()
    assert _job(client, user, job_id)["status"] == "succeeded"


def test_a_chapter_that_keeps_losing_its_worker_fails_the_job_naming_it(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(max_chunk_attempts=2)
    client = app.test_client()
    user = bearer(mint_key(app, "doomed", "k", admin=False))
    inline, job_id = _start(app, client, user, reference_audio[0])
    rt = tome_of(app).runtime
    _drop_chapter_stitches(inline)
    for _ in range(2):
        _expire_chapter_leases(app)
        sweep(rt, inline.enqueue)
        _drop_chapter_stitches(inline)
    job = _job(client, user, job_id)
    assert job["status"] == "failed"
    assert "chapter 1 could not be stitched in 2 attempts" in job["error"]


def test_single_chapter_books_are_stitched_once_as_before(
    client: FlaskClient, user: dict[str, str], app: Flask, reference_audio: tuple[bytes, str]
) -> None:
    voice = upload_voice(client, user, reference_audio[0])
    job = submit_job(client, user, "narrator", script="Just one paragraph. Two sentences.")
    assert job.status_code == 202
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    single = _job(client, user, job.json["id"])
    assert single["status"] == "succeeded"
    assert all(c["state"] is None for c in single["chapters"])
    assert not state_rows(app, job.json["id"])
    assert not any(name == STITCH_CHAPTER for name, _ in inline.sent)


def state_rows(app: Flask, job_id: str) -> list[JobChapter]:
    query = select(JobChapter).where(JobChapter.job_id == uuid.UUID(job_id)).order_by(JobChapter.position)
    return list(tome_of(app).sessions.scalars(query))
