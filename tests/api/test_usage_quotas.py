"""GET /v1/usage and the per-owner quotas: stored bytes, unfinished jobs, audio submitted per 24 hours."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker.task_names import BUILD_VOICE, START_JOB

BOOK = "The tide came in slowly over the flats. " * 5


def _user(app: Flask, owner: str) -> tuple[FlaskClient, dict[str, str]]:
    return app.test_client(), bearer(mint_key(app, owner=owner, name="k", admin=False))


def _files_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_usage_counts_references_chunks_and_outputs_of_the_caller_only(
    app: Flask, client: FlaskClient, user: dict[str, str], other_user: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:  # fmt: skip
    empty = client.get("/v1/usage", headers=user)
    assert empty.status_code == 200
    assert empty.json["stored_bytes"]["used"] == 0
    assert empty.json["unfinished_jobs"]["used"] == 0
    voice = upload_voice(client, user, reference_audio[0]).json
    job = submit_job(client, user, "narrator", script=BOOK, output={"format": "wav"}).json
    queued = client.get("/v1/usage", headers=user).json
    assert queued["unfinished_jobs"]["used"] == 1
    assert queued["audio_seconds_24h"]["used"] == job["estimated_seconds"] > 0
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice["id"]])
    inline.enqueue(START_JOB, [job["id"]])
    inline.run()
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "succeeded"
    done = client.get("/v1/usage", headers=user).json
    assert done["unfinished_jobs"]["used"] == 0
    data = tome_of(app).settings.layout
    on_disk = _files_bytes(data.jobs) + sum(p.stat().st_size for p in data.voices.rglob("reference-*.wav"))
    assert done["stored_bytes"]["used"] == on_disk  # chunks, output and reference, to the byte
    assert done["stored_bytes"]["quota"] == tome_of(app).settings.quotas.storage_bytes
    theirs = client.get("/v1/usage", headers=other_user).json
    assert theirs["stored_bytes"]["used"] == 0
    assert theirs["audio_seconds_24h"]["used"] == 0


def test_unfinished_jobs_quota_is_a_429_with_retry_after(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(quota_unfinished_jobs=2)
    client, user = _user(app, "alice")
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    assert submit_job(client, user, "narrator").status_code == 202
    assert submit_job(client, user, "narrator").status_code == 202
    third = submit_job(client, user, "narrator")
    assert third.status_code == 429
    assert third.json["error"]["code"] == "quota_unfinished_jobs"
    assert "TOME_QUOTA_UNFINISHED_JOBS" in third.json["error"]["message"]
    assert int(third.headers["Retry-After"]) > 0
    other_client, other = _user(app, "bob")  # another owner is not affected
    assert upload_voice(other_client, other, reference_audio[0]).status_code == 202
    assert submit_job(other_client, other, "narrator").status_code == 202


def test_audio_per_day_quota_counts_what_was_submitted(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(quota_audio_seconds_per_day=20)
    client, user = _user(app, "alice")
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    first = submit_job(client, user, "narrator", script=BOOK)  # about 15 s
    assert first.status_code == 202, first.json
    second = submit_job(client, user, "narrator", script=BOOK)
    assert second.status_code == 429
    assert second.json["error"]["code"] == "quota_audio_per_day"
    # A cancelled job counts only what it rendered (nothing): the room comes back.
    assert client.post(f"/v1/jobs/{first.json['id']}/cancel", headers=user).status_code == 200
    assert submit_job(client, user, "narrator", script=BOOK).status_code == 202


def test_storage_quota_refuses_new_voices_and_jobs_with_a_403(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(quota_storage_bytes=len(reference_audio[0]) // 2)
    client, user = _user(app, "alice")
    assert upload_voice(client, user, reference_audio[0]).status_code == 202  # under the quota before
    again = upload_voice(client, user, reference_audio[0], name="second")
    assert again.status_code == 403
    assert again.json["error"]["code"] == "quota_storage"
    job = submit_job(client, user, "narrator")
    assert job.status_code == 403
    assert job.json["error"]["code"] == "quota_storage"
    assert "Retry-After" not in job.headers
    usage = client.get("/v1/usage", headers=user).json["stored_bytes"]
    assert usage["used"] > usage["quota"]
    assert not any(name.startswith("upload-") for name in os.listdir(tome_of(app).settings.layout.uploads))
