"""The API and the sweeper with TOME_STORAGE=s3 (moto's server on 127.0.0.1): downloads keep Range
(proxied, or a presigned redirect), keys hold server-made ids only, expiry and orphan clean-up reach the
bucket, and a missing bucket is named at start and in /healthz, never a 500 at download."""

from __future__ import annotations

import contextlib
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from models import Job, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.api_server import free_port
from tests.support.apps import app_on, tome_of
from tests.support.inline import Inline
from tests.support.s3 import S3Server, s3_overrides
from webapi import create_app
from webapi.cli import mint_key
from worker.config import load_settings
from worker.jobs.expire import expire
from worker.storage.check import StorageUnavailable
from worker.storage.s3 import S3Storage
from worker.sweeper import ORPHAN_INTERVAL, remove_stored_orphans, sweep
from worker.task_names import BUILD_VOICE, START_JOB

HOSTILE_TITLE = "../../voices/x/../../../etc/passwd %2e%2e/\\..\u2028"  # (NUL is refused in titles)
SCRIPT = "# One\n\nThe fog came in before dawn.\n\n# Two\n\nBy noon the wind had turned."


@pytest.fixture
def make_s3_app(s3_server: S3Server, tmp_path: Path) -> Iterator[Callable[..., tuple[Flask, str]]]:
    """An app on a new bucket (and its name), with the given settings; closed when the test ends."""
    with contextlib.ExitStack() as made:

        def make(**more: Any) -> tuple[Flask, str]:
            bucket = s3_server.new_bucket()
            overrides = s3_overrides(s3_server, bucket, **more)
            settings = load_settings({}, data_dir=tmp_path / f"var-{bucket}", **overrides)
            return made.enter_context(app_on(settings)), bucket

        yield make


def _finished(app: Flask, client: FlaskClient, user: dict[str, str], audio: bytes, **body: Any) -> Any:
    voice = upload_voice(client, user, audio)
    assert voice.status_code == 202, voice.json
    job = submit_job(client, user, "narrator", script=SCRIPT, script_format="markdown", **body)
    assert job.status_code == 202, job.json
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    done = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert done["status"] == "succeeded", done
    return done


@pytest.fixture
def s3_app(make_s3_app: Callable[..., tuple[Flask, str]]) -> tuple[Flask, str]:
    return make_s3_app()


def test_downloads_are_proxied_from_the_bucket_with_range(
    s3_app: tuple[Flask, str], s3_server: S3Server, reference_audio: tuple[bytes, str]
) -> None:
    app, bucket = s3_app
    client = app.test_client()
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    job = _finished(app, client, user, reference_audio[0], title=HOSTILE_TITLE, output={"format": "mp3"})
    whole = client.get(job["output"]["url"], headers=user)
    assert whole.status_code == 200
    data = whole.data
    assert len(data) == job["output"]["bytes"] > 1000
    assert whole.headers["Accept-Ranges"] == "bytes"
    assert data[:3] == b"ID3"  # an MP3 with its tags
    for header, expected in (
        ("bytes=0-99", data[:100]),
        ("bytes=100-", data[100:]),
        ("bytes=-37", data[-37:]),
        (f"bytes={len(data) - 5}-{len(data) + 500}", data[-5:]),
    ):
        part = client.get(job["output"]["url"], headers={**user, "Range": header})
        assert part.status_code == 206, header
        assert part.data == expected, header
        assert part.headers["Content-Length"] == str(len(expected))
    assert (
        client.get(job["output"]["url"], headers={**user, "Range": f"bytes={len(data)}-"}).status_code == 416
    )
    several = client.get(job["output"]["url"], headers={**user, "Range": "bytes=0-1,5-9"})
    assert several.status_code == 200
    assert several.data == data
    # the files beside the book come from the bucket too
    srt = client.get(f"{job['output']['files_url']}/book.srt", headers={**user, "Range": "bytes=0-1"})
    assert srt.status_code == 206
    assert srt.data == b"1\n"
    # every key is made of the job's and voice's ids and generated names: the title is nowhere
    keys = s3_server.keys(bucket)
    assert keys
    assert all(k.startswith((f"jobs/{job['id']}/", f"voices/{job['voice_id']}/")) for k in keys), keys
    assert not any("etc" in k or ".." in k or "passwd" in k for k in keys)
    # another tenant cannot reach it
    other = bearer(mint_key(app, owner="bob", name="t", admin=False))
    assert client.get(job["output"]["url"], headers=other).status_code == 404


