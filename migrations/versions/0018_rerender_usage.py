"""each accepted re-render of a finished job's chunk, counted against its owner's daily audio quota and
its job's hourly re-render limit

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_rerenders",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_rerenders_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_rerenders")),
    )
    with op.batch_alter_table("job_rerenders", schema=None) as batch_op:
        batch_op.create_index("ix_job_rerenders_job_id_created_at", ["job_id", "created_at"], unique=False)
        batch_op.create_index("ix_job_rerenders_owner_created_at", ["owner", "created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("job_rerenders", schema=None) as batch_op:
        batch_op.drop_index("ix_job_rerenders_owner_created_at")
        batch_op.drop_index("ix_job_rerenders_job_id_created_at")
    op.drop_table("job_rerenders")
