from __future__ import annotations

from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from models import ApiKey
from tests.api.helpers import submit_job, upload_voice
from tests.support.apps import tome_of
from webapi.cli import mint_key


def test_requests_without_a_valid_key_are_401(client: FlaskClient) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
        response = client.get("/v1/jobs", headers=headers)
        assert response.status_code == 401
        assert response.json["error"]["code"] == "unauthorized"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_health_and_spec_need_no_key(client: FlaskClient) -> None:
    assert client.get("/healthz").json == {"status": "ok", "database": "ok", "storage": "ok"}
    assert client.get("/openapi.json").status_code == 200


def test_only_the_hash_of_a_key_is_stored(app: Flask) -> None:
    key = mint_key(app, "erin", "laptop", admin=False)
    state = tome_of(app)
    rows = state.sessions.scalars(select(ApiKey).where(ApiKey.owner == "erin")).all()
    assert len(rows) == 1
    assert key not in (rows[0].key_sha256, rows[0].name)
    assert len(rows[0].key_sha256) == 64


def test_another_users_objects_are_404_everywhere(
    client: FlaskClient, user: dict[str, str], other_user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    voice = upload_voice(client, user, reference_audio[0]).json
    job: dict[str, Any] = submit_job(client, user, "narrator").json
    for method, url in [
        ("get", f"/v1/voices/{voice['id']}"),
        ("delete", f"/v1/voices/{voice['id']}"),
        ("get", f"/v1/jobs/{job['id']}"),
        ("get", f"/v1/jobs/{job['id']}/audio"),
        ("post", f"/v1/jobs/{job['id']}/cancel"),
    ]:
        response = getattr(client, method)(url, headers=other_user)
        assert response.status_code == 404, (method, url)
    assert client.get("/v1/voices", headers=other_user).json["voices"] == []
    assert client.get("/v1/jobs", headers=other_user).json["jobs"] == []
    assert submit_job(client, other_user, voice["id"]).status_code == 422
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).status_code == 200


def test_malformed_ids_are_404_not_500(client: FlaskClient, user: dict[str, str]) -> None:
    for url in ("/v1/jobs/not-a-uuid", "/v1/voices/%00", "/v1/jobs/12345/audio"):
        assert client.get(url, headers=user).status_code == 404


def test_revoked_key_is_refused(app: Flask) -> None:
    key = mint_key(app, "frank", "k", admin=False)
    runner = app.test_cli_runner()
    key_id = str(tome_of(app).sessions.scalars(select(ApiKey.id).where(ApiKey.owner == "frank")).one())
    assert runner.invoke(args=["tome-keys", "revoke", key_id]).exit_code == 0
    assert app.test_client().get("/v1/jobs", headers={"Authorization": f"Bearer {key}"}).status_code == 401


def test_keys_cli_creates_a_working_key(app: Flask) -> None:
    result = app.test_cli_runner().invoke(args=["tome-keys", "create", "--owner", "gina", "--admin"])
    assert result.exit_code == 0, result.output
    key = result.stdout.strip()
    assert "webhook secret: " in result.stderr
    assert app.test_client().get("/v1/voices", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    listing = app.test_cli_runner().invoke(args=["tome-keys", "list"]).output
    assert "gina" in listing
    assert key not in listing
