"""PostgreSQL pool connections are pinged only after sitting idle (models/db.py), and a dead one is
replaced, not handed out: what pool_pre_ping did on every checkout, without its round trip when busy."""

from __future__ import annotations

import pytest
from sqlalchemy import exc, text

from models import db
from tests.support.services import Services, postgres_database, terminate_backend

pytestmark = pytest.mark.postgres


def test_a_connection_killed_while_idle_is_replaced_before_use(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.0)  # every checkout counts as idle
    with postgres_database(services.pg_url) as url:
        engine = db.make_engine(url)
        try:
            with engine.connect() as conn:
                pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            terminate_backend(services.pg_url, pid)  # as a server restart does to every pooled connection
            with engine.connect() as conn:
                assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
        finally:
            engine.dispose()


def test_a_busy_connection_is_not_pinged_and_a_dead_one_fails_once_then_the_pool_recovers(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 3600.0)  # never idle long enough to be pinged
    with postgres_database(services.pg_url) as url:
        engine = db.make_engine(url)
        try:
            with engine.connect() as conn:
                pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            terminate_backend(services.pg_url, pid)
            with pytest.raises(exc.OperationalError), engine.connect() as conn:
                conn.execute(text("SELECT 1"))  # not pinged: the dead connection is used and fails
            with engine.connect() as conn:  # the failure invalidated the pool: a new connection
                assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
        finally:
            engine.dispose()
