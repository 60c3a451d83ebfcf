"""delivery into Audiobookshelf: an owner's server and sealed API token (integrations), and on each job
the delivery's state, attempts, next try and error, and the record of its delivery event

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 11:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "integrations",
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("token_sealed", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "kind"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("abs_state", sa.String(length=10), nullable=True))
        batch_op.add_column(sa.Column("abs_attempts", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("abs_next_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("abs_error", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("delivery_webhook_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("delivery_webhook_delivered_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("delivery_webhook_next_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("delivery_webhook_next_at")
        batch_op.drop_column("delivery_webhook_delivered_at")
        batch_op.drop_column("delivery_webhook_attempts")
        batch_op.drop_column("abs_error")
        batch_op.drop_column("abs_next_at")
        batch_op.drop_column("abs_attempts")
        batch_op.drop_column("abs_state")
    op.drop_table("integrations")
