"""Alembic: one head; upgrade and downgrade work on SQLite and PostgreSQL; the models match the migrations."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError

from models.migrate import alembic_config, upgrade_head
from tests.support.services import Services, postgres_database


def test_single_head() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1


def _round_trip(url: str) -> None:
    upgrade_head(url)
    config = alembic_config(url)
    command.check(config)  # raises if the models and the migrations disagree
    command.downgrade(config, "base")
    upgrade_head(url)


def test_upgrade_check_downgrade_on_sqlite(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'm.db'}")


@pytest.mark.postgres
def test_upgrade_check_downgrade_on_postgres(services: Services) -> None:
    with postgres_database(services.pg_url) as url:
        _round_trip(url)


def _progress_bounded(url: str) -> None:
    """Jobs whose progress is outside 0..chunks_total (as a double-counted chunk once left one) are
    brought inside on upgrade, and from then on the database refuses such progress."""
    config = alembic_config(url)
    command.upgrade(config, "0015")
    engine = sa.create_engine(url)
    now = datetime.now(UTC)
    voice_id = uuid.uuid4()
    progress = {uuid.uuid4(): (21, 20), uuid.uuid4(): (-1, 5), uuid.uuid4(): (3, 5)}
    text, number, moment = sa.String, sa.Integer, sa.DateTime(timezone=True)
    voices = sa.table(
        "voices", sa.column("id", sa.Uuid), *(sa.column(c, text) for c in (
            "owner", "name", "language", "ref_text", "audio_path", "audio_sha256", "cache_status")),
        sa.column("audio_duration", sa.Float), sa.column("audio_sample_rate", number),
        sa.column("created_at", moment), sa.column("updated_at", moment),
    )  # fmt: skip
    jobs = sa.table(
        "jobs", sa.column("id", sa.Uuid), sa.column("voice_id", sa.Uuid), *(sa.column(c, text) for c in (
            "owner", "status", "title", "script_format", "engine", "output_format")),
        sa.column("options", sa.JSON), sa.column("chapters", sa.JSON), sa.column("chunks_total", number),
        sa.column("chunks_done", number), sa.column("created_at", moment), sa.column("updated_at", moment),
    )  # fmt: skip
    with engine.begin() as conn:
        conn.execute(
            voices.insert().values(
                id=voice_id, owner="o", name="v", language="en", ref_text="r", audio_path="a",
                audio_sha256="0" * 64, audio_duration=1.0, audio_sample_rate=16000, created_at=now,
                updated_at=now, cache_status="pending",
            )
        )  # fmt: skip
        for job_id, (done, total) in progress.items():
            conn.execute(
                jobs.insert().values(
                    id=job_id, owner="o", status="running", title="t", script_format="plain",
                    voice_id=voice_id, engine="espeak", options={}, chapters=[], chunks_total=total,
                    chunks_done=done, created_at=now, updated_at=now, output_format="mp3",
                )
            )  # fmt: skip
    upgrade_head(url)
    with engine.begin() as conn:
        found = {r.id: r.chunks_done for r in conn.execute(sa.select(jobs.c.id, jobs.c.chunks_done))}
    assert {job_id: found[job_id] for job_id in progress} == dict(zip(progress, [20, 0, 3], strict=True))
    over = list(progress)[2]
    for done in (6, -1):
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(jobs.update().where(jobs.c.id == over).values(chunks_done=done))
    engine.dispose()


def test_progress_is_bounded_on_sqlite(tmp_path: Path) -> None:
    _progress_bounded(f"sqlite:///{tmp_path / 'p.db'}")


@pytest.mark.postgres
def test_progress_is_bounded_on_postgres(services: Services) -> None:
    with postgres_database(services.pg_url) as url:
        _progress_bounded(url)


def test_check_notices_a_model_without_a_migration(tmp_path: Path) -> None:
    from sqlalchemy import Column, Integer, Table

    from models import Base

    url = f"sqlite:///{tmp_path / 'n.db'}"
    upgrade_head(url)
    table = Table("not_migrated", Base.metadata, Column("id", Integer, primary_key=True))
    try:
        with pytest.raises(CommandError):
            command.check(alembic_config(url))
    finally:
        Base.metadata.remove(table)


# Voices as they may stand before 0016: names unique per owner only as written. (owner, name, deleted).
CLASHING_VOICES = [
    ("alice", "Bob", False),
    ("alice", "bob", False),  # clashes with "Bob": becomes "bob 3" ("bob 2" is taken below)
    ("alice", "bob 2", False),
    ("alice", "BOB ", False),  # trimmed, then clashes: "BOB 4"
    ("alice", "bob", True),  # deleted: keeps its name, clashes with nothing
    ("alice", "Mary  Ann", False),  # inner spaces made one
    ("carol", "bob", False),  # another owner's
    ("alice", "x" * 64, False),
    ("alice", "X" * 64, False),  # the suffix fits in 64 characters
]


def _upgrade_with_clashing_names(url: str) -> list[tuple[str, str, str, bool]]:
    """Upgrade to 0015, insert :data:`CLASHING_VOICES` (oldest first), upgrade to head: every voice's
    (owner, name, name_key, deleted), oldest first."""
    import sqlalchemy as sa

    command.upgrade(alembic_config(url), "0015")
    engine = sa.create_engine(url)
    when = sa.DateTime(timezone=True)
    voices = sa.table(
        "voices",
        *(
            sa.column(name)
            for name in ("owner", "name", "language", "ref_text", "audio_path", "audio_sha256")
        ),
        *(sa.column(name) for name in ("audio_duration", "audio_sample_rate", "cache_status")),
        sa.column("id", sa.Uuid()),
        *(sa.column(name, when) for name in ("created_at", "updated_at", "deleted_at")),
    )
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {
            "id": uuid.uuid4(),
            "owner": owner,
            "name": name,
            "language": "en",
            "ref_text": "hello",
            "audio_path": "/nowhere.wav",
            "audio_sha256": "0" * 64,
            "audio_duration": 3.0,
            "audio_sample_rate": 16000,
            "created_at": start + timedelta(seconds=n),
            "updated_at": start,
            "deleted_at": start if deleted else None,
            "cache_status": "pending",
        }
        for n, (owner, name, deleted) in enumerate(CLASHING_VOICES)
    ]
    with engine.begin() as connection:
        connection.execute(voices.insert(), rows)
    upgrade_head(url)
    with engine.connect() as connection:
        found = connection.execute(
            sa.text("SELECT owner, name, name_key, deleted_at FROM voices ORDER BY created_at")
        ).all()
    engine.dispose()
    return [(owner, name, key, deleted is not None) for owner, name, key, deleted in found]


def _check_clashes_resolved(url: str) -> None:
    import sqlalchemy as sa

    assert _upgrade_with_clashing_names(url) == [
        ("alice", "Bob", "bob", False),
        ("alice", "bob 3", "bob 3", False),
        ("alice", "bob 2", "bob 2", False),
        ("alice", "BOB 4", "bob 4", False),
        ("alice", "bob", "bob", True),
        ("alice", "Mary Ann", "mary ann", False),
        ("carol", "bob", "bob", False),
        ("alice", "x" * 64, "x" * 64, False),
        ("alice", "X" * 62 + " 2", "x" * 62 + " 2", False),
    ]
    engine = sa.create_engine(url)
    try:
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
            connection.execute(sa.text("UPDATE voices SET name_key = 'bob' WHERE name = 'bob 2'"))
    finally:
        engine.dispose()
    config = alembic_config(url)
    command.check(config)
    command.downgrade(config, "0015")  # the names stay as upgraded, unique as written
    upgrade_head(url)


def test_voice_names_that_clash_case_aside_are_renamed_on_sqlite(tmp_path: Path) -> None:
    _check_clashes_resolved(f"sqlite:///{tmp_path / 'v.db'}")


@pytest.mark.postgres
def test_voice_names_that_clash_case_aside_are_renamed_on_postgres(services: Services) -> None:
    with postgres_database(services.pg_url) as url:
        _check_clashes_resolved(url)
