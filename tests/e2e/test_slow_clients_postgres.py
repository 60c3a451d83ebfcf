"""Slow clients on the production stack's drivers (issue 10): the API as `make run` starts it, on PostgreSQL
and Redis, under gevent workers (psycopg must wait cooperatively, the Celery producer must reach Redis)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.e2e.test_slow_clients import (
    BOUND,
    SLOW_HEADERS,
    Tricklers,
    header_trickle,
    seed_voice,
    victim_latencies,
)
from tests.support.api_server import request, running_api
from tests.support.apps import app_on
from webapi.cli import mint_key
from worker.config import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.serial]  # BOUND is seconds: run alone


def test_slow_clients_on_postgres_and_redis(
    pg_settings: Settings, tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    """The production stack's drivers under gevent: psycopg waits cooperatively, Redis takes the job."""
    with app_on(pg_settings) as app:
        victim = mint_key(app, owner="alice", name="victim", admin=False)
        seed_voice(app, victim, reference_audio)
    with running_api(pg_settings, tmp_path) as server:
        openings = [header_trickle("/v1/voices") for _ in range(SLOW_HEADERS)]
        with Tricklers(server.port, openings):
            time.sleep(1.5)
            seconds = victim_latencies(server.port, victim)
            job = request(
                server.port, "POST", "/v1/jobs",
                {"Authorization": f"Bearer {victim}", "Content-Type": "application/json"},
                json.dumps({"title": "x", "script": "Hi.", "voice": "narrator"}).encode(),
            )  # fmt: skip
        assert max(seconds) < BOUND, (seconds, server.log()[-3000:])
        assert job.status == 202, job  # inserted through psycopg, START_JOB sent to Redis, under gevent
