"""An app on given settings, its database migrated, its connections released afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flask import Flask

from models.migrate import upgrade_head
from webapi import create_app
from worker.config import Settings


@contextlib.contextmanager
def app_on(settings: Settings) -> Iterator[Flask]:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade_head(settings.sqlalchemy_url)
    app = create_app({"settings": settings})
    try:
        yield app
    finally:
        app.extensions["tome"].sessions.remove()
        app.extensions["tome"].db.dispose()
