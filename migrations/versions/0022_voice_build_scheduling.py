"""voice prompt builds: when a pending voice's build message was sent (builds wait for room in the
database), and each build that ran, counted in its owner's usage and build quota

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cache_sent_until", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "voice_builds",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("voice_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("audio_seconds", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(length=12), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["voice_id"], ["voices.id"], name=op.f("fk_voice_builds_voice_id_voices"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_voice_builds")),
    )
    with op.batch_alter_table("voice_builds", schema=None) as batch_op:
        batch_op.create_index("ix_voice_builds_owner_created_at", ["owner", "created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("voice_builds", schema=None) as batch_op:
        batch_op.drop_index("ix_voice_builds_owner_created_at")
    op.drop_table("voice_builds")
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.drop_column("cache_sent_until")
