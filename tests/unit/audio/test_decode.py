"""decode_reference against real files written with libsndfile and the bundled ffmpeg."""

from __future__ import annotations

import os
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf

from worker.audio import AudioError, AudioLimits, FfmpegEncoder, decode_reference, ffmpeg_exe
from worker.audio.transcode import MP4, WEBM, sniff_container, transcode_to_wav

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


# --- MP4/M4A and WebM/Matroska, decoded through the bundled ffmpeg -----------------------------------


def chirp_voice(seconds: float, sample_rate: int) -> npt.NDArray[np.float32]:
    """Harmonics of a pitch that glides 150 -> 400 Hz, under a syllable-rate envelope: no two stretches
    are alike, so a good correlation at lag ~0 means the decoder returned this signal, in place."""
    t = np.arange(round(seconds * sample_rate)) / sample_rate
    f0 = 150.0 + 250.0 * t / seconds
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    x = sum(np.sin(k * phase) / k for k in (1, 2, 3, 4, 5))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 3.0 * t)
    return (0.25 * envelope * x).astype(np.float32)


def best_alignment(
    decoded: npt.NDArray[np.float32], source: npt.NDArray[np.float32], max_lag: int = 480
) -> tuple[float, int]:
    """(Pearson correlation, lag in samples) of ``decoded`` against ``source`` at the best lag within
    +-``max_lag`` samples, on their common length."""
    best = (-1.0, 0)
    for lag in range(-max_lag, max_lag + 1):
        a = decoded[max(0, lag) :]
        b = source[max(0, -lag) :]
        n = min(a.size, b.size)
        r = float(np.corrcoef(a[:n], b[:n])[0, 1])
        best = max(best, (r, lag))
    return best


