"""reliability: idempotency, webhooks, expiry, rate windows

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 05:29:24.775491
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_windows",
        sa.Column("key_id", sa.String(length=36), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key_id", "window_start", name=op.f("pk_rate_windows")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("webhook_secret", sa.String(length=64), nullable=True))
    # Keys minted before webhooks existed get their own secret.
    bind = op.get_bind()
    keys = sa.table("api_keys", sa.column("id", sa.Uuid()), sa.column("webhook_secret", sa.String(64)))
    for (key_id,) in bind.execute(sa.select(keys.c.id)).all():
        bind.execute(keys.update().where(keys.c.id == key_id).values(webhook_secret=secrets.token_hex(32)))
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.alter_column("webhook_secret", existing_type=sa.String(length=64), nullable=False)

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expired_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("request_sha256", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("webhook_url", sa.String(length=2000), nullable=True))
        batch_op.add_column(sa.Column("webhook_attempts", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("webhook_delivered_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("webhook_next_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("webhook_error", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("api_key_id", sa.Uuid(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("api_key_id")
        batch_op.drop_column("webhook_error")
        batch_op.drop_column("webhook_next_at")
        batch_op.drop_column("webhook_delivered_at")
        batch_op.drop_column("webhook_attempts")
        batch_op.drop_column("webhook_url")
        batch_op.drop_column("request_sha256")
        batch_op.drop_column("expired_at")

    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("webhook_secret")

    op.drop_table("rate_windows")
