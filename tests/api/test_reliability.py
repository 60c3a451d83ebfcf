"""Idempotency keys, rate limits, signed webhooks, output expiry, configuration refusal."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from models import ApiKey, Chunk, Job, unit_of_work, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.inline import Inline
from tests.support.receiver import Receiver
from webapi import create_app
from webapi.cli import mint_key
from worker import webhooks
from worker.config import ConfigError, load_settings
from worker.jobs.expire import expire
from worker.jobs.start import start_job
from worker.jobs.state import claim_chunks
from worker.processes import settings_env
from worker.sweeper import sweep
from worker.task_names import START_JOB
from worker.voices.prompts import build_voice


def test_idempotency_key_returns_the_same_job_and_refuses_a_different_body(
    client: FlaskClient, user: dict[str, str], voice: dict[str, Any]
) -> None:
    headers = {**user, "Idempotency-Key": "order-1234"}
    first = submit_job(client, headers, "narrator", title="Once")
    again = submit_job(client, headers, "narrator", title="Once")
    assert first.status_code == again.status_code == 202
    assert again.json["id"] == first.json["id"]
    assert len(client.get("/v1/jobs", headers=user).json["jobs"]) == 1
    different = submit_job(client, headers, "narrator", title="Twice")
    assert different.status_code == 409
    assert different.json["error"]["code"] == "idempotency_conflict"
    other_key = submit_job(client, {**user, "Idempotency-Key": "order-5678"}, "narrator", title="Once")
    assert other_key.json["id"] != first.json["id"]
    too_long = submit_job(client, {**user, "Idempotency-Key": "k" * 201}, "narrator")
    assert too_long.status_code == 422


def test_concurrent_requests_with_one_idempotency_key_make_one_job(
    app: Flask, user: dict[str, str], voice: dict[str, Any]
) -> None:
    barrier = threading.Barrier(8)
    ids: list[str] = []

    def submit() -> None:
        client = app.test_client()
        barrier.wait()
        response = submit_job(client, {**user, "Idempotency-Key": "same"}, "narrator", title="Race")
        assert response.status_code == 202, response.json
        ids.append(response.json["id"])

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(ids) == 8
    assert len(set(ids)) == 1


def test_rate_limit_answers_429_with_retry_after(make_app: Callable[..., Flask]) -> None:
    app = make_app(rate_limit_per_minute=5)
    client = app.test_client()
    headers = bearer(mint_key(app, "hasty", "k", admin=False))
    codes = [client.get("/v1/jobs", headers=headers).status_code for _ in range(7)]
    assert codes[:5] == [200] * 5
    assert codes[5:] == [429, 429]
    limited = client.get("/v1/jobs", headers=headers)
    assert limited.json["error"]["code"] == "rate_limited"
    assert 1 <= int(limited.headers["Retry-After"]) <= 61
    other = bearer(mint_key(app, "calm", "k", admin=False))
    assert client.get("/v1/jobs", headers=other).status_code == 200, "limits are per key"


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9/hook", "http://10.0.0.8/hook", "ftp://example.org/x", "http://user:pw@example.org/"],
)
def test_webhooks_to_private_addresses_or_odd_schemes_are_refused(
    client: FlaskClient, user: dict[str, str], voice: dict[str, Any], url: str
) -> None:
    response = submit_job(client, user, "narrator", webhook_url=url)
    assert response.status_code == 422
    assert response.json["error"]["field"] == "webhook_url"


def test_completed_job_sends_a_signed_webhook_and_retries_failures(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], receiver: Receiver
) -> None:
    app = make_app(webhook_allow_private=True)
    client = app.test_client()
    key = mint_key(app, "wendy", "k", admin=False)
    headers = bearer(key)
    upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
    job = submit_job(client, headers, "narrator", webhook_url=receiver.url, output={"format": "wav"}).json
    state = tome_of(app)
    inline = Inline(state.runtime)

    receiver.status = 500
    inline.enqueue(START_JOB, [job["id"]])
    inline.run()
    done = client.get(f"/v1/jobs/{job['id']}", headers=headers).json
    assert done["status"] == "succeeded"
    assert done["webhook"]["attempts"] == 1
    assert done["webhook"]["error"] == "HTTP 500"
    assert done["webhook"]["delivered_at"] is None
    assert webhooks.deliver(state.runtime, uuid.UUID(job["id"])) == "not_due", "backoff is respected"

    receiver.status = 204
    state.sessions.execute(update(Job).values(webhook_next_at=utcnow() - timedelta(seconds=1)))
    state.sessions.commit()
    assert webhooks.deliver(state.runtime, uuid.UUID(job["id"])) == "delivered"
    assert webhooks.deliver(state.runtime, uuid.UUID(job["id"])) == "not_due", "delivered once"
    assert len(receiver.requests) == 2
    sent_headers, body = receiver.requests[-1]
    secret = state.sessions.scalar(select(ApiKey.webhook_secret).where(ApiKey.owner == "wendy"))
    assert secret is not None
    assert webhooks.verify(secret, body, sent_headers[webhooks.SIGNATURE_HEADER])
    assert not webhooks.verify("wrong secret", body, sent_headers[webhooks.SIGNATURE_HEADER])
    assert not webhooks.verify(secret, body + b" ", sent_headers[webhooks.SIGNATURE_HEADER])
    event = json.loads(body)
    assert event["event"] == "job.succeeded"
    assert event["job"]["id"] == job["id"]
    assert client.get(f"/v1/jobs/{job['id']}", headers=headers).json["webhook"]["delivered_at"] is not None


def test_outputs_expire_and_the_job_says_so(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(output_ttl_seconds=60, chunk_ttl_seconds=3600)
    client = app.test_client()
    headers = bearer(mint_key(app, "xena", "k", admin=False))
    upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
    job = submit_job(client, headers, "narrator", output={"format": "flac"}).json
    state = tome_of(app)
    inline = Inline(state.runtime)
    inline.enqueue(START_JOB, [job["id"]])
    inline.run()
    done = client.get(f"/v1/jobs/{job['id']}", headers=headers).json
    assert done["status"] == "succeeded"
    assert client.get(done["output"]["url"], headers=headers).status_code == 200
    folder = state.settings.storage.data_dir / "jobs" / job["id"]
    assert folder.is_dir()

    assert expire(state.runtime, utcnow()).outputs == 0, "not yet"
    assert expire(state.runtime, utcnow() + timedelta(seconds=61)).outputs == 1
    # the book and its files are gone; the chunks stay for reuse until their own expiry
    assert [p.name for p in folder.iterdir()] == ["chunks"]
    chunks = list((folder / "chunks").iterdir())
    assert chunks
    assert expire(state.runtime, utcnow() + timedelta(seconds=61)).chunk_folders == 0, "chunks not yet"
    assert expire(state.runtime, utcnow() + timedelta(seconds=3601)).chunk_folders == 1
    assert not folder.exists()
    state.sessions.remove()
    expired = client.get(f"/v1/jobs/{job['id']}", headers=headers).json
    assert expired["expired_at"] is not None
    gone = client.get(f"/v1/jobs/{job['id']}/audio", headers=headers)
    assert gone.status_code == 410
    assert gone.json["error"]["code"] == "expired"


def test_time_limits_must_sit_below_the_visibility_timeout(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="VISIBILITY_TIMEOUT"):
        load_settings({"TOME_TASK_TIME_LIMIT": "4000", "TOME_VISIBILITY_TIMEOUT": "3600"})
    with pytest.raises(ConfigError, match="SOFT_TIME_LIMIT"):
        load_settings({"TOME_TASK_SOFT_TIME_LIMIT": "900", "TOME_TASK_TIME_LIMIT": "900"})
    with pytest.raises(ConfigError):
        create_app({"data_dir": tmp_path, "visibility_timeout": 10})
    env = settings_env(load_settings({}, data_dir=tmp_path))
    env["TOME_TASK_TIME_LIMIT"] = "4000"
    worker = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "worker.main", "worker", "--loglevel", "INFO"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert worker.returncode != 0
    assert "TOME_VISIBILITY_TIMEOUT" in worker.stderr + worker.stdout


def test_a_chunk_whose_worker_keeps_dying_fails_the_job_clearly(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """Poison: each claim of chunk 0 ends with its worker gone (the lease runs out, nothing is written).
    The sweeper re-sends it until the attempts are used up, then fails the chunk and the job."""
    app = make_app(max_chunk_attempts=3)
    client = app.test_client()
    headers = bearer(mint_key(app, "pia", "k", admin=False))
    upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
    job = submit_job(client, headers, "narrator", script="First part.\n\nSecond part.").json
    state = tome_of(app)
    rt = state.runtime
    inline = Inline(rt)
    build_voice(rt, uuid.UUID(job["voice_id"]))
    start_job(rt, uuid.UUID(job["id"]), inline.enqueue)
    job_id = uuid.UUID(job["id"])
    clock = utcnow()
    for attempt in range(1, 4):
        clock += timedelta(seconds=100)
        with unit_of_work(rt.sessions) as session:  # a worker takes chunk 0 ... and is killed
            _, claimed = claim_chunks(session, job_id, [0], timedelta(seconds=60), 3, clock)
            assert [c.seq for c in claimed] == [0], f"attempt {attempt} could not claim"
        report = sweep(rt, inline.enqueue, now=clock + timedelta(seconds=61))
        if attempt < 3:
            assert report.chunks_resent >= 1
            assert report.chunks_failed == 0
    assert report.chunks_failed == 1
    failed = client.get(f"/v1/jobs/{job['id']}", headers=headers).json
    assert failed["status"] == "failed"
    assert "chunk 0 failed after 3 attempts" in failed["error"]
    with unit_of_work(rt.sessions) as session:  # and it cannot be claimed again
        assert (
            claim_chunks(session, job_id, [0], timedelta(seconds=60), 3, clock + timedelta(hours=1))[1] == []
        )


def test_kept_chunks_are_bounded_per_owner_oldest_jobs_first(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(chunk_keep_bytes=1)  # any job's chunks are over the bound but the newest job's...
    client = app.test_client()
    headers = bearer(mint_key(app, "yara", "k", admin=False))
    upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
    state = tome_of(app)
    inline = Inline(state.runtime)
    ids = []
    for text in ("The first book. It is short.", "The second book. It is short too."):
        job = submit_job(client, headers, "narrator", script=text).json
        inline.enqueue(START_JOB, [job["id"]])
        inline.run()
        ids.append(job["id"])
    folders = [state.settings.storage.data_dir / "jobs" / job_id for job_id in ids]
    assert all(f.is_dir() for f in folders)
    # ... which are over it too: every ended job's chunks go, the book with them (expired now)
    assert expire(state.runtime, utcnow()).chunk_folders == 2
    assert not any(f.exists() for f in folders)
    state.sessions.remove()
    for job_id in ids:
        gone = client.get(f"/v1/jobs/{job_id}/audio", headers=headers)
        assert gone.status_code == 410


def test_a_failed_jobs_chunks_expire_too(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(chunk_ttl_seconds=60)
    client = app.test_client()
    headers = bearer(mint_key(app, "zed", "k", admin=False))
    upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
    job = submit_job(client, headers, "narrator").json
    state = tome_of(app)
    inline = Inline(state.runtime)
    inline.enqueue(START_JOB, [job["id"]])
    while client.get(f"/v1/jobs/{job['id']}", headers=headers).json["progress"]["chunks_done"] == 0:
        assert inline.run(max_messages=1) == 1
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=headers).status_code == 200
    inline.run()
    folder = state.settings.storage.data_dir / "jobs" / job["id"]
    assert any((folder / "chunks").iterdir())
    assert expire(state.runtime, utcnow()).chunk_folders == 0, "not yet"
    assert expire(state.runtime, utcnow() + timedelta(seconds=61)).chunk_folders == 1
    assert not folder.exists()


def _same_book_twice(
    make_app: Callable[..., Flask], audio: tuple[bytes, str], **settings: Any
) -> tuple[Flask, list[str], int]:
    """One owner's book in two formats (the second job reuses every chunk of the first): the app, the
    jobs' ids, and the bytes of one job's chunks."""
    app = make_app(**settings)
    client = app.test_client()
    headers = bearer(mint_key(app, "vera", "k", admin=False))
    upload_voice(client, headers, audio[0], ref_text=audio[1])
    state = tome_of(app)
    inline = Inline(state.runtime)
    ids = []
    for fmt in ("wav", "mp3"):
        job = submit_job(client, headers, "narrator", script=SAME_BOOK, output={"format": fmt}).json
        inline.enqueue(START_JOB, [job["id"]])
        inline.run()
        ids.append(job["id"])
    second = client.get(f"/v1/jobs/{ids[1]}", headers=headers).json
    assert second["progress"]["chunks_reused"] == second["progress"]["chunks_total"]
    with state.runtime.sessions() as session:
        sizes = session.scalars(select(Chunk.audio_bytes).where(Chunk.job_id == uuid.UUID(ids[0])))
        one_book = sum(int(size or 0) for size in sizes)
    assert one_book > 0
    return app, ids, one_book


SAME_BOOK = "The first book. It is short. It has three sentences."


def test_reused_chunk_audio_on_one_disk_is_weighed_once(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """The same book in two formats: the second job's chunks are hard links to the first's, so the
    owner's kept chunks weigh one book, not two: under a bound of one and a half books neither job goes;
    under one book less a byte both do."""
    _, _, one_book = _same_book_twice(make_app, reference_audio)
    app, _, _ = _same_book_twice(make_app, reference_audio, chunk_keep_bytes=int(one_book * 1.5))
    assert expire(tome_of(app).runtime, utcnow()).chunk_folders == 0, (
        "one book's bytes on disk, under the bound"
    )
    app, _, _ = _same_book_twice(make_app, reference_audio, chunk_keep_bytes=one_book - 1)
    assert expire(tome_of(app).runtime, utcnow()).chunk_folders == 2, "over it: both go"


def test_reused_chunk_audio_on_one_disk_counts_once_against_the_storage_quota(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app()
    client = app.test_client()
    headers = bearer(mint_key(app, "wes", "k", admin=False))
    upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
    inline = Inline(tome_of(app).runtime)
    used = []
    jobs = []
    for fmt in ("wav", "mp3"):
        job = submit_job(client, headers, "narrator", script=SAME_BOOK, output={"format": fmt}).json
        inline.enqueue(START_JOB, [job["id"]])
        inline.run()
        jobs.append(client.get(f"/v1/jobs/{job['id']}", headers=headers).json)
        used.append(client.get("/v1/usage", headers=headers).json["stored_bytes"]["used"])
    assert jobs[1]["progress"]["chunks_reused"] == jobs[1]["progress"]["chunks_total"]
    with tome_of(app).runtime.sessions() as session:
        second = session.get(Job, uuid.UUID(jobs[1]["id"]))
        assert second is not None
        its_files = int(second.output_bytes or 0) + int(second.files_bytes or 0)
    assert used[1] - used[0] == its_files, "the second job adds its book and files, not its chunks again"