def ffmpeg_encode(src: Path, dst: Path, *args: str) -> None:
    """Encode ``src`` (or lavfi inputs, given in ``args``) into ``dst`` with the bundled ffmpeg."""
    inputs = ["-i", str(src)] if src.name else []
    cmd = [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-nostdin", "-y", *inputs, *args, str(dst)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def encoded(tmp_path: Path, name: str, x: npt.NDArray[np.float32], sample_rate: int, *args: str) -> Path:
    source = tmp_path / f"{name}.source.wav"
    sf.write(source, x, sample_rate, subtype="FLOAT")
    path = tmp_path / name
    ffmpeg_encode(source, path, *args)
    return path


M4A_AAC = ("-c:a", "aac", "-b:a", "128k", "-f", "mp4")
WEBM_OPUS = ("-c:a", "libopus", "-b:a", "64k", "-f", "webm")


@pytest.mark.parametrize(
    ("name", "args", "sample_rate", "fmt", "min_correlation"),
    [
        ("memo.m4a", M4A_AAC, 44_100, "MP4", 0.995),
        ("memo-faststart.m4a", (*M4A_AAC[:-2], "-movflags", "+faststart", "-f", "mp4"), 44_100, "MP4", 0.995),
        ("lossless.m4a", ("-c:a", "alac", "-f", "mp4"), 24_000, "MP4", 0.9999),
        ("browser.webm", WEBM_OPUS, 48_000, "WEBM", 0.995),
        ("browser-vorbis.webm", ("-c:a", "libvorbis", "-q:a", "5", "-f", "webm"), 44_100, "WEBM", 0.995),
        ("chrome-pcm.mkv", ("-c:a", "pcm_f32le", "-f", "matroska"), 48_000, "WEBM", 0.9999),
    ],
)
def test_decodes_mp4_and_webm_references(
    tmp_path: Path,
    name: str,
    args: tuple[str, ...],
    sample_rate: int,
    fmt: str,
    min_correlation: float,
) -> None:
    x = chirp_voice(4.0, sample_rate)
    path = encoded(tmp_path, name, x, sample_rate, *args)

    audio = decode_reference(path)

    assert audio.format == fmt
    assert audio.sample_rate == sample_rate
    assert audio.samples.dtype == np.float32
    assert audio.duration == pytest.approx(audio.samples.size / sample_rate)
    assert audio.duration == pytest.approx(4.0, abs=0.025)
    r, lag = best_alignment(audio.samples, x)
    assert r >= min_correlation, (r, lag)
    assert abs(lag) <= sample_rate // 1000  # encoder delay and priming are removed: in place within 1 ms
    assert not list(tmp_path.glob(".decode-*")), "the intermediate WAV is removed"


def test_container_is_sniffed_never_taken_from_the_name(tmp_path: Path) -> None:
    x = chirp_voice(2.0, 44_100)
    m4a = encoded(tmp_path, "memo.m4a", x, 44_100, *M4A_AAC)
    disguised = tmp_path / "voice.mp3"
    disguised.write_bytes(m4a.read_bytes())
    assert decode_reference(disguised).format == "MP4"

    flac = tmp_path / "flac.webm"  # a FLAC named like a WebM goes to libsndfile
    sf.write(flac, x, 44_100, format="FLAC")
    assert decode_reference(flac).format == "FLAC"

    # A name that looks like an ffmpeg option or protocol is only ever passed as an absolute path.
    odd = tmp_path / "-i concat:a.m4a"
    odd.write_bytes(m4a.read_bytes())
    assert decode_reference(odd).duration == pytest.approx(2.0, abs=0.025)


def test_stereo_m4a_is_downmixed(tmp_path: Path) -> None:
    left, right = chirp_voice(2.0, 44_100), voice_like(2.0, 44_100, f0=330.0)
    source = tmp_path / "stereo.wav"
    sf.write(source, np.stack([left, right], axis=1), 44_100, subtype="FLOAT")
    path = tmp_path / "stereo.m4a"
    ffmpeg_encode(source, path, *M4A_AAC)

    audio = decode_reference(path)

    r, _ = best_alignment(audio.samples, ((left + right) / 2).astype(np.float32))
    assert r > 0.99


def test_phone_video_uses_its_audio_track(tmp_path: Path) -> None:
    x = chirp_voice(3.0, 44_100)
    source = tmp_path / "a.wav"
    sf.write(source, x, 44_100, subtype="FLOAT")
    path = tmp_path / "clip.mp4"
    video = ("-f", "lavfi", "-i", "testsrc=d=3:s=64x48:r=10", "-map", "1:v", "-map", "0:a")
    ffmpeg_encode(source, path, *video, "-c:v", "libx264", *M4A_AAC)

    audio = decode_reference(path)

    assert audio.format == "MP4"
    assert best_alignment(audio.samples, x)[0] > 0.99


def test_long_m4a_is_refused_after_decoding_one_second_past_the_limit(tmp_path: Path) -> None:
    path = encoded(tmp_path, "long.m4a", voice_like(125.0, 16_000), 16_000, *M4A_AAC)
    error = assert_refused(path, "audio_too_long")
    assert "120" in error.message
    assert decode_reference(path, AudioLimits(max_seconds=126.0)).duration == pytest.approx(125.0, abs=0.03)


def test_ffmpeg_stops_decoding_at_the_limit(tmp_path: Path) -> None:
    path = encoded(tmp_path, "long.webm", voice_like(60.0, 48_000), 48_000, *WEBM_OPUS)
    wav = tmp_path / "out.wav"

    transcode_to_wav(str(path), str(wav), WEBM, 3.0, 10**8, 30.0)

    info = sf.info(str(wav))
    assert info.frames / info.samplerate == pytest.approx(3.0, abs=0.025)
    assert_refused(path, "audio_too_long", AudioLimits(max_seconds=10.0))


def test_ffmpeg_output_is_capped_in_bytes(tmp_path: Path) -> None:
    x = np.tile(chirp_voice(3.0, 48_000)[:, None], (1, 12))
    source = tmp_path / "many.wav"
    sf.write(source, x, 48_000, subtype="PCM_16")
    path = tmp_path / "many.mkv"
    ffmpeg_encode(source, path, "-c:a", "pcm_s16le", "-f", "matroska")
    wav = tmp_path / "out.wav"

    transcode_to_wav(str(path), str(wav), WEBM, 10.0, 200_000, 30.0)

    # ffmpeg stops at the first packet past the cap: far short of the 3.5 MB the whole file would make.
    assert 200_000 <= wav.stat().st_size <= 200_000 + 12 * 48_000 * 2 // 5
    # Through decode_reference the cap is what 8 channels at the limits would need: the 12-channel WAV
    # is cut there, and its header is refused as it would be for a 12-channel WAV upload.
    error = assert_refused(path, "audio_bad_format")
    assert "12 channels" in error.message


def test_mp4_without_audio_is_refused(tmp_path: Path) -> None:
    video_only = tmp_path / "video.mp4"
    ffmpeg_encode(Path(), video_only, "-f", "lavfi", "-i", "testsrc=d=2:s=64x48:r=10", "-c:v", "libx264")
    error = assert_refused(video_only, "audio_empty")
    assert "no audio track" in error.message

    srt = tmp_path / "s.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:02,000\nhello\n", encoding="utf-8")
    subtitles_only = tmp_path / "subs.m4a"
    ffmpeg_encode(srt, subtitles_only, "-c:s", "mov_text", "-f", "mp4")
    assert subtitles_only.read_bytes()[4:8] == b"ftyp"
    assert "no audio track" in assert_refused(subtitles_only, "audio_empty").message


def test_webm_without_audio_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "video.webm"
    ffmpeg_encode(
        Path(), path, "-f", "lavfi", "-i", "testsrc=d=1:s=64x48:r=10", "-c:v", "libvpx", "-f", "webm"
    )
    assert "WebM" in assert_refused(path, "audio_empty").message


def test_audio_codec_outside_the_list_is_refused(tmp_path: Path) -> None:
    path = encoded(
        tmp_path, "mp3-in.m4a", chirp_voice(2.0, 44_100), 44_100, "-c:a", "libmp3lame", "-f", "mp4"
    )
    error = assert_refused(path, "audio_bad_format")
    assert "mp3" in error.message
    assert "aac" in error.message


