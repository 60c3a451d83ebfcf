"""chapters as soon as they are done: a row per chapter of a job (claimed and stitched when its last
chunk is done, its files downloadable while later chapters render); each chunk's word times; chunk audio
found by content key (an index) and a job's count of chunks reused from earlier renders

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_chapters",
        sa.Column("job_id", sa.Uuid(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("chapter", sa.Integer(), primary_key=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("token", sa.String(32), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("build", sa.JSON(), nullable=True),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("webhook_attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("webhook_next_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("webhook_delivered_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_job_chapters_status_lease", "job_chapters", ["status", "lease_until"])
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("words", sa.JSON(), nullable=True))
        batch_op.create_index("ix_chunks_content_key", ["content_key"])
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("chunks_reused", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("chunks_reused")
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_chunks_content_key")
        batch_op.drop_column("words")
    op.drop_index("ix_job_chapters_status_lease", table_name="job_chapters")
    op.drop_table("job_chapters")
