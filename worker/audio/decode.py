"""Validating and decoding an uploaded reference recording, with bounded memory and time."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from worker.audio.errors import AudioError
from worker.audio.pcm import Waveform, downmix

SILENCE_PEAK_DBFS = -60.0
"""A reference whose peak stays below this level is treated as empty."""

_BLOCK_SAMPLES = 1 << 18
"""Interleaved samples read per block while decoding (1 MiB of float32)."""


@dataclass(frozen=True)
class AudioLimits:
    """What a reference recording may be. ``formats`` are libsndfile major format names."""

    max_bytes: int = 50 * 1024 * 1024
    max_seconds: float = 120.0
    min_seconds: float = 1.0
    max_channels: int = 8
    max_sample_rate: int = 192_000
    formats: frozenset[str] = frozenset({"WAV", "WAVEX", "FLAC", "OGG", "MP3", "AIFF"})


@dataclass(frozen=True)
class DecodedAudio:
    """A decoded reference: float32 mono samples in [-1, 1]."""

    samples: Waveform
    sample_rate: int
    duration: float
    format: str


def decode_reference(path: str | os.PathLike[str], limits: AudioLimits = AudioLimits()) -> DecodedAudio:
    """Check and decode a reference recording to float32 mono.

    The header is sniffed first, so a file claiming absurd channel counts, sample rates or lengths is
    refused before any sample is read (the length claim is not trusted for MP3, where libsndfile only
    estimates it); decoding then stops one frame past ``max_seconds`` whatever the header said.
    Raises :class:`AudioError` for every kind of bad file (``OSError`` still propagates when ``path``
    cannot be read at all, e.g. it does not exist).
    """
    name = os.fspath(path)
    size = os.path.getsize(name)
    if size == 0:
        raise AudioError("audio_empty", "the audio file is empty (0 bytes)")
    if size > limits.max_bytes:
        raise AudioError(
            "audio_too_large",
            f"the audio file is {size} bytes; at most {limits.max_bytes} bytes are accepted",
        )

    try:
        info = sf.info(name)
    except Exception as exc:  # libsndfile reports every unreadable file as some RuntimeError
        raise _undecodable(exc) from exc
    fmt, channels, sample_rate = str(info.format), int(info.channels), int(info.samplerate)
    _check_header(fmt, channels, sample_rate, int(info.frames), limits)

    max_frames = math.floor(limits.max_seconds * sample_rate)
    samples = _read_mono(name, max_frames, channels)
    duration = samples.size / sample_rate

    if samples.size == 0:
        raise AudioError("audio_empty", "the audio file contains no samples")
    if samples.size > max_frames:
        raise AudioError(
            "audio_too_long", f"the audio is longer than the limit of {limits.max_seconds:g} seconds"
        )
    if not np.isfinite(samples).all():
        raise AudioError("audio_bad_format", "the audio contains invalid (NaN or infinite) samples")
    np.clip(samples, -1.0, 1.0, out=samples)
    peak = float(np.max(np.abs(samples)))
    if peak < 10.0 ** (SILENCE_PEAK_DBFS / 20.0):
        raise AudioError(
            "audio_empty", f"the audio is silent (peak below {SILENCE_PEAK_DBFS:g} dBFS throughout)"
        )
    if duration < limits.min_seconds:
        raise AudioError(
            "audio_too_short",
            f"the audio lasts {duration:.2f} seconds; at least {limits.min_seconds:g} seconds are needed",
        )
    return DecodedAudio(samples=samples, sample_rate=sample_rate, duration=duration, format=fmt)


def _check_header(fmt: str, channels: int, sample_rate: int, frames: int, limits: AudioLimits) -> None:
    if fmt not in limits.formats:
        accepted = ", ".join(sorted(limits.formats))
        raise AudioError("audio_bad_format", f"audio format {fmt} is not accepted (accepted: {accepted})")
    if not 1 <= channels <= limits.max_channels:
        raise AudioError(
            "audio_bad_format",
            f"the audio has {channels} channels; at most {limits.max_channels} are accepted",
        )
    if not 1 <= sample_rate <= limits.max_sample_rate:
        raise AudioError(
            "audio_bad_format",
            f"the audio sample rate is {sample_rate} Hz; at most {limits.max_sample_rate} Hz is accepted",
        )
    if fmt == "MP3":
        # libsndfile estimates an MP3's length from its size and first frame's bitrate when there is no
        # Xing/Info header, so it may be wildly off (either way); the bounded read below decides.
        return
    claimed = frames / sample_rate
    if claimed > limits.max_seconds:
        raise AudioError(
            "audio_too_long",
            f"the audio lasts {claimed:.1f} seconds; at most {limits.max_seconds:g} seconds are accepted",
        )


def _read_mono(name: str, max_frames: int, channels: int) -> Waveform:
    """Decode at most ``max_frames + 1`` frames, block by block, downmixing each block to mono."""
    block_frames = max(1, _BLOCK_SAMPLES // channels)
    blocks: list[Waveform] = []
    total = 0
    try:
        with sf.SoundFile(name) as f:
            while total <= max_frames:
                want = min(block_frames, max_frames + 1 - total)
                block = f.read(frames=want, dtype="float32", always_2d=True)
                if block.shape[0] == 0:
                    break
                blocks.append(downmix(block))
                total += block.shape[0]
    except Exception as exc:
        raise _undecodable(exc) from exc
    if not blocks:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(blocks)


def _undecodable(exc: Exception) -> AudioError:
    # libsndfile's own reason, without the "Error opening '<server path>'" prefix soundfile adds.
    reason = str(getattr(exc, "error_string", "") or "").strip().rstrip(".")
    detail = f" ({reason})" if reason else ""
    return AudioError("audio_undecodable", f"the audio file could not be decoded{detail}")
