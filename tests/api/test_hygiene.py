"""What every tenant relies on beyond isolation: metrics behind a token, security headers on every answer,
private files, and multi-range downloads that do not fail."""

from __future__ import annotations

import stat
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from models import Job
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.inline import Inline
from webapi.cli import mint_key
from webapi.headers import SECURITY_HEADERS
from worker.task_names import START_JOB

TOKEN = "scrape-me-0123456789"


def test_metrics_need_the_metrics_token_or_an_admin_key(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app(metrics_token=TOKEN)
    client = app.test_client()
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    admin = bearer(mint_key(app, owner="root", name="t", admin=True))
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=user).status_code == 403
    assert client.get("/metrics", headers=bearer("scrape-me-wrong")).status_code == 401
    for headers in (bearer(TOKEN), admin):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 200
        assert "tome_jobs" in response.get_data(as_text=True)


def test_without_a_token_only_admin_keys_scrape(
    client: FlaskClient, user: dict[str, str], admin: dict[str, str]
) -> None:
    assert client.get("/metrics", headers=bearer("")).status_code == 401  # an empty token is no token
    assert client.get("/metrics", headers=user).status_code == 403
    assert client.get("/metrics", headers=admin).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/healthz"),
        ("GET", "/openapi.json"),
        ("GET", "/v1/jobs"),
        ("GET", "/nowhere"),
        ("POST", "/v1/jobs"),
    ],
)
def test_every_response_carries_the_security_headers(
    client: FlaskClient, user: dict[str, str], method: str, path: str
) -> None:
    response = client.open(path, method=method, headers=user, json={})
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (path, response.status_code, name)
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def _finished_job(app: Flask, client: FlaskClient, user: dict[str, str], audio: bytes) -> str:
    assert upload_voice(client, user, audio).status_code == 202
    job = submit_job(client, user, "narrator", output={"format": "wav"})
    assert job.status_code == 202
    inline = Inline(tome_of(app).runtime)
    for voice in client.get("/v1/voices", headers=user).json["voices"]:
        inline.enqueue("tome.build_voice", [voice["id"]])
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    assert client.get(f"/v1/jobs/{job.json['id']}", headers=user).json["status"] == "succeeded"
    job_id: str = job.json["id"]
    return job_id


def test_files_and_folders_are_private_to_the_service(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    job_id = _finished_job(app, client, user, reference_audio[0])
    data_dir = tome_of(app).settings.storage.data_dir.resolve()
    checked = 0
    for path in [*data_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.name == "tome.db" or path.name.startswith("tome.db-"):
            continue  # made by the test's migration before the app started (make run migrates after)
        assert mode & 0o077 == 0, (path, oct(mode))
        checked += 1
    assert checked >= 6
    row = tome_of(app).sessions.get(Job, uuid.UUID(job_id))
    assert row is not None
    output = Path(str(row.output_path))
    assert stat.S_IMODE(output.stat().st_mode) == 0o600
    assert stat.S_IMODE(output.parent.stat().st_mode) == 0o700


def test_a_multi_range_request_gets_the_whole_file(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    job_id = _finished_job(app, client, user, reference_audio[0])
    whole = client.get(f"/v1/jobs/{job_id}/audio", headers=user)
    assert whole.status_code == 200
    single = client.get(f"/v1/jobs/{job_id}/audio", headers={**user, "Range": "bytes=0-99"})
    assert single.status_code == 206
    assert single.data == whole.data[:100]
    multi = client.get(f"/v1/jobs/{job_id}/audio", headers={**user, "Range": "bytes=0-9,20-29"})
    assert multi.status_code == 200
    assert multi.data == whole.data
