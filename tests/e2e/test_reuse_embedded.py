"""Fixing one paragraph of a multi-chapter book through the whole service on the embedded defaults (SQLite,
filesystem broker, a real Celery worker): the second job renders only the edited paragraph's chunks and
takes every other chunk's audio from the first job byte for byte; its book plays every chunk where its
manifest says (tests.e2e.flow.check_output)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.e2e.flow import check_output, wait_terminal
from tests.support.factories import job_chunks
from worker.config import Settings

pytestmark = pytest.mark.e2e

PARAGRAPHS = [
    "# The Harbour",
    "The fog came in before dawn. Dr. Hale counted the boats on the quay, one by one.",
    "Nobody spoke of the lighthouse any more, not since the winter of the great storm.",
    "# The Storm",
    "By noon the wind had turned. The boats strained at their moorings all afternoon.",
    '"Bring them in," said the harbour master. "All of them, before the light goes."',
    "# The Morning After",
    "Everything was calm again, and the gulls came back to the harbour wall.",
]
EDITED = "By noon the wind had turned. The boats pulled hard at their moorings all afternoon."


def test_an_edited_paragraph_is_the_only_thing_rendered_again(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
) -> None:
    start_worker(settings, concurrency=2)
    assert upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1]).status_code == 202
    jobs = []
    for paragraphs in (PARAGRAPHS, [EDITED if p.startswith("By noon") else p for p in PARAGRAPHS]):
        response = submit_job(
            client, user, "narrator", script="\n\n".join(paragraphs), script_format="markdown",
            output={"format": "mp3"},
        )  # fmt: skip
        assert response.status_code == 202, response.json
        job = wait_terminal(client, user, response.json["id"])
        check_output(app, client, user, job)
        jobs.append(job)
    first, second = jobs
    assert first["progress"]["chunks_reused"] == 0
    before = {c.text: c for c in job_chunks(app, first["id"])}
    after = job_chunks(app, second["id"])
    rendered = [c for c in after if c.text not in before]
    assert rendered, "the edited paragraph's chunks are new"
    assert all("pulled hard" in c.text for c in rendered), [c.text for c in rendered]
    assert second["progress"]["chunks_reused"] == len(after) - len(rendered)
    for chunk in after:
        if chunk in rendered:
            continue
        old = before[chunk.text]
        assert Path(str(chunk.audio_path)).read_bytes() == Path(str(old.audio_path)).read_bytes()
