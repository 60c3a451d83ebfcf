"""The stack the studio is tested against, once per test module: the API as ``make run`` serves it
(gunicorn, ``running_api``) on a free 127.0.0.1 port with its own data directory and SQLite database, real
Celery workers (embedded: filesystem broker, espeak) for the modules that ask for ``worker``, and one
headless Chromium (``studio``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.browser.studio import Studio, chromium
from tests.support.api_server import running_api
from tests.support.apps import app_on
from webapi.cli import mint_key
from worker.config import Settings, load_settings
from worker.processes import WorkerProcess, api_command


@dataclass(frozen=True)
class Stack:
    url: str
    settings: Settings
    root: Path
    alice: str  # a user's key
    bob: str  # another user's key
    admin: str  # an admin's key

    def api(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("studio")
    # a secret key, as `make run` makes one: the player streams the book from a signed link
    settings = load_settings({}, data_dir=root / "var", secret_key="studio-test-secret-" + "k" * 32)
    with app_on(settings) as app:  # migrates the database, then mints the keys
        alice = mint_key(app, owner="alice", name="studio", admin=False)
        bob = mint_key(app, owner="bob", name="studio", admin=False)
        admin = mint_key(app, owner="root", name="studio", admin=True)
    with running_api(settings, root, lambda bind: api_command(bind, workers=1)) as server:
        yield Stack(f"http://127.0.0.1:{server.port}", settings, root, alice, bob, admin)


@pytest.fixture(scope="module")
def worker(stack: Stack) -> Iterator[WorkerProcess]:
    """Real Celery worker processes on the stack's database and broker (stopped by their PIDs)."""
    process = WorkerProcess(stack.settings, log_dir=stack.root, concurrency=2)
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop(timeout=0)  # killed: nothing is checked after the module (a warm stop is seconds)


@pytest.fixture(scope="module")
def studio(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    with chromium(stack.url, tmp_path_factory.mktemp("downloads")) as browser:
        yield browser
