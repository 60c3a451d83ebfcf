"""Re-renders count: each one's estimated speech is added to its owner's audio of the last 24 hours
(GET /v1/usage) and checked against the daily audio quota before it starts, and a job's chunks can be
rendered again at most TOME_MAX_RERENDERS_PER_JOB_HOUR times an hour (429 with Retry-After)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask

from tests.api.test_rerender import _chunk, _finished, _storm_seq
from tests.support.apps import tome_of

LIMIT = 6


def _audio_used(client: Any, user: dict[str, str]) -> float:
    return float(client.get("/v1/usage", headers=user).json["audio_seconds_24h"]["used"])


def test_six_rerenders_move_usage_and_the_seventh_is_a_429_with_retry_after(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    def make(**overrides: Any) -> Flask:
        return make_app(max_rerenders_per_job_hour=LIMIT, **overrides)

    app, client, user, inline, job = _finished(make, reference_audio, format="wav")
    seq = _storm_seq(client, user, job)
    per_take = len(_chunk(app, job["id"], seq).text) / tome_of(app).settings.limits.speech_chars_per_second
    before = _audio_used(client, user)
    for n in range(1, LIMIT + 1):
        started = client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", headers=user)
        assert started.status_code == 202, started.json
        inline.run()
        assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "succeeded"
        assert _audio_used(client, user) == pytest.approx(before + n * per_take, abs=0.11)

    refused = client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", headers=user)
    assert refused.status_code == 429, refused.json
    assert refused.json["error"]["code"] == "rerenders_per_hour"
    assert "TOME_MAX_RERENDERS_PER_JOB_HOUR" in refused.json["error"]["message"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 3601
    after = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert (after["status"], after["revision"]) == ("succeeded", LIMIT)  # nothing started
    assert _audio_used(client, user) == pytest.approx(before + LIMIT * per_take, abs=0.11)


def test_a_rerender_over_the_daily_audio_quota_is_a_429(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user, _, job = _finished(make_app, reference_audio, format="wav")
    seq = _storm_seq(client, user, job)
    used = _audio_used(client, user)
    state = tome_of(app)
    state.settings = state.settings.with_overrides(quota_audio_seconds_per_day=used + 1.0)
    refused = client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", headers=user)
    assert refused.status_code == 429, refused.json
    assert refused.json["error"]["code"] == "quota_audio_per_day"
    assert "re-render" in refused.json["error"]["message"]
    assert int(refused.headers["Retry-After"]) > 0
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["revision"] == 0
    # an edit short enough to fit the room left is accepted
    fits = client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", json={"text": "By noon."}, headers=user)
    assert fits.status_code == 202, fits.json
