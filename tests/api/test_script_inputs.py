"""Issue 11 over the API: scripts as files (multipart), EPUBs, SSML, breaks, speed, language, lexicons
on jobs, and ``POST /v1/scripts/preview`` (nothing queued)."""

from __future__ import annotations

import base64
import io
import json
import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from models import Chunk, Job
from tests.api.helpers import preview_of, submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.epubs import build_epub
from tests.support.factories import post_script_file
from webapi.cli import mint_key
from worker.jobs.intake import plan_job


def _chunks(app: Flask, job_id: str) -> list[Chunk]:
    sessions = tome_of(app).sessions
    return list(sessions.scalars(select(Chunk).where(Chunk.job_id == uuid.UUID(job_id)).order_by(Chunk.seq)))


def _jobs(app: Flask) -> int:
    return int(tome_of(app).sessions.scalar(select(func.count()).select_from(Job)) or 0)


def test_a_markdown_file_upload_becomes_a_job_titled_by_its_front_matter(
    app: Flask, client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    book = (
        b"---\ntitle: Upload Test\nauthor: Ann Smith\n---\n"
        b"# One\n\nIt was 1984. The harbour lay quiet under a low grey sky, and the boats rocked gently.\n\n"
        b"# Two\n\nThe end[^1]. Everyone went home, tired and happy, along the long road by the sea.\n\n"
        b"[^1]: Note."
    )
    response = post_script_file(client, user, "/v1/jobs", {"voice": "narrator"}, book, "book.md")
    assert response.status_code == 202, response.json
    job = response.json
    assert job["title"] == "Upload Test"
    assert job["script_format"] == "markdown"
    assert [c["title"] for c in job["chapters"]] == ["One", "Two"]
    chunks = _chunks(app, job["id"])
    texts = [c.text for c in chunks]
    assert "nineteen eighty-four" in " ".join(texts)  # the engine reads normalised text
    assert any((c.source_text or "").startswith("It was 1984. The") for c in chunks)  # written text kept
    assert not any("Note" in t or "title" in t for t in texts)
    row = tome_of(app).sessions.get(Job, uuid.UUID(job["id"]))
    assert row is not None
    assert row.options["metadata"]["author"] == "Ann Smith"


def test_an_epub_upload_keeps_its_table_of_contents_and_metadata(
    app: Flask, client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    data = build_epub()
    accepted = post_script_file(client, user, "/v1/jobs", {"voice": "narrator"}, data, "novel.epub")
    assert accepted.status_code == 202, accepted.json
    assert accepted.json["progress"]["chunks_total"] == 0  # a worker unpacks and plans it
    job = _planned(app, client, user, accepted.json["id"])
    assert job["status"] == "queued", job
    assert job["title"] not in ("", "(untitled EPUB)"), job  # the book's own title, once planned
    assert job["script_format"] == "epub"
    titles = [c["title"] for c in job["chapters"]]
    assert titles, job
    assert not any(t and t.lower() in ("cover", "copyright", "contents") for t in titles)
    row = tome_of(app).sessions.get(Job, uuid.UUID(job["id"]))
    assert row is not None
    assert row.options["metadata"].get("author")
    # The same EPUB, base64 in a JSON body, plans identically.
    again = submit_job(
        client, user, "narrator", script=base64.b64encode(data).decode(), script_format="epub", title="Same"
    )
    assert again.status_code == 202, again.json
    again_job = _planned(app, client, user, again.json["id"])
    assert [c["title"] for c in again_job["chapters"]] == titles
    assert again_job["title"] == "Same"


def _planned(app: Flask, client: FlaskClient, user: dict[str, str], job_id: str) -> dict[str, Any]:
    """The job once the worker's plan task has run (here, in this process)."""
    plan_job(tome_of(app).runtime, uuid.UUID(job_id), lambda *_: None)
    response = client.get(f"/v1/jobs/{job_id}", headers=user)
    assert response.status_code == 200, response.json
    job = response.get_json()
    assert isinstance(job, dict)
    return job


def test_an_epub_that_cannot_be_planned_fails_its_job_saying_why(
    app: Flask, client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    """What the request answered as a 422 before the worker planned EPUBs: the job's error, with the
    same code and field."""
    broken = submit_job(
        client, user, "narrator", script=base64.b64encode(b"PK\x03\x04 broken").decode(), script_format="epub"
    )
    assert broken.status_code == 202, broken.json
    job = _planned(app, client, user, broken.json["id"])
    assert job["status"] == "failed", job
    assert job["error_detail"]["field"] == "script", job
    assert job["error"].startswith(job["error_detail"]["code"] + ": ")


def test_ssml_jobs_honour_breaks_rates_and_substitutions(
    app: Flask, client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    ssml = (
        '<speak><p>Welcome to <sub alias="the World Wide Web">WWW</sub>.<break time="1500ms"/>'
        '<prosody rate="slow">Slowly now.</prosody></p></speak>'
    )
    response = submit_job(client, user, "narrator", script=ssml, script_format="ssml", speed=1.2)
    assert response.status_code == 202, response.json
    chunks = _chunks(app, response.json["id"])
    assert chunks[0].text == "Welcome to the World Wide Web."
    assert chunks[0].source_text == "Welcome to WWW."
    assert chunks[0].pause_seconds == 1.5
    assert chunks[1].rate == 0.75
    row = tome_of(app).sessions.get(Job, uuid.UUID(response.json["id"]))
    assert row is not None
    assert row.options["speed"] == 1.2


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"script": "<speak><blink>x</blink></speak>", "script_format": "ssml"}, 422, "script"),
        ({"script": "not base64!!", "script_format": "epub"}, 422, "script"),
        ({"script": "Hi.", "speed": 3}, 422, "speed"),
        ({"script": "Hi.", "language": "english!"}, 422, "language"),
        ({"script": "Hi.", "lexicons": ["no-such-lexicon"]}, 422, "lexicons"),
        ({"script": "A.\n<!-- break: forever -->"}, 422, "script"),
        ({"script": "Hello.", "title": None}, 422, "title"),
    ],
)
def test_bad_script_inputs_are_named_4xx_and_queue_nothing(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    narrator: str,
    body: dict[str, Any],
    status: int,
    field: str,
) -> None:
    before = _jobs(app)
    payload = {"title": "T", "voice": "narrator", **body}
    if payload["title"] is None:
        del payload["title"]
    response = client.post("/v1/jobs", json=payload, headers=user)
    assert response.status_code == status, response.json
    assert response.json["error"]["field"] == field, response.json
    assert _jobs(app) == before


