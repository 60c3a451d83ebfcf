"""Signed file links: ``POST /v1/jobs/{id}/files/{name}/link`` gives a short-lived URL that serves the file
with no API key, exactly as the keyed download does (Range, 206, 416, ETag; on the local data directory
and on an S3 bucket, proxied or redirected to a presigned URL), and that stops working when it expires,
when anything in it is changed, when its key is revoked, or when its job is gone or expired."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import delete, select, update

from models import ApiKey, Job, hash_key, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.factories import render_inline
from tests.support.s3 import both_backends
from webapi.cli import mint_key
from webapi.file_links import sign
from worker.config import ConfigError, Settings, load_settings
from worker.jobs.expire import expire

SECRET = "file-link-test-secret-" + "s" * 32
BOOK = "# The Harbour\n\nThe fog came in before dawn.\n\n# The Storm\n\nBy noon the wind had turned."


storage_overrides = both_backends  # every test here runs on the local directory and on S3


@pytest.fixture
def settings(tmp_path: Any, storage_overrides: dict[str, Any]) -> Settings:
    return load_settings({}, data_dir=tmp_path / "var", secret_key=SECRET, **storage_overrides)


def _render(app: Flask, client: FlaskClient, user: dict[str, str], audio: bytes) -> dict[str, Any]:
    voice = upload_voice(client, user, audio)
    job = submit_job(client, user, "narrator", script=BOOK, script_format="markdown",
                     output={"format": "wav", "split": "chapter"})  # fmt: skip
    assert job.status_code == 202, job.json
    return render_inline(app, client, user, job.json["id"], voice.json["id"])


@pytest.fixture
def book(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> tuple[dict[str, Any], str]:
    """A job rendered here, and its book file's name."""
    job = _render(app, client, user, reference_audio[0])
    return job, _files(client, user, job)["book"]["name"]


def _files(client: FlaskClient, user: dict[str, str], job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["kind"] if f["kind"] == "book" else f["name"]: f for f in client.get(
        job["output"]["files_url"], headers=user).json["files"]}  # fmt: skip


def _link(client: FlaskClient, user: dict[str, str], job_id: str, name: str) -> str:
    made = client.post(f"/v1/jobs/{job_id}/files/{name}/link", headers=user)
    assert made.status_code == 200, made.json
    assert made.headers["Cache-Control"] == "private, no-store"
    url: str = made.json["url"]
    assert url.startswith(f"/v1/links/{job_id}/"), url  # a path of this API, never another host
    expires_at = datetime.fromisoformat(made.json["expires_at"])
    assert timedelta(seconds=3590) < expires_at - utcnow() <= timedelta(seconds=3601)
    return url


def _with(url: str, **changes: str) -> str:
    """``url`` with some of its query parameters replaced."""
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return f"{parts.path}?{urlencode({**query, **changes})}"


def _refused(client: FlaskClient, url: str, status: int, code: str) -> None:
    answer = client.get(url)
    assert answer.status_code == status, (url, answer.status_code, answer.data[:300])
    assert answer.json["error"]["code"] == code, answer.json


