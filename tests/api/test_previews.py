"""Previews planned by a worker: ``POST /v1/scripts/preview`` of an EPUB or of a script over the inline cap
answers 202 at once; ``GET /v1/previews/{id}`` answers 202 while it is planned, then the body the inline
preview answers for the same input, or the error the inline path would have given; only to its owner,
until it expires. A body over the server's limit is refused naming the limit (and, under gunicorn, before
it is read: tests/e2e/test_intake_off_the_api.py)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from models import Preview, utcnow
from tests.api.helpers import preview_of, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.cost import CpuMeter
from tests.support.epubs import build_epub
from webapi.cli import mint_key
from worker.jobs.preview import PreviewOutcome, expire_previews, preview_script, resend_queued_previews
from worker.task_names import PREVIEW_SCRIPT

CAP = 200  # inline_plan_max_chars in these tests
SCRIPT = "# One\n\nThe tide came in at 7 p.m. on the 3rd of May. “Again?” said Tom.\n\n# Two\n\n" + (
    "It went out again, slowly, past the harbour wall. " * 6
)


@pytest.fixture
def setup(make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]) -> tuple[Flask, dict[str, str]]:
    app = make_app(inline_plan_max_chars=CAP)
    user = bearer(mint_key(app, owner="alice", name="k", admin=False))
    assert upload_voice(app.test_client(), user, reference_audio[0]).status_code == 202
    return app, user


def _post(client: FlaskClient, user: dict[str, str], **body: Any) -> Any:
    payload = {"voice": "narrator", "script": SCRIPT, "script_format": "markdown", **body}
    return client.post("/v1/scripts/preview", json=payload, headers=user)


def test_a_long_preview_is_accepted_at_once_and_equals_the_inline_one(
    setup: tuple[Flask, dict[str, str]], make_app: Callable[..., Flask]
) -> None:
    app, user = setup
    client = app.test_client()
    assert len(SCRIPT) > CAP
    accepted = _post(client, user, speed=1.25, pauses={"paragraph": 0.9})
    assert accepted.status_code == 202, accepted.json
    preview_id = accepted.json["preview"]
    assert accepted.headers["Location"] == accepted.json["url"] == f"/v1/previews/{preview_id}"
    assert accepted.headers["Retry-After"] == "1"
    assert accepted.json["status"] == "queued"
    pending = client.get(f"/v1/previews/{preview_id}", headers=user)
    assert pending.status_code == 202, pending.json
    assert pending.json["preview"] == preview_id
    assert preview_script(tome_of(app).runtime, uuid.UUID(preview_id)) == PreviewOutcome.READY
    assert preview_script(tome_of(app).runtime, uuid.UUID(preview_id)) == PreviewOutcome.SKIPPED  # once
    ready = client.get(f"/v1/previews/{preview_id}", headers=user)
    assert ready.status_code == 200, ready.json
    assert ready.mimetype == "application/json"
    # the same request planned inline, by the same app with a cap above the script's length
    inline_app = make_app(inline_plan_max_chars=10_000, database_url=tome_of(app).settings.sqlalchemy_url)
    inline = _post(inline_app.test_client(), user, speed=1.25, pauses={"paragraph": 0.9})
    assert inline.status_code == 200, inline.json
    assert ready.json == inline.json
    assert ready.json["chunks"], ready.json
    assert ready.json["rules"], ready.json
    row = tome_of(app).sessions.get(Preview, uuid.UUID(preview_id))
    assert row is not None
    assert row.script is None  # the script is dropped once planned


def test_an_error_is_the_one_the_inline_path_gives(
    setup: tuple[Flask, dict[str, str]], make_app: Callable[..., Flask]
) -> None:
    app, user = setup
    bad = SCRIPT + "\n\nA.\n<!-- break: forever -->"
    answer = preview_of(app, _post(app.test_client(), user, script=bad))
    inline_app = make_app(inline_plan_max_chars=10_000, database_url=tome_of(app).settings.sqlalchemy_url)
    inline = _post(inline_app.test_client(), user, script=bad)
    assert inline.status_code == 422, inline.json
    assert (answer.status_code, answer.json) == (422, inline.json)
    assert answer.json["error"]["line"] is not None


def test_another_owners_unknown_and_malformed_ids_are_404(setup: tuple[Flask, dict[str, str]]) -> None:
    app, user = setup
    client = app.test_client()
    other = bearer(mint_key(app, owner="bob", name="k", admin=False))
    preview_id = _post(client, user).json["preview"]
    preview_script(tome_of(app).runtime, uuid.UUID(preview_id))
    for headers, path in (
        (other, f"/v1/previews/{preview_id}"),
        (user, f"/v1/previews/{uuid.uuid4()}"),
        (user, "/v1/previews/not-a-uuid"),
        (user, "/v1/previews/%27%20OR%201=1--"),
    ):
        response = client.get(path, headers=headers)
        assert response.status_code == 404, (path, response.json)
        assert response.json is not None
        assert "chunks" not in response.json
    assert client.get(f"/v1/previews/{preview_id}").status_code == 401


def test_an_expired_preview_is_410_then_removed_by_the_sweeper(setup: tuple[Flask, dict[str, str]]) -> None:
    app, user = setup
    client = app.test_client()
    preview_id = uuid.UUID(_post(client, user).json["preview"])
    rt = tome_of(app).runtime
    preview_script(rt, preview_id)
    sessions = tome_of(app).sessions
    sessions.execute(update(Preview).where(Preview.id == preview_id).values(expires_at=utcnow()))
    sessions.commit()
    gone = client.get(f"/v1/previews/{preview_id}", headers=user)
    assert gone.status_code == 410, gone.json
    assert gone.json["error"]["code"] == "expired"
    assert expire_previews(rt, utcnow() + timedelta(seconds=1)) == 1
    sessions.remove()
    assert sessions.scalars(select(Preview).where(Preview.id == preview_id)).first() is None
    assert client.get(f"/v1/previews/{preview_id}", headers=user).status_code == 404


def test_a_preview_whose_worker_died_fails_saying_so(setup: tuple[Flask, dict[str, str]]) -> None:
    app, user = setup
    client = app.test_client()
    preview_id = uuid.UUID(_post(client, user).json["preview"])
    rt = tome_of(app).runtime
    sessions = tome_of(app).sessions
    taken = utcnow() - timedelta(seconds=rt.settings.tasks.task_time_limit + 1)
    sessions.execute(
        update(Preview).where(Preview.id == preview_id).values(status="running", created_at=taken)
    )
    sessions.commit()
    expire_previews(rt, utcnow())
    failed = client.get(f"/v1/previews/{preview_id}", headers=user)
    assert failed.status_code == 422, failed.json
    assert failed.json["error"]["code"] == "preview_failed"


def test_an_epub_preview_goes_to_a_worker_and_its_request_is_cheap(
    setup: tuple[Flask, dict[str, str]],
) -> None:
    app, user = setup
    client = app.test_client()
    form = {"job": '{"voice": "narrator"}', "script": (io.BytesIO(build_epub()), "b.epub")}
    meter = CpuMeter()
    accepted = client.post("/v1/scripts/preview", data=form, headers=user, content_type="multipart/form-data")
    assert accepted.status_code == 202, accepted.json
    assert meter.seconds() < 0.5  # nothing unpacked in the request
    ready = preview_of(app, accepted)
    assert ready.status_code == 200, ready.json
    assert ready.json["chapters"], ready.json


def test_a_body_over_the_limit_is_413_naming_the_limit(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app(max_upload_bytes=1_000_000, max_script_chars=100_000)
    limit = app.config["MAX_CONTENT_LENGTH"]
    user = bearer(mint_key(app, owner="alice", name="k", admin=False))
    response = app.test_client().post(
        "/v1/scripts/preview",
        data=b"x" * (limit + 1),
        headers={**user, "Content-Type": "application/json"},
    )
    assert response.status_code == 413, response.json
    assert response.json["error"]["code"] == "too_large"
    assert str(limit) in response.json["error"]["message"]


def test_a_preview_whose_message_was_lost_is_sent_again_by_the_sweeper(
    setup: tuple[Flask, dict[str, str]],
) -> None:
    app, user = setup
    preview_id = _post(app.test_client(), user).json["preview"]
    rt = tome_of(app).runtime
    sent: list[tuple[str, list[Any]]] = []
    assert resend_queued_previews(rt, lambda *m: sent.append(m), utcnow()) == 0  # within its grace
    later = utcnow() + timedelta(seconds=rt.settings.tasks.queued_grace_seconds + 1)
    assert resend_queued_previews(rt, lambda *m: sent.append(m), later) == 1
    assert sent == [(PREVIEW_SCRIPT, [preview_id])]
    assert preview_script(rt, uuid.UUID(preview_id)) == PreviewOutcome.READY
    assert resend_queued_previews(rt, lambda *m: sent.append(m), later) == 0  # planned: nothing to resend
