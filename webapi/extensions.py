"""What the app holds for the duration of its life: settings, the database session registry, Celery."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from celery import Celery
from flask import Flask, current_app
from sqlalchemy import Engine as DbEngine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, scoped_session

from models import make_engine, make_session_factory
from worker.celery_app import ensure_broker_folders, make_celery
from worker.config import Settings
from worker.engines import Engine, get_engine
from worker.runtime import Runtime
from worker.storage.atomic import keep_files_private
from worker.storage.backend import Storage
from worker.storage.check import check_storage

log = logging.getLogger(__name__)


@dataclass
class Tome:
    settings: Settings
    db: DbEngine
    sessions: scoped_session[Session]
    celery: Celery
    storage: Storage

    @property
    def runtime(self) -> Runtime:
        """The worker-side services (voice builds) on this app's database pool."""
        return Runtime.sharing(self.settings, self.db, self.storage)

    def engine(self) -> Engine:
        return get_engine(self.settings.engines.default, self.settings)

    def end_session(self) -> None:
        """Close this thread's database session (end of a request, or an error answered).

        A connection the database dropped meanwhile (a restart) cannot run the closing ROLLBACK: nothing
        was left to commit, SQLAlchemy invalidates the connection, and the session is forgotten so that
        the thread's next request starts on a fresh one, instead of the error escaping the request."""
        try:
            self.sessions.remove()
        except DBAPIError as exc:
            log.warning("closing a request's database session failed: %s", exc.orig or exc)
            self.sessions.registry.clear()

    def enqueue(self, name: str, args: list[Any], priority: int | None = None) -> None:
        """Send a task after its rows are committed, at its route's priority unless ``priority`` says
        otherwise. A broker outage loses nothing: the sweeper re-sends whatever the database says is
        still waiting."""
        try:
            self.celery.send_task(
                name, args=args, priority=priority, retry=True, retry_policy={"max_retries": 2}
            )
        except Exception:
            log.exception("could not send %s%s now; the sweeper will send it again", name, args)


def init_tome(app: Flask, settings: Settings) -> Tome:
    keep_files_private()
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    ensure_broker_folders(settings)
    storage = settings.open_storage()
    check_storage(storage)
    db = make_engine(settings.sqlalchemy_url)
    state = Tome(settings, db, scoped_session(make_session_factory(db)), make_celery(settings), storage)
    app.extensions["tome"] = state

    @app.teardown_appcontext
    def _remove_session(_exc: BaseException | None) -> None:
        state.end_session()

    return state


def tome() -> Tome:
    state = current_app.extensions["tome"]
    assert isinstance(state, Tome)
    return state