@pytest.mark.parametrize("public", [False, True])
def test_a_presigned_redirect_serves_the_same_bytes_with_range(
    s3_server: S3Server,
    make_s3_app: Callable[..., tuple[Flask, str]],
    reference_audio: tuple[bytes, str],
    public: bool,
) -> None:
    """With ``public``, Tome reaches the bucket at one address and its clients at another (compose's
    MinIO is http://minio:9000 inside): the redirect names TOME_S3_PUBLIC_ENDPOINT_URL."""
    endpoint = s3_server.endpoint_url.replace("127.0.0.1", "localhost") if public else s3_server.endpoint_url
    app, _ = make_s3_app(s3_presign_seconds=60, s3_public_endpoint_url=endpoint if public else "")
    client = app.test_client()
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    job = _finished(app, client, user, reference_audio[0], output={"format": "ogg"})
    answer = client.get(job["output"]["url"], headers=user)
    assert answer.status_code == 302
    url = answer.headers["Location"]
    assert url.startswith(endpoint + "/"), url  # the bucket answers the client itself
    assert "X-Amz-Expires=60" in url
    with urllib.request.urlopen(url, timeout=30) as whole:
        data = whole.read()
        assert "attachment" in whole.headers["Content-Disposition"]
    assert len(data) == job["output"]["bytes"]
    assert data[:4] == b"OggS"
    ranged = urllib.request.Request(url, headers={"Range": "bytes=10-59"})
    with urllib.request.urlopen(ranged, timeout=30) as part:
        assert part.status == 206
        assert part.read() == data[10:60]


def test_expiry_and_orphan_clean_up_reach_the_bucket(
    s3_app: tuple[Flask, str], s3_server: S3Server, reference_audio: tuple[bytes, str]
) -> None:
    app, bucket = s3_app
    client = app.test_client()
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    job = _finished(app, client, user, reference_audio[0], output={"format": "mp3"})
    rt = tome_of(app).runtime
    prefix = f"jobs/{job['id']}/"
    before = s3_server.keys(bucket, prefix)
    assert any("/output-" in k for k in before)
    assert any("/chunks/" in k for k in before)
    # the book expires: everything of the job but its chunks (kept for reuse) leaves the bucket
    later = utcnow() + timedelta(seconds=rt.settings.storage.output_ttl_seconds + 60)
    assert expire(rt, later).outputs == 1
    after = s3_server.keys(bucket, prefix)
    assert after
    assert all("/chunks/" in k for k in after), after
    assert client.get(job["output"]["url"] or f"/v1/jobs/{job['id']}/audio", headers=user).status_code == 410
    # later still, the chunks go too (the whole job folder)
    report = sweep(
        rt, lambda *_: None, utcnow() + timedelta(seconds=rt.settings.storage.chunk_ttl_seconds + 3600)
    )
    assert report.chunk_folders_removed == 1
    assert s3_server.keys(bucket, prefix) == []
    # orphans: objects of a job the database never committed, and of a deleted voice
    orphan = f"jobs/{uuid.uuid4()}/chunks/000000-dead.wav"
    client_s3 = s3_server.client()
    client_s3.put_object(Bucket=bucket, Key=orphan, Body=b"RIFF")
    assert client.delete(f"/v1/voices/{job['voice_id']}", headers=user).status_code == 204
    assert not any(k.startswith(f"voices/{job['voice_id']}/") for k in s3_server.keys(bucket))
    stray = f"voices/{job['voice_id']}/prompt-{'0' * 24}.safetensors"  # written after the delete
    client_s3.put_object(Bucket=bucket, Key=stray, Body=b"{}")
    assert remove_stored_orphans(rt, utcnow()) == 0  # within the grace period: maybe about to commit
    assert remove_stored_orphans(rt, utcnow() + timedelta(hours=2)) == 2
    assert orphan not in s3_server.keys(bucket)
    assert stray not in s3_server.keys(bucket)


def test_live_objects_are_no_orphans(
    s3_app: tuple[Flask, str], s3_server: S3Server, reference_audio: tuple[bytes, str]
) -> None:
    app, bucket = s3_app
    client = app.test_client()
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    _finished(app, client, user, reference_audio[0])
    before = s3_server.keys(bucket)
    assert remove_stored_orphans(tome_of(app).runtime, utcnow() + timedelta(days=3)) == 0
    assert s3_server.keys(bucket) == before


def test_a_missing_bucket_stops_the_api_at_start_and_degrades_healthz_later(
    s3_server: S3Server,
    make_s3_app: Callable[..., tuple[Flask, str]],
    tmp_path: Path,
    reference_audio: tuple[bytes, str],
) -> None:
    settings = load_settings({}, data_dir=tmp_path / "gone", **s3_overrides(s3_server, "never-created"))
    settings.storage.data_dir.mkdir(parents=True)
    with pytest.raises(StorageUnavailable, match=r"'never-created'.*does not exist"):
        create_app({"settings": settings})
    app, bucket = make_s3_app()
    client = app.test_client()
    assert client.get("/healthz").json == {"status": "ok", "database": "ok", "storage": "ok"}
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    job = _finished(app, client, user, reference_audio[0])
    s3 = s3_server.client()
    for key in s3_server.keys(bucket):
        s3.delete_object(Bucket=bucket, Key=key)
    s3.delete_bucket(Bucket=bucket)
    health = client.get("/healthz")
    assert health.status_code == 503
    assert health.json["status"] == "degraded"
    assert "does not exist" in health.json["storage"]
    gone = client.get(job["output"]["url"], headers=user)
    assert gone.status_code == 410  # the file is not there: named, not a 500
    assert gone.json["error"]["code"] == "expired"
    with tome_of(app).sessions() as session:
        assert session.get(Job, uuid.UUID(job["id"])) is not None


