"""decode_reference against real files written with libsndfile and the bundled ffmpeg."""

from __future__ import annotations

import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf

from worker.audio import AudioError, AudioLimits, FfmpegEncoder, decode_reference, ffmpeg_exe

SR = 24_000
DEFAULT_LIMITS = AudioLimits()


def voice_like(seconds: float, sample_rate: int = SR, f0: float = 220.0) -> npt.NDArray[np.float32]:
    """A sine with a few harmonics and a slow amplitude envelope, peak about 0.5."""
    t = np.arange(round(seconds * sample_rate)) / sample_rate
    x = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in (1, 2, 3, 4))
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 1.5 * t)
    return (0.3 * envelope * x).astype(np.float32)


def dominant_hz(x: npt.NDArray[np.float32], sample_rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.fft.rfftfreq(x.size, 1.0 / sample_rate)[int(np.argmax(spectrum))])


def write_mp3(path: Path, x: npt.NDArray[np.float32], sample_rate: int) -> None:
    with FfmpegEncoder(path, "mp3", sample_rate, bitrate_kbps=96) as enc:
        enc.write(x)


def crafted_wav(channels: int, sample_rate: int, data_size: int, payload: bytes) -> bytes:
    """A PCM-16 RIFF/WAVE file whose header says whatever we like."""
    block_align = (channels * 2) & 0xFFFF
    fmt = struct.pack(
        "<HHIIHH", 1, channels, sample_rate, (sample_rate * channels * 2) & 0xFFFFFFFF, block_align, 16
    )
    riff_size = min(0xFFFFFFFF, 4 + 8 + len(fmt) + 8 + data_size)
    return (
        b"RIFF"
        + struct.pack("<I", riff_size)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", data_size)
        + payload
    )


def assert_refused(path: Path, code: str | set[str], limits: AudioLimits = DEFAULT_LIMITS) -> AudioError:
    with pytest.raises(AudioError) as info:
        decode_reference(path, limits)
    codes = {code} if isinstance(code, str) else code
    assert info.value.code in codes, info.value
    assert info.value.message
    assert isinstance(info.value, ValueError)
    return info.value


@pytest.mark.parametrize(
    ("name", "write_kwargs", "fmt", "sample_rate", "tolerance"),
    [
        ("ref.wav", {"subtype": "PCM_16"}, "WAV", 24_000, 0.0),
        ("ref24.wav", {"subtype": "PCM_24"}, "WAV", 44_100, 0.0),
        ("ref.flac", {}, "FLAC", 44_100, 0.0),
        ("ref.ogg", {"format": "OGG", "subtype": "VORBIS"}, "OGG", 22_050, 0.0),
        ("ref.opus", {"format": "OGG", "subtype": "OPUS"}, "OGG", 48_000, 0.0),
        ("ref.mp3", None, "MP3", 24_000, 0.1),
    ],
)
def test_decodes_valid_references(
    tmp_path: Path,
    name: str,
    write_kwargs: dict[str, str] | None,
    fmt: str,
    sample_rate: int,
    tolerance: float,
) -> None:
    x = voice_like(3.0, sample_rate)
    path = tmp_path / name
    if write_kwargs is None:
        write_mp3(path, x, sample_rate)
    else:
        sf.write(path, x, sample_rate, **write_kwargs)

    audio = decode_reference(path)

    assert audio.format == fmt
    assert audio.sample_rate == sample_rate
    assert audio.samples.dtype == np.float32
    assert audio.samples.ndim == 1
    assert audio.duration == pytest.approx(audio.samples.size / sample_rate)
    assert audio.duration == pytest.approx(3.0, abs=tolerance + 1e-9)
    assert float(np.max(np.abs(audio.samples))) <= 1.0
    assert dominant_hz(audio.samples, sample_rate) == pytest.approx(220.0, abs=3.0)


def test_stereo_is_downmixed_by_averaging(tmp_path: Path) -> None:
    left = voice_like(2.0)
    right = voice_like(2.0, f0=330.0)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, right], axis=1), SR, subtype="FLOAT")

    audio = decode_reference(path)

    assert audio.samples.shape == (2 * SR,)
    np.testing.assert_allclose(audio.samples, (left + right) / 2, atol=1e-6)


def test_refuses_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    path.write_bytes(b"")
    assert_refused(path, "audio_empty")


def test_refuses_random_bytes(tmp_path: Path) -> None:
    path = tmp_path / "noise.wav"
    path.write_bytes(np.random.default_rng(1).bytes(10_000))
    assert_refused(path, "audio_undecodable")


def test_refuses_file_over_max_bytes(tmp_path: Path) -> None:
    path = tmp_path / "ref.wav"
    sf.write(path, voice_like(2.0), SR)
    assert_refused(path, "audio_too_large", AudioLimits(max_bytes=50_000))


def test_header_claiming_2_to_31_frames_is_refused_quickly(tmp_path: Path) -> None:
    payload = (voice_like(0.25) * 32767).astype("<i2").tobytes()
    path = tmp_path / "liar.wav"
    path.write_bytes(crafted_wav(1, SR, 0xFFFFFFF0, payload))

    start = time.perf_counter()
    # libsndfile clamps the data size to the file, so only the few real frames are ever read.
    assert_refused(path, {"audio_too_short", "audio_too_long", "audio_undecodable"})
    assert time.perf_counter() - start < 1.0


def test_flac_header_claiming_huge_length_is_refused_before_decoding(tmp_path: Path) -> None:
    path = tmp_path / "liar.flac"
    sf.write(path, voice_like(2.0), SR)
    data = bytearray(path.read_bytes())
    assert data[:4] == b"fLaC"
    # STREAMINFO starts at byte 8; its bytes 10..17 end with the 36-bit total sample count.
    packed = int.from_bytes(data[18:26], "big")
    data[18:26] = (packed | (2**36 - 1)).to_bytes(8, "big")
    path.write_bytes(bytes(data))

    start = time.perf_counter()
    error = assert_refused(path, "audio_too_long")
    assert time.perf_counter() - start < 1.0
    assert "120" in error.message