def test_multipart_errors_name_the_part(client: FlaskClient, user: dict[str, str], narrator: str) -> None:
    bad_json = client.post(
        "/v1/jobs",
        data={"job": "{not json", "script": (io.BytesIO(b"Hi."), "a.txt")},
        headers=user,
        content_type="multipart/form-data",
    )
    assert bad_json.status_code == 422
    assert bad_json.json["error"]["field"] == "job"
    no_file = client.post(
        "/v1/jobs",
        data={"job": json.dumps({"voice": "narrator", "title": "T"})},
        headers=user,
        content_type="multipart/form-data",
    )
    assert no_file.status_code == 422
    assert no_file.json["error"]["field"] == "script"
    latin1 = post_script_file(
        client, user, "/v1/jobs", {"voice": "narrator", "title": "T"}, "café".encode("latin-1"), "a.txt"
    )
    assert latin1.status_code == 422
    assert "UTF-8" in latin1.json["error"]["message"]
    extra = client.post(
        "/v1/jobs",
        data={
            "job": json.dumps({"voice": "narrator"}),
            "rogue": "1",
            "script": (io.BytesIO(b"Hi."), "a.txt"),
        },
        headers=user,
        content_type="multipart/form-data",
    )
    assert extra.status_code == 422
    assert extra.json["error"]["field"] == "rogue"


