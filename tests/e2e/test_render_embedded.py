"""End to end on the embedded defaults: SQLite, Celery's filesystem broker, a real worker process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.e2e.flow import check_output, submit_book, wait_terminal
from worker.config import Settings

pytestmark = pytest.mark.e2e


def test_markdown_book_renders_to_mp3_with_chunks_in_order(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
) -> None:
    start_worker(settings, concurrency=2)
    job = submit_book(client, user, reference_audio, fmt="mp3")
    finished = wait_terminal(client, user, job["id"])
    assert [c["title"] for c in finished["chapters"]] == ["The Harbour", "The Storm", "The Morning After"]
    starts = [c["start"] for c in finished["chapters"]]
    assert starts[0] == 0.0
    assert starts == sorted(starts)
    check_output(app, client, user, finished)
    voice = client.get(f"/v1/voices/{finished['voice_id']}", headers=user).json
    assert voice["cache_status"] == "ready"


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_lossless_outputs(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
    fmt: str,
) -> None:
    start_worker(settings)
    job = submit_book(client, user, reference_audio, fmt=fmt)
    check_output(app, client, user, wait_terminal(client, user, job["id"]))
