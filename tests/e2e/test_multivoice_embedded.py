"""A two-voice Markdown book through the whole service on the embedded defaults (SQLite, filesystem broker,
a real Celery worker): both prompts are built, every chunk is rendered in its directive's voice, and the
second voice's chunks are measurably higher than the first's."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.e2e.flow import check_output, wait_terminal
from tests.support.factories import add_pitched_voices, job_chunks, median_f0, submit_job
from worker.config import Settings

pytestmark = pytest.mark.e2e

BOOK = """# The Crossing

The ferry left the harbour just after dawn, and the passengers gathered at the rail.

<!-- voice: high -->
"Will we reach the island before the weather turns?" asked the girl by the window.

"I think we will, if the wind keeps to the west all morning," her brother answered.

<!-- voice: default -->
# The Island

Nobody answered her. The engines settled into a steady rhythm across the grey water.
"""

# Chunk voices, in order: heading, narration, the girl, her brother, heading, narration.
EXPECTED = ["low", "low", "high", "high", "low", "low"]


def test_two_voice_markdown_book_renders_each_chunk_in_its_voice(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    tmp_path: Path,
    start_worker: Callable[..., Any],
) -> None:
    start_worker(settings, concurrency=2)
    ids = add_pitched_voices(client, user, tmp_path, {"low": 95.0, "high": 230.0})

    submitted = submit_job(
        client, user, "low", title="The Crossing", script=BOOK, script_format="markdown",
        output={"format": "wav"},
    )  # fmt: skip
    assert submitted.status_code == 202, submitted.json
    assert submitted.json["voice_ids"] == [ids["low"], ids["high"]]
    finished = wait_terminal(client, user, submitted.json["id"])
    assert finished["status"] == "succeeded", finished
    assert [c["title"] for c in finished["chapters"]] == ["The Crossing", "The Island"]
    check_output(app, client, user, finished)  # every chunk is in the output, in order, with its pauses

    chunks = job_chunks(app, finished["id"])
    assert [str(c.voice_id) for c in chunks] == [ids[name] for name in EXPECTED]
    pitch = {name: [median_f0(str(c.audio_path)) for c, n in zip(chunks, EXPECTED, strict=True) if n == name]
             for name in ("low", "high")}  # fmt: skip
    low, high = statistics.median(pitch["low"]), statistics.median(pitch["high"])
    assert high > 1.8 * low, pitch
    # each chunk on its own side of the gap, not just on average
    assert min(pitch["high"]) > 1.4 * max(pitch["low"]), pitch
    for name in ("low", "high"):
        voice = client.get(f"/v1/voices/{ids[name]}", headers=user).json
        assert voice["cache_status"] == "ready"
