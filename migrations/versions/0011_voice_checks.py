"""voice checks: the warnings of a voice's reference recording (signal checks at upload, the transcript
check at its prompt build)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("warnings", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.drop_column("warnings")
