"""Delivery into Audiobookshelf end to end: the API under gunicorn, real Celery worker processes, the
``tome`` command line, and a fake Audiobookshelf on 127.0.0.1 (tests/support/audiobookshelf.py) that
answers the first upload with a 503. The worker's retry (a Celery message sent with the backoff as its
countdown) delivers the book; the token shows in no command's output, no answer and no worker log line."""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.conftest import Stack
from tests.support.audiobookshelf import ABS_TOKEN, FakeAudiobookshelf
from tome_cli.main import EXIT_API, EXIT_OK
from worker.config import Settings, load_settings

pytestmark = pytest.mark.e2e

SECRET = "e2e-secret-key-0123456789abcdefghijkl"
TOKEN = ABS_TOKEN


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The embedded stack, with a secret key, a fake server on loopback allowed and short retries."""
    return load_settings(
        {},
        data_dir=tmp_path / "var",
        secret_key=SECRET,
        audiobookshelf_allow_private=True,
        audiobookshelf_retry_seconds=0.5,
        audiobookshelf_timeout_seconds=5.0,
    )


def _job(stack: Stack, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(stack.run("jobs", "show", job_id, "--json").stdout)
    return found


def test_a_job_rendered_through_the_cli_is_delivered_into_audiobookshelf_after_a_503(
    stack: Stack,
    settings: Settings,
    tmp_path: Path,
    reference: tuple[Path, str],
    start_worker: Callable[..., Any],
    abs_server: FakeAudiobookshelf,
) -> None:
    worker = start_worker(settings, concurrency=2)
    assert stack.run("integrations", "audiobookshelf", "show").stdout.strip() == "audiobookshelf: not set"
    configured = stack.run(
        "integrations", "audiobookshelf", "set", abs_server.url, env={"TOME_ABS_TOKEN": TOKEN}
    )
    assert configured.exit_code == EXIT_OK, configured.output
    shown = stack.run("integrations", "audiobookshelf", "show", "--json")
    assert json.loads(shown.stdout) == {"url": abs_server.url, "configured": True}

    ref, transcript = reference
    assert stack.run("voices", "add", "narrator", str(ref), "--text", transcript).exit_code == EXIT_OK
    script = tmp_path / "keeper.txt"
    script.write_text("The keeper climbed the stairs at dusk. The lamp turned slowly.", encoding="utf-8")
    abs_server.upload_statuses = [503]
    rendered = stack.run(
        "render", str(script), "--voice", "narrator", "--title", "The Keeper", "--format", "mp3",
        "--author", "Mara Quill", "--narrator", "Ada Voice", "--series", "Lighthouse Tales",
        "--series-index", "1", "--abs-library", "lib_main", "--abs-folder", "fol_books", "--library-zip",
        "-o", str(tmp_path / "keeper.mp3"),
    )  # fmt: skip
    assert rendered.exit_code == EXIT_OK, rendered.output
    job_id = json.loads(stack.run("jobs", "list", "--json").stdout)[0]["id"]

    deadline = time.monotonic() + 60
    job = _job(stack, job_id)
    while job["delivery"]["audiobookshelf"]["state"] == "pending" and time.monotonic() < deadline:
        time.sleep(0.3)
        job = _job(stack, job_id)
    assert job["status"] == "succeeded"
    assert job["delivery"] == {"audiobookshelf": {"state": "delivered", "attempts": 2, "error": None}}
    assert [u.status for u in abs_server.uploads] == [503, 200]
    upload = abs_server.uploads[-1]
    assert upload.token == TOKEN
    assert upload.fields["title"] == "Vol 1 - The Keeper"
    assert (upload.fields["author"], upload.fields["series"]) == ("Mara Quill", "Lighthouse Tales")
    book = (tmp_path / "keeper.mp3").read_bytes()
    assert upload.files == {"The Keeper.mp3": book, "reader.txt": b"Ada Voice\n"}
    assert abs_server.scans == [(TOKEN, "lib_main")]

    files = json.loads(stack.run("jobs", "files", job_id, "--json").stdout)
    listed = next(f for f in files if f["name"] == "library.zip")
    zipped = httpx.get(stack.url + listed["url"], headers={"Authorization": f"Bearer {stack.key}"}).content
    with zipfile.ZipFile(io.BytesIO(zipped)) as archive:
        folder = "Mara Quill/Lighthouse Tales/Vol 1 - The Keeper"
        assert archive.read(f"{folder}/The Keeper.mp3") == book

    assert "audiobookshelf attempt 1 failed: HTTP 503" in worker.log()
    assert TOKEN not in worker.log()
    assert TOKEN not in configured.output + shown.output + rendered.output + json.dumps(job)
    assert stack.run("integrations", "audiobookshelf", "forget").exit_code == EXIT_OK
    again = stack.run("render", str(script), "--voice", "narrator", "--abs-library", "l", "--abs-folder", "f")
    assert again.exit_code == EXIT_API
    assert "integration_missing" in again.stderr
