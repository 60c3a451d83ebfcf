from __future__ import annotations

import io
import uuid
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update
from sqlalchemy.orm import Session, scoped_session

from models import CacheStatus, Voice
from tests.api.helpers import submit_job, upload_voice
from tests.support.apps import tome_of
from tests.support.audio import speak
from worker import counters
from worker.audio import write_wav_atomic
from worker.runtime import Runtime
from worker.voices.prompts import build_voice


def _set_status(app: Flask, voice_id: str, status: CacheStatus) -> None:
    sessions = tome_of(app).sessions
    sessions.execute(update(Voice).where(Voice.id == uuid.UUID(voice_id)).values(cache_status=status.value))
    sessions.commit()


def _build(app: Flask, voice_id: str) -> str:
    return build_voice(tome_of(app).runtime, uuid.UUID(voice_id)).value


def test_user_keys_get_403_on_every_admin_endpoint(
    client: FlaskClient, user: dict[str, str], voice: dict[str, Any]
) -> None:
    for method, url, body in [
        ("get", "/v1/admin/voices", None),
        ("post", f"/v1/admin/voices/{voice['id']}/cache", {"force": True}),
        ("post", "/v1/admin/voice-caches/rebuild", {"all": True}),
    ]:
        response = getattr(client, method)(url, json=body, headers=user)
        assert response.status_code == 403, url
        assert response.json["error"]["code"] == "forbidden"
    assert client.get("/v1/admin/voices").status_code == 401


