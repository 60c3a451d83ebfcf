from __future__ import annotations

import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select

from models import Chunk
from tests.api.helpers import submit_job, upload_voice
from tests.support.apps import tome_of
from webapi.extensions import Tome

MARKDOWN = """# Chapter One

It was a quiet morning. Dr. Smith measured 3.5 litres of rain.

The gulls cried over the harbour.

# Chapter Two

Nobody expected the *storm*.
"""


@pytest.fixture
def voice(client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]) -> dict[str, Any]:
    response = upload_voice(client, user, reference_audio[0], name="narrator", ref_text=reference_audio[1])
    assert response.status_code == 202
    data: dict[str, Any] = response.json
    return data


def test_submit_job_stores_chunks_in_order_and_reports_progress(
    client: FlaskClient, user: dict[str, str], voice: dict[str, Any], app: Any
) -> None:
    response = submit_job(
        client, user, "narrator", title="Harbour", script=MARKDOWN, script_format="markdown",
        output={"format": "mp3"},
    )  # fmt: skip
    assert response.status_code == 202, response.json
    job = response.json
    assert job["status"] == "queued"
    assert job["voice_id"] == voice["id"]
    assert job["progress"] == {
        "chunks_done": 0,
        "chunks_reused": 0,
        "chunks_total": job["progress"]["chunks_total"],
        "percent": 0.0,
        "eta_seconds": None,
    }
    assert [c["title"] for c in job["chapters"]] == ["Chapter One", "Chapter Two"]
    assert job["output"]["url"] is None
    state: Tome = tome_of(app)
    chunks = state.sessions.scalars(
        select(Chunk).where(Chunk.job_id == uuid.UUID(job["id"])).order_by(Chunk.seq)
    ).all()
    assert len(chunks) == job["progress"]["chunks_total"] >= 4
    assert chunks[0].text == "Chapter One"
    assert [c.chapter for c in chunks] == sorted(c.chapter for c in chunks)
    assert chunks[-1].pause_after == "none"
    assert "chapter" in [c.pause_after for c in chunks]
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["id"] == job["id"]
    listed = client.get("/v1/jobs", headers=user).json["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert client.get("/v1/jobs?status=succeeded", headers=user).json["jobs"] == []


def test_voice_can_be_named_by_id(client: FlaskClient, user: dict[str, str], voice: dict[str, Any]) -> None:
    assert submit_job(client, user, voice["id"]).status_code == 202


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"voice": "nobody"}, "voice", "unknown_voice"),
        ({"script": ""}, "script", "validation_error"),
        ({"script": "   \n\n  "}, "script", "empty_script"),
        ({"script": "bad \x00 byte"}, "script", "script_invalid"),
        ({"output": {"format": "aac"}}, "output.format", "validation_error"),
        ({"script_format": "docx"}, "script_format", "validation_error"),
        ({"title": ""}, "title", "validation_error"),
        ({"unexpected": 1}, "unexpected", "validation_error"),
        ({"pauses": {"chapter": -1}}, "pauses.chapter", "validation_error"),
    ],
)
def test_bad_job_requests_are_422_naming_the_field(
    client: FlaskClient,
    user: dict[str, str],
    voice: dict[str, Any],
    body: dict[str, Any],
    field: str,
    code: str,
) -> None:
    response = submit_job(client, user, body.pop("voice", "narrator"), **body)
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"] == field
    assert response.json["error"]["code"] == code


def test_script_error_names_line_and_column(
    client: FlaskClient, user: dict[str, str], voice: dict[str, Any]
) -> None:
    response = submit_job(client, user, "narrator", script="line one\nline \x07two")
    assert response.status_code == 422
    assert (response.json["error"]["line"], response.json["error"]["column"]) == (2, 6)


def test_missing_fields_and_non_json(client: FlaskClient, user: dict[str, str]) -> None:
    response = client.post("/v1/jobs", json={"title": "x"}, headers=user)
    assert response.status_code == 422
    assert response.json["error"]["field"] in {"script", "voice"}
    assert client.post("/v1/jobs", data="{not json", headers={**user, "Content-Type": "application/json"}
                       ).status_code == 400  # fmt: skip
    assert client.post("/v1/jobs", data="x", headers=user).status_code == 415
    assert client.post("/v1/jobs", json=[1, 2], headers=user).status_code == 400


def test_oversized_script_is_rejected(make_app: Any, reference_audio: tuple[bytes, str]) -> None:
    from tests.conftest import bearer
    from webapi.cli import mint_key

    app = make_app(max_script_chars=100)
    client = app.test_client()
    headers = bearer(mint_key(app, "dora", "k", admin=False))
    assert upload_voice(client, headers, reference_audio[0]).status_code == 202
    response = submit_job(client, headers, "narrator", script="word " * 30)
    assert response.status_code == 422
    assert response.json["error"]["code"] == "script_too_long"


def test_cancel_and_audio_before_success(
    client: FlaskClient, user: dict[str, str], voice: dict[str, Any]
) -> None:
    job = submit_job(client, user, "narrator").json
    assert client.get(f"/v1/jobs/{job['id']}/audio", headers=user).status_code == 409
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel", headers=user)
    assert cancelled.status_code == 200
    assert cancelled.json["status"] == "cancelled"
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=user).status_code == 409


def test_voice_in_use_cannot_be_deleted(
    client: FlaskClient, user: dict[str, str], voice: dict[str, Any]
) -> None:
    submit_job(client, user, "narrator")
    response = client.delete(f"/v1/voices/{voice['id']}", headers=user)
    assert response.status_code == 409
