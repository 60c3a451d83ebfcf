"""Audiobook files through the API: every format renders, downloads with its type and extension, and
carries the job's chapters and tags inside the file, read back by ffmpeg itself (not by Tome's code)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import mutagen
import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.support.factories import render_inline
from worker.audio import ffmpeg_exe

BOOK = "# The Harbour\n\nThe fog came in before dawn.\n\n# The Storm\n\nBy noon the wind had turned."
METADATA = {"author": "Ann Writer", "narrator": "Keeper", "year": 2026, "language": "en"}


def _render(
    app: Flask, client: FlaskClient, user: dict[str, str], audio: bytes, **body: object
) -> dict[str, object]:
    voice = upload_voice(client, user, audio)
    assert voice.status_code == 202
    job = submit_job(client, user, "narrator", script=BOOK, script_format="markdown", **body)
    assert job.status_code == 202, job.json
    return render_inline(app, client, user, job.json["id"], voice.json["id"])


def _chapter_titles(meta: str) -> list[str]:
    """Chapter titles in ffmpeg's ffmetadata dump: a ``[CHAPTER]`` header line that does not continue an
    escaped value (a backslash at the end of the line before it) starts a chapter."""
    titles: list[str] = []
    continued = False
    in_chapter = False
    for line in meta.split("\n"):
        if not continued:
            if line == "[CHAPTER]":
                in_chapter = True
            elif in_chapter and line.startswith("title="):
                titles.append(line.removeprefix("title="))
        continued = line.endswith("\\") and not line.endswith("\\\\")
    return titles


def _tags(path: Path) -> dict[str, list[str]]:
    """Tags read back by mutagen (ID3, MP4 atoms, Vorbis comments), independently of ffmpeg."""
    audio = mutagen.File(path, easy=True)
    assert audio is not None, path
    return {k.lower(): [str(v) for v in vs] for k, vs in audio.tags.items()}


def _ffmetadata(path: Path) -> str:
    result = subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "ffmetadata", "-"],
        capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    return result.stdout.decode()


@pytest.mark.parametrize(
    ("fmt", "mime", "extension"),
    [
        ("m4b", "audio/mp4", ".m4b"),
        ("mp3", "audio/mpeg", ".mp3"),
        ("ogg", "audio/ogg", ".opus"),
        ("flac", "audio/flac", ".flac"),
    ],
)
def test_each_format_carries_chapters_and_tags(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str],
    tmp_path: Path, fmt: str, mime: str, extension: str,
) -> None:  # fmt: skip
    done = _render(
        app, client, user, reference_audio[0], title="The Crossing", output={"format": fmt}, metadata=METADATA
    )
    response = client.get(f"/v1/jobs/{done['id']}/audio", headers=user)
    assert response.status_code == 200
    assert response.mimetype == mime
    assert f"The-Crossing{extension}" in response.headers["Content-Disposition"]
    path = tmp_path / f"book{extension}"
    path.write_bytes(response.data)
    # ffmpeg reads ID3 CHAP, MP4 chapters and Vorbis CHAPTERnnn comments back as chapters.
    assert _chapter_titles(_ffmetadata(path)) == ["The Harbour", "The Storm"]
    tags = _tags(path)
    assert tags["title"] == ["The Crossing"]
    assert tags["artist"] == ["Ann Writer"]


def test_bad_metadata_is_a_422_naming_the_field(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    bad = submit_job(client, user, "narrator", metadata={"language": "not a language"})
    assert bad.status_code == 422
    assert bad.json["error"]["field"] == "metadata"
    unknown = submit_job(client, user, "narrator", output={"format": "aac"})
    assert unknown.status_code == 422
    assert unknown.json["error"]["field"] == "output.format"


def test_metadata_cannot_inject_chapters_or_tags(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], tmp_path: Path
) -> None:
    evil = "x\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=1\ntitle=evil"
    # One-line fields refuse line breaks outright; the description, which may hold them, is escaped.
    refused = submit_job(client, user, "narrator", script=BOOK, metadata={"author": evil})
    assert refused.status_code == 422
    assert refused.json["error"]["field"] == "metadata.author"
    done = _render(
        app, client, user, reference_audio[0], title="a=b;c#d", output={"format": "m4b"},
        metadata={"author": "a=b\\;c", "narrator": "-i /etc/passwd", "description": evil},
    )  # fmt: skip
    path = tmp_path / "book.m4b"
    path.write_bytes(client.get(f"/v1/jobs/{done['id']}/audio", headers=user).data)
    assert _chapter_titles(_ffmetadata(path)) == ["The Harbour", "The Storm"]
    tags = _tags(path)
    assert tags["artist"] == ["a=b\\;c"]  # stored literally
    assert evil in [value for values in tags.values() for value in values]  # newlines and all
    assert tags["title"] == ["a=b;c#d"]