def test_admin_lists_every_owners_voices_with_cache_state(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    other_user: dict[str, str],
    admin: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    mine = upload_voice(client, user, reference_audio[0], name="a").json
    theirs = upload_voice(client, other_user, reference_audio[0], name="b").json
    assert _build(app, mine["id"]) == "built"
    listed = client.get("/v1/admin/voices", headers=admin).json["voices"]
    assert {(v["id"], v["owner"]) for v in listed} == {(mine["id"], "alice"), (theirs["id"], "bob")}
    ready = client.get("/v1/admin/voices?cache_status=ready", headers=admin).json["voices"]
    assert [v["id"] for v in ready] == [mine["id"]]
    assert ready[0]["cache_key"].startswith("espeak/")
    bad = client.get("/v1/admin/voices?cache_status=bogus", headers=admin)
    assert bad.status_code == 422
    assert bad.json["error"]["field"] == "query.cache_status"


def test_rebuild_one_is_idempotent_unless_forced(
    app: Flask, client: FlaskClient, admin: dict[str, str], voice: dict[str, Any], db: scoped_session[Session]
) -> None:
    assert _build(app, voice["id"]) == "built"
    url = f"/v1/admin/voices/{voice['id']}/cache"
    again = client.post(url, json={}, headers=admin)
    assert again.status_code == 202
    assert again.json["queued"] is False
    assert again.json["voice"]["cache_status"] == "ready"
    forced = client.post(url, json={"force": True}, headers=admin)
    assert forced.json["queued"] is True
    assert forced.json["voice"]["cache_status"] == "pending"
    repeated = client.post(url, json={"force": True}, headers=admin)
    assert repeated.json["queued"] is False, "a second request while one is pending queues nothing new"
    assert _build(app, voice["id"]) == "built"
    assert _build(app, voice["id"]) == "already_ready"
    assert counters.read_all(db())[(counters.BUILDS, "espeak")] == 2
    assert client.post(f"/v1/admin/voices/{uuid.uuid4()}/cache", json={}, headers=admin).status_code == 404
    assert client.post(url, json={"force": "yes please"}, headers=admin).status_code == 422


def test_rebuild_many_by_status_or_all(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    admin: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    ids = [upload_voice(client, user, reference_audio[0], name=f"v{i}").json["id"] for i in range(3)]
    for voice_id in ids:
        _build(app, voice_id)
    _set_status(app, ids[0], CacheStatus.FAILED)
    _set_status(app, ids[1], CacheStatus.STALE)
    response = client.post(
        "/v1/admin/voice-caches/rebuild", json={"status": ["failed", "stale"]}, headers=admin
    )
    assert response.status_code == 202
    assert response.json == {"queued": 2, "matched": 2}
    everything = client.post("/v1/admin/voice-caches/rebuild", json={"all": True}, headers=admin).json
    assert everything == {"queued": 1, "matched": 3}, "the two already pending are not queued twice"
    bodies: list[dict[str, Any]] = [
        {},
        {"all": True, "status": ["failed"]},
        {"status": []},
        {"status": ["x"]},
    ]
    for body in bodies:
        bad = client.post("/v1/admin/voice-caches/rebuild", json=body, headers=admin)
        assert bad.status_code == 422, body


def test_job_with_a_failed_voice_fails_naming_the_voice(
    app: Flask, client: FlaskClient, user: dict[str, str], voice: dict[str, Any], db: scoped_session[Session]
) -> None:
    from worker.jobs.start import start_job

    db.execute(
        update(Voice)
        .where(Voice.id == uuid.UUID(voice["id"]))
        .values(cache_status="failed", cache_error="EngineError: reference too quiet")
    )
    db.commit()
    job = submit_job(client, user, voice["name"]).json
    sent: list[tuple[str, list[Any]]] = []
    assert start_job(tome_of(app).runtime, uuid.UUID(job["id"]), lambda n, a: sent.append((n, a))) == "failed"
    failed = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert failed["status"] == "failed"
    assert "narrator" in failed["error"]
    assert "reference too quiet" in failed["error"]
    assert sent == [("tome.deliver_webhook", [job["id"]])], "only the completion notice is sent"


def test_metrics_report_cache_counters_by_engine(
    app: Flask, client: FlaskClient, voice: dict[str, Any], rt: Runtime, admin: dict[str, str]
) -> None:
    from worker.voices.prompts import load_voice_prompt

    assert _build(app, voice["id"]) == "built"
    load_voice_prompt(rt, uuid.UUID(voice["id"]))
    load_voice_prompt(rt, uuid.UUID(voice["id"]))
    text = client.get("/metrics", headers=admin).get_data(as_text=True)
    assert 'tome_voice_cache_builds_total{engine="espeak"} 1.0' in text
    assert 'tome_voice_cache_build_seconds_count{engine="espeak"} 1.0' in text
    assert 'tome_voice_cache_misses_total{engine="espeak"}' in text
    assert 'tome_voice_cache_hits_total{engine="espeak"}' in text
    assert 'tome_voices{cache_status="ready"} 1.0' in text


def test_reupload_replaces_audio_and_rebuilds(
    app: Flask, client: FlaskClient, user: dict[str, str], voice: dict[str, Any], tmp_path: Any
) -> None:
    assert _build(app, voice["id"]) == "built"
    wave, rate = speak("A completely different recording, spoken much higher.", {"f0_median_hz": _f32(220.0)})
    path = tmp_path / "new.wav"
    write_wav_atomic(path, wave, rate)
    response = client.put(
        f"/v1/voices/{voice['id']}",
        data={
            "audio": (io.BytesIO(path.read_bytes()), "new.wav"),
            "ref_text": "A completely different recording",
        },
        headers=user,
        content_type="multipart/form-data",
    )
    assert response.status_code == 202, response.json
    replaced = response.json
    assert replaced["cache_status"] == "pending"
    assert replaced["audio_sha256"] != voice["audio_sha256"]
    assert _build(app, voice["id"]) == "built"
    folder = tome_of(app).settings.storage.data_dir / "voices" / voice["id"]
    assert len(list(folder.glob("reference-*.wav"))) == 1, "the old recording is removed"
    assert len(list(folder.glob("prompt-*.safetensors"))) == 1, "the old prompt is removed"
    empty = client.put(f"/v1/voices/{voice['id']}", data={}, headers=user, content_type="multipart/form-data")
    assert empty.status_code == 422
    submit_job(client, user, voice["id"])
    busy = client.put(
        f"/v1/voices/{voice['id']}", data={"ref_text": "x"}, headers=user, content_type="multipart/form-data"
    )
    assert busy.status_code == 409


def _f32(value: float) -> Any:
    import numpy as np

    return np.array([value], dtype=np.float32)
