"""Apply Alembic migrations programmatically (used by `make run`, tests and the container entrypoint)."""

from __future__ import annotations

import sys
from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade_head(url: str) -> None:
    command.upgrade(alembic_config(url), "head")


def main() -> None:
    from worker.config import load_settings

    settings = load_settings()
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade_head(settings.sqlalchemy_url)
    print(f"database at head: {settings.sqlalchemy_url.split('@')[-1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
