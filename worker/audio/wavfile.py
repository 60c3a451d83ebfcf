"""Durable 16-bit WAV files for rendered chunks."""

from __future__ import annotations

import os
import wave

import numpy as np
import numpy.typing as npt
import soundfile as sf

from worker.audio.errors import AudioError
from worker.audio.pcm import Waveform, downmix, to_pcm16
from worker.storage.atomic import atomic_file

_BLOCK = 1 << 18


def write_wav_atomic(
    path: str | os.PathLike[str],
    samples: npt.NDArray[np.floating],
    sample_rate: int,
    *,
    durable: bool = True,
) -> int:
    """Write float mono ``samples`` as a 16-bit PCM WAV at ``path``, atomically; returns the file size.

    The data goes to a unique temp file in the same directory, is fsynced and renamed onto ``path``, and
    the directory is fsynced (``durable=False``: not fsynced; the caller makes a batch durable with
    ``worker.storage.atomic.sync_files``). On any error the temp file is removed and ``path`` is left as
    it was. Samples are clipped to [-1, 1]; NaN becomes silence.
    """
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int | np.integer) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive integer, got {sample_rate!r}")
    data = np.asarray(samples)
    if data.dtype.kind != "f":
        raise TypeError(f"samples must be a floating-point array, got dtype {data.dtype}")
    if data.ndim != 1:
        raise ValueError(f"samples must be a 1-D mono array, got shape {data.shape}")

    with atomic_file(path, durable=durable) as tmp, open(tmp, "wb") as f:
        w = wave.open(f, "wb")  # noqa: SIM115 - closed explicitly; it must not close ``f``
        try:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(int(sample_rate))
            for start in range(0, data.size, _BLOCK):
                w.writeframesraw(to_pcm16(data[start : start + _BLOCK]).data.cast("B"))
        finally:
            w.close()
        f.flush()
        size = f.tell()
    return size


def wav_header(head: bytes) -> tuple[int, int] | None:
    """(frames, sample rate) of a PCM WAV from its first bytes, or None if ``head`` does not reach the
    ``data`` chunk's header (or is no PCM WAV): lets a chunk in a bucket be measured with a ranged read."""
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    pos, rate, align = 12, 0, 0
    while pos + 8 <= len(head):
        cid, size = head[pos : pos + 4], int.from_bytes(head[pos + 4 : pos + 8], "little")
        if cid == b"fmt " and pos + 24 <= len(head):
            rate = int.from_bytes(head[pos + 12 : pos + 16], "little")
            align = int.from_bytes(head[pos + 20 : pos + 22], "little")
        elif cid == b"data":
            return (size // align, rate) if rate and align else None
        pos += 8 + size + (size & 1)
    return None


def read_wav(path: str | os.PathLike[str]) -> tuple[Waveform, int]:
    """Read an audio file (normally a WAV written here) as float32 mono (channels averaged) and its rate.

    Raises ``OSError`` (e.g. ``FileNotFoundError``) if the file cannot be opened and :class:`AudioError`
    (``audio_undecodable``) if libsndfile cannot decode it.
    """
    with open(os.fspath(path), "rb") as f:
        try:
            data, sample_rate = sf.read(f, dtype="float32", always_2d=True)
        except sf.SoundFileError as exc:
            reason = str(getattr(exc, "error_string", "") or exc).strip().rstrip(".")
            raise AudioError(
                "audio_undecodable", f"{os.fspath(path)} could not be decoded ({reason})"
            ) from exc
    return downmix(data), int(sample_rate)
