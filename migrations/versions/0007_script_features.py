"""script features: each chunk's written text (the engine reads the normalised one), its speaking rate
and an exact pause after it (SSML and inline breaks); pronunciation lexicons and voices' default lexicons

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 04:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lexicons",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("language", sa.String(length=16), nullable=True),
        sa.Column("entries", sa.JSON(), nullable=False),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lexicons")),
        sa.UniqueConstraint("owner", "name", name="uq_lexicons_owner_name"),
    )
    with op.batch_alter_table("lexicons", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lexicons_owner"), ["owner"], unique=False)
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lexicon_ids", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source_text", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("rate", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("pause_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.drop_column("lexicon_ids")
    with op.batch_alter_table("lexicons", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lexicons_owner"))
    op.drop_table("lexicons")
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_column("pause_seconds")
        batch_op.drop_column("rate")
        batch_op.drop_column("source_text")
