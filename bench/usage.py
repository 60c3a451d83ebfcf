"""``python -m bench.usage``: what ``GET /v1/usage`` costs on PostgreSQL for owners with a long history.

A fresh database (created beside ``--pg-url``'s, dropped afterwards) is migrated to head and filled
with ``--owners`` owners of ``--jobs`` finished books of ``--chunks`` stored chunks each (a tenth of
them sharing content keys with an earlier book, as reused chunks do; one book in ten failed, one in
five submitted in the last 24 hours, each with its chapters), a voice and builds each, and a small
owner of 2 books; then vacuumed and analysed, as autovacuum leaves a table of finished chunks. Each
query of :func:`worker.jobs.usage.usage_of` is timed on its own (median and max in ms, each call in its
own transaction) for ``owner0`` and the small owner, with ``--explain`` their plans are printed
(``EXPLAIN (ANALYZE, BUFFERS)``), and the real app answers ``GET /v1/usage`` ``--requests`` times for
each. ``--sql`` runs a statement first (an index to try); ``--custom-plans`` sets
``plan_cache_mode=force_custom_plan`` on the bench's connections. Figures: docs/limits.md, "GET
/v1/usage on PostgreSQL".
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import psycopg
from sqlalchemy import event, insert, text
from sqlalchemy.orm import Session

from models import Chunk, Job, JobChapter, Voice, VoiceBuild, make_engine, utcnow
from models.migrate import upgrade_head
from worker.jobs import usage

PG_URL = os.environ.get("TOME_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    name = f"tome_bench_usage_{uuid.uuid4().hex[:8]}"
    libpq = admin_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin_url.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fill(session: Session, owners: int, jobs: int, chunks: int) -> None:
    """The owners' voices, builds, books, chapters and chunks (see the module's docstring), and a small
    owner ("small": 2 books) beside them."""
    for o in range(owners):
        fill_owner(session, f"owner{o}", jobs, chunks)
    fill_owner(session, "small", 2, chunks)


def fill_owner(session: Session, owner: str, jobs: int, chunks: int) -> None:
    now = utcnow()
    voice_id = uuid.uuid4()
    session.execute(
        insert(Voice).values(
            id=voice_id,
            owner=owner,
            name="narrator",
            name_key="narrator",
            ref_text="Hello there.",
            audio_path=f"voices/{voice_id}/ref.wav",
            audio_sha256="0" * 64,
            audio_duration=10.0,
            audio_sample_rate=24000,
            audio_bytes=480_000,
            cache_status="ready",
        )
    )
    session.execute(
        insert(VoiceBuild),
        [
            {
                "voice_id": voice_id,
                "owner": owner,
                "seconds": 2.0,
                "audio_seconds": 10.0,
                "outcome": "built",
                "created_at": now - timedelta(hours=h),
            }
            for h in range(48)
        ],
    )
    for j in range(jobs):
        job_id = uuid.uuid4()
        failed = j % 10 == 0
        session.execute(
            insert(Job).values(
                id=job_id,
                owner=owner,
                status="failed" if failed else "succeeded",
                title=f"book {j}",
                script_format="plain",
                voice_id=voice_id,
                engine="espeak",
                chunks_total=chunks,
                chunks_done=chunks,
                estimated_seconds=chunks * 8.0,
                output_format="mp3",
                output_path=None if failed else f"jobs/{job_id}/book.mp3",
                output_bytes=None if failed else chunks * 64_000,
                created_at=now - timedelta(hours=2 if j % 5 == 0 else 30 + j),
            )
        )
        session.execute(
            insert(JobChapter),
            [
                {"job_id": job_id, "chapter": c, "position": c + 1, "status": "ready", "bytes": 500_000}
                for c in range(10)
            ],
        )
        session.execute(
            insert(Chunk),
            [
                {
                    "job_id": job_id,
                    "seq": s,
                    "chapter": s * 10 // chunks,
                    "text": "Some sentence of the book, spoken.",
                    "pause_after": "sentence",
                    "voice_id": voice_id,
                    "status": "done",
                    "content_key": f"{owner}-{s}" if s % 10 == 0 else f"{job_id}-{s}",
                    "audio_path": f"chunks/{job_id}/{s}.wav",
                    "audio_bytes": 380_000,
                    "duration": 8.0,
                }
                for s in range(chunks)
            ],
        )
    session.commit()


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Median and max wall milliseconds of ``fn`` over ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def parts(session: Session, owner: str) -> dict[str, Callable[[], Any]]:
    now = utcnow()
    return {
        "usage_of (all)": lambda: usage.usage_of(session, owner, now, shared_chunks=True),
        "stored bytes (shared chunks)": lambda: usage._stored_bytes(session, owner, True),
        "stored bytes (every copy)": lambda: usage._stored_bytes(session, owner, False),
        "audio seconds 24h": lambda: usage._audio_seconds(session, owner, now),
        "build estimate": lambda: usage.build_estimate(session, now),
    }


def explain(session: Session, owner: str) -> None:
    """The plans of the stored-bytes and audio queries, as PostgreSQL ran them."""
    statements: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        statements.append((statement, params))

    bind = session.connection()
    event.listen(bind, "before_cursor_execute", capture)
    try:
        usage.usage_of(session, owner, utcnow(), shared_chunks=True)
    finally:
        event.remove(bind, "before_cursor_execute", capture)
    cursor = bind.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    for statement, params in statements:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
        print("\n" + " ".join(statement.split())[:300])
        print("\n".join(row[0] for row in cursor.fetchall()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default=PG_URL, help="an admin URL: a database is created beside it")
    parser.add_argument("--owners", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=250)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument(
        "--custom-plans", action="store_true", help="plan_cache_mode=force_custom_plan on every connection"
    )
    parser.add_argument("--sql", help="a statement run after the fill, before the timings (an index to try)")
    args = parser.parse_args()
    with fresh_database(args.pg_url) as url:
        upgrade_head(url)
        engine = make_engine(url)  # as the app's: psycopg prepares a statement run 5 times on a connection
        if args.custom_plans:
            event.listen(engine, "connect", _custom_plans)
        started = time.perf_counter()
        with Session(engine) as session:
            fill(session, args.owners, args.jobs, args.chunks)
            if args.sql:
                session.execute(text(args.sql))
                session.commit()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))  # as autovacuum leaves a table of finished chunks
        print(
            f"filled: {args.owners} owners x {args.jobs} books x {args.chunks} chunks "
            f"in {time.perf_counter() - started:.1f} s; load average {os.getloadavg()[0]:.1f}"
        )
        with Session(engine) as session:
            for owner in ("owner0", "small"):
                for name, fn in parts(session, owner).items():
                    # each in its own transaction, as each request is
                    median, most = timed(_in_own_transaction(session, fn), args.requests)
                    print(f"{owner:6s} {name:30s} median {median:8.1f} ms  max {most:8.1f} ms")
            if args.explain:
                explain(session, "owner0")
                explain(session, "small")
        print(f"GET /v1/usage: {api_figures(url, args.requests)}; load average {os.getloadavg()[0]:.1f}")
        engine.dispose()


def _in_own_transaction(session: Session, fn: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        fn()
        session.rollback()

    return run


def _custom_plans(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("SET plan_cache_mode = force_custom_plan")


def api_figures(url: str, requests: int) -> str:
    """Median and max of ``GET /v1/usage`` through the real app (test client): owner0's, then the small
    owner's after them (the app's connections have then prepared owner0's statements)."""
    from webapi import create_app
    from webapi.cli import mint_key
    from worker.config import load_settings

    with TemporaryDirectory() as folder:
        settings = load_settings({}, data_dir=Path(folder) / "var", database_url=url)
        settings.storage.data_dir.mkdir(parents=True)
        app = create_app({"settings": settings})
        client = app.test_client()
        figures = []
        for owner in ("owner0", "small"):
            headers = {"Authorization": f"Bearer {mint_key(app, owner=owner, name='bench', admin=False)}"}
            assert client.get("/v1/usage", headers=headers).status_code == 200
            median, most = timed(partial(client.get, "/v1/usage", headers=headers), requests)
            figures.append(f"{owner} median {median:.1f} ms, max {most:.1f} ms")
        return f"{'; '.join(figures)} ({requests} requests each)"


if __name__ == "__main__":
    main()
