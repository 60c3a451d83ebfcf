"""chunks know their speaker: the character who says a chunk cut out of a line of dialogue by a job's cast
(``narrator`` for the narration of such a job; null for a job without a cast), for the manifest and the
WebVTT voice spans

Revision ID: 0019
Revises: 0015
Create Date: 2026-11-28 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("speaker", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_column("speaker")
