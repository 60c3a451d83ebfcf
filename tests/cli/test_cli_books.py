"""``tome`` reaches what a user of the API does for a book, against the real API and Celery workers:
every job option on ``render``, the job's files and their downloads (one, several, all; resumed), the
ACX delivery, ``rerender --wait`` that saves the new book, and ids given as unique prefixes."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import httpx
import mutagen
import pytest
from flask import Flask
from sqlalchemy import update
from sqlalchemy.orm import Session, scoped_session

from models import Chunk, Job
from tests.chaos.hostile import png_bytes
from tests.cli.conftest import Stack
from tests.e2e.flow import BOOK
from tome_cli.context import EXIT_API, EXIT_FAILED, EXIT_OK
from webapi.cli import mint_key


def _get(stack: Stack, url: str) -> bytes:
    response = httpx.get(stack.url + url, headers={"Authorization": f"Bearer {stack.key}"}, timeout=60)
    response.raise_for_status()
    return response.content


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.e2e
def test_render_with_every_kind_of_option_then_files_downloads_and_a_waited_rerender(
    db: scoped_session[Session],
    rendering: Stack,
    tmp_path: Path,
    reference: tuple[Path, str],
) -> None:
    stack = rendering
    assert stack.add_voice(reference).exit_code == EXIT_OK
    lexicon = httpx.post(
        f"{stack.url}/v1/lexicons",
        headers={"Authorization": f"Bearer {stack.key}"},
        json={"name": "harbour", "language": "en", "entries": [{"grapheme": "quay", "alias": "key"}]},
    )
    assert lexicon.status_code == 201, lexicon.text
    book = tmp_path / "harbour.md"
    book.write_text(BOOK, encoding="utf-8")
    cover = tmp_path / "cover.png"
    cover.write_bytes(png_bytes())
    out = tmp_path / "out" / "harbour.mp3"
    rendered = stack.run(
        "render", str(book), "--voice", "narrator", "-o", str(out), "--split", "chapter",
        "--language", "en-gb", "--speed", "1.1", "--lexicon", "harbour", "--author", "A. Author",
        "--narrator", "N. Narrator", "--year", "2026", "--cover", str(cover), "--pause-chapter", "1.5",
        "--qa-threshold", "max_pause_s=2.5", "--qa-max-rerenders", "1", "--bitrate", "96",
    )  # fmt: skip
    assert rendered.exit_code == EXIT_OK, rendered.output
    job_id = rendered.stderr.split("job ", 1)[1].split(":", 1)[0]
    job = db.get(Job, uuid.UUID(job_id))
    assert job is not None
    options = job.options
    assert (options["language"], options["speed"], options["bitrate_kbps"]) == ("en-gb", 1.1, 96)
    assert {"author": "A. Author", "narrator": "N. Narrator", "year": 2026}.items() <= options[
        "metadata"
    ].items()
    assert options["pauses"]["chapter"] == 1.5
    assert options["qa"]["thresholds"] == {"max_pause_s": 2.5}
    assert options["qa"]["max_rerenders"] == 1
    assert len(options["lexicons"]) == 1
    tags = mutagen.File(out)
    assert tags.tags.getall("APIC")[0].data == png_bytes()
    assert str(tags.tags["TCOM"]) == "N. Narrator"

    # the split's chapter files were saved beside the book, in a folder named after it
    files = json.loads(stack.run("jobs", "files", job_id[:8], "--json").stdout)
    chapters = [f for f in files if f["kind"] == "chapter"]
    assert len(chapters) == 3
    for chapter in chapters:
        assert (out.parent / "harbour" / chapter["name"]).read_bytes() == _get(stack, chapter["url"])
    listed = stack.run("jobs", "files", job_id[:8])
    assert all(f["name"] in listed.stdout for f in files)

    # one file, by name (resumed from a part the size of a broken download)
    srt = next(f for f in files if f["name"] == "book.srt")
    one = stack.run("jobs", "download", job_id[:6], "--file", "book.srt", "-o", str(tmp_path / "b.srt"))
    assert one.exit_code == EXIT_OK, one.output
    assert (tmp_path / "b.srt").read_bytes() == _get(stack, srt["url"])
    whole = _get(stack, chapters[1]["url"])
    etag = httpx.head(stack.url + chapters[1]["url"], headers={"Authorization": f"Bearer {stack.key}"})
    part_dir = tmp_path / "parts"
    part_dir.mkdir()
    (part_dir / f".{chapters[1]['name']}.part").write_bytes(whole[:1000])
    (part_dir / f".{chapters[1]['name']}.part.etag").write_text(etag.headers["ETag"])
    resumed = stack.run("jobs", "download", job_id, "--file", chapters[1]["name"], "-o", str(part_dir))
    assert resumed.exit_code == EXIT_OK, resumed.output
    assert (part_dir / chapters[1]["name"]).read_bytes() == whole
    unknown = stack.run("jobs", "download", job_id, "--file", "../../etc/passwd")
    assert unknown.exit_code == EXIT_API
    assert "has no file '../../etc/passwd'" in unknown.stderr

    # every file
    every = stack.run("jobs", "download", job_id, "--all", "-o", str(tmp_path / "all"))
    assert every.exit_code == EXIT_OK, every.output
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == sorted(f["name"] for f in files)
    for entry in files:
        assert _digest((tmp_path / "all" / entry["name"]).read_bytes()) == _digest(_get(stack, entry["url"]))

    # a re-render followed to its end saves the new book where the first one was
    before = out.read_bytes()
    redo = stack.run(
        "jobs", "rerender", job_id[:8], "1", "--text", "The fog came in at noon.", "--wait", "-o", str(out)
    )
    assert redo.exit_code == EXIT_OK, redo.output
    shown = json.loads(stack.run("jobs", "show", job_id, "--json").stdout)
    assert (shown["status"], shown["revision"], shown["rerender"]["state"]) == ("succeeded", 1, "published")
    assert out.read_bytes() == _get(stack, shown["output"]["url"])
    assert out.read_bytes() != before
    qa = json.loads(stack.run("jobs", "qa", job_id, "--json").stdout)
    chapter = next(c["chapter"] for c in qa["chunks"] if c["seq"] == 1)
    files = json.loads(stack.run("jobs", "files", job_id, "--json").stdout)
    redone = next(f for f in files if f["kind"] == "chapter" and f["chapter"] == chapter)
    assert (out.parent / "harbour" / redone["name"]).read_bytes() == _get(stack, redone["url"])

    # a flag (set here: espeak's takes pass) accepted from the command line
    reason = "median pitch 241 Hz is 4.1 semitones above the voice's 190 Hz (at most 3 allowed)"
    qa_record = {**(qa["chunks"][0] or {}), "passed": False, "reasons": [reason], "checks": []}
    db.execute(
        update(Chunk)
        .where(Chunk.job_id == uuid.UUID(job_id), Chunk.seq == 0)
        .values(flagged=True, qa={k: qa_record[k] for k in ("passed", "reasons", "checks", "renders")})
    )
    db.execute(update(Job).where(Job.id == uuid.UUID(job_id)).values(chunks_flagged=1))
    db.commit()
    flagged = stack.run("jobs", "qa", job_id[:8], "--flagged")
    assert "1 chunks flagged" in flagged.stdout
    assert "FLAGGED" in flagged.stdout
    accepted = stack.run("jobs", "qa", job_id[:8], "--accept", "0")
    assert accepted.exit_code == EXIT_OK, accepted.output
    assert "accepted chunk 0" in accepted.stderr
    assert "0 chunks flagged" in accepted.stdout
    assert "accepted" in accepted.stdout.split("\n")[2]  # the first chunk's row, under the header
    assert (
        "semitones above the voice's 190 Hz (at most 3 allowed)"
        in stack.run("jobs", "qa", job_id, env={"COLUMNS": "300"}).stdout
    )
    twice = stack.run("jobs", "qa", job_id, "--accept", "0")
    assert twice.exit_code == EXIT_API
    assert "accepted already" in twice.stderr
    assert "[not_flagged, HTTP 409]" in twice.stderr
    beyond = stack.run("jobs", "qa", job_id, "--accept", "9999")
    assert (beyond.exit_code, "HTTP 404" in beyond.stderr) == (EXIT_API, True)


@pytest.mark.e2e
def test_the_acx_preset_saves_the_chapter_files_and_the_report(
    rendering: Stack,
    tmp_path: Path,
    reference: tuple[Path, str],
) -> None:
    stack = rendering
    assert stack.add_voice(reference).exit_code == EXIT_OK
    script = tmp_path / "two.md"
    script.write_text(
        "# One\n\nThe ferry left the harbour at dawn, and nobody said a word.\n\n"
        "# Two\n\nBy noon the island was in sight, grey and green.\n",
        encoding="utf-8",
    )
    out = tmp_path / "acx.mp3"
    rendered = stack.run("render", str(script), "--voice", "narrator", "--preset", "acx", "-o", str(out))
    assert rendered.exit_code == EXIT_OK, rendered.output
    saved = sorted(p.name for p in (tmp_path / "acx").iterdir())
    assert saved == ["acx-report.json", "chapter-001.mp3", "chapter-002.mp3"]
    report = json.loads((tmp_path / "acx" / "acx-report.json").read_text())
    assert len(report["files"]) == 2
    assert out.is_file()


def test_ids_are_taken_whole_or_as_unique_prefixes_and_listed_whole(
    stack: Stack, tmp_path: Path, reference: tuple[Path, str]
) -> None:
    """No worker runs: the jobs stay queued. 17 jobs: two of them share a first hex digit."""
    assert stack.add_voice(reference, "--no-wait").exit_code == 0
    script = tmp_path / "note.txt"
    script.write_text("A short note, read aloud.\n", encoding="utf-8")
    ids = []
    for n in range(17):
        made = stack.run("render", str(script), "--voice", "narrator", "--title", f"N{n}", "--no-wait")
        assert made.exit_code == EXIT_OK, made.output
        ids.append(made.stdout.strip())

    listed = stack.run("jobs", "list", "--limit", "100", env={"COLUMNS": "80"})
    assert all(job_id in listed.stdout for job_id in ids)  # whole, at 80 columns

    first = ids[0]
    for given in (first, first.upper(), first[:13]):
        shown = json.loads(stack.run("jobs", "show", given, "--json").stdout)
        assert shown["id"] == first
    shared = next(i[:1] for i in ids if sum(j.startswith(i[:1]) for j in ids) > 1)
    ambiguous = stack.run("jobs", "show", shared)
    assert ambiguous.exit_code == EXIT_API
    assert ambiguous.stdout == ""
    for job_id in ids:
        assert (job_id in ambiguous.stderr) == job_id.startswith(shared)
    assert "give more of the id" in ambiguous.stderr
    missing = stack.run("jobs", "show", "zzz")
    assert missing.exit_code == EXIT_API
    assert "you have no job whose id starts with 'zzz'" in missing.stderr
    another = uuid.uuid4()  # a whole id goes to the API as it is: 404 when it is not one of yours
    assert "HTTP 404" in stack.run("jobs", "show", str(another)).stderr
    cancelled = stack.run("jobs", "cancel", first[:13])
    assert cancelled.stdout == f"{first}\tcancelled\n"
    assert stack.run("jobs", "download", first[:13]).exit_code == EXIT_FAILED  # cancelled: no book

    voice = json.loads(stack.run("voices", "list", "--json").stdout)[0]
    assert json.loads(stack.run("voices", "show", voice["id"][:8], "--json").stdout)["name"] == "narrator"
    by_prefix = stack.run("render", str(script), "--voice", voice["id"][:8], "--no-wait")
    assert by_prefix.exit_code == EXIT_OK, by_prefix.output
    made = json.loads(stack.run("jobs", "show", by_prefix.stdout.strip(), "--json").stdout)
    assert made["voice_id"] == voice["id"]


def test_another_owners_jobs_are_not_found_by_prefix(
    app: Flask, stack: Stack, tmp_path: Path, reference: tuple[Path, str]
) -> None:
    assert stack.add_voice(reference, "--no-wait").exit_code == 0
    script = tmp_path / "note.txt"
    script.write_text("A short note, read aloud.\n", encoding="utf-8")
    job_id = stack.run("render", str(script), "--voice", "narrator", "--no-wait").stdout.strip()
    bob = mint_key(app, owner="bob", name="cli", admin=False)
    for given in (job_id[:8], job_id):
        refused = stack.run("jobs", "show", given, key=bob)
        assert refused.exit_code == EXIT_API
        assert "HTTP 404" in refused.stderr
    assert (
        f"you have no job whose id starts with '{job_id[:8]}'"
        in stack.run("jobs", "show", job_id[:8], key=bob).stderr
    )
