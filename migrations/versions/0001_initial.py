"""initial schema: api keys, voices, jobs, chunks

Revision ID: 0001
Revises:
Create Date: 2026-11-22 05:03:23.679439
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("key_sha256", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=10), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_sha256", name=op.f("uq_api_keys_key_sha256")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_keys_owner"), ["owner"], unique=False)

    op.create_table(
        "voices",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("language", sa.String(length=16), nullable=False),
        sa.Column("ref_text", sa.Text(), nullable=False),
        sa.Column("audio_path", sa.String(length=500), nullable=False),
        sa.Column("audio_sha256", sa.String(length=64), nullable=False),
        sa.Column("audio_duration", sa.Float(), nullable=False),
        sa.Column("audio_sample_rate", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cache_status", sa.String(length=12), nullable=False),
        sa.Column("cache_key", sa.String(length=200), nullable=True),
        sa.Column("cache_engine", sa.String(length=200), nullable=True),
        sa.Column("cache_path", sa.String(length=500), nullable=True),
        sa.Column("cache_error", sa.Text(), nullable=True),
        sa.Column("cache_lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cache_built_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_voices")),
    )
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_voices_owner"), ["owner"], unique=False)
        batch_op.create_index(
            "uq_voices_owner_name_live",
            ["owner", "name"],
            unique=True,
            sqlite_where=sa.text("deleted_at IS NULL"),
            postgresql_where=sa.text("deleted_at IS NULL"),
        )

    op.create_table(
        "jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("script_format", sa.String(length=12), nullable=False),
        sa.Column("voice_id", sa.Uuid(), nullable=False),
        sa.Column("engine", sa.String(length=50), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("chapters", sa.JSON(), nullable=False),
        sa.Column("chunks_total", sa.Integer(), nullable=False),
        sa.Column("chunks_done", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("stitch_token", sa.String(length=32), nullable=True),
        sa.Column("output_path", sa.String(length=500), nullable=True),
        sa.Column("output_format", sa.String(length=8), nullable=False),
        sa.Column("output_bytes", sa.BigInteger(), nullable=True),
        sa.Column("output_duration", sa.Float(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["voice_id"], ["voices.id"], name=op.f("fk_jobs_voice_id_voices")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_owner"), ["owner"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_status"), ["status"], unique=False)

    op.create_table(
        "chunks",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("chapter", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("pause_after", sa.String(length=10), nullable=False),
        sa.Column("voice_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("attempt_token", sa.String(length=32), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("content_key", sa.String(length=64), nullable=True),
        sa.Column("audio_path", sa.String(length=500), nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_chunks_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["voice_id"], ["voices.id"], name=op.f("fk_chunks_voice_id_voices")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunks")),
        sa.UniqueConstraint("job_id", "seq", name="uq_chunks_job_id_seq"),
    )
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.create_index("ix_chunks_status_lease", ["status", "lease_until"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_chunks_status_lease")

    op.drop_table("chunks")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_status"))
        batch_op.drop_index(batch_op.f("ix_jobs_owner"))

    op.drop_table("jobs")
    with op.batch_alter_table("voices", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_voices_owner_name_live",
            sqlite_where=sa.text("deleted_at IS NULL"),
            postgresql_where=sa.text("deleted_at IS NULL"),
        )
        batch_op.drop_index(batch_op.f("ix_voices_owner"))

    op.drop_table("voices")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_owner"))

    op.drop_table("api_keys")
