"""previews planned by a worker (an EPUB, or a script over the inline cap), and an EPUB job's bytes kept
until a worker plans it

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "previews",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("voice_id", sa.Uuid(), nullable=False),
        sa.Column("engine", sa.String(length=64), nullable=False),
        sa.Column("script_format", sa.String(length=16), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("script", sa.Text(), nullable=True),
        sa.Column("script_file", sa.LargeBinary(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_previews")),
    )
    with op.batch_alter_table("previews", schema=None) as batch_op:
        batch_op.create_index("ix_previews_owner", ["owner"], unique=False)
        batch_op.create_index("ix_previews_expires_at", ["expires_at"], unique=False)
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("script_file", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("script_file")
    with op.batch_alter_table("previews", schema=None) as batch_op:
        batch_op.drop_index("ix_previews_expires_at")
        batch_op.drop_index("ix_previews_owner")
    op.drop_table("previews")
