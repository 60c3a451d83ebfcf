"""a re-render that fails keeps the chunk's previous take (what it was, kept on the chunk meanwhile; what
became of the last re-render, on the job), a take chosen on request found by later jobs (its key without
the seed), and the ``job.flagged`` webhook event's own delivery record

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 23:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("previous", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("take_key", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_chunks_take_key", ["take_key"], unique=False)
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rerender", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("flags_webhook_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("flags_webhook_delivered_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("flags_webhook_next_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("flags_webhook_next_at")
        batch_op.drop_column("flags_webhook_delivered_at")
        batch_op.drop_column("flags_webhook_attempts")
        batch_op.drop_column("rerender")
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_chunks_take_key")
        batch_op.drop_column("take_key")
        batch_op.drop_column("previous")
