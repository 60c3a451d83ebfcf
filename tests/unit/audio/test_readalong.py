"""The read-along EPUB builder (worker.audio.readalong) on real audio (ffmpeg) and real books: valid for
epubcheck, every clip where the manifest says, and hostile text, ids and sizes handled."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lxml import etree

from tests.support.epubs import Section, build_epub, xhtml
from tests.support.readalong import check_against_manifest, element_text, epubcheck, read_epub
from worker.audio import ffmpeg_exe
from worker.audio.errors import StitchError
from worker.audio.ffmpeg import FfmpegEncoder
from worker.audio.readalong import BookMeta, audio_format, build, clock
from worker.script.parse import parse_document

RATE = 16_000
META = BookMeta("urn:uuid:0b7c4d52-8d0e-4a57-9f0e-2b7f3e1c9a10", "A Book", "en", "Ann Smith")


def fake_job(
    chapters: list[tuple[str | None, list[list[str]]]], folder: Path, sentence_s: float = 1.0
) -> tuple[dict[str, Any], Path]:
    """A manifest as the stitch writes it (chapters of chunks of sentences, with pauses between) and
    a book of that length: a tone, encoded to MP3."""
    manifest: dict[str, Any] = {"version": 1, "chapters": [], "chunks": []}
    at, seq = 0.0, 0
    for index, (title, chunks) in enumerate(chapters):
        start = at
        for sentences in chunks:
            timed = []
            first = at
            for text in sentences:
                timed.append({"text": text, "start": round(at, 3), "end": round(at + sentence_s, 3)})
                at += sentence_s + 0.25  # a sentence pause, outside the clips
            manifest["chunks"].append(
                {"seq": seq, "chapter": index, "start": first, "end": at, "sentences": timed, "voice": "v"}
            )
            seq += 1
            at += 0.5
        manifest["chapters"].append(
            {"index": index, "title": title, "start": round(start, 3), "end": round(at, 3)}
        )
    manifest["duration"] = round(at, 3)
    book = folder / "book.mp3"
    with FfmpegEncoder(book, "mp3", RATE, 64) as encoder:
        total = round(at * RATE)
        for first in range(0, total, RATE):  # a second at a time: the test's own memory stays small
            t = np.arange(first, min(total, first + RATE)) / RATE
            encoder.write(0.2 * np.sin(2 * np.pi * 220 * t))
    return manifest, book


def from_script(source: str | bytes, fmt: str) -> list[tuple[str | None, list[list[str]]]]:
    """The chapters the planner reads from a script: each paragraph a chunk of its sentences."""
    parsed = parse_document(source, fmt)  # type: ignore[arg-type]
    return [(c.title, [[str(s) for s in p] for p in c.paragraphs]) for c in parsed.chapters]


def make(
    tmp_path: Path, chapters: list[tuple[str | None, list[list[str]]]], epub: bytes | None = None, **kw: Any
) -> tuple[bytes, dict[str, Any]]:
    manifest, book = fake_job(chapters, tmp_path)
    out = tmp_path / "book-readalong.epub"
    size = build(
        out,
        manifest,
        book,
        fmt=kw.get("fmt", "mp3"),
        sample_rate=RATE,
        bitrate_kbps=64,
        meta=kw.get("meta", META),
        epub=epub,
    )
    assert size == out.stat().st_size
    return out.read_bytes(), manifest


def _duration(data: bytes, name: str, tmp_path: Path) -> float:
    path = tmp_path / Path(name).name
    path.write_bytes(zipfile.ZipFile(io.BytesIO(data)).read(name))
    pcm = subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", str(path), "-ac", "1", "-ar", str(RATE), "-f", "s16le", "-"],
        capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return len(pcm) / 2 / RATE


def test_a_markdown_book_becomes_a_valid_read_along_whose_clips_are_the_manifests(tmp_path: Path) -> None:
    script = "# One\n\nThe fog came in. Nobody spoke.\n\nA second paragraph.\n\n# Two\n\nCalm again."
    data, manifest = make(tmp_path, from_script(script, "markdown"))
    path = tmp_path / "check.epub"
    path.write_bytes(data)
    epubcheck(path)
    pars = check_against_manifest(data, manifest)
    sentences = [s["text"] for c in manifest["chunks"] for s in c["sentences"]]
    assert [element_text(data, p.doc, p.fragment) for p in pars] == sentences
    # each chapter's audio is its stretch of the book, sample for sample (MP3 pads its last frame)
    for chapter in manifest["chapters"]:
        audio = next(
            p.audio for p, c in zip(pars, _chapter_of(manifest), strict=True) if c == chapter["index"]
        )
        assert abs(_duration(data, audio, tmp_path) - (chapter["end"] - chapter["start"])) < 0.08


def _chapter_of(manifest: dict[str, Any]) -> list[int]:
    return [c["chapter"] for c in manifest["chunks"] for _ in c["sentences"]]


def test_m4a_and_m4b_jobs_get_aac_and_the_others_mp3(tmp_path: Path) -> None:
    assert audio_format("m4b") == "m4a"
    assert audio_format("m4a") == "m4a"
    assert {audio_format(f) for f in ("mp3", "wav", "flac", "ogg")} == {"mp3"}
    data, manifest = make(tmp_path, [("One", [["Hello there.", "Goodbye."]])], fmt="m4a")
    _archive, _, package = read_epub(data)
    audio = [
        i
        for i in package.iter("{http://www.idpf.org/2007/opf}item")
        if (i.get("media-type") or "").startswith("audio")
    ]
    assert [a.get("media-type") for a in audio] == ["audio/mp4"]
    check_against_manifest(data, manifest)


def test_an_epub_keeps_its_pages_and_marks_sentences_across_inline_markup(tmp_path: Path) -> None:
    body = (
        '<section epub:type="chapter"><h1>Inline</h1><p>He said <em>this</em> and left. '
        "Then <b>bold</b> words came.</p><p>Plain here.</p></section>"
    )
    epub = build_epub(
        [Section("Inline", ("placeholder",))], files={"OEBPS/chapter1.xhtml": xhtml(body, title="Inline")}
    )
    chapters = from_script(epub, "epub")
    data, manifest = make(tmp_path, chapters, epub)
    path = tmp_path / "check.epub"
    path.write_bytes(data)
    epubcheck(path)
    pars = check_against_manifest(data, manifest)
    texts = [element_text(data, p.doc, p.fragment) for p in pars]
    assert texts == ["Inline", "He said this and left.", "Then bold words came.", "Plain here."]
    page = zipfile.ZipFile(io.BytesIO(data)).read(pars[1].doc).decode()
    assert "<em>this</em>" in page  # the book's markup stays inside the span


def test_ids_the_book_already_uses_are_left_alone(tmp_path: Path) -> None:
    body = '<h1 id="tome-s1">Taken</h1><p id="tome-s2">First one. Second one.</p>'
    epub = build_epub([Section("Taken", ("x",))], files={"OEBPS/chapter1.xhtml": xhtml(body, title="Taken")})
    data, manifest = make(tmp_path, from_script(epub, "epub"), epub)
    pars = check_against_manifest(data, manifest)
    archive, _, _ = read_epub(data)
    page = etree.fromstring(archive.read(pars[0].doc))
    ids = [e.get("id") for e in page.iter() if isinstance(e.tag, str) and e.get("id")]
    assert len(ids) == len(set(ids)), ids
    assert [element_text(data, p.doc, p.fragment) for p in pars] == ["Taken", "First one.", "Second one."]
    assert all(p.fragment not in {"tome-s1", "tome-s2"} for p in pars)


def test_an_epub_2_book_becomes_a_valid_epub_3(tmp_path: Path) -> None:
    epub = build_epub(version=2)
    data, manifest = make(tmp_path, from_script(epub, "epub"), epub)
    path = tmp_path / "check.epub"
    path.write_bytes(data)
    # the test book's own faults (an NCX head without its meta, notes linking to ids in other files)
    epubcheck(path, tolerated=("OEBPS/toc.ncx", "OEBPS/notes.xhtml"))
    check_against_manifest(data, manifest)
    _, _, package = read_epub(data)
    assert package.get("version") == "3.0"


def test_text_not_found_in_the_book_still_has_its_par(tmp_path: Path) -> None:
    epub = build_epub([Section("Found", ("These words are in the book.",))])
    chapters: list[tuple[str | None, list[list[str]]]] = [
        ("Found", [["Found"], ["These words are in the book.", "Note 1. These are not."]])
    ]
    data, manifest = make(tmp_path, chapters, epub)
    pars = check_against_manifest(data, manifest)
    assert pars[2].fragment == pars[1].fragment  # the unplaced sentence points at the one before


HOSTILE = 'A ]]> & <script>alert("x")</script> \x01\x7f "quotes" \'n\' &amp; <!-- c --> \ud800'


def test_hostile_titles_and_text_are_escaped_and_the_book_stays_valid(tmp_path: Path) -> None:
    chapters: list[tuple[str | None, list[list[str]]]] = [
        (HOSTILE, [[HOSTILE.replace("\ud800", ""), "<p id='s1'>Injected</p>."]]),
        ("]]><!DOCTYPE x>", [["Two & two."]]),
    ]
    meta = BookMeta(META.identifier, HOSTILE, "en", '<dc:creator>"Evil"</dc:creator>')
    data, manifest = make(tmp_path, chapters, meta=meta)
    path = tmp_path / "check.epub"
    path.write_bytes(data)
    epubcheck(path)
    pars = check_against_manifest(data, manifest)
    assert element_text(data, pars[1].doc, pars[1].fragment) == "<p id='s1'>Injected</p>."
    archive, _opf, package = read_epub(data)
    assert b"<script>" not in b"".join(archive.read(n) for n in archive.namelist() if not n.endswith(".mp3"))
    creator = package.find(".//{http://purl.org/dc/elements/1.1/}creator")
    assert creator is not None
    assert creator.text == '<dc:creator>"Evil"</dc:creator>'


def test_clock_values() -> None:
    assert clock(0) == "0:00:00.000"
    assert clock(3_723_456) == "1:02:03.456"


_PEAK = """
import json, resource, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.unit.audio.test_readalong import fake_job, META, RATE
from worker.audio.readalong import build
folder = Path(sys.argv[2])
minutes = float(sys.argv[3])
sentences = int(minutes * 60 / 1.25)
chapters = [(f"Chapter {c}", [[f"Sentence {c} {n}." for n in range(sentences // 10)]]) for c in range(10)]
manifest, book = fake_job(chapters, folder)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
build(folder / "out.epub", manifest, book, fmt="mp3", sample_rate=RATE, bitrate_kbps=32, meta=META)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"growth_kb": after - before, "bytes": (folder / "out.epub").stat().st_size}))
"""


def _peak(tmp_path: Path, minutes: float) -> dict[str, int]:
    folder = tmp_path / f"m{minutes:g}"
    folder.mkdir()
    root = str(Path(__file__).resolve().parents[3])
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, root, str(folder), str(minutes)],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_memory_does_not_grow_with_the_book(tmp_path: Path) -> None:
    """The book is decoded and cut a block at a time and the ZIP written an entry at a time: building
    the read-along of a book ten times longer costs about the same memory (its PCM would be 19 MB)."""
    small = _peak(tmp_path, 1)
    large = _peak(tmp_path, 10)
    assert large["bytes"] > 5 * small["bytes"]
    assert large["growth_kb"] < small["growth_kb"] + 12_000, (small, large)


def test_an_epub_that_cannot_be_read_again_gets_generated_text(tmp_path: Path) -> None:
    data, manifest = make(tmp_path, [("One", [["Hello there.", "Goodbye."]])], b"PK\x03\x04 not a zip")
    pars = check_against_manifest(data, manifest)
    assert [element_text(data, p.doc, p.fragment) for p in pars] == ["Hello there.", "Goodbye."]


def test_a_book_shorter_than_its_manifest_is_an_error_not_a_short_read_along(tmp_path: Path) -> None:
    manifest, book = fake_job([("One", [["Hello there.", "Goodbye."]])], tmp_path)
    manifest["chapters"][0]["end"] += 30.0  # the manifest says 30 s more than the book holds
    with pytest.raises(StitchError, match="shorter than its manifest"):
        build(tmp_path / "x.epub", manifest, book, fmt="mp3", sample_rate=RATE, bitrate_kbps=64, meta=META)
    assert not (tmp_path / "x.epub").exists()
