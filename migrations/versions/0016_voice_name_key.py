"""voice names unique per owner without regard to case: every name stored normalised (NFC, trimmed, inner
spaces as one) beside its key (the name case-folded), and the live voices' uniqueness on (owner, key).
Existing live voices whose names now clash keep the oldest as it is; each later one gets the first free
" 2", " 3", ... suffix (logged), so that the upgrade never fails

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 08:40:00
"""

from __future__ import annotations

import logging
import unicodedata
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

log = logging.getLogger("alembic.runtime.migration")
LIVE = sa.text("deleted_at IS NULL")
MAX_NAME = 64

voices = sa.table(
    "voices",
    sa.column("id", sa.Uuid()),
    sa.column("owner", sa.String()),
    sa.column("name", sa.String()),
    sa.column("name_key", sa.String()),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("deleted_at", sa.DateTime(timezone=True)),
)


# models.names as this revision knows it (a migration keeps the rule it was written with).
def _name(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split()) or "voice"


def _key(name: str) -> str:
    return unicodedata.normalize("NFC", name.casefold())


def _free(name: str, used: set[str]) -> str:
    """``name`` with the first " N" suffix whose key no live voice of the owner has (within 64 characters)."""
    number = 2
    while True:
        suffix = f" {number}"
        candidate = name[: MAX_NAME - len(suffix)].rstrip() + suffix
        if _key(candidate) not in used:
            return candidate
        number += 1


def _normalise_names() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(voices.c.id, voices.c.owner, voices.c.name, voices.c.deleted_at).order_by(
            voices.c.created_at, voices.c.id
        )
    ).all()
    used: dict[str, set[str]] = defaultdict(set)  # owner -> keys of live names (as found, then as given)
    for row in rows:
        if row.deleted_at is None:
            used[row.owner].add(_key(_name(row.name)))
    kept: set[tuple[str, str]] = set()
    updates: list[dict[str, Any]] = []
    for row in rows:
        name = _name(row.name)
        if row.deleted_at is None:
            if (row.owner, _key(name)) in kept:
                renamed = _free(name, used[row.owner])
                log.warning(
                    "voice %s of %s renamed %r -> %r: its name clashed with an older voice's (case aside)",
                    row.id,
                    row.owner,
                    row.name,
                    renamed,
                )
                name = renamed
                used[row.owner].add(_key(name))
            kept.add((row.owner, _key(name)))
        updates.append({"voice_id": row.id, "new_name": name, "new_key": _key(name)})
    if updates:
        bind.execute(
            voices.update()
            .where(voices.c.id == sa.bindparam("voice_id"))
            .values(name=sa.bindparam("new_name"), name_key=sa.bindparam("new_key")),
            updates,
        )


def upgrade() -> None:
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("name_key", sa.String(length=192), nullable=True))
    _normalise_names()
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.alter_column("name_key", existing_type=sa.String(length=192), nullable=False)
        batch_op.drop_index("uq_voices_owner_name_live")
        batch_op.create_index(
            "uq_voices_owner_name_key_live",
            ["owner", "name_key"],
            unique=True,
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        )


def downgrade() -> None:
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.drop_index("uq_voices_owner_name_key_live")
        batch_op.create_index(
            "uq_voices_owner_name_live",
            ["owner", "name"],
            unique=True,
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        )
        batch_op.drop_column("name_key")
