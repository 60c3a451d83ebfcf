"""Delivery into Audiobookshelf, against a fake Audiobookshelf on 127.0.0.1 (a real HTTP server speaking
its upload and scan endpoints, tests/support/audiobookshelf.py): what Tome sends (fields, files, the
bearer token), the retry after a 503, none after a 401, a stalled upload given up in bounded time, each
owner's token used only for their own jobs, and the token in no answer, log line or webhook body."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from models import Integration, Job, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import app_on, tome_of
from tests.support.audiobookshelf import ABS_TOKEN, OTHER_ABS_TOKEN, FakeAudiobookshelf
from tests.support.inline import Inline
from tests.support.receiver import Receiver
from webapi.cli import mint_key
from worker import audiobookshelf
from worker.audio import ffmpeg_exe
from worker.config import Settings
from worker.runtime import Runtime
from worker.sweeper import sweep
from worker.task_names import DELIVER_AUDIOBOOKSHELF, START_JOB

SECRET = "s3cret-key-for-tests-0123456789abcdef"
TOKEN, OTHER_TOKEN = ABS_TOKEN, OTHER_ABS_TOKEN
TARGET = {"library_id": "lib_main", "folder_id": "fol_books"}
METADATA = {
    "author": "Mara Quill",
    "narrator": "Ada Voice",
    "description": "A keeper and a storm.\nSecond line.",
    "series": "Lighthouse Tales",
    "series_index": 2,
}


@pytest.fixture
def abs_app(make_app: Callable[..., Flask]) -> Flask:
    return make_app(
        secret_key=SECRET,
        audiobookshelf_allow_private=True,
        webhook_allow_private=True,
        audiobookshelf_timeout_seconds=1.0,
    )


def _owner(app: Flask, name: str) -> dict[str, str]:
    return bearer(mint_key(app, owner=name, name="k", admin=False))


def _configure(client: FlaskClient, headers: dict[str, str], url: str, token: str = TOKEN) -> Any:
    return client.put("/v1/integrations/audiobookshelf", json={"url": url, "token": token}, headers=headers)


def _jpeg() -> bytes:
    return subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-f", "lavfi", "-i", "color=c=red:s=16x8", "-frames:v", "1",
         "-f", "mjpeg", "-"],
        capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip


def _submit(
    client: FlaskClient,
    headers: dict[str, str],
    audio: bytes,
    *,
    cover: bytes | None = None,
    **body: Any,
) -> dict[str, Any]:
    assert upload_voice(client, headers, audio).status_code in (202, 409)  # 409: the owner has it already
    fields = {"voice": "narrator", "title": "The Keeper", "output": {"format": "mp3"}, **body}
    form: dict[str, Any] = {
        "job": json.dumps(fields),
        "script": (io.BytesIO(b"The keeper climbed the stairs. The lamp turned."), "book.txt"),
    }
    if cover is not None:
        form["cover"] = (io.BytesIO(cover), "cover.jpg")
    response = client.post("/v1/jobs", data=form, headers=headers, content_type="multipart/form-data")
    assert response.status_code == 202, response.json
    job = response.json
    assert isinstance(job, dict)
    return job


@pytest.fixture(scope="module")
def cover() -> bytes:
    return _jpeg()


@pytest.fixture
def alice(abs_app: Flask) -> dict[str, str]:
    return _owner(abs_app, "alice")


def _render(app: Flask, job_id: str) -> Inline:
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(START_JOB, [job_id])
    inline.run()
    return inline


def _make_due(app: Flask, job_id: str) -> None:
    sessions = tome_of(app).sessions
    sessions.execute(
        update(Job).where(Job.id == uuid.UUID(job_id)).values(abs_next_at=utcnow() - timedelta(seconds=1))
    )
    sessions.commit()


def test_the_server_and_token_are_stored_sealed_and_never_shown(abs_app: Flask) -> None:
    client = abs_app.test_client()
    alice, bob = _owner(abs_app, "alice"), _owner(abs_app, "bob")
    assert client.get("/v1/integrations/audiobookshelf", headers=alice).json == {
        "url": None,
        "configured": False,
    }
    put = _configure(client, alice, "http://127.0.0.1:13378")
    assert put.status_code == 200, put.json
    assert put.json == {"url": "http://127.0.0.1:13378", "configured": True}
    got = client.get("/v1/integrations/audiobookshelf", headers=alice)
    assert got.json == {"url": "http://127.0.0.1:13378", "configured": True}
    assert TOKEN not in put.get_data(as_text=True) + got.get_data(as_text=True)
    stored = tome_of(abs_app).sessions.get(Integration, ("alice", "audiobookshelf"))
    assert stored is not None
    assert TOKEN not in stored.token_sealed
    # another owner sees nothing of it
    assert client.get("/v1/integrations/audiobookshelf", headers=bob).json["configured"] is False
    assert client.delete("/v1/integrations/audiobookshelf", headers=bob).status_code == 204
    assert client.get("/v1/integrations/audiobookshelf", headers=alice).json["configured"] is True
    assert client.delete("/v1/integrations/audiobookshelf", headers=alice).status_code == 204
    assert client.get("/v1/integrations/audiobookshelf", headers=alice).json["configured"] is False


def test_without_a_secret_key_storing_a_token_is_a_409_naming_the_setting(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app(audiobookshelf_allow_private=True)
    client = app.test_client()
    response = _configure(client, _owner(app, "alice"), "http://127.0.0.1:13378")
    assert response.status_code == 409
    assert "TOME_SECRET_KEY" in response.json["error"]["message"]
    assert TOKEN not in response.get_data(as_text=True)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:13378",
        "http://10.0.0.5",
        "http://[::ffff:192.168.1.2]/abs",
        "http://169.254.169.254/latest",
        "ftp://example.com",
        "http://user:pw@93.184.216.34",
    ],
)
def test_private_addresses_are_refused_without_the_operators_permission(
    make_app: Callable[..., Flask], url: str
) -> None:
    app = make_app(secret_key=SECRET)
    client = app.test_client()
    response = _configure(client, _owner(app, "alice"), url)
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"] == "url"
    assert tome_of(app).sessions.scalar(select(Integration)) is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "http://127.0.0.1:1/?x=1", "token": TOKEN}, "url"),
        ({"url": "http://127.0.0.1:1", "token": TOKEN + "\r\nX-Evil: 1"}, "token"),
        ({"url": "http://127.0.0.1:1", "token": "two words"}, "token"),
        ({"url": "http://127.0.0.1:1", "token": "x" * 4097}, "token"),
        ({"url": "http://127.0.0.1:1", "token": ""}, "token"),
        ({"url": "http://127.0.0.1:1\n", "token": TOKEN}, "url"),
        ({"url": "http://127.0.0.1:1", "token": TOKEN, "extra": 1}, "extra"),
    ],
)
def test_hostile_input_is_a_422_naming_the_field_and_never_echoes_the_token(
    abs_app: Flask, body: dict[str, Any], field: str
) -> None:
    client = abs_app.test_client()
    response = client.put("/v1/integrations/audiobookshelf", json=body, headers=_owner(abs_app, "alice"))
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"] == field
    assert TOKEN not in response.get_data(as_text=True)


def test_a_job_asking_for_delivery_needs_a_server_and_sane_ids(
    abs_app: Flask, alice: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    client = abs_app.test_client()
    assert upload_voice(client, alice, reference_audio[0]).status_code == 202
    missing = submit_job(client, alice, "narrator", deliver={"audiobookshelf": TARGET})
    assert missing.status_code == 409
    assert missing.json["error"]["code"] == "integration_missing"
    assert _configure(client, alice, "http://127.0.0.1:13378").status_code == 200
    for bad in ("../../api/x", "lib main", "", "l" * 65, "lib%2F"):
        target = {"library_id": bad, "folder_id": "fol_books"}
        response = submit_job(client, alice, "narrator", deliver={"audiobookshelf": target})
        assert response.status_code == 422, (bad, response.json)
        assert response.json["error"]["field"] == "deliver.audiobookshelf.library_id"
    for metadata, field in (
        ({"series_index": -1}, "metadata.series_index"),
        ({"series_index": 1e9}, "metadata.series_index"),
        ({"series": "Tales\r\nX-Evil: 1"}, "metadata.series"),
        ({"series": "s" * 1001}, "metadata.series"),
    ):
        response = submit_job(client, alice, "narrator", metadata=metadata)
        assert response.status_code == 422, (metadata, response.json)
        assert response.json["error"]["field"] == field
    ok = submit_job(client, alice, "narrator", deliver={"audiobookshelf": TARGET})
    assert ok.status_code == 202, ok.json
    assert ok.json["delivery"] == {"audiobookshelf": {"state": "pending", "attempts": 0, "error": None}}


def test_a_finished_job_is_uploaded_with_its_fields_and_files_and_retried_after_a_503(
    abs_app: Flask,
    alice: dict[str, str],
    reference_audio: tuple[bytes, str],
    cover: bytes,
    abs_server: FakeAudiobookshelf,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    client = abs_app.test_client()
    assert _configure(client, alice, abs_server.url).status_code == 200
    abs_server.upload_statuses = [503]
    job = _submit(
        client,
        alice,
        reference_audio[0],
        cover=cover,
        metadata=METADATA,
        webhook_url=receiver.url,
        deliver={"audiobookshelf": TARGET},
    )
    inline = _render(abs_app, job["id"])
    assert (DELIVER_AUDIOBOOKSHELF, [job["id"]]) in inline.sent
    first = client.get(f"/v1/jobs/{job['id']}", headers=alice).json
    assert first["status"] == "succeeded", "delivery never changes the job's status"
    assert first["delivery"] == {"audiobookshelf": {"state": "pending", "attempts": 1, "error": "HTTP 503"}}
    assert len(abs_server.uploads) == 1
    assert abs_server.uploads[0].status == 503
    rt = tome_of(abs_app).runtime
    assert audiobookshelf.deliver(rt, uuid.UUID(job["id"])).outcome == "not_due", "the backoff holds"
    next_at = tome_of(abs_app).sessions.scalar(select(Job.abs_next_at).where(Job.id == uuid.UUID(job["id"])))
    assert next_at is not None
    delay = (next_at - utcnow()).total_seconds()
    assert 3 < delay <= 5, "the first retry comes after 5 s"

    # The sweeper sends a due retry whose message was lost (the Celery task also schedules it itself).
    sent = len(inline.sent)
    sweep(rt, inline.enqueue, now=utcnow() + timedelta(seconds=6))
    assert (DELIVER_AUDIOBOOKSHELF, [job["id"]]) in inline.sent[sent:]
    _make_due(abs_app, job["id"])
    inline.run()
    done = client.get(f"/v1/jobs/{job['id']}", headers=alice).json
    assert done["status"] == "succeeded"
    assert done["delivery"] == {"audiobookshelf": {"state": "delivered", "attempts": 2, "error": None}}

    upload = abs_server.uploads[-1]
    assert upload.status == 200
    assert upload.token == TOKEN
    assert upload.fields == {
        "title": "Vol 2 - The Keeper",
        "author": "Mara Quill",
        "series": "Lighthouse Tales",
        "library": "lib_main",
        "folder": "fol_books",
    }
    book = client.get(done["output"]["url"], headers=alice).data
    assert upload.files == {
        "The Keeper.mp3": book,
        "cover.jpg": cover,
        "desc.txt": b"A keeper and a storm.\nSecond line.\n",
        "reader.txt": b"Ada Voice\n",
    }
    assert upload.part_names == ["0", "1", "2", "3"]
    assert abs_server.scans == [(TOKEN, "lib_main")]

    events = [json.loads(body) for _, body in receiver.requests]
    assert [e["event"] for e in events] == ["job.succeeded", "job.delivered"]
    assert events[1]["job"]["id"] == job["id"]
    assert events[1]["delivery"] == done["delivery"]
    assert all(TOKEN not in body.decode() for _, body in receiver.requests)
    assert TOKEN not in caplog.text
    assert TOKEN not in json.dumps(done)
    assert audiobookshelf.deliver(rt, uuid.UUID(job["id"])).outcome == "not_due", "delivered once"


def test_a_refused_token_fails_at_once_without_a_retry(
    abs_app: Flask,
    alice: dict[str, str],
    reference_audio: tuple[bytes, str],
    abs_server: FakeAudiobookshelf,
    receiver: Receiver,
) -> None:
    client = abs_app.test_client()
    assert _configure(client, alice, abs_server.url, token="revoked-token").status_code == 200
    job = _submit(
        client,
        alice,
        reference_audio[0],
        webhook_url=receiver.url,
        deliver={"audiobookshelf": TARGET},
    )
    _render(abs_app, job["id"])
    done = client.get(f"/v1/jobs/{job['id']}", headers=alice).json
    assert done["status"] == "succeeded"
    delivery = done["delivery"]["audiobookshelf"]
    assert delivery["state"] == "failed"
    assert delivery["attempts"] == 1
    assert delivery["error"].startswith("HTTP 401")
    assert [u.status for u in abs_server.uploads] == [401]
    _make_due(abs_app, job["id"])
    assert audiobookshelf.deliver(tome_of(abs_app).runtime, uuid.UUID(job["id"])).outcome == "not_due"
    assert len(abs_server.uploads) == 1, "a 401 is not retried"
    assert abs_server.scans == []
    events = [json.loads(body) for _, body in receiver.requests]
    assert [e["event"] for e in events] == ["job.succeeded", "job.delivery_failed"]
    assert events[1]["delivery"]["audiobookshelf"]["state"] == "failed"
    assert all(b"revoked-token" not in body for _, body in receiver.requests)


@pytest.fixture(params=["sqlite", "postgresql"])
def retry_app(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Flask]:
    """An app allowing three attempts, on SQLite and on PostgreSQL (the claim is a conditional update)."""
    base = settings if request.param == "sqlite" else request.getfixturevalue("pg_settings")
    chosen = base.with_overrides(
        secret_key=SECRET, audiobookshelf_allow_private=True, audiobookshelf_max_attempts=3
    )
    with app_on(chosen) as app:
        yield app


def test_retries_end_after_the_last_attempt(
    retry_app: Flask, reference_audio: tuple[bytes, str], abs_server: FakeAudiobookshelf
) -> None:
    app = retry_app
    client = app.test_client()
    alice = _owner(app, "alice")
    assert _configure(client, alice, abs_server.url).status_code == 200
    abs_server.upload_statuses = [502, 503, 500, 200]
    job = _submit(client, alice, reference_audio[0], deliver={"audiobookshelf": TARGET})
    _render(app, job["id"])
    rt = tome_of(app).runtime
    outcomes = []
    for _ in range(4):
        _make_due(app, job["id"])
        outcomes.append(audiobookshelf.deliver(rt, uuid.UUID(job["id"])).outcome)
    assert outcomes == ["retry", "failed", "not_due", "not_due"]
    assert [u.status for u in abs_server.uploads] == [502, 503, 500]
    done = client.get(f"/v1/jobs/{job['id']}", headers=alice).json
    assert done["delivery"] == {"audiobookshelf": {"state": "failed", "attempts": 3, "error": "HTTP 500"}}


def test_a_stalled_upload_is_given_up_in_bounded_time_and_retried(
    abs_app: Flask, alice: dict[str, str], reference_audio: tuple[bytes, str], abs_server: FakeAudiobookshelf
) -> None:
    client = abs_app.test_client()
    assert _configure(client, alice, abs_server.url).status_code == 200
    job = _submit(client, alice, reference_audio[0], deliver={"audiobookshelf": TARGET})
    abs_server.stall = True
    started = time.monotonic()
    _render(abs_app, job["id"])  # the render, then the upload that the server never answers
    took = time.monotonic() - started
    done = client.get(f"/v1/jobs/{job['id']}", headers=alice).json
    assert done["status"] == "succeeded"
    assert done["delivery"] == {"audiobookshelf": {"state": "pending", "attempts": 1, "error": "timed out"}}
    assert took < 60, took  # TOME_AUDIOBOOKSHELF_TIMEOUT_SECONDS=1 here; the fake would hold 60 s

    abs_server.stall = False
    _make_due(abs_app, job["id"])
    assert audiobookshelf.deliver(tome_of(abs_app).runtime, uuid.UUID(job["id"])).outcome == "delivered"


def test_each_owners_job_uses_only_that_owners_server_and_token(
    abs_app: Flask, reference_audio: tuple[bytes, str], abs_server: FakeAudiobookshelf
) -> None:
    other = FakeAudiobookshelf(tokens={TOKEN, OTHER_TOKEN})
    try:
        client = abs_app.test_client()
        alice, bob = _owner(abs_app, "alice"), _owner(abs_app, "bob")
        assert _configure(client, alice, abs_server.url, TOKEN).status_code == 200
        assert _configure(client, bob, other.url, OTHER_TOKEN).status_code == 200
        a = _submit(client, alice, reference_audio[0], deliver={"audiobookshelf": TARGET})
        _render(abs_app, a["id"])
        b = _submit(client, bob, reference_audio[0], title="Bob's", deliver={"audiobookshelf": TARGET})
        _render(abs_app, b["id"])
        assert [(u.token, u.fields["title"]) for u in abs_server.uploads] == [(TOKEN, "The Keeper")]
        assert [(u.token, u.fields["title"]) for u in other.uploads] == [(OTHER_TOKEN, "Bob's")]
        # another owner's job is not found, nor its delivery
        assert client.get(f"/v1/jobs/{a['id']}", headers=bob).status_code == 404
        # Bob forgets his server: his next job cannot ask for delivery, Alice's setting is untouched
        assert client.delete("/v1/integrations/audiobookshelf", headers=bob).status_code == 204
        again = submit_job(client, bob, "narrator", deliver={"audiobookshelf": TARGET})
        assert again.status_code == 409
        assert client.get("/v1/integrations/audiobookshelf", headers=alice).json["configured"] is True
    finally:
        other.close()


def test_a_private_address_the_operator_no_longer_allows_fails_the_delivery_without_a_call(
    abs_app: Flask, alice: dict[str, str], reference_audio: tuple[bytes, str], abs_server: FakeAudiobookshelf
) -> None:
    client = abs_app.test_client()
    assert _configure(client, alice, abs_server.url).status_code == 200
    job = _submit(client, alice, reference_audio[0], deliver={"audiobookshelf": TARGET})
    state = tome_of(abs_app)
    # The operator withdraws the permission for private addresses: the stored loopback URL is refused.
    strict = Runtime.sharing(state.settings.with_overrides(audiobookshelf_allow_private=False), state.db)
    inline = Inline(strict)
    inline.enqueue(START_JOB, [job["id"]])
    inline.run()
    assert abs_server.uploads == []
    one = client.get(f"/v1/jobs/{job['id']}", headers=alice).json["delivery"]["audiobookshelf"]
    assert (one["state"], one["attempts"]) == ("failed", 1)
    assert one["error"].startswith("refused: "), one  # its port, then its address: neither allowed now


def test_a_server_forgotten_before_the_job_ends_fails_its_delivery_without_a_call(
    abs_app: Flask, alice: dict[str, str], reference_audio: tuple[bytes, str], abs_server: FakeAudiobookshelf
) -> None:
    client = abs_app.test_client()
    assert _configure(client, alice, abs_server.url).status_code == 200
    job = _submit(client, alice, reference_audio[0], deliver={"audiobookshelf": TARGET})
    assert client.delete("/v1/integrations/audiobookshelf", headers=alice).status_code == 204
    _render(abs_app, job["id"])
    assert abs_server.uploads == []
    two = client.get(f"/v1/jobs/{job['id']}", headers=alice).json["delivery"]["audiobookshelf"]
    assert two["state"] == "failed"
    assert "no Audiobookshelf server" in two["error"]


def test_the_library_zip_holds_the_book_in_author_series_title_folders(
    abs_app: Flask, alice: dict[str, str], reference_audio: tuple[bytes, str], cover: bytes
) -> None:
    client = abs_app.test_client()
    job = _submit(
        client,
        alice,
        reference_audio[0],
        cover=cover,
        metadata=METADATA,
        deliver={"library_zip": True},
    )
    _render(abs_app, job["id"])
    done = client.get(f"/v1/jobs/{job['id']}", headers=alice).json
    assert done["status"] == "succeeded"
    assert done["delivery"] is None
    files = client.get(done["output"]["files_url"], headers=alice).json["files"]
    listed = next(f for f in files if f["name"] == "library.zip")
    assert listed["kind"] == "bundle"
    data = client.get(listed["url"], headers=alice).data
    assert len(data) == listed["bytes"]
    folder = "Mara Quill/Lighthouse Tales/Vol 2 - The Keeper"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert sorted(archive.namelist()) == sorted(
            f"{folder}/{name}" for name in ("The Keeper.mp3", "cover.jpg", "desc.txt", "reader.txt")
        )
        assert (
            archive.read(f"{folder}/The Keeper.mp3") == client.get(done["output"]["url"], headers=alice).data
        )
        assert archive.read(f"{folder}/cover.jpg") == cover
        assert archive.read(f"{folder}/reader.txt") == b"Ada Voice\n"
        assert archive.read(f"{folder}/desc.txt") == b"A keeper and a storm.\nSecond line.\n"
