"""End to end on the embedded stack: jobs that ask for ``output.readalong`` get book-readalong.epub among
their files, an EPUB 3 with media overlays that epubcheck passes, whose every clip matches the job's
manifest (read with zipfile and lxml, tests.support.readalong)."""

from __future__ import annotations

import io
import json
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.e2e.flow import wait_terminal
from tests.support.epubs import Section, build_epub
from tests.support.factories import post_script_file
from tests.support.readalong import check_against_manifest, element_text, epubcheck, read_epub
from worker.audio import ffmpeg_exe
from worker.config import Settings

pytestmark = pytest.mark.e2e

NOTE = "Lighthouses were painted white in those days."
BOOK = (
    Section(
        "The Lighthouse & <Lamp>",
        ('The keeper climbed the stairs at dusk. "Is it lit?" asked Ann.', "The lamp turned slowly."),
        children=(Section("A Cracked Pane", ("Wind whistled through the glass.",)),),
        notes=(NOTE,),
    ),
    Section("The Storm", ("Rain beat on the windows all night.",)),
)
HOSTILE_TITLE = "Tides ]]> & <script>alert(\"x\")</script> 'n' &amp;"
MARKDOWN = """# One <b>&amp;</b> "quotes"

The fog came in before dawn. It was cold & <wet>.

<!-- voice: second -->
"Bring them in," said the harbour master.

<!-- voice: default -->
# Two

Everything was calm again.
"""


def _files(client: FlaskClient, user: dict[str, str], job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    listed = client.get(job["output"]["files_url"], headers=user)
    assert listed.status_code == 200, listed.json
    return {f["name"]: f for f in listed.json["files"]}


def _download(client: FlaskClient, user: dict[str, str], entry: dict[str, Any]) -> bytes:
    response = client.get(entry["url"], headers=user)
    assert response.status_code == 200
    data: bytes = response.data
    return data


def _audio_codec(data: bytes, name: str, tmp_path: Path) -> str:
    path = tmp_path / Path(name).name
    path.write_bytes(zipfile.ZipFile(io.BytesIO(data)).read(name))
    probe = subprocess.run(
        [ffmpeg_exe(), "-hide_banner", "-i", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return probe.stderr


def test_an_epub_script_gets_a_read_along_of_its_own_pages(
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    narrator: str,  # uploaded: its prompt builds once the worker runs
    start_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    start_worker(settings, concurrency=2)
    fields = {"voice": "narrator", "output": {"format": "m4b", "readalong": True}}
    epub = build_epub(BOOK, title="The Keeper's Log")
    submitted = post_script_file(client, user, "/v1/jobs", fields, epub, "log.epub")
    assert submitted.status_code == 202, submitted.json
    job = wait_terminal(client, user, submitted.json["id"], timeout=180)
    assert job["status"] == "succeeded", job

    files = _files(client, user, job)
    entry = files["book-readalong.epub"]
    assert entry["kind"] == "readalong"
    assert entry["format"] == "epub"
    data = _download(client, user, entry)
    assert len(data) == entry["bytes"]
    manifest = json.loads(_download(client, user, files["manifest.json"]))
    path = tmp_path / "book-readalong.epub"
    path.write_bytes(data)
    epubcheck(path)

    pars = check_against_manifest(data, manifest)
    sentences = [s["text"] for c in manifest["chunks"] for s in c["sentences"]]
    # the book's own pages, each spoken sentence wrapped where it is
    for par, sentence in zip(pars, sentences, strict=True):
        assert element_text(data, par.doc, par.fragment).strip() == sentence.strip()
    archive, _, _ = read_epub(data)
    names = set(archive.namelist())
    assert {"OEBPS/copyright.xhtml", "OEBPS/cover.gif", "OEBPS/colophon.xhtml"} <= names  # all kept
    chapter = archive.read(pars[0].doc).decode()
    assert NOTE in chapter
    assert "noteref" in chapter
    assert not any(NOTE in s for s in sentences)
    assert "All rights reserved" in archive.read("OEBPS/copyright.xhtml").decode()
    assert "aac" in _audio_codec(data, pars[0].audio, tmp_path).lower()  # m4b: AAC in MP4


def test_a_two_voice_markdown_script_gets_a_generated_read_along(
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    start_worker(settings, concurrency=2)
    for name in ("narrator", "second"):
        voice = upload_voice(client, user, reference_audio[0], name=name, ref_text=reference_audio[1])
        assert voice.status_code == 202, voice.json
    response = submit_job(
        client, user, "narrator", title=HOSTILE_TITLE, script=MARKDOWN, script_format="markdown",
        output={"format": "mp3", "readalong": True},
    )  # fmt: skip
    assert response.status_code == 202, response.json
    job = wait_terminal(client, user, response.json["id"], timeout=180)
    assert job["status"] == "succeeded", job

    files = _files(client, user, job)
    data = _download(client, user, files["book-readalong.epub"])
    manifest = json.loads(_download(client, user, files["manifest.json"]))
    path = tmp_path / "book-readalong.epub"
    path.write_bytes(data)
    epubcheck(path)  # the hostile title and text are escaped: the book stays valid

    pars = check_against_manifest(data, manifest)
    voices = [c["voice"] for c in manifest["chunks"] for _ in c["sentences"]]
    assert len(set(voices)) == 2  # lines in the other voice have their pars and ids too
    sentences = [s["text"] for c in manifest["chunks"] for s in c["sentences"]]
    for par, sentence in zip(pars, sentences, strict=True):
        assert element_text(data, par.doc, par.fragment) == sentence
    archive, opf, package = read_epub(data)
    title = package.find(".//{http://purl.org/dc/elements/1.1/}title")
    assert title is not None
    assert title.text == HOSTILE_TITLE
    assert b"<script>" not in archive.read(opf)
    assert "mp3" in _audio_codec(data, pars[0].audio, tmp_path).lower()