def test_a_link_serves_the_file_with_ranges_and_no_key(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    job = _render(app, client, user, reference_audio[0])
    files = _files(client, user, job)
    book, chapter = files["book"], files["chapter-001.wav"]
    for listed in (book, chapter):
        url = _link(client, user, job["id"], listed["name"])
        keyed = client.get(listed["url"], headers=user)
        assert keyed.status_code == 200
        whole = client.get(url)  # no Authorization header
        assert whole.status_code == 200, whole.data[:300]
        assert whole.data == keyed.data
        assert len(whole.data) == listed["bytes"]
        assert whole.mimetype == keyed.mimetype == "audio/wav"
        assert whole.headers["Accept-Ranges"] == "bytes"
        assert whole.headers["ETag"] == keyed.headers["ETag"]
        ranged = client.get(url, headers={"Range": "bytes=100-1099"})
        assert ranged.status_code == 206
        assert ranged.data == keyed.data[100:1100]
        assert ranged.headers["Content-Range"] == f"bytes 100-1099/{len(keyed.data)}"
        length = len(keyed.data)
        past = client.get(url, headers={"Range": f"bytes={length}-"})
        assert past.status_code == 416
        assert past.headers["Content-Range"] == f"bytes */{length}"
        assert past.json["error"]["code"] == "requested_range_not_satisfiable"
    # the book is downloadable with the key by its listed name too, as every other listed file is
    by_name = client.get(f"{job['output']['files_url']}/{book['name']}", headers=user)
    assert by_name.status_code == 200
    assert by_name.data == client.get(book["url"], headers=user).data


@pytest.mark.parametrize("storage_overrides", ["s3"], indirect=True)  # presigned URLs: an S3 feature
def test_with_presigned_s3_downloads_a_link_redirects_to_the_bucket(
    make_app: Callable[..., Flask],
    storage_overrides: dict[str, Any],
    reference_audio: tuple[bytes, str],
) -> None:
    app = make_app(secret_key=SECRET, s3_presign_seconds=60)
    client = app.test_client()
    user = bearer(mint_key(app, "alice", "k", admin=False))
    job = _render(app, client, user, reference_audio[0])
    book = _files(client, user, job)["book"]
    answer = client.get(_link(client, user, job["id"], book["name"]))
    assert answer.status_code == 302
    assert answer.headers["Location"].startswith(f"{storage_overrides['s3_endpoint_url']}/")
    assert answer.headers["Cache-Control"] == "private, no-store"
    fetched = httpx.get(answer.headers["Location"], headers={"Range": "bytes=0-99"}, timeout=30)
    assert fetched.status_code == 206
    assert len(fetched.content) == 100


def _key_id(app: Flask, headers: dict[str, str]) -> str:
    key = headers["Authorization"].removeprefix("Bearer ")
    with app.app_context():
        found = tome_of(app).sessions.scalars(select(ApiKey.id).where(ApiKey.key_sha256 == hash_key(key)))
        return str(found.one())


def _signed(url: str, job_id: str, name: str, expires: int, key_id: str, owner: str) -> str:
    """``url`` re-pointed at ``job_id``/``name`` and signed by the server's own secret for these fields."""
    signature = sign(SECRET, job_id, name, expires, key_id, owner)
    return _with(f"/v1/links/{job_id}/{name}?{urlsplit(url).query}", expires=str(expires), key=key_id,
                 signature=signature)  # fmt: skip


LOCAL_ONLY = pytest.mark.parametrize("storage_overrides", [{}])


@LOCAL_ONLY
def test_a_changed_or_expired_link_is_refused(
    app: Flask, client: FlaskClient, user: dict[str, str], book: tuple[dict[str, Any], str]
) -> None:
    job, name = book
    url = _link(client, user, job["id"], name)
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert query["key"] == _key_id(app, user)
    assert client.get(url).status_code == 200
    signature = query["signature"]
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    _refused(client, _with(url, signature=flipped), 403, "invalid_link")
    _refused(client, _with(url, signature=signature[:-1]), 403, "invalid_link")
    _refused(client, _with(url, expires=str(int(query["expires"]) + 1)), 403, "invalid_link")
    other = submit_job(client, user, "narrator", script="Another book.").json["id"]
    _refused(client, url.replace(job["id"], other), 403, "invalid_link")  # another job of the same owner
    _refused(client, url.replace(f"/{name}?", "/chapter-001.wav?"), 403, "invalid_link")  # another file
    second = _key_id(app, bearer(mint_key(app, "alice", "second", admin=False)))
    _refused(client, _with(url, key=second), 403, "invalid_link")  # the same owner's other key
    # signed with the server's own secret for a moment already past: expired, all else being right
    past = int(time.time()) - 5
    expired = _signed(url, job["id"], name, past, query["key"], "alice")
    _refused(client, expired, 403, "link_expired")
    assert "expired at" in client.get(expired).json["error"]["message"]
    # validly signed, but meant to live longer than TOME_FILE_LINK_SECONDS (3600 s) allows
    later = int(time.time()) + 2 * 3600
    _refused(client, _signed(url, job["id"], name, later, query["key"], "alice"), 403, "invalid_link")
    assert client.get(url).status_code == 200, "the link itself still works"


MALFORMED = (
    "",
    "expires=&key=&signature=",
    "expires=abc&key={key}&signature={sig}",
    "expires=1e12&key={key}&signature={sig}",
    "expires=-5&key={key}&signature={sig}",
    "expires=" + "9" * 400 + "&key={key}&signature={sig}",
    "expires=\u0663\u0663\u0663&key={key}&signature={sig}",  # digits, but not ASCII ones
    "expires={exp}&key=not-a-uuid&signature={sig}",
    "expires={exp}&key={key}",
    "expires={exp}&key={key}&signature=" + "A" * 44,
    "expires={exp}&key={key}&signature=" + "%C3%A9" * 43,
    "expires={exp}&key={key}&signature=" + "!" * 43,
    "expires={exp}&key={key}&signature=" + "A" * 100_000,
)


@LOCAL_ONLY
def test_a_malformed_link_is_a_403_naming_what_is_wrong(
    app: Flask, client: FlaskClient, user: dict[str, str]
) -> None:
    """Checked before any job is looked up: no job is needed, and none of these reaches one."""
    job_id, name, key_id = str(uuid.uuid4()), "book.wav", _key_id(app, user)
    expires = int(time.time()) + 60
    signature = sign(SECRET, job_id, name, expires, key_id, "alice")
    path = f"/v1/links/{job_id}/{name}"
    assert client.get(f"{path}?expires={expires}&key={key_id}&signature={signature}").status_code == 404
    for query in MALFORMED:
        wanted = query.format(exp=expires, key=key_id, sig=signature)
        answer = client.get(f"{path}?{wanted}")
        assert answer.status_code == 403, (query[:80], answer.status_code)
        assert answer.json["error"]["code"] == "invalid_link", query[:80]
        assert "not valid" in answer.json["error"]["message"]
    good = f"expires={expires}&key={key_id}&signature={signature}"
    for other, status in (
        (f"/v1/links/not-a-job/{name}", 403),
        (f"/v1/links/{job_id}/x", 403),
        (f"/v1/links/{job_id}/..%2F..%2Ftome.db", 404),  # a slash in a name: no such path at all
    ):
        assert client.get(f"{other}?{good}").status_code == status, other


@LOCAL_ONLY
def test_only_the_owner_gets_a_link_and_a_link_never_reaches_another_owners_job(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    other_user: dict[str, str],
    book: tuple[dict[str, Any], str],
) -> None:
    job, name = book
    answer = client.post(f"/v1/jobs/{job['id']}/files/{name}/link", headers=other_user)
    assert answer.status_code == 404
    for bad in ("..%2F..%2Ftome.db", "../output.wav", "%2Fetc%2Fpasswd", "chapter-009.wav", "x" * 300):
        answer = client.post(f"/v1/jobs/{job['id']}/files/{bad}/link", headers=user)
        assert answer.status_code == 404, (bad, answer.status_code)
    assert client.post(f"/v1/jobs/{job['id']}/files/{name}/link").status_code == 401
    # bob holding a validly signed link of his own key, re-pointed at alice's job: no such job for bob
    bob_key = _key_id(app, other_user)
    url = _link(client, user, job["id"], name)
    expires = int(time.time()) + 60
    answer = client.get(_signed(url, job["id"], name, expires, bob_key, "bob"))
    assert answer.status_code == 404
    assert answer.json["error"]["code"] == "not_found"
    # nor can a link claim alice as the owner with bob's key: the owner signed is the key's own
    _refused(client, _signed(url, job["id"], name, expires, bob_key, "alice"), 403, "invalid_link")


@LOCAL_ONLY
def test_a_link_dies_with_its_key_and_with_its_job(
    app: Flask, client: FlaskClient, user: dict[str, str], book: tuple[dict[str, Any], str]
) -> None:
    job, name = book
    url = _link(client, user, job["id"], name)
    second = bearer(mint_key(app, "alice", "second", admin=False))
    by_second = _link(client, second, job["id"], name)
    sessions = tome_of(app).sessions
    # a revoked key's links stop working; the owner's other keys' links do not
    with app.app_context():
        key_id = uuid.UUID(_key_id(app, second))
        sessions.execute(update(ApiKey).where(ApiKey.id == key_id).values(revoked_at=utcnow()))
        sessions.commit()
        sessions.remove()
    _refused(client, by_second, 403, "link_revoked")
    assert client.get(url).status_code == 200
    # the job expires (the sweeper's own expiry): 410, as the keyed download answers
    with app.app_context():
        sessions.execute(update(Job).where(Job.id == uuid.UUID(job["id"])).values(expires_at=utcnow()))
        sessions.commit()
        assert expire(tome_of(app).runtime, utcnow() + timedelta(seconds=1)).outputs == 1
        sessions.remove()
    _refused(client, url, 410, "expired")
    # the job is deleted outright: 404
    with app.app_context():
        sessions.execute(delete(Job).where(Job.id == uuid.UUID(job["id"])))
        sessions.commit()
        sessions.remove()
    _refused(client, url, 404, "not_found")


@LOCAL_ONLY
def test_without_a_secret_key_links_are_a_409_naming_the_setting(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(secret_key="")
    client = app.test_client()
    user = bearer(mint_key(app, "alice", "k", admin=False))
    job = _render(app, client, user, reference_audio[0])
    name = _files(client, user, job)["book"]["name"]
    answer = client.post(f"/v1/jobs/{job['id']}/files/{name}/link", headers=user)
    assert answer.status_code == 409
    assert answer.json["error"]["code"] == "secret_key_missing"
    assert "TOME_SECRET_KEY" in answer.json["error"]["message"]
    key_id = _key_id(app, user)
    expires = int(time.time()) + 60
    served = client.get(_signed(f"/v1/links/{job['id']}/{name}?", job["id"], name, expires, key_id, "alice"))
    assert served.status_code == 409
    assert served.json["error"]["code"] == "secret_key_missing"


def test_the_link_lifetime_setting_is_bounded() -> None:
    assert load_settings({}).security.file_link_seconds == 3600
    assert load_settings({"TOME_FILE_LINK_SECONDS": "600"}).security.file_link_seconds == 600
    for wrong in ("0", "5", "86401"):
        with pytest.raises(ConfigError, match="TOME_FILE_LINK_SECONDS"):
            load_settings({"TOME_FILE_LINK_SECONDS": wrong})
