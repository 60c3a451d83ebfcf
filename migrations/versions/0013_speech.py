"""speech jobs: POST /v1/audio/speech's requests are jobs of kind "speech" (streamed, never stitched)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=12), nullable=False, server_default="book"))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("kind")