def test_header_with_65535_channels_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "channels.wav"
    path.write_bytes(crafted_wav(65535, SR, 65535 * 2 * 4, bytes(65535 * 2 * 4)))
    start = time.perf_counter()
    assert_refused(path, {"audio_bad_format", "audio_undecodable"})
    assert time.perf_counter() - start < 1.0


def test_more_channels_than_the_limit_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "many.wav"
    sf.write(path, np.tile(voice_like(1.5)[:, None], (1, 12)), SR, subtype="PCM_16")
    error = assert_refused(path, "audio_bad_format")
    assert "12 channels" in error.message
    assert "8" in error.message


def test_too_high_sample_rate_is_refused(tmp_path: Path) -> None:
    payload = (voice_like(0.1) * 32767).astype("<i2").tobytes()
    path = tmp_path / "rate.wav"
    path.write_bytes(crafted_wav(1, 2**31 - 1, len(payload), payload))
    assert_refused(path, "audio_bad_format")


def test_too_long_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "long.flac"
    sf.write(path, voice_like(121.0, 8000), 8000)
    error = assert_refused(path, "audio_too_long")
    assert "120" in error.message


def test_too_long_with_smaller_limits(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    sf.write(path, voice_like(3.0), SR)
    assert_refused(path, "audio_too_long", AudioLimits(max_seconds=2.5))
    assert decode_reference(path, AudioLimits(max_seconds=3.0)).duration == pytest.approx(3.0)


def test_mp3_length_estimate_is_not_trusted(tmp_path: Path) -> None:
    # VBR without a Xing header: libsndfile estimates the length from the first frame's bitrate, and a
    # near-silent start (low bitrate) makes it claim about twice the real length.
    rng = np.random.default_rng(7)
    x = np.concatenate([1e-4 * rng.standard_normal(5 * SR), 0.3 * rng.standard_normal(5 * SR)]).astype(
        np.float32
    )
    wav = tmp_path / "src.wav"
    sf.write(wav, x, SR)
    path = tmp_path / "vbr.mp3"
    cmd = [ffmpeg_exe(), "-loglevel", "error", "-y", "-i", str(wav), "-c:a", "libmp3lame", "-q:a", "9"]
    subprocess.run([*cmd, "-write_xing", "0", str(path)], check=True)
    assert sf.info(str(path)).frames / SR > 15.0

    audio = decode_reference(path, AudioLimits(max_seconds=15.0))
    assert audio.duration == pytest.approx(10.0, abs=0.1)
    assert_refused(path, "audio_too_long", AudioLimits(max_seconds=8.0))


def test_refuses_silence(tmp_path: Path) -> None:
    path = tmp_path / "silence.wav"
    sf.write(path, np.zeros(3 * SR, dtype=np.float32), SR)
    assert_refused(path, "audio_empty")


def test_refuses_near_silence_below_60_dbfs(tmp_path: Path) -> None:
    path = tmp_path / "hiss.wav"
    x = voice_like(3.0)
    sf.write(path, x / np.max(np.abs(x)) * 10 ** (-65 / 20), SR, subtype="FLOAT")
    assert_refused(path, "audio_empty")


def test_refuses_too_short(tmp_path: Path) -> None:
    path = tmp_path / "short.wav"
    sf.write(path, voice_like(0.5), SR)
    error = assert_refused(path, "audio_too_short")
    assert "1 seconds" in error.message


def test_refuses_header_only_wav(tmp_path: Path) -> None:
    path = tmp_path / "nodata.wav"
    path.write_bytes(crafted_wav(1, SR, 0, b""))
    assert_refused(path, {"audio_empty", "audio_undecodable"})


def test_refuses_nan_samples(tmp_path: Path) -> None:
    path = tmp_path / "nan.wav"
    x = voice_like(2.0)
    x[100] = np.nan
    sf.write(path, x, SR, subtype="FLOAT")
    assert_refused(path, "audio_bad_format")


def test_refuses_format_not_in_the_allowed_list(tmp_path: Path) -> None:
    path = tmp_path / "ref.au"
    sf.write(path, voice_like(2.0), SR, format="AU")
    assert_refused(path, "audio_bad_format")


@pytest.mark.parametrize("name", ["ref.wav", "ref.flac", "ref.ogg", "ref.mp3"])
def test_truncated_and_corrupted_files_raise_only_audio_error(tmp_path: Path, name: str) -> None:
    source = tmp_path / name
    x = voice_like(2.0)
    if name.endswith(".mp3"):
        write_mp3(source, x, SR)
    else:
        sf.write(source, x, SR)
    data = source.read_bytes()
    rng = np.random.default_rng(3)
    variants = [data[:n] for n in (4, 12, 40, 100, len(data) // 2)]
    for _ in range(10):
        damaged = bytearray(data)
        for pos in rng.integers(0, len(data), size=20):
            damaged[int(pos)] = int(rng.integers(0, 256))
        variants.append(bytes(damaged))
    for i, variant in enumerate(variants):
        path = tmp_path / f"v{i}_{name}"
        path.write_bytes(variant)
        try:
            audio = decode_reference(path)
        except AudioError:
            continue
        assert audio.samples.dtype == np.float32
        assert np.isfinite(audio.samples).all()
        assert float(np.max(np.abs(audio.samples))) <= 1.0


def test_missing_file_is_not_an_audio_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        decode_reference(tmp_path / "nope.wav")
