"""A three-character chapter read by a full cast through the whole service (SQLite, filesystem broker, a
real Celery worker): each quotation is rendered in its character's voice and measured to have that
voice's pitch, the narrator reads the tags; the manifest and WebVTT name the speakers; a correction of two
lines renders only those two chunks again."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from models import Chunk
from tests.e2e.flow import wait_terminal
from tests.support.apps import tome_of
from tests.support.factories import add_pitched_voices, job_chunks, median_f0, submit_job
from worker.config import Settings

pytestmark = pytest.mark.e2e

CHAPTER = """# The Harbour

The boat came in late, and three people were waiting on the quay in the rain.

"You are very late tonight," said Ruth Marlow.

"The wind turned against us at the headland," Tom Hale replied.

"Then we shall all have a cold supper," said Anna Price.

"I would rather have a cold supper than a cold sea," Tom said.

"So would every sailor in this town," Ruth answered.
"""
# Voices by median pitch: the narrator lowest, then Tom, Anna, Ruth.
PITCH = {"narrator": 85.0, "tom": 125.0, "anna": 185.0, "ruth": 270.0}
SPEAKER_VOICE = {"Ruth Marlow": "ruth", "Tom Hale": "tom", "Anna Price": "anna", "narrator": "narrator"}


def _nearest(f0: float) -> str:
    return min(PITCH, key=lambda name: abs(math.log(f0 / PITCH[name])))


def _fresh_chunks(app: Flask, job_id: str) -> list[Chunk]:
    """The job's chunks as the worker left them (the session's held rows dropped first)."""
    tome_of(app).sessions.remove()
    return job_chunks(app, job_id)


def test_each_line_is_read_in_its_characters_voice_and_a_correction_renders_only_its_lines(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    tmp_path: Path,
    start_worker: Callable[..., Any],
) -> None:
    start_worker(settings, concurrency=2)
    add_pitched_voices(client, user, tmp_path, PITCH)
    body: dict[str, Any] = {"script": CHAPTER, "script_format": "markdown", "output": {"format": "wav"}}
    preview = client.post("/v1/scripts/preview", json={"voice": "narrator", **body}, headers=user).json
    assert [line["speaker"] for line in preview["lines"]] == [
        "Ruth Marlow", "Tom Hale", "Anna Price", "Tom Hale", "Ruth Marlow",
    ]  # fmt: skip
    cast = {"voices": {"Ruth": "ruth", "Tom Hale": "tom", "anna price": "anna"}}

    first = submit_job(client, user, "narrator", cast=cast, **body)
    assert first.status_code == 202, first.json
    done = wait_terminal(client, user, first.json["id"])
    assert done["status"] == "succeeded", done
    chunks = _fresh_chunks(app, done["id"])
    quotations = [c for c in chunks if c.speaker != "narrator"]
    assert len(quotations) == 5
    assert any("said Ruth Marlow" in (c.source_text or c.text) and c.speaker == "narrator" for c in chunks)
    for chunk in chunks:
        heard = _nearest(median_f0(str(chunk.audio_path)))
        assert heard == SPEAKER_VOICE[str(chunk.speaker)], (chunk.text, chunk.speaker, heard)

    files = {f["name"]: f for f in client.get(f"/v1/jobs/{done['id']}/files", headers=user).json["files"]}
    manifest = json.loads(client.get(files["manifest.json"]["url"], headers=user).data)
    speakers = [s["speaker"] for c in manifest["chunks"] for s in c["sentences"]]
    assert {"narrator", "Ruth Marlow", "Tom Hale", "Anna Price"} <= set(speakers)
    vtt = client.get(files["book.vtt"]["url"], headers=user).data.decode()
    assert "<v Narrator>" in vtt
    assert "<v Anna Price>Then we shall all have a cold supper" in vtt.replace("\n", " ").replace('"', "")

    # Lines 2 and 4 (Anna's, then Ruth's) corrected: Anna's goes to Ruth, Ruth's to Anna.
    corrected = {**cast, "lines": {"2": "Ruth", "4": "Anna"}}
    second = submit_job(client, user, "narrator", cast=corrected, **body)
    assert second.status_code == 202, second.json
    again = wait_terminal(client, user, second.json["id"])
    assert again["status"] == "succeeded", again
    after = _fresh_chunks(app, again["id"])
    assert len(after) == len(chunks)
    assert again["progress"]["chunks_reused"] == len(after) - 2
    changed = [
        (a.speaker, _nearest(median_f0(str(a.audio_path))))
        for a, b in zip(after, chunks, strict=True)
        if a.speaker != b.speaker
    ]
    assert changed == [("Ruth Marlow", "ruth"), ("Anna Price", "anna")]
