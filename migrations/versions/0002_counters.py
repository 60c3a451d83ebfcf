"""counters shared across processes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 05:20:52.996252
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "counters",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("engine", sa.String(length=50), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", "engine", name=op.f("pk_counters")),
    )


def downgrade() -> None:
    op.drop_table("counters")
