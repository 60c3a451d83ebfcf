"""The API as `make run` and compose serve it: gunicorn, configured only through TOME_* variables."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from flask import Flask

from webapi.cli import mint_key
from worker.config import Settings
from worker.processes import api_command, settings_env

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post_json(url: str, key: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_apis_own_log_lines_reach_gunicorns_log(
    app: Flask, settings: Settings, tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    """Without handing the root logger gunicorn's handlers, every ``log.info`` of the API was dropped."""
    key = mint_key(app, owner="alice", name="test", admin=False)
    port = _free_port()
    log_path = tmp_path / "gunicorn.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            api_command(f"127.0.0.1:{port}", workers=1),  # what make run starts
            env=settings_env(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, log_path.read_text()
                assert proc.poll() is None, log_path.read_text()
                time.sleep(0.2)
        status, body = _post_json(f"{base}/v1/jobs", key, {"title": "x", "script": "Hi.", "voice": "Nobody"})
        assert status == 422, body
        # An accepted job logs "job <id>: accepted": seed a voice row straight through the app's client.
        audio, transcript = reference_audio
        uploaded = app.test_client().post(
            "/v1/voices",
            data={"name": "narrator", "ref_text": transcript, "audio": (io.BytesIO(audio), "r.wav")},
            headers={"Authorization": f"Bearer {key}"},
            content_type="multipart/form-data",
        )
        assert uploaded.status_code == 202
        status, body = _post_json(
            f"{base}/v1/jobs", key, {"title": "x", "script": "Hi.", "voice": "narrator"}
        )
        assert status == 202, body
        deadline = time.monotonic() + 10
        while f"webapi.jobs: job {body['id']}: accepted" not in log_path.read_text():
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
