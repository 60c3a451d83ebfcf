"""Alembic: one head; upgrade and downgrade work on SQLite and PostgreSQL; the models match the migrations."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
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
