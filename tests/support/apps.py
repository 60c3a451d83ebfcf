"""An app on given settings, its database migrated, its connections released afterwards."""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from flask import Flask
from sqlalchemy import Engine as DbEngine

from models.migrate import upgrade_head
from webapi import create_app
from webapi.extensions import Tome
from worker import counters
from worker.config import Settings


def tome_of(app: Flask) -> Tome:
    """What the app holds (settings, sessions, runtime), for helpers handed an app outside a request."""
    state = app.extensions["tome"]
    assert isinstance(state, Tome)
    return state


def close_engine(db: DbEngine, *, write_metrics: bool = True) -> None:
    """Release a database engine the test is done with: this process's metrics batch for its database
    is written (``write_metrics``; else dropped, for a database that never answered) and forgotten, then
    the engine's pooled connections are closed. Otherwise the batch keeps the engine alive, the metrics
    flusher opens connections through it again (a few file descriptors per engine: a suite that kept them
    ran out of descriptors), and the exit flush writes to databases that may be gone by then."""
    counters.release(db, write=write_metrics)
    db.dispose()


def close_app(app: Flask, *, write_metrics: bool = True) -> None:
    """Release what the app holds open: its sessions and its database engine (:func:`close_engine`)."""
    tome_of(app).sessions.remove()
    close_engine(tome_of(app).db, write_metrics=write_metrics)


@contextlib.contextmanager
def closing(app: Flask, *, write_metrics: bool = True) -> Iterator[Flask]:
    """``app``, closed (:func:`close_app`) when the block ends, however it ends."""
    try:
        yield app
    finally:
        close_app(app, write_metrics=write_metrics)


@functools.cache
def _migrated_sqlite() -> Path:
    """A SQLite database that Alembic brought to head in this process, once: the template that
    :func:`migrate` copies. Alembic's engine is disposed when it ends, so the file is whole on its own
    (no write-ahead log beside it)."""
    folder = Path(tempfile.mkdtemp(prefix="tome-migrated-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    template = folder / "head.db"
    upgrade_head(f"sqlite:///{template}")
    leftovers = [p.name for p in folder.iterdir() if p != template]
    assert not leftovers, f"the migrated template is not closed: {leftovers}"
    return template


def migrate(url: str) -> None:
    """Bring a new, empty database at ``url`` to head. A SQLite file is a copy of one migrated in this
    process (:func:`_migrated_sqlite`): the same schema and ``alembic_version`` row as running every
    migration again, at the cost of a file copy instead of most of the setup time of an app test. Other
    databases, and a SQLite file that exists already, are migrated by Alembic."""
    prefix = "sqlite:///"
    target = Path(url.removeprefix(prefix)) if url.startswith(prefix) else None
    if target is None or target.exists() or str(target) in {"", ":memory:"}:
        upgrade_head(url)
        return
    shutil.copyfile(_migrated_sqlite(), target)


@contextlib.contextmanager
def app_on(settings: Settings) -> Iterator[Flask]:
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    migrate(settings.sqlalchemy_url)
    with closing(create_app({"settings": settings})) as app:
        yield app
