"""A finished job's files through the API: chapter files with their own tags, the ZIP of them, subtitles,
the manifest, the ACX preset and its report, covers, and what a hostile client cannot reach."""

from __future__ import annotations

import io
import itertools
import json
import zipfile
from pathlib import Path
from typing import Any

import mutagen
import mutagen.mp3
import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.support.factories import render_inline
from tests.support.s3 import both_backends
from worker.audio.ffmpeg import decode_to_pcm

storage_overrides = both_backends  # every test here runs on the local directory and on S3


BOOK = (
    "# The Harbour\n\nThe fog came in before dawn. Dr. Hale counted the boats.\n\n"
    "# The Storm\n\nBy noon the wind had turned, and the gulls went quiet.\n\n"
    "# The Morning After\n\nThe sea was calm again."
)
TITLES = ["The Harbour", "The Storm", "The Morning After"]


def _render(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    audio: bytes,
    script: str = BOOK,
    files: dict[str, tuple[bytes, str]] | None = None,
    **body: Any,
) -> dict[str, Any]:
    voice = upload_voice(client, user, audio)
    assert voice.status_code == 202
    if files is None:
        job = submit_job(client, user, "narrator", script=script, script_format="markdown", **body)
    else:
        form: dict[str, Any] = {
            "job": json.dumps({"voice": "narrator", "title": "Harbour", "script_format": "markdown", **body})
        }
        form["script"] = (io.BytesIO(script.encode()), "book.md")
        for field, (data, name) in files.items():
            form[field] = (io.BytesIO(data), name)
        job = client.post("/v1/jobs", data=form, headers=user, content_type="multipart/form-data")
    assert job.status_code == 202, job.json
    return render_inline(app, client, user, job.json["id"], voice.json["id"])


def _files(client: FlaskClient, user: dict[str, str], job: dict[str, Any]) -> list[dict[str, Any]]:
    listed = client.get(job["output"]["files_url"], headers=user)
    assert listed.status_code == 200, listed.json
    files: list[dict[str, Any]] = listed.json["files"]
    return files


def _download(client: FlaskClient, user: dict[str, str], url: str, path: Path) -> Path:
    got = client.get(url, headers=user)
    assert got.status_code == 200, got.data[:200]
    path.write_bytes(got.data)
    return path


def test_split_gives_a_file_per_chapter_with_its_own_tags_and_a_zip_of_them(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], tmp_path: Path
) -> None:
    job = _render(
        app,
        client,
        user,
        reference_audio[0],
        output={"format": "mp3", "split": "chapter"},
        metadata={"author": "Ann Writer"},
    )
    files = _files(client, user, job)
    kinds = [f["kind"] for f in files]
    assert kinds.count("book") == 1
    chapters = [f for f in files if f["kind"] == "chapter"]
    assert [c["title"] for c in chapters] == TITLES
    assert [c["chapter"] for c in chapters] == [0, 1, 2]
    for track, chapter in enumerate(chapters, start=1):
        path = _download(client, user, chapter["url"], tmp_path / chapter["name"])
        assert path.stat().st_size == chapter["bytes"]
        tags = mutagen.File(path, easy=True)
        assert tags is not None
        assert tags["title"] == [TITLES[track - 1]]
        assert tags["album"] == ["Harbour"] or tags["album"] == [job["title"]]
        assert tags["tracknumber"] == [f"{track}/3"]
        assert tags["artist"] == ["Ann Writer"]
        assert abs(tags.info.length - chapter["duration"]) < 0.1
    bundle = next(f for f in files if f["kind"] == "bundle")
    data = client.get(bundle["url"], headers=user).data
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.namelist() == [c["name"] for c in chapters]
        for chapter in chapters:
            assert archive.read(chapter["name"]) == (tmp_path / chapter["name"]).read_bytes()
    # the chapters together last as long as the book (joined from them: each file's encoder delay and
    # padding, at most two MP3 frames, 52 ms at 44.1 kHz, stays between the chapters)
    book = next(f for f in files if f["kind"] == "book")
    assert 0 <= book["duration"] - sum(c["duration"] for c in chapters) < 0.053 * len(chapters)


