"""chunk QA: each chunk's QA result and whether it was kept flagged; a job's counts of flagged and
re-rendered chunks

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("qa", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("flagged", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("chunks_flagged", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("chunks_rerendered", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("chunks_rerendered")
        batch_op.drop_column("chunks_flagged")
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_column("flagged")
        batch_op.drop_column("qa")
