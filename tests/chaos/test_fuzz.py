"""CI-sized fuzzing: schemathesis over the app's own /openapi.json, and the hostile corpus.

The full-size run (about 1,500 generated cases and the corpus) is ``python -m tests.chaos.fuzz``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from tests.chaos.fuzz import (
    CI_MAX_EXAMPLES,
    LOCAL_PACKAGES,
    SPEECH_WAIT_S,
    FuzzReport,
    load_local_modules,
    run_schemathesis,
)
from tests.chaos.hostile import (
    MEMORY_LIMIT,
    TIME_LIMIT_S,
    VOICE,
    Corpus,
    HostileReport,
    build_corpus,
    run_hostile,
    seed_voice,
)
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.cost import CpuMeter
from webapi.cli import mint_key
from worker.config import Settings

HOSTILE_SETTINGS: dict[str, Any] = {
    "rate_limit_per_minute": 0,
    "max_upload_bytes": 2_000_000,  # the limit + 1 item is then 2 MB, not 50 MB
    "max_script_chars": 10_000,
    "speech_wait_seconds": SPEECH_WAIT_S,
}


def _keys(app: Flask) -> tuple[dict[str, str], dict[str, str]]:
    user = bearer(mint_key(app, owner="fuzz", name="fuzz", admin=False))
    admin = bearer(mint_key(app, owner="root", name="fuzz", admin=True))
    return user, admin


def _settings(app: Flask) -> Settings:
    settings = tome_of(app).settings
    assert isinstance(settings, Settings)
    return settings


def test_schemathesis_finds_no_server_error(make_app: Callable[..., Flask]) -> None:
    """Generated requests for every operation (valid and invalid, with the user key; the admin operations
    also with the admin key) and stateful scenarios over the links schemathesis infers: never a 5xx."""
    app = make_app(rate_limit_per_minute=0, speech_wait_seconds=SPEECH_WAIT_S)
    user, admin = _keys(app)
    report = run_schemathesis(app, user, CI_MAX_EXAMPLES, stateful=True, admin_headers=admin, seed=0)
    print(report.summary())
    assert report.server_errors == 0, report.summary()
    assert report.cases >= 150, report.summary()
    assert len(report.operations) >= 14, report.operations
    assert set(report.per_operation) == set(report.operations), report.summary()  # each one was fuzzed
    # The seeded voice let generated jobs through to parsing, chunking and the queue ...
    assert report.statuses[202] > 0, report.summary()
    # ... and the state machine followed inferred links ...
    assert report.stateful_scenarios > 0, report.summary()
    # ... and stepped on objects it had created. One exploration's 7 scenarios often start on ids that
    # do not exist and never create one (seeds 0 to 4 reached live objects in 2 of 5); the machine
    # must reach live objects within nine more seeds (each 5-10 s, run only while none was reached).
    live = _live_steps(report)
    for seed in range(1, 10):
        if live:
            break
        again = run_schemathesis(
            app, user, CI_MAX_EXAMPLES, stateful=True, admin_headers=admin, seed=seed, modes=()
        )
        assert again.server_errors == 0, again.summary()
        live = _live_steps(again)
    assert live > 0, report.summary()


def _live_steps(report: FuzzReport) -> int:
    """Stateful steps on a live object: a success (200, 202, 204...) on a step that takes an id."""
    return sum(n for step, n in report.stateful_statuses.items() if "{" in step and step[-3:].startswith("2"))


@pytest.fixture
def hostile(make_app: Callable[..., Flask]) -> tuple[Flask, dict[str, str], HostileReport]:
    app = make_app(**HOSTILE_SETTINGS)
    user, _ = _keys(app)
    return app, user, run_hostile(app, user)


def test_hostile_corpus_is_refused_quickly_with_bounded_memory(
    hostile: tuple[Flask, dict[str, str], HostileReport],
) -> None:
    """Every hostile upload and job body gets a 4xx (the few that are hostile in form but valid in
    content may be accepted: never a 5xx), each for under a second of CPU and within the memory bound; nothing
    is left in uploads/ and nothing is written outside the data dir, whatever the file name says."""
    app, _, report = hostile
    print(report.summary())
    assert report.violations() == [], "\n".join(report.violations())
    assert len(report.results) >= 80
    assert len({r.label for r in report.results}) == len(report.results)
    uploads = _settings(app).storage.data_dir / "uploads"
    assert not uploads.exists() or not any(uploads.iterdir())
    assert report.slowest().cpu_s < TIME_LIMIT_S
    assert report.heaviest().peak_bytes < MEMORY_LIMIT


def test_hostile_file_names_never_reach_the_file_system(
    hostile: tuple[Flask, dict[str, str], HostileReport],
) -> None:
    """The accepted upload with a traversal file name is stored under a server-generated name inside
    the data dir; no stored path carries anything of the client's name."""
    app, user, report = hostile
    accepted = [r for r in report.results if r.label.startswith("file name") and r.status == 202]
    assert len(accepted) == 1, report.summary()
    voices = app.test_client().get("/v1/voices", headers=user).get_json()["voices"]
    assert any(v["name"].startswith("escape ") for v in voices)
    data_dir = _settings(app).storage.data_dir.resolve()
    stored = [p for p in (data_dir / "voices").rglob("*") if p.is_file() or p.is_symlink()]
    assert len(stored) >= len(voices) > 1
    for path in stored:
        assert path.resolve().is_relative_to(data_dir)
        assert path.name.startswith("reference-"), path


