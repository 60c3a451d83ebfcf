"""The ffmpeg helpers: streaming encoder and decode_to_pcm, against the bundled binary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import worker.audio
from worker.audio import (
    AudioError,
    BookTags,
    FfmpegEncoder,
    PieceLength,
    StitchError,
    decode_to_pcm,
    ffmpeg_exe,
    plan_chapters,
)

SR = 24_000


def test_ffmpeg_is_the_bundled_binary() -> None:
    exe = ffmpeg_exe()
    assert os.access(exe, os.X_OK)
    version = subprocess.run([exe, "-hide_banner", "-encoders"], capture_output=True, check=True, text=True)
    for encoder in ("libmp3lame", "flac", "pcm_s16le", "libopus", "aac"):
        assert encoder in version.stdout
    muxers = subprocess.run([exe, "-hide_banner", "-muxers"], capture_output=True, check=True, text=True)
    for muxer in ("mp3", "flac", "wav", "ogg", "mp4", "ffmetadata"):
        assert f" {muxer} " in muxers.stdout


def test_encoder_metadata_files_live_while_ffmpeg_runs(tmp_path: Path) -> None:
    chapters = plan_chapters([PieceLength(SR, "none", 0)], SR).chapters
    out = tmp_path / "out.m4b"
    with FfmpegEncoder(out, "m4b", SR, tags=BookTags(title="t"), chapters=chapters) as enc:
        hidden = [name for name in os.listdir(tmp_path) if name.startswith(".out.m4b.")]
        assert len(hidden) == 1
        assert (tmp_path / hidden[0]).stat().st_mode & 0o777 == 0o600
        enc.write(np.zeros(SR, np.float32))
    assert os.listdir(tmp_path) == ["out.m4b"]

    def fail_while_encoding() -> None:
        with FfmpegEncoder(tmp_path / "x.mp3", "mp3", SR, tags=BookTags(title="t"), chapters=chapters):
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail_while_encoding()
    assert sorted(os.listdir(tmp_path)) in (["out.m4b"], ["out.m4b", "x.mp3"])  # partial output: caller's


def test_encoder_accepts_float_and_int16(tmp_path: Path) -> None:
    out = tmp_path / "out.wav"
    x = np.linspace(-1.0, 1.0, 1000, dtype=np.float32)
    pcm = np.arange(-500, 500, dtype=np.int16)
    with FfmpegEncoder(out, "wav", SR) as enc:
        enc.write(x)
        enc.write(pcm)
        enc.write_silence(100_000)
        assert enc.samples_written == 102_000
    data, rate = sf.read(str(out), dtype="int16")
    assert rate == SR
    assert data.size == 102_000
    assert data[0] == -32768
    assert data[999] == 32767
    np.testing.assert_array_equal(data[1000:2000], pcm)
    assert not data[2000:].any()


def test_encoder_exception_in_body_kills_ffmpeg(tmp_path: Path) -> None:
    out = tmp_path / "out.mp3"
    enc = FfmpegEncoder(out, "mp3", SR)

    def fail_while_encoding() -> None:
        with enc:
            enc.write(np.zeros(SR, np.float32))
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail_while_encoding()
    assert enc._proc.returncode is not None
    with pytest.raises(StitchError, match="closed"):
        enc.write(np.zeros(10, np.float32))
    enc.close()  # idempotent after abort


def test_encoder_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format"):
        FfmpegEncoder(tmp_path / "x", "aac", SR)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bitrate"):
        FfmpegEncoder(tmp_path / "x", "mp3", SR, bitrate_kbps=1000)
    with FfmpegEncoder(tmp_path / "x.wav", "wav", SR) as enc, pytest.raises(ValueError, match="1-D"):
        enc.write(np.zeros((4, 2), np.float32))


def test_decode_to_pcm_resamples_and_downmixes(tmp_path: Path) -> None:
    t = np.arange(2 * SR) / SR
    x = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    path = tmp_path / "s.flac"
    sf.write(path, np.stack([x, x], axis=1), SR)
    y = decode_to_pcm(path, 16_000)
    assert y.dtype == np.float32
    assert y.size == 32_000
    peak_hz = np.fft.rfftfreq(y.size, 1 / 16_000)[np.argmax(np.abs(np.fft.rfft(y)))]
    assert peak_hz == pytest.approx(440, abs=1)
    assert float(np.max(np.abs(y))) == pytest.approx(0.5, abs=0.02)


def test_decode_to_pcm_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        decode_to_pcm(tmp_path / "missing.mp3", SR)
    junk = tmp_path / "junk.mp3"
    junk.write_bytes(b"\x00not audio at all" * 10)
    with pytest.raises(AudioError) as info:
        decode_to_pcm(junk, SR)
    assert info.value.code == "audio_undecodable"


def test_package_imports_neither_flask_nor_celery() -> None:
    code = (
        "import sys, worker.audio; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'flask', 'celery'}); "
        "assert not bad, bad"
    )
    root = Path(worker.audio.__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
