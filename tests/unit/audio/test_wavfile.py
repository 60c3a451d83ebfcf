"""write_wav_atomic / read_wav round trips and failure cleanup."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from worker.audio import AudioError, read_wav, write_wav_atomic

SR = 24_000


def tone(seconds: float = 1.0, hz: float = 440.0) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def test_round_trip(tmp_path: Path) -> None:
    x = tone(1.3)
    path = tmp_path / "chunk.wav"

    size = write_wav_atomic(path, x, SR)

    assert size == path.stat().st_size == 44 + 2 * x.size
    info = sf.info(str(path))
    assert (info.format, info.subtype, info.channels, info.samplerate) == ("WAV", "PCM_16", 1, SR)
    y, rate = read_wav(path)
    assert rate == SR
    assert y.dtype == np.float32
    assert y.shape == x.shape
    np.testing.assert_allclose(y, x, atol=1.0 / 32768)
    assert os.listdir(tmp_path) == ["chunk.wav"]


def test_round_trip_is_lossless_for_pcm16_values(tmp_path: Path) -> None:
    x = tone(0.2)
    write_wav_atomic(tmp_path / "a.wav", x, SR)
    y, _ = read_wav(tmp_path / "a.wav")
    write_wav_atomic(tmp_path / "b.wav", y, SR)
    assert (tmp_path / "a.wav").read_bytes() == (tmp_path / "b.wav").read_bytes()


def test_clips_out_of_range_and_nan(tmp_path: Path) -> None:
    x = np.array([0.0, 2.0, -2.0, 1.0, -1.0, np.nan, np.inf, -np.inf], dtype=np.float32)
    write_wav_atomic(tmp_path / "c.wav", x, SR)
    pcm, _ = sf.read(str(tmp_path / "c.wav"), dtype="int16")
    assert pcm.tolist() == [0, 32767, -32768, 32767, -32768, 0, 32767, -32768]


def test_accepts_float64_and_empty(tmp_path: Path) -> None:
    write_wav_atomic(tmp_path / "d.wav", tone(0.1).astype(np.float64), SR)
    assert read_wav(tmp_path / "d.wav")[0].size == 2400
    assert write_wav_atomic(tmp_path / "e.wav", np.zeros(0, dtype=np.float32), SR) == 44


def test_replaces_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "chunk.wav"
    write_wav_atomic(path, tone(1.0), SR)
    write_wav_atomic(path, tone(0.5), SR)
    assert read_wav(path)[0].size == SR // 2
    assert os.listdir(tmp_path) == ["chunk.wav"]


def test_unique_temp_names_and_private_permissions(tmp_path: Path) -> None:
    for i in range(5):
        write_wav_atomic(tmp_path / f"c{i}.wav", tone(0.05), SR)
    assert sorted(os.listdir(tmp_path)) == [f"c{i}.wav" for i in range(5)]
    assert (tmp_path / "c0.wav").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("samples", "error"),
    [
        (np.zeros((100, 2), dtype=np.float32), ValueError),
        (np.zeros(100, dtype=np.int16), TypeError),
        (np.array(["a", "b"]), TypeError),
    ],
)
def test_invalid_array_leaves_no_file(tmp_path: Path, samples: np.ndarray, error: type[Exception]) -> None:
    path = tmp_path / "bad.wav"
    with pytest.raises(error):
        write_wav_atomic(path, samples, SR)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("rate", [0, -1, 24000.5])
def test_invalid_sample_rate(tmp_path: Path, rate: float) -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        write_wav_atomic(tmp_path / "x.wav", tone(0.1), rate)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_failure_after_data_is_written_removes_temp_and_keeps_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "chunk.wav"
    write_wav_atomic(path, tone(0.5), SR)
    before = path.read_bytes()
    seen: list[str] = []

    def failing_fsync(fd: int) -> None:
        # Fault injection: the disk fails when the fully written temp file is synced.
        seen.extend(name for name in os.listdir(tmp_path) if name != "chunk.wav")
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output"):
        write_wav_atomic(path, tone(2.0), SR)

    assert len(seen) == 1
    assert seen[0].startswith(".chunk.wav.")
    assert seen[0].endswith(".tmp")
    assert os.listdir(tmp_path) == ["chunk.wav"]
    assert path.read_bytes() == before


def test_missing_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_wav_atomic(tmp_path / "nope" / "x.wav", tone(0.1), SR)


def test_read_wav_downmixes(tmp_path: Path) -> None:
    x = tone(0.5)
    sf.write(tmp_path / "s.wav", np.stack([x, np.zeros_like(x)], axis=1), SR, subtype="FLOAT")
    y, rate = read_wav(tmp_path / "s.wav")
    assert rate == SR
    np.testing.assert_allclose(y, x / 2, atol=1e-7)


def test_read_wav_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_wav(tmp_path / "missing.wav")
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    with pytest.raises(AudioError) as info:
        read_wav(bad)
    assert info.value.code == "audio_undecodable"