def test_format_outside_the_limits_is_refused_before_decoding(tmp_path: Path) -> None:
    path = encoded(tmp_path, "memo.m4a", chirp_voice(2.0, 44_100), 44_100, *M4A_AAC)
    error = assert_refused(path, "audio_bad_format", AudioLimits(formats=frozenset({"WAV"})))
    assert "MP4" in error.message


def test_silent_and_short_m4a_are_refused(tmp_path: Path) -> None:
    silent = encoded(tmp_path, "silent.m4a", np.zeros(3 * 44_100, dtype=np.float32), 44_100, *M4A_AAC)
    assert_refused(silent, "audio_empty")
    short = encoded(tmp_path, "short.webm", chirp_voice(0.5, 48_000), 48_000, *WEBM_OPUS)
    assert_refused(short, "audio_too_short")


@pytest.mark.parametrize(
    ("name", "args", "cut", "expected"),
    [
        # moov at the end (what a recorder that was stopped abruptly leaves): nothing to decode.
        ("memo.m4a", M4A_AAC, 0.5, "could not be decoded (moov atom not found)"),
        # moov first, samples cut: ffmpeg decodes part of it and says so; a reference whose audio does
        # not match its transcript is worse than none, so it is refused.
        ("fast.m4a", (*M4A_AAC[:-2], "-movflags", "+faststart", "-f", "mp4"), 0.6, "damaged or truncated"),
        ("rec.webm", WEBM_OPUS, 0.6, "damaged or truncated (File ended prematurely"),
    ],
)
def test_truncated_mp4_and_webm_are_refused(
    tmp_path: Path, name: str, args: tuple[str, ...], cut: float, expected: str
) -> None:
    full = encoded(tmp_path, name, chirp_voice(3.0, 48_000), 48_000, *args)
    data = full.read_bytes()
    path = tmp_path / f"cut-{name}"
    path.write_bytes(data[: int(len(data) * cut)])

    error = assert_refused(path, "audio_undecodable")

    assert expected in error.message
    assert str(tmp_path) not in error.message  # no server paths in what the client sees
    assert not list(tmp_path.glob(".decode-*"))


@pytest.mark.parametrize("magic", [b"\x00\x00\x00\x18ftypM4A ", b"\x1a\x45\xdf\xa3"])
def test_garbage_after_the_magic_is_refused(tmp_path: Path, magic: bytes) -> None:
    path = tmp_path / "junk.bin"
    path.write_bytes(magic + np.random.default_rng(5).bytes(20_000))
    error = assert_refused(path, {"audio_undecodable", "audio_empty"})
    assert "MP4" in error.message or "WebM" in error.message


@pytest.mark.parametrize("name", ["memo.m4a", "rec.webm"])
def test_damaged_mp4_and_webm_raise_only_audio_error(tmp_path: Path, name: str) -> None:
    args = M4A_AAC if name.endswith(".m4a") else WEBM_OPUS
    data = encoded(tmp_path, name, chirp_voice(2.0, 48_000), 48_000, *args).read_bytes()
    rng = np.random.default_rng(11)
    variants = [data[:n] for n in (8, 12, 40, 100, 1000)]
    for _ in range(6):
        damaged = bytearray(data)
        for pos in rng.integers(8, len(data), size=20):
            damaged[int(pos)] = int(rng.integers(0, 256))
        variants.append(bytes(damaged))
    refusals: list[AudioError] = []
    for i, variant in enumerate(variants):
        path = tmp_path / f"v{i}-{name}"
        path.write_bytes(variant)
        try:
            audio = decode_reference(path)
        except AudioError as exc:
            refusals.append(exc)
            continue
        assert np.isfinite(audio.samples).all()
        assert float(np.max(np.abs(audio.samples))) <= 1.0
    assert refusals
    assert all(exc.message for exc in refusals)
    assert not list(tmp_path.glob(".decode-*"))


def test_ffmpeg_is_killed_after_the_time_limit(tmp_path: Path) -> None:
    fifo = tmp_path / "never-written.m4a"
    os.mkfifo(fifo)  # ffmpeg blocks opening it, as it would on a stalled disk
    start = time.perf_counter()
    with pytest.raises(AudioError) as info:
        transcode_to_wav(str(fifo), str(tmp_path / "out.wav"), MP4, 10.0, 10**6, 0.5)
    assert time.perf_counter() - start < 5.0
    assert info.value.code == "audio_undecodable"
    assert "longer than 0.5 seconds" in info.value.message


def test_sniffing() -> None:
    assert sniff_container(b"\x00\x00\x00\x20ftypisom") is MP4
    assert sniff_container(b"\x1a\x45\xdf\xa3\x9f\x42\x86") is WEBM
    for head in (b"", b"ftyp", b"RIFF\x00\x00\x00\x00WAVE", b"fLaC", b"OggS", b"ID3\x04", b"\xff\xfb"):
        assert sniff_container(head) is None
