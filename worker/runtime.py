"""Per-process resources of a worker: settings, database sessions, the engine (built lazily, after fork)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from sqlalchemy import Engine as DbEngine
from sqlalchemy.orm import Session, sessionmaker

from models import make_engine, make_session_factory
from worker.config import Settings, load_settings
from worker.engines import Engine, get_engine
from worker.storage.backend import Storage
from worker.storage.layout import Layout


@dataclass
class Runtime:
    settings: Settings

    @classmethod
    def sharing(cls, settings: Settings, db: DbEngine, storage: Storage | None = None) -> Runtime:
        """A runtime on an existing database engine (the API process shares its pool and its storage)."""
        rt = cls(settings)
        rt.__dict__["db"] = db
        if storage is not None:
            rt.__dict__["storage"] = storage
        return rt

    @cached_property
    def db(self) -> DbEngine:
        return make_engine(self.settings.sqlalchemy_url)

    @cached_property
    def sessions(self) -> sessionmaker[Session]:
        return make_session_factory(self.db)

    def engine(self, name: str | None = None) -> Engine:
        return get_engine(name or self.settings.engines.default, self.settings)

    @cached_property
    def layout(self) -> Layout:
        return self.settings.layout

    @cached_property
    def storage(self) -> Storage:
        """Where files live (worker.storage): the data directory or a bucket."""
        return self.settings.open_storage()


_runtime: tuple[int, Runtime] | None = None


def runtime() -> Runtime:
    """This process's runtime; a forked child builds its own (connections are never shared across fork)."""
    global _runtime  # noqa: PLW0603 - one runtime per process, by design
    if _runtime is None or _runtime[0] != os.getpid():
        _runtime = (os.getpid(), Runtime(load_settings()))
    return _runtime[1]
