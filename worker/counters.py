"""Counters kept in the database, so that every worker process on every machine adds to the same figures
and the API's ``GET /metrics`` can report them (no framework imports)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from models import Counter, unit_of_work

HITS = "tome_voice_cache_hits_total"
MISSES = "tome_voice_cache_misses_total"
BUILDS = "tome_voice_cache_builds_total"
BUILD_SECONDS = "tome_voice_cache_build_seconds_sum"


def add(sessions: sessionmaker[Session], engine: str, deltas: Mapping[str, float]) -> None:
    """Add to named counters atomically (an upsert with ``value = value + delta``)."""
    with unit_of_work(sessions) as session:
        dialect = session.get_bind().dialect.name
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        for name, delta in deltas.items():
            stmt = insert(Counter).values(name=name, engine=engine, value=delta)
            session.execute(
                stmt.on_conflict_do_update(
                    index_elements=[Counter.name, Counter.engine], set_={"value": Counter.value + delta}
                )
            )


def read_all(session: Session) -> dict[tuple[str, str], float]:
    return {(c.name, c.engine): c.value for c in session.scalars(select(Counter))}
