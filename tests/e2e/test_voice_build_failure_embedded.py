"""A voice whose prompt build raises (any exception from the engine, here a RuntimeError of espeak-paced's
codec on a reference longer than it takes) gives its build claim up at once, on a real worker: the voice
is ``failed`` with the cause (no server path), the job waiting for it fails naming the voice and the
cause, and a rebuild is queued at once instead of answering busy until the build lease expires."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.e2e.flow import wait_terminal
from tests.support.apps import app_on
from webapi.cli import mint_key
from worker.config import Settings

pytestmark = pytest.mark.e2e

CAUSE = "RuntimeError: the codec takes at most 1 s of reference audio"


def _eventually(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 120
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def test_a_build_that_raises_fails_the_voice_and_its_job_at_once_and_can_be_rebuilt(
    settings: Settings, reference_audio: tuple[bytes, str], start_worker: Callable[..., Any]
) -> None:
    failing = settings.with_overrides(
        engine="espeak-paced", paced_seconds_per_chunk=0.0, paced_max_reference_seconds=1.0
    )
    assert failing.voices.build_lease_seconds >= 300  # what a build that kept its claim would cost
    with app_on(failing) as app:
        client = app.test_client()
        user = bearer(mint_key(app, "vera", "k", admin=False))
        admin = bearer(mint_key(app, "root", "k", admin=True))
        voice = upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1])
        assert voice.status_code == 202, voice.json
        job = submit_job(client, user, "narrator", script="The fog came in before dawn.")
        assert job.status_code == 202, job.json
        worker = start_worker(failing)

        ended = wait_terminal(client, user, job.json["id"], timeout=120)
        assert ended["status"] == "failed"
        assert "'narrator'" in ended["error"], ended["error"]
        assert CAUSE in ended["error"]
        failed = client.get(f"/v1/voices/{voice.json['id']}", headers=user).json
        assert failed["cache_status"] == "failed"
        assert failed["cache_error"].startswith(CAUSE), failed["cache_error"]
        for text in (failed["cache_error"], ended["error"]):
            assert str(failing.storage.data_dir) not in text

        rebuild = client.post(f"/v1/admin/voices/{voice.json['id']}/cache", json={}, headers=admin)
        assert rebuild.status_code == 202, rebuild.json
        assert rebuild.json["queued"] is True  # not busy: the failed build holds no claim
        # the rebuild runs (and fails again on this engine) at once, not after the build lease
        # the worker logs the failure before it stores it: wait for both
        _eventually(
            "a second build",
            lambda: (
                worker.log().count("prompt build failed") == 2
                and client.get(f"/v1/voices/{voice.json['id']}", headers=user).json["cache_status"]
                == "failed"
            ),
        )
        again = client.get(f"/v1/voices/{voice.json['id']}", headers=user).json
        assert again["cache_status"] == "failed"
        assert again["cache_error"].startswith(CAUSE)
