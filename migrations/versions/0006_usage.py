"""usage: bytes of each reference and chunk, a job's estimated output (per-owner quotas); the script of a
job planned by a worker

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 23:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("audio_bytes", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("audio_bytes", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("estimated_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("script", sa.Text(), nullable=True))
        batch_op.create_index("ix_jobs_owner_created_at", ["owner", "created_at"])


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_owner_created_at")
        batch_op.drop_column("script")
        batch_op.drop_column("estimated_seconds")
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.drop_column("audio_bytes")
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_column("audio_bytes")
