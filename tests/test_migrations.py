"""Alembic: one head; upgrade and downgrade work on SQLite and PostgreSQL; the models match the migrations."""

from __future__ import annotations

from pathlib import Path

import pytest
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
