"""End to end on the embedded stack: an EPUB uploaded as a file renders to an m4b through real Celery
worker processes, and the file it makes carries the book's table of contents as its chapters and the
OPF's title and author as its tags, read back by ffmpeg and mutagen (not by Tome's code)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import mutagen
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from models import Chunk
from tests.e2e.flow import wait_terminal
from tests.support.apps import tome_of
from tests.support.epubs import Section, build_epub
from tests.support.factories import post_script_file
from worker.audio import ffmpeg_exe
from worker.config import Settings

pytestmark = pytest.mark.e2e

TITLE = "The Keeper's Log"
AUTHOR = "Mara Quill"
NOTE = "Lighthouses were painted white in those days."
# Short chapters (a few seconds of speech each): a nested section two levels deep, and footnotes.
BOOK = (
    Section(
        "The Lighthouse",
        ("The keeper climbed the stairs at dusk.",),
        children=(
            Section(
                "The Lamp Room",
                ("The lamp turned slowly.",),
                children=(Section("A Cracked Pane", ("Wind whistled through the glass.",)),),
            ),
        ),
        notes=(NOTE,),
    ),
    Section("The Storm", ("Rain beat on the windows all night.",), notes=("A second note.",)),
    Section("The Calm", ("Morning came quiet and grey.",)),
)
# What the front and back matter of build_epub() say; none of it may be read aloud.
NOT_READ = ("All rights reserved", "typeface", "Legal Notice", "Contents", "Colophon", NOTE, "second note")


def flattened(sections: Sequence[Section]) -> list[str]:
    """The table of contents in reading order: each entry, then its children, depth first."""
    return [title for s in sections for title in (s.title, *flattened(s.children))]


def file_chapters(path: Path) -> tuple[list[str], list[float], list[float]]:
    """Titles, start and end seconds of the chapters ffmpeg reads from ``path`` (its ffmetadata dump)."""
    dump = subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "ffmetadata", "-"],
        capture_output=True, check=True, timeout=60, text=True,
    ).stdout  # fmt: skip
    assert dump.startswith(";FFMETADATA1\n"), dump[:200]
    assert "\\" not in dump, dump  # no escapes: every value below is read literally
    chapters: list[dict[str, str]] = []
    for line in dump.splitlines()[1:]:
        if line == "[CHAPTER]":
            chapters.append({})
        elif chapters and "=" in line:
            key, value = line.split("=", 1)
            chapters[-1][key] = value

    def seconds(chapter: dict[str, str], key: str) -> float:
        num, den = chapter["TIMEBASE"].split("/")
        return float(Fraction(int(chapter[key]) * int(num), int(den)))

    return (
        [c.get("title", "") for c in chapters],
        [seconds(c, "START") for c in chapters],
        [seconds(c, "END") for c in chapters],
    )


def test_an_uploaded_epub_renders_to_an_m4b_with_its_table_of_contents_as_chapters(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    narrator: str,  # uploaded: its prompt builds once the worker runs
    start_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    start_worker(settings, concurrency=2)
    epub = build_epub(BOOK, version=3, title=TITLE, authors=(AUTHOR,))  # cover, copyright, nav, notes...
    # No title, no script_format: the file's name says EPUB, and the OPF names the book.
    fields = {"voice": "narrator", "output": {"format": "m4b"}}
    submitted = post_script_file(client, user, "/v1/jobs", fields, epub, "keepers-log.epub")
    assert submitted.status_code == 202, submitted.json
    assert submitted.json["script_format"] == "epub"
    assert submitted.json["progress"]["chunks_total"] == 0  # a worker unpacks and plans it

    job = wait_terminal(client, user, submitted.json["id"], timeout=120)
    assert job["status"] == "succeeded", job
    assert job["title"] == TITLE  # the book's own, once planned
    assert job["output"]["format"] == "m4b"
    expected = flattened(BOOK)
    assert expected == ["The Lighthouse", "The Lamp Room", "A Cracked Pane", "The Storm", "The Calm"]
    assert [c["title"] for c in job["chapters"]] == expected

    # What the worker read: every chapter's words, no front or back matter, no footnote.
    chunks = (
        tome_of(app)
        .sessions.scalars(select(Chunk).where(Chunk.job_id == uuid.UUID(job["id"])).order_by(Chunk.seq))
        .all()
    )
    spoken = " ".join(f"{c.text} {c.source_text or ''}" for c in chunks)
    for section in ("keeper climbed", "lamp turned", "Wind whistled", "Rain beat", "Morning came"):
        assert section in spoken, spoken
    for matter in NOT_READ:
        assert matter not in spoken, (matter, spoken)
    assert sorted({c.chapter for c in chunks}) == list(range(len(expected)))

    download = client.get(job["output"]["url"], headers=user)
    assert download.status_code == 200
    assert len(download.data) == job["output"]["bytes"]
    path = tmp_path / "book.m4b"
    path.write_bytes(download.data)

    # The chapters inside the file: the table of contents flattened, in order, where the job says.
    titles, starts, ends = file_chapters(path)
    assert titles == expected
    assert starts[0] == 0.0
    for ours, start in zip(job["chapters"], starts, strict=True):
        assert abs(ours["start"] - start) < 0.002, (ours, start)
    assert all(a < b for a, b in zip(starts, ends, strict=True))
    assert ends[:-1] == pytest.approx(starts[1:], abs=0.002)  # back to back, no gap, no overlap
    assert abs(ends[-1] - job["output"]["duration"]) < 0.05

    # The tags, read by mutagen from the MP4 atoms: the OPF's title and author.
    audio = mutagen.File(path, easy=True)
    assert audio is not None
    tags = {key.lower(): [str(v) for v in values] for key, values in (audio.tags or {}).items()}
    assert tags["title"] == [TITLE], tags
    assert tags["artist"] == [AUTHOR], tags
    # AAC pads the end to whole 1,024-sample frames (and mutagen counts the priming frames): a few hundredths.
    assert abs(audio.info.length - job["output"]["duration"]) < 0.15
