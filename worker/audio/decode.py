"""Validating and decoding an uploaded reference recording, with bounded memory and time."""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from worker.audio.errors import AudioError
from worker.audio.pcm import Waveform, downmix
from worker.audio.transcode import Container, sniff_file, transcode_to_wav

SILENCE_PEAK_DBFS = -60.0
"""A reference whose peak stays below this level is treated as empty."""

_BLOCK_SAMPLES = 1 << 18
"""Interleaved samples read per block while decoding (1 MiB of float32)."""

_WAV_HEADER_SLACK = 1 << 16
"""Bytes allowed beyond the PCM in an intermediate WAV (header, rounding)."""


@dataclass(frozen=True)
class AudioLimits:
    """What a reference recording may be.

    ``formats`` are libsndfile major format names, plus ``MP4`` (M4A voice memos: AAC or ALAC) and
    ``WEBM`` (WebM or Matroska browser recordings: Opus, Vorbis or PCM), which the bundled ffmpeg decodes
    in at most ``decode_timeout`` seconds (wall clock).
    """

    max_bytes: int = 50 * 1024 * 1024
    max_seconds: float = 120.0
    min_seconds: float = 1.0
    max_channels: int = 8
    max_sample_rate: int = 192_000
    formats: frozenset[str] = frozenset({"WAV", "WAVEX", "FLAC", "OGG", "MP3", "AIFF", "MP4", "WEBM"})
    decode_timeout: float = 30.0


@dataclass(frozen=True)
class DecodedAudio:
    """A decoded reference: float32 mono samples in [-1, 1]."""

    samples: Waveform
    sample_rate: int
    duration: float
    format: str


def decode_reference(path: str | os.PathLike[str], limits: AudioLimits = AudioLimits()) -> DecodedAudio:
    """Check and decode a reference recording to float32 mono.

    The container is recognised from the file's first bytes (never its name): MP4/M4A and WebM/Matroska
    go through the bundled ffmpeg (see :mod:`worker.audio.transcode`), which stops one second past
    ``max_seconds`` and is killed after ``decode_timeout``; everything else goes to libsndfile.
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

    container = sniff_file(name)
    if container is None:
        return _decode(name, None, limits)
    _check_format(container.name, limits)
    return _decode_with_ffmpeg(name, container, limits)


def _decode_with_ffmpeg(name: str, container: Container, limits: AudioLimits) -> DecodedAudio:
    """Decode through ffmpeg into a WAV next to ``name`` (the upload's folder), then read that as any WAV.

    ffmpeg writes at most one second more than ``max_seconds`` and, whatever the channels and rate, no
    more bytes than a file within the limits would need, so the WAV stays bounded; its header is then
    checked against the limits like any other file's.
    """
    seconds = limits.max_seconds + 1.0
    max_wav = math.ceil(seconds * limits.max_sample_rate) * limits.max_channels * 2 + _WAV_HEADER_SLACK
    fd, wav = tempfile.mkstemp(prefix=".decode-", suffix=".wav", dir=os.path.dirname(os.path.abspath(name)))
    os.close(fd)
    try:
        transcode_to_wav(name, wav, container, seconds, max_wav, limits.decode_timeout)
        return _decode(wav, container.name, limits)
    finally:
        os.unlink(wav)


def _decode(name: str, container: str | None, limits: AudioLimits) -> DecodedAudio:
    """Decode ``name`` with libsndfile: a file as uploaded (``container`` None), or the WAV ffmpeg made of
    a ``container`` file (whose format was checked already and whose length says nothing of the source's)."""
    try:
        info = sf.info(name)
    except Exception as exc:  # libsndfile reports every unreadable file as some RuntimeError
        raise _undecodable(exc) from exc
    fmt, channels, sample_rate = str(info.format), int(info.channels), int(info.samplerate)
    if container is None:
        _check_format(fmt, limits)
    # libsndfile estimates an MP3's length from its size and first frame's bitrate when there is no
    # Xing/Info header, so it may be wildly off (either way); ffmpeg stopped at the limit, so its WAV's
    # length is at most the limit plus a second. In both cases the bounded read below decides.
    length_known = container is None and fmt != "MP3"
    _check_header(channels, sample_rate, int(info.frames) if length_known else None, limits)

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
    return DecodedAudio(samples=samples, sample_rate=sample_rate, duration=duration, format=container or fmt)


def _check_format(fmt: str, limits: AudioLimits) -> None:
    if fmt not in limits.formats:
        accepted = ", ".join(sorted(limits.formats))
        raise AudioError("audio_bad_format", f"audio format {fmt} is not accepted (accepted: {accepted})")


def _check_header(channels: int, sample_rate: int, frames: int | None, limits: AudioLimits) -> None:
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
    if frames is None:
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
