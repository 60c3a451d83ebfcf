"""a job's progress within its bounds: 0 <= chunks_done <= chunks_total, a CHECK constraint (rows outside
the bounds are brought back inside them first, so that the upgrade never fails on them); a chunk that is
no re-render has no ``previous`` (SQL NULL, where a JSON null had been written)

Revision ID: 0017
Revises: 0015
Create Date: 2026-11-28 08:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_NAME = "chunks_done_bounds"  # ck_jobs_chunks_done_bounds, by the naming convention


def upgrade() -> None:
    jobs = sa.table("jobs", sa.column("chunks_done", sa.Integer), sa.column("chunks_total", sa.Integer))
    op.execute(
        jobs.update().where(jobs.c.chunks_done > jobs.c.chunks_total).values(chunks_done=jobs.c.chunks_total)
    )
    op.execute(jobs.update().where(jobs.c.chunks_done < 0).values(chunks_done=0))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE chunks SET previous = NULL WHERE previous::text = 'null'")
    else:
        op.execute("UPDATE chunks SET previous = NULL WHERE previous = 'null'")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_check_constraint(_NAME, "chunks_done >= 0 AND chunks_done <= chunks_total")


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_constraint(_NAME, type_="check")
