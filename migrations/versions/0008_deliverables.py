"""deliverables: each chunk's measured levels (loudness at render time, for mastering at the stitch) and
a job's list of files beside the book (chapter files, ZIP, subtitles, manifest, ACX report)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 07:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("levels", sa.JSON(), nullable=True))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("files", sa.JSON(), nullable=False, server_default="[]"))
        batch_op.add_column(sa.Column("files_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("files_bytes")
        batch_op.drop_column("files")
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_column("levels")
