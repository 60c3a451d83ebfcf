"""The format table and the ffmpeg command: names, file kinds, and no user text on the command line."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from worker.audio import FORMATS, OUTPUT_FORMATS, BookTags, FfmpegEncoder, PieceLength, plan_chapters
from worker.audio.ffmpeg import encoder_command
from worker.audio.formats import check_format, codec_args


def test_table() -> None:
    assert OUTPUT_FORMATS == ("wav", "mp3", "flac", "ogg", "m4a", "m4b")
    assert set(FORMATS) == set(OUTPUT_FORMATS)
    assert {f: (i.extension, i.mime_type) for f, i in FORMATS.items()} == {
        "wav": (".wav", "audio/wav"),
        "mp3": (".mp3", "audio/mpeg"),
        "flac": (".flac", "audio/flac"),
        "ogg": (".opus", "audio/ogg"),
        "m4a": (".m4a", "audio/mp4"),
        "m4b": (".m4b", "audio/mp4"),
    }
    assert {f: i.max_chapters for f, i in FORMATS.items()} == {
        "wav": None,
        "mp3": 255,
        "flac": 999,
        "ogg": 999,
        "m4a": None,
        "m4b": None,
    }
    assert [f for f, i in FORMATS.items() if not i.cover] == ["wav"]
    assert [f for f, i in FORMATS.items() if i.lossless] == ["wav", "flac"]


@pytest.mark.parametrize("name", ["aac", "MP3", "", "ogg ", "opus", "m4b\n"])
def test_unknown_format_names(name: str) -> None:
    with pytest.raises(ValueError, match="unknown output format"):
        check_format(name)


def test_codec_choices() -> None:
    assert "libmp3lame" in codec_args("mp3", 22_050, 64)
    assert codec_args("ogg", 22_050, 320)[:4] == ["-c:a", "libopus", "-b:a", "256k"]
    assert "-ar" in codec_args("ogg", 22_050, 64)
    assert "-ar" not in codec_args("ogg", 24_000, 64)
    assert codec_args("m4b", 22_050, 64)[-4:] == ["-brand", "M4B ", "-f", "mp4"]
    assert "-brand" not in codec_args("m4a", 22_050, 64)


def test_command_holds_only_paths_numbers_and_constants() -> None:
    cmd = encoder_command("/data/out.tmp", "m4b", 22_050, 64, "/data/meta.tmp")
    assert cmd[cmd.index("-i") - 2 : cmd.index("-i") + 2] == ["-f", "ffmetadata", "-i", "/data/meta.tmp"]
    assert cmd[-1] == "/data/out.tmp"
    assert cmd.count("-i") == 2
    assert cmd[cmd.index("-map_chapters") + 1] == "0"
    plain = encoder_command("/data/out.tmp", "flac", 22_050, 64)
    assert plain[plain.index("-map_metadata") + 1] == "-1"
    assert plain.count("-i") == 1
    vorbis = encoder_command("/data/out.tmp", "ogg", 22_050, 64, "/data/meta.tmp")
    assert vorbis[vorbis.index("-map_chapters") + 1] == "-1"  # Tome writes the chapter comments itself
    assert "0:g" in vorbis


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
def test_user_text_never_reaches_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    evil = "-i /etc/passwd -map 0 -f data"
    seen: list[list[str]] = []
    real_popen = subprocess.Popen

    def spy(cmd: list[str], **kwargs: Any) -> Any:
        seen.append(list(cmd))
        return real_popen(cmd, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    chapters = plan_chapters([PieceLength(100, "none", 0)], 22_050, titles={0: evil}).chapters
    tags = BookTags(title=evil, author=evil, narrator=evil, publisher=evil, description=evil)
    with FfmpegEncoder(tmp_path / "out", fmt, 22_050, tags=tags, chapters=chapters) as enc:  # type: ignore[arg-type]
        enc.write(np.zeros(100, np.float32))
    (cmd,) = seen
    assert not [arg for arg in cmd if "passwd" in arg or arg == "data"]
    assert cmd.count("-i") == 2
