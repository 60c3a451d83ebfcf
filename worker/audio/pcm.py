"""Conversions between float32 waveforms and 16-bit PCM (shared by the WAV writer and the encoder)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Waveform = npt.NDArray[np.float32]
Pcm16 = npt.NDArray[np.int16]

PCM16_SCALE = 32768.0
"""Full scale of 16-bit PCM, the same convention libsndfile and ffmpeg use when they read it as float."""


def to_pcm16(samples: npt.ArrayLike) -> Pcm16:
    """Float samples in [-1, 1] to little-endian int16 (clipped; NaN becomes 0, +-inf full scale)."""
    x = np.asarray(samples, dtype=np.float32)
    x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)
    scaled = np.rint(x * np.float32(PCM16_SCALE))
    np.clip(scaled, -32768.0, 32767.0, out=scaled)
    pcm: Pcm16 = scaled.astype("<i2")
    return pcm


def from_pcm16(data: npt.NDArray[np.int16]) -> Waveform:
    """int16 PCM to float32 in [-1, 1)."""
    return (data.astype(np.float32) / np.float32(PCM16_SCALE)).astype(np.float32, copy=False)


def downmix(frames: npt.NDArray[np.floating]) -> Waveform:
    """A ``(frames, channels)`` float block to mono float32 by averaging the channels."""
    if frames.ndim == 1:
        return frames.astype(np.float32, copy=False)
    if frames.shape[1] == 1:
        return np.ascontiguousarray(frames[:, 0], dtype=np.float32)
    mono: Waveform = frames.mean(axis=1, dtype=np.float32)
    return mono
