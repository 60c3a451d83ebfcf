"""The orchestration benchmark (bench/orchestration.py) in a tiny configuration, so that it cannot rot: a
few chunks on one worker process, a few API clients, on the real PostgreSQL and Redis."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.orchestration import measure, problems_of, report, script_of
from tests.support.services import Services
from worker.engines import SynthesisRequest, get_engine
from worker.script.sentences import split_sentences

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

CHUNKS = 12


def test_the_constant_engine_renders_its_tone_for_any_text() -> None:
    engine = get_engine("constant")
    prompt = engine.encode_speaker(np.full(24_000, 0.5, np.float32), 24_000, "Hello.")
    waves = engine.synthesize([SynthesisRequest("One.", prompt), SynthesisRequest("Two words.", prompt)])
    assert [len(w) for w in waves] == [2400, 2400]
    assert float(prompt["rms"][0]) == pytest.approx(0.5)
    waves[0][:] = 0  # each caller's own copy: trimming one leaves the next request's tone whole
    assert float(abs(waves[1]).max()) > 0.2


def test_the_bench_script_is_one_chunk_a_paragraph_and_each_run_has_its_own() -> None:
    assert split_sentences(script_of(3).split("\n\n")[1]) == ["Line 1 of run 0 of the long test."]
    # a paragraph shared by two runs would be reused by the second (worker.jobs.reuse), not rendered
    assert not set(script_of(3, 1).split("\n\n")) & set(script_of(3, 2).split("\n\n"))


def test_the_bench_runs_a_tiny_job_and_load_on_postgres_and_redis(services: Services, tmp_path: Path) -> None:
    figures = measure(
        tmp_path / "bench",
        chunks=CHUNKS,
        processes=(1,),
        clients=2,
        requests=3,
        big_chars=5_000,
        api_workers=1,
        pg_url=services.pg_url,
        redis_url=services.redis_url,
    )
    assert problems_of(figures, CHUNKS) == []
    [run] = figures.jobs
    assert (run.status, run.chunks, run.processes) == ("succeeded", CHUNKS, 1)
    assert run.wall_s > 0
    assert run.transactions > 0
    assert run.reused == 0
    assert run.redis_commands > 0
    assert figures.round_trip_ms > 0
    assert figures.api is not None
    assert len(figures.api.submit.latencies) == len(figures.api.poll.latencies) == 6
    assert figures.api.big_status == [202, 202, 202]
    lines, summary = report(figures, CHUNKS)
    assert any(line.startswith(f"| 1 | {CHUNKS} | ") for line in lines)
    assert "ms/chunk" in summary
    assert "poll=" in summary
