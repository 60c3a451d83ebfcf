"""Engines, sessions and the one unit-of-work helper (commit on success, roll back on error)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_MS = 30_000
# A pooled PostgreSQL connection idle for longer than this is pinged before it is handed out (a server
# restart in the meantime then costs a reconnect, not an error); one in constant use is not.
PING_AFTER_IDLE_SECONDS = 1.0
# Connections older than this are replaced (servers and proxies that drop long-lived connections).
POOL_RECYCLE_SECONDS = 1800


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the API read while a worker writes; busy_timeout makes writers wait instead of failing
    # with "database is locked"; foreign keys are off by default in SQLite.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _note_checkin(_dbapi_connection: Any, record: Any) -> None:
    record.info["checked_in"] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    """Ping a connection that sat idle in the pool; a dead one is replaced (the pool retries the checkout
    with a new connection on DisconnectionError).

    ``pool_pre_ping`` would do this on every checkout: a ``SELECT 1`` round trip before every transaction,
    a large share of a chunk's database round trips. A connection checked in less than
    :data:`PING_AFTER_IDLE_SECONDS` ago was working then; a restart inside that window still fails one
    statement, after which SQLAlchemy invalidates every connection of the pool (as it always did on a
    disconnect), and tasks retry transient database errors."""
    idle = time.monotonic() - record.info.get("checked_in", float("-inf"))
    if idle < PING_AFTER_IDLE_SECONDS:
        return
    try:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SELECT 1")
        finally:
            cursor.close()
    except Exception as error:
        raise exc.DisconnectionError(f"pooled connection is dead: {error}") from error


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_engine(url, pool_size=5, max_overflow=5, pool_recycle=POOL_RECYCLE_SECONDS)
    event.listen(engine, "connect", _note_checkin)  # a new connection needs no ping
    event.listen(engine, "checkin", _note_checkin)
    event.listen(engine, "checkout", _ping_if_idle)
    return engine


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed when the block ends and rolled back if it raises."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
