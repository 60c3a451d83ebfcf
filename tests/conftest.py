"""Fixtures: settings on a temp data dir, the app and its client, API keys, reference audio, workers.

PostgreSQL and Redis tests use 127.0.0.1:5432 and 127.0.0.1:6379 (or TOME_TEST_PG_URL / TOME_TEST_REDIS_URL).
Where they are unreachable those tests are skipped with the reason, unless TOME_TEST_REQUIRE_SERVICES=1
(set by .ci/run), in which case they fail.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, scoped_session

from bench.engines import MODULE as BENCH_ENGINES
from tests.support.apps import app_on, tome_of
from tests.support.audio import reference_wav
from tests.support.audiobookshelf import ABS_TOKEN, OTHER_ABS_TOKEN, FakeAudiobookshelf
from tests.support.factories import upload_voice
from tests.support.receiver import Receiver
from tests.support.s3 import S3Server, moto_server
from tests.support.services import Services, postgres_database, require_services
from webapi.cli import mint_key
from worker.config import Settings, load_modules, load_settings
from worker.processes import WorkerProcess
from worker.runtime import Runtime

# The benchmarks' engines (espeak-paced: espeak at a GPU's pace; constant) do not ship with Tome: the tests
# load them as a deployment loads its own (TOME_ENGINE_MODULES), and the settings hand them on to every
# worker and API process a test starts.
load_modules(BENCH_ENGINES)

# The directories whose test files start worker, API, browser or database processes and so take minutes
# each; under pytest-xdist (make test) they are handed out first, so that the quick files fill the end of
# the run instead of one slow file starting last and running on alone.
SLOW_FIRST = ("e2e", "chaos", "browser", "cli", "qwen3", "fish")


def slow_first(item: pytest.Item) -> int:
    parts = item.nodeid.split("/")
    kind = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    return SLOW_FIRST.index(kind) if kind in SLOW_FIRST else len(SLOW_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker (``workerinput``), the slow directories' tests first (a stable sort: each
    file's tests stay together and in their order); the scheduler hands files out in that order when
    ``--no-loadscope-reorder`` keeps it from ordering them by their number of tests."""
    if hasattr(config, "workerinput"):
        items.sort(key=slow_first)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server, a child process on 127.0.0.1 for the whole session (tests/support/s3.py)."""
    with moto_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def storage_overrides() -> dict[str, Any]:
    """Settings overrides that choose the storage backend: none (the local data directory) here;
    modules that run with both backends override this fixture (tests/support/s3.py, ``both_backends``)."""
    return {}


@pytest.fixture
def settings(tmp_path: Path, storage_overrides: dict[str, Any]) -> Settings:
    return load_settings({}, data_dir=tmp_path / "var", **storage_overrides)


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    """The app on ``settings``, its database migrated; its connections released when the test ends."""
    with app_on(settings) as app:
        yield app


@pytest.fixture
def db(app: Flask) -> scoped_session[Session]:
    """The app's database sessions (the same registry its views use)."""
    return tome_of(app).sessions


@pytest.fixture
def rt(app: Flask) -> Runtime:
    """The worker-side services on the app's database: what a task body is given."""
    return tome_of(app).runtime


@pytest.fixture
def make_app(tmp_path: Path, storage_overrides: dict[str, Any]) -> Iterator[Callable[..., Flask]]:
    """An app with its own data dir and database, and the given Settings overrides (on the storage
    backend ``storage_overrides`` chooses); every app made is closed when the test ends."""
    with contextlib.ExitStack() as made:

        def make(**overrides: Any) -> Flask:
            where = {"data_dir": tmp_path / f"app-{os.urandom(3).hex()}", **storage_overrides}
            return made.enter_context(app_on(load_settings({}, **{**where, **overrides})))

        yield make


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def user(app: Flask) -> dict[str, str]:
    return bearer(mint_key(app, owner="alice", name="test", admin=False))


@pytest.fixture
def other_user(app: Flask) -> dict[str, str]:
    return bearer(mint_key(app, owner="bob", name="test", admin=False))


@pytest.fixture
def admin(app: Flask) -> dict[str, str]:
    return bearer(mint_key(app, owner="root", name="test", admin=True))


@pytest.fixture(scope="session")
def reference_audio(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, str]:
    """A spoken reference recording (espeak at a low pitch) and its transcript."""
    return reference_wav(tmp_path_factory.mktemp("ref"))


@pytest.fixture(scope="session")
def services() -> Services:
    return require_services()


@pytest.fixture
def pg_settings(services: Services, tmp_path: Path) -> Iterator[Settings]:
    """Settings on a fresh PostgreSQL database and a private Redis queue; both removed afterwards."""
    with postgres_database(services.pg_url) as url:
        queue = f"tome-test-{os.urandom(4).hex()}"
        yield load_settings(
            {}, data_dir=tmp_path / "var", database_url=url, broker_url=services.redis_url, queue=queue
        )


@pytest.fixture
def pg_app(pg_settings: Settings) -> Iterator[Flask]:
    """An app on a fresh PostgreSQL database and a private Redis queue."""
    with app_on(pg_settings) as app:
        yield app


@pytest.fixture(params=["sqlite", "postgresql"])
def database_app(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Flask]:
    """An app on each database: the embedded SQLite one, then a fresh PostgreSQL one."""
    chosen = settings if request.param == "sqlite" else request.getfixturevalue("pg_settings")
    with app_on(chosen) as app:
        yield app


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real Celery worker processes; when the test ends, those still running are killed by their own
    PIDs (pool processes included) rather than shut down warm: nothing is left to check by then, and a
    warm shutdown spends seconds of idle waits in Celery's pool (more on a loaded machine) for each worker.
    A test that needs what a warm shutdown does (the pool processes writing their counters as they exit)
    calls ``stop()`` itself."""
    started: list[WorkerProcess] = []

    def start(settings: Settings, **kwargs: Any) -> WorkerProcess:
        worker = WorkerProcess(settings, log_dir=tmp_path, **kwargs)
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop(timeout=0)


@pytest.fixture
def narrator(client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]) -> str:
    """The id of ``user``'s voice "narrator", uploaded with its transcript."""
    response = upload_voice(client, user, reference_audio[0], name="narrator", ref_text=reference_audio[1])
    assert response.status_code == 202, response.json
    return str(response.json["id"])


@pytest.fixture
def voice(client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]) -> dict[str, Any]:
    """``user``'s voice "narrator" as its upload answered (uploaded with its transcript)."""
    data: dict[str, Any] = upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1]).json
    return data


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on 127.0.0.1 (tests/support/receiver.py)."""
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def abs_server() -> Iterator[FakeAudiobookshelf]:
    """A fake Audiobookshelf on 127.0.0.1 that takes ``ABS_TOKEN`` and ``OTHER_ABS_TOKEN``."""
    server = FakeAudiobookshelf(tokens={ABS_TOKEN, OTHER_ABS_TOKEN})
    yield server
    server.close()
