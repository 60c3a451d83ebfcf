"""observability: metric samples shared by every process (histograms, request latency), and a previous
webhook secret kept for an overlap while a key's secret is rotated

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_samples",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("labels", sa.String(length=400), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", "labels"),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("webhook_secret_previous", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("webhook_secret_previous_until", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("webhook_secret_previous_until")
        batch_op.drop_column("webhook_secret_previous")
    op.drop_table("metric_samples")
