"""The API tests' helpers, which are the shared builders of tests/support/factories.py (the name many API
test modules import them by)."""

from __future__ import annotations

from tests.support.factories import chunk_voice_ids, preview_of, submit_job, upload_voice

__all__ = ["chunk_voice_ids", "preview_of", "submit_job", "upload_voice"]
