"""re-render one chunk of a finished job: the job's revision, and a chunk's own seed (a new take)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 10:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revision", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("seed", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_column("seed")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("revision")
