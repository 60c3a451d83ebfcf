"""The CI-sized chaos battery (`make chaos` runs the full one): jobs on real workers while pool children
are SIGKILLed, Redis and PostgreSQL (the battery's own instances) are restarted and a worker is frozen."""

from __future__ import annotations

import pytest

from tests.chaos.battery import ChaosConfig, scenario_a, scenario_b
from tests.chaos.services import PG_BIN

pytestmark = pytest.mark.e2e

SMALL = ChaosConfig(
    jobs=12,
    chunks_per_job=10,
    seconds_per_chunk=0.3,
    kill_every=4,
    max_kills=10,
    stop_seconds=10,
    stop_at=3,
    redis_at=6,
    pg_at=10,
    chunks_per_task=2,
    deadline_seconds=240,
)


def test_scenario_a_postgres_redis_under_kills_restarts_and_a_frozen_worker() -> None:
    if PG_BIN is None:
        pytest.fail("PostgreSQL server binaries (/usr/lib/postgresql/*/bin) are needed for the chaos battery")
    figures = scenario_a(SMALL)
    print(figures.details())
    print(figures.line())
    assert figures.kills >= 3
    assert (figures.redis_restarts, figures.pg_restarts, figures.stops) == (1, 1, 1)
    assert figures.jobs == SMALL.jobs
    assert figures.ok, figures.problems
    assert (figures.lost, figures.missing, figures.duplicated, figures.server_errors) == (0, 0, 0, 0)


def test_scenario_b_embedded_under_twenty_concurrent_jobs_and_kills() -> None:
    config = ChaosConfig(
        jobs=20,
        chunks_per_job=4,
        seconds_per_chunk=0.2,
        # A pool process killed every 3 s: on this broker one killed idle process used to stop a worker
        # for good (worker.filesystem_broker); about 15-20 s and 3-5 kills here, 6 at most, so that a
        # loaded machine, where the jobs take longer, does not also take more kills (each can cost a chunk
        # one of its attempts).
        kill_every=3,
        max_kills=6,
        stop_seconds=0,
        chunks_per_task=2,
        submit_threads=20,
        deadline_seconds=240,
    )
    figures = scenario_b(config)
    print(figures.details())
    print(figures.line())
    assert figures.kills >= 1
    assert figures.locked_errors == 0, "'database is locked' reached a caller"
    assert figures.ok, figures.problems
    assert (figures.lost, figures.missing, figures.duplicated, figures.server_errors) == (0, 0, 0, 0)