def test_an_endpoint_that_stops_answering_is_a_503_naming_the_store_not_a_500(
    s3_app: tuple[Flask, str], reference_audio: tuple[bytes, str]
) -> None:
    app, bucket = s3_app
    client = app.test_client()
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    job = _finished(app, client, user, reference_audio[0])
    state = tome_of(app)
    # the same bucket behind an endpoint where nothing listens any more
    state.storage = S3Storage(state.settings.layout, bucket, endpoint_url=f"http://127.0.0.1:{free_port()}")
    answer = client.get(job["output"]["url"], headers=user)
    assert answer.status_code == 503
    assert answer.json["error"]["code"] == "storage_unavailable"
    assert "cannot be reached" in answer.json["error"]["message"]
    health = client.get("/healthz")
    assert health.status_code == 503
    assert "cannot be reached" in health.json["storage"]
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json["down"] == ["storage"]
    assert "cannot be reached" in ready.json["checks"]["storage"]
    assert client.get("/livez").status_code == 200  # the process answers: no restart would help


def test_objects_tome_did_not_write_are_left_alone_and_never_stop_the_sweep(
    s3_app: tuple[Flask, str], s3_server: S3Server, reference_audio: tuple[bytes, str]
) -> None:
    """A folder marker a console made, another program's file, an id in another spelling: none is an
    orphan of Tome's (nothing says it is Tome's to delete), and none makes the sweep raise."""
    app, bucket = s3_app
    client = app.test_client()
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    job = _finished(app, client, user, reference_audio[0])
    dead = uuid.uuid4()
    foreign = [
        "jobs/.keep",
        "jobs/",
        "voices/readme.txt",
        "voices/not-a-uuid/prompt.safetensors",
        f"jobs/{str(dead).upper()}/chunks/000000-x.wav",  # Tome writes ids in lower case
        f"jobs/{dead.hex}/output.mp3",  # ... with hyphens
        f"jobs/{dead}",  # an object named like a job's folder
    ]
    orphan = f"jobs/{dead}/chunks/000000-dead.wav"
    s3 = s3_server.client()
    for key in [*foreign, orphan]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    rt = tome_of(app).runtime
    report = sweep(rt, lambda *_: None, utcnow() + timedelta(hours=2))
    assert report.failed_steps == []
    assert report.stored_orphans_removed == 1
    keys = s3_server.keys(bucket)
    assert orphan not in keys
    assert set(foreign) <= set(keys)
    assert any(k.startswith(f"jobs/{job['id']}/") for k in keys)  # the live job keeps its files
    # the bucket is listed for orphans at most every ORPHAN_INTERVAL, not on every 30-second pass
    late = f"jobs/{uuid.uuid4()}/chunks/000000-late.wav"
    s3.put_object(Bucket=bucket, Key=late, Body=b"x")
    soon = sweep(rt, lambda *_: None, utcnow() + timedelta(hours=2, minutes=1))
    assert soon.stored_orphans_removed == 0
    assert late in s3_server.keys(bucket)
    due = sweep(rt, lambda *_: None, utcnow() + timedelta(hours=2) + ORPHAN_INTERVAL + timedelta(minutes=1))
    assert due.stored_orphans_removed == 1
    assert late not in s3_server.keys(bucket)


def test_a_step_that_fails_does_not_stop_the_others(
    s3_app: tuple[Flask, str], s3_server: S3Server, reference_audio: tuple[bytes, str]
) -> None:
    """The bucket is gone: the bucket's steps fail, are named in the report and logged, and a queued job
    whose start message was lost is still sent again (it is the database's work, not the bucket's)."""
    app, bucket = s3_app
    client = app.test_client()
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    job = submit_job(client, user, "narrator", script=SCRIPT, script_format="markdown")
    assert job.status_code == 202, job.json
    s3 = s3_server.client()
    for key in s3_server.keys(bucket):
        s3.delete_object(Bucket=bucket, Key=key)
    s3.delete_bucket(Bucket=bucket)
    sent: list[tuple[str, list[Any]]] = []
    later = utcnow() + timedelta(hours=2)
    report = sweep(tome_of(app).runtime, lambda name, args: sent.append((name, args)), later)
    assert report.failed_steps == ["stored orphans"]
    assert (START_JOB, [job.json["id"]]) in sent
    assert report.jobs_restarted == 1
