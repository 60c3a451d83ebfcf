"""The API as `make run` and compose serve it: gunicorn, configured only through TOME_* variables."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from flask import Flask

from tests.support.api_server import request, running_api
from webapi.cli import mint_key
from worker.config import Settings
from worker.processes import api_command

pytestmark = pytest.mark.e2e


def _post_json(port: int, key: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    answer = request(port, "POST", "/v1/jobs", headers, json.dumps(body).encode(), timeout=10)
    return answer.status, json.loads(answer.body)


def _seed_voice(app: Flask, key: str, reference_audio: tuple[bytes, str]) -> None:
    """A voice "narrator" for ``key``'s owner, through the app's own client."""
    audio, transcript = reference_audio
    uploaded = app.test_client().post(
        "/v1/voices",
        data={"name": "narrator", "ref_text": transcript, "audio": (io.BytesIO(audio), "r.wav")},
        headers={"Authorization": f"Bearer {key}"},
        content_type="multipart/form-data",
    )
    assert uploaded.status_code == 202


def test_the_apis_own_log_lines_reach_gunicorns_log(
    app: Flask, settings: Settings, tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    """Without handing the root logger gunicorn's handlers, every ``log.info`` of the API was dropped."""
    key = mint_key(app, owner="alice", name="test", admin=False)
    with running_api(settings, tmp_path, lambda bind: api_command(bind, workers=1)) as server:
        status, body = _post_json(server.port, key, {"title": "x", "script": "Hi.", "voice": "Nobody"})
        assert status == 422, body
        # An accepted job logs "job <id>: accepted": seed a voice row straight through the app's client.
        _seed_voice(app, key, reference_audio)
        status, body = _post_json(server.port, key, {"title": "x", "script": "Hi.", "voice": "narrator"})
        assert status == 202, body
        server.wait_for(server.stderr, f"webapi.jobs: job {body['id']}: accepted")


def test_with_json_logs_the_apis_lines_carry_the_request_and_job_ids(
    app: Flask, settings: Settings, tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    """TOME_LOG_FORMAT=json under gunicorn: one JSON object a line, with the request id the client sent
    and the job it created."""
    key = mint_key(app, owner="alice", name="test", admin=False)
    _seed_voice(app, key, reference_audio)
    as_json = settings.with_overrides(log_format="json")
    with running_api(as_json, tmp_path, lambda bind: api_command(bind, workers=1)) as server:
        headers = {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "X-Request-ID": "req-json-logs-1",
        }
        body = json.dumps({"title": "x", "script": "Hi.", "voice": "narrator"}).encode()
        answer = request(server.port, "POST", "/v1/jobs", headers, body, timeout=10)
        assert answer.status == 202, answer.body
        assert answer.headers["X-Request-ID"] == "req-json-logs-1"
        job_id = json.loads(answer.body)["id"]
        server.wait_for(server.stderr, f"job {job_id}: accepted")
        lines = [line for line in server.stderr.read_text().splitlines() if f"job {job_id}: accepted" in line]
    record = json.loads(lines[0])
    assert record["logger"] == "webapi.jobs"
    assert record["level"] == "INFO"
    assert record["request_id"] == "req-json-logs-1"
    assert record["job_id"] == job_id