def test_preview_shows_what_would_be_read_and_queues_nothing(
    app: Flask, client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    before = _jobs(app)
    script = (
        "# Chapter IV\n\nDr. Smith paid $5.50 on 3 March 2020. <!-- break: 1s --> Then he left.\n\n"
        "# Empty\n\n# Last\n\nA \u2603 snowman. " + "word " * 200
    )
    response = client.post(
        "/v1/scripts/preview",
        json={"title": "P", "voice": "narrator", "script": script, "script_format": "markdown"},
        headers=user,
    )
    assert response.status_code == 200, response.json
    preview = response.json
    assert _jobs(app) == before
    assert [c["title"] for c in preview["chapters"]] == ["Chapter IV", "Empty", "Last"]
    first = preview["chunks"][0]
    assert first["written"] == "Chapter IV"
    assert first["text"] == "Chapter four"
    second = preview["chunks"][1]
    assert "Doctor Smith" in second["text"]
    assert "dollars" in second["text"]
    assert second["pause_after"] == 1.0
    assert {f["rule"] for f in second["fired"]} >= {"abbreviation", "currency"}
    assert preview["rules"]["roman"] >= 1
    warnings = " ".join(preview["warnings"])
    assert "'Empty'" in warnings
    assert "U+2603" in warnings
    assert all(c["estimated_seconds"] >= 0 for c in preview["chapters"])
    assert preview["chapters"][2]["estimated_seconds"] > preview["chapters"][1]["estimated_seconds"]


def test_preview_takes_uploads_and_refuses_like_a_job(
    app: Flask, client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    """An EPUB preview is planned by a worker (202, then GET /v1/previews/{id}); its errors are the same."""
    accepted = post_script_file(
        client, user, "/v1/scripts/preview", {"voice": "narrator"}, build_epub(), "b.epub"
    )
    assert accepted.status_code == 202, accepted.json
    response = preview_of(app, accepted)
    assert response.status_code == 200, response.json
    assert response.json["metadata"]["title"]
    junk = b"PK\x03\x04junk"
    bad = preview_of(
        app, post_script_file(client, user, "/v1/scripts/preview", {"voice": "narrator"}, junk, "b.epub")
    )
    assert bad.status_code == 422
    assert bad.json["error"]["field"] == "script"
    other_voice = client.post("/v1/scripts/preview", json={"voice": "nobody", "script": "Hi."}, headers=user)
    assert other_voice.status_code == 422
    assert other_voice.json["error"]["field"] == "voice"


def test_an_epubs_length_is_held_to_the_daily_quota_once_unpacked(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """Accepted at once whatever its size on the wire (no estimate from its bytes: images weigh nothing
    read aloud); its planned length then counts against the daily audio quota, as a text's does."""
    app = make_app(quota_audio_seconds_per_day=5)
    client, user = app.test_client(), bearer(mint_key(app, owner="alice", name="k", admin=False))
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    padded = build_epub(files={"OEBPS/images/plate.png": os.urandom(3_000_000)})
    accepted = post_script_file(client, user, "/v1/jobs", {"voice": "narrator"}, padded, "plates.epub")
    assert accepted.status_code == 202, accepted.json
    job = _planned(app, client, user, accepted.json["id"])
    assert job["status"] == "failed", job
    assert job["error_detail"]["code"] == "quota_audio_per_day", job


def test_an_epub_job_with_no_title_anywhere_fails_naming_title(
    app: Flask, client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    """The inline path answered 422 naming ``title``; the worker fails the job the same way."""
    untitled = build_epub(title="", titlepage=False)
    accepted = post_script_file(client, user, "/v1/jobs", {"voice": "narrator"}, untitled, "untitled.epub")
    assert accepted.status_code == 202, accepted.json
    job = _planned(app, client, user, accepted.json["id"])
    assert job["status"] == "failed", job
    assert job["error_detail"]["field"] == "title", job
