"""speech requests waiting for a voice build: each holds one of its owner's speech places

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28 18:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "speech_waits",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("voice_id", sa.Uuid(), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["voice_id"], ["voices.id"], name=op.f("fk_speech_waits_voice_id_voices"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_speech_waits")),
    )
    with op.batch_alter_table("speech_waits", schema=None) as batch_op:
        batch_op.create_index("ix_speech_waits_owner_until", ["owner", "until"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("speech_waits", schema=None) as batch_op:
        batch_op.drop_index("ix_speech_waits_owner_until")
    op.drop_table("speech_waits")