def _single(app: Flask, label_start: str) -> Corpus:
    items = [i for i in build_corpus(_settings(app), "single").items if i.label.startswith(label_start)]
    assert items, label_start
    return Corpus(tuple(items), (), ())


def test_deeply_nested_json_is_refused_with_a_4xx(make_app: Callable[..., Flask]) -> None:
    app = make_app(**HOSTILE_SETTINGS)
    user, _ = _keys(app)
    report = run_hostile(app, user, _single(app, "job: JSON nested 10,000 levels deep"))
    assert report.violations(include_bugs=True) == [], "\n".join(report.violations(include_bugs=True))


def test_flac_decompression_bomb_stays_within_the_memory_bound(make_app: Callable[..., Flask]) -> None:
    app = make_app(**HOSTILE_SETTINGS)
    user, _ = _keys(app)
    report = run_hostile(app, user, _single(app, "upload: FLAC decompression bomb"))
    assert report.violations(include_bugs=True) == [], "\n".join(report.violations(include_bugs=True))


def test_refusing_a_script_over_the_chunk_limit_is_fast(make_app: Callable[..., Flask]) -> None:
    """Scaled down: 40,000 paragraphs against a limit of 100 chunks must be refused as fast as any other
    invalid request, not after parsing all of them (that took about 5 s before the paragraph pre-check)."""
    app = make_app(rate_limit_per_minute=0, max_script_chars=200_000, max_chunks_per_job=100)
    user, _ = _keys(app)
    seed_voice(app, user)
    script = "Hi.\n\n" * 40_000
    meter = CpuMeter()
    response = app.test_client().post(
        "/v1/jobs",
        headers=user,
        json={"title": "t", "script": script, "voice": VOICE, "script_format": "markdown"},
    )
    cost = meter.seconds()
    assert response.status_code == 422, response.data
    assert cost < TIME_LIMIT_S, f"refused after {cost:.1f} s of CPU"


@pytest.mark.parametrize("path", ["/v1/voices", "/v1/jobs", "/v1/admin/voices"])
def test_list_offset_beyond_the_database_integer_range_is_a_4xx(
    make_app: Callable[..., Flask], path: str
) -> None:
    """Found by the fuzzer: ``offset`` is unbounded in ListQuery; SQLite cannot bind 2**63 (OverflowError)."""
    app = make_app(rate_limit_per_minute=0)
    _, admin = _keys(app)
    for offset in (2**63, 10**30):
        response = app.test_client().get(f"{path}?offset={offset}", headers=admin)
        assert 400 <= response.status_code < 500, (offset, response.status_code, response.data)


def test_every_module_of_the_project_is_loaded_before_fuzzing() -> None:
    """Hypothesis draws values from the constants of the project's loaded modules: the fuzz loads them
    all first (tests.chaos.fuzz.load_local_modules), so that a seed generates the same cases in the whole
    suite as alone. A module it misses would make that depend on what other tests imported."""
    load_local_modules()
    root = Path(__file__).resolve().parents[2]
    missing = []
    for package in LOCAL_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.name == "__main__.py":
                continue
            name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            if name not in sys.modules:
                missing.append(name)
    assert missing == []
