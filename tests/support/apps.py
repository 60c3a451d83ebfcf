"""An app on given settings, its database migrated, its connections released afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flask import Flask

from models.migrate import upgrade_head
from webapi import create_app
from webapi.extensions import Tome
from worker.config import Settings


def tome_of(app: Flask) -> Tome:
    """What the app holds (settings, sessions, runtime), for helpers handed an app outside a request."""
    state = app.extensions["tome"]
    assert isinstance(state, Tome)
    return state


@contextlib.contextmanager
def app_on(settings: Settings) -> Iterator[Flask]:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade_head(settings.sqlalchemy_url)
    app = create_app({"settings": settings})
    try:
        yield app
    finally:
        tome_of(app).sessions.remove()
        tome_of(app).db.dispose()