def test_subtitles_and_manifest_follow_the_stitched_audio(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], tmp_path: Path
) -> None:
    job = _render(app, client, user, reference_audio[0], output={"format": "flac"})
    files = {f["name"]: f for f in _files(client, user, job)}
    assert {"book.srt", "book.vtt", "manifest.json"} <= set(files)
    manifest = client.get(files["manifest.json"]["url"], headers=user).json
    assert [c["title"] for c in manifest["chapters"]] == TITLES
    chunks = manifest["chunks"]
    assert [c["start"] for c in chunks] == sorted(c["start"] for c in chunks)
    assert chunks[0]["start"] >= 0
    assert chunks[-1]["end"] <= job["output"]["duration"] + 1e-3
    # every chunk's start is where its audio begins in the decoded book: silence before it, sound after
    audio = _download(client, user, job["output"]["url"], tmp_path / "book.flac")
    rate = 24_000
    pcm = decode_to_pcm(audio, rate)
    for chunk in chunks[1:]:
        at = round(chunk["start"] * rate)
        before = np.abs(pcm[max(0, at - rate // 20) : at - rate // 200])
        after = np.abs(pcm[at : at + rate // 5])
        assert before.max() < 0.01, chunk
        assert after.max() > 0.05, chunk
    vtt = client.get(files["book.vtt"]["url"], headers=user)
    assert vtt.mimetype == "text/vtt"
    assert vtt.data.decode().startswith("WEBVTT")
    assert "The fog came in before dawn." in vtt.data.decode()
    srt = client.get(files["book.srt"]["url"], headers=user).data.decode()
    assert srt.startswith("1\n00:00:00,0")  # the first word, within the chunk's 20 ms lead-in
    # espeak reports its words: sentences are timed by them, not estimated, and every word lies in its
    # chunk and in its sentence, in order
    sentences = [s for c in chunks for s in c["sentences"]]
    assert sentences
    assert not any(s["estimated"] for s in sentences)
    for chunk in chunks:
        for sentence in chunk["sentences"]:
            words = sentence["words"]
            assert words
            assert chunk["start"] <= sentence["start"] == words[0]["start"]
            assert sentence["end"] == words[-1]["end"] <= chunk["end"]
            assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(words))
    fog = next(s for s in sentences if s["text"] == "The fog came in before dawn.")
    assert [w["text"] for w in fog["words"]] == ["The", "fog", "came", "in", "before", "dawn"]


def test_acx_preset_delivers_44k_mp3_chapters_with_a_report(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], tmp_path: Path
) -> None:
    job = _render(app, client, user, reference_audio[0], output={"preset": "acx"})
    assert job["output"]["preset"] == "acx"
    assert job["output"]["format"] == "mp3"
    report = client.get(job["output"]["report_url"], headers=user)
    assert report.status_code == 200
    files = _files(client, user, job)
    chapters = [f for f in files if f["kind"] == "chapter"]
    assert len(chapters) == 3
    measured = {f["name"]: f for f in report.json["files"]}
    assert set(measured) == {c["name"] for c in chapters}
    for chapter in chapters:
        path = _download(client, user, chapter["url"], tmp_path / chapter["name"])
        info = mutagen.File(path).info
        assert info.sample_rate == 44_100
        assert info.channels == 1
        assert info.bitrate_mode == mutagen.mp3.BitrateMode.CBR
        assert abs(info.bitrate - 192_000) < 1000
        pcm = decode_to_pcm(path, 44_100)
        head = pcm[: 44_100 // 2]  # room tone, neither digital silence nor speech
        head_db = 10 * np.log10(float(np.mean(head.astype(np.float64) ** 2)))
        assert -80 < head_db < -60, head_db
        peak = 20 * np.log10(np.abs(pcm).max())
        assert peak <= -2.9, (chapter["name"], peak)
        report_of = measured[chapter["name"]]
        assert report_of["passed"], [r for r in report_of["rules"] if not r["passed"]]
    assert report.json["passed"]


@pytest.mark.parametrize(
    ("output", "field"),
    [
        ({"preset": "acx", "format": "m4b"}, "output.format"),
        ({"preset": "acx", "bitrate_kbps": 128}, "output.bitrate_kbps"),
        ({"preset": "acx", "max_part_minutes": 180}, "output.max_part_minutes"),
        ({"preset": "acx", "loudness": None}, "output.loudness"),
        ({"preset": "audible"}, "output.preset"),
        ({"split": "page"}, "output.split"),
        ({"loudness": {"target_lufs": -3}}, "output.loudness.target_lufs"),
        ({"loudness": {"true_peak_db": 3}}, "output.loudness.true_peak_db"),
    ],
)
def test_output_requests_that_cannot_be_honoured_are_422_naming_the_field(
    client: FlaskClient,
    user: dict[str, str],
    reference_audio: tuple[bytes, str],
    output: dict[str, Any],
    field: str,
) -> None:
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    answer = submit_job(client, user, "narrator", script=BOOK, script_format="markdown", output=output)
    assert answer.status_code == 422, answer.json
    assert answer.json["error"]["field"] == field, answer.json


def test_a_split_on_a_script_without_chapters_is_422(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    answer = submit_job(client, user, "narrator", script="Just one line.", output={"split": "chapter"})
    assert answer.status_code == 422
    assert answer.json["error"]["field"] == "output.split"
    assert "no chapters" in answer.json["error"]["message"]


def _png(width: int = 4, height: int = 3) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80\x20\x10" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_a_cover_sent_with_the_job_is_inside_the_book_and_the_chapter_files(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], tmp_path: Path
) -> None:
    cover = _png()
    job = _render(
        app,
        client,
        user,
        reference_audio[0],
        files={"cover": (cover, "cover.png")},
        output={"format": "m4b", "split": "chapter"},
    )
    book = _download(client, user, job["output"]["url"], tmp_path / "book.m4b")
    covers = mutagen.File(book).tags["covr"]
    assert bytes(covers[0]) == cover
    chapter = next(f for f in _files(client, user, job) if f["kind"] == "chapter")
    first = _download(client, user, chapter["url"], tmp_path / chapter["name"])
    assert bytes(mutagen.File(first).tags["covr"][0]) == cover


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        (b"GIF89a not a cover", 422, "cover_not_image"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, 422, "cover_undecodable"),
        (b"\xff\xd8\xff" + b"\x00" * (6 * 1024 * 1024), 413, "cover_too_large"),
    ],
)
def test_a_bad_cover_is_refused_naming_it(
    client: FlaskClient,
    user: dict[str, str],
    reference_audio: tuple[bytes, str],
    data: bytes,
    status: int,
    code: str,
) -> None:
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    form = {
        "job": json.dumps({"voice": "narrator", "title": "T"}),
        "script": (io.BytesIO(b"Hello there."), "a.txt"),
        "cover": (io.BytesIO(data), "cover.png"),
    }
    answer = client.post("/v1/jobs", data=form, headers=user, content_type="multipart/form-data")
    assert answer.status_code == status, answer.json
    assert answer.json["error"]["field"] == "cover"
    assert answer.json["error"]["code"] == code


def test_files_belong_to_their_owner_and_names_are_not_paths(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    other_user: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    job = _render(app, client, user, reference_audio[0], output={"format": "mp3", "split": "chapter"})
    files = _files(client, user, job)
    chapter = next(f for f in files if f["kind"] == "chapter")
    assert client.get(job["output"]["files_url"], headers=other_user).status_code == 404
    assert client.get(chapter["url"], headers=other_user).status_code == 404
    base = job["output"]["files_url"]
    for name in ("..%2F..%2Ftome.db", "../output.mp3", "%2Fetc%2Fpasswd", "chapter-001.wav", "x" * 300):
        answer = client.get(f"{base}/{name}", headers=user)
        assert answer.status_code == 404, (name, answer.status_code)
    ranged = client.get(chapter["url"], headers={**user, "Range": "bytes=0-99"})
    assert ranged.status_code == 206
    assert len(ranged.data) == 100


def test_files_are_a_409_until_the_job_succeeds(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    job = submit_job(client, user, "narrator", script=BOOK, script_format="markdown")
    answer = client.get(f"/v1/jobs/{job.json['id']}/files", headers=user)
    assert answer.status_code == 409
    assert answer.json["error"]["code"] == "not_ready"
    assert job.json["output"]["files_url"] is None


def test_a_cover_counts_against_storage_from_submission(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    before = client.get("/v1/usage", headers=user).json["stored_bytes"]["used"]
    cover = _png(64, 64)
    form = {
        "job": json.dumps({"voice": "narrator", "title": "T"}),
        "script": (io.BytesIO(b"Hello there."), "a.txt"),
        "cover": (io.BytesIO(cover), "cover.png"),
    }
    answer = client.post("/v1/jobs", data=form, headers=user, content_type="multipart/form-data")
    assert answer.status_code == 202, answer.json
    after = client.get("/v1/usage", headers=user).json["stored_bytes"]["used"]
    assert after - before == len(cover)


def test_a_range_past_the_end_is_416_with_the_length_in_content_range(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    """RFC 9110: a 416 says how long the file is (``Content-Range: bytes */LENGTH``), so that a client
    resuming a download past its end learns where the end is; the body is the API's JSON error."""
    job = _render(app, client, user, reference_audio[0], script="The sea was calm.", output={"format": "wav"})
    urls = [
        job["output"]["url"],
        next(f["url"] for f in _files(client, user, job) if f["kind"] == "subtitles"),
        f"/v1/jobs/{job['id']}/chunks/0/audio",
    ]
    for url in urls:
        whole = client.get(url, headers=user)
        assert whole.status_code == 200, url
        length = len(whole.data)
        for wanted in (f"bytes={length}-", f"bytes={length + 1000}-{length + 2000}"):
            answer = client.get(url, headers={**user, "Range": wanted})
            assert answer.status_code == 416, (url, wanted)
            assert answer.headers["Content-Range"] == f"bytes */{length}", url
            assert answer.json["error"]["code"] == "requested_range_not_satisfiable"
        last = client.get(url, headers={**user, "Range": f"bytes={length - 1}-"})
        assert last.status_code == 206
        assert last.headers["Content-Range"] == f"bytes {length - 1}-{length - 1}/{length}"
