"""Streamed codec decoding for Qwen3-TTS: audio for frames as they arrive (pure: torch and numpy only).

qwen-tts decodes a row's codes (the reference's codes, then the generated ones) in windows of 300 frames,
each with 25 frames of left context before it. The codec decoder is causal to the sample: its
convolutions pad on the left only, its transposed convolutions trim what reaches past their input, and its
transformer's mask is causal. So the samples of frames ``a..b`` of one of those windows depend only on the
window's codes up to ``b``: decoding the window's prefix gives them exactly, and a stream can hand out
audio as soon as a few frames exist.

:class:`StreamDecoder` takes frames as they are generated and decodes the window's prefix each time
enough new frames have come (4 at first, then twice as many each time, so the prefixes decoded add up to
about twice the frames of the whole: the first audio is fast and the total cost stays bounded). The
samples of the reference's own codes are never handed out, as qwen-tts cuts them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["StreamDecoder", "decode_whole"]

WINDOW = 300  # frames qwen-tts decodes at once
LEFT_CONTEXT = 25  # frames of context before each window but the first
FIRST_FRAMES = 4  # the first audio is handed out after this many generated frames

Decoder = Callable[[torch.Tensor], torch.Tensor]  # codes (1, codebooks, frames) -> wav (1, 1, samples)


def _window_start(frame: int) -> tuple[int, int]:
    """(first frame decoded, first frame kept) of the window holding ``frame``."""
    kept = (frame // WINDOW) * WINDOW
    context = LEFT_CONTEXT if kept - LEFT_CONTEXT > 0 else kept
    return kept - context, kept


class StreamDecoder:
    """Audio of one row, handed out as its frames are generated (see the module docstring)."""

    def __init__(
        self,
        decoder: Decoder,
        upsample: int,
        prefix: torch.Tensor | None = None,
        *,
        first_frames: int = FIRST_FRAMES,
    ) -> None:
        """``decoder``: the codec decoder's forward; ``upsample``: samples per frame; ``prefix``: the
        reference's codes (frames, codebooks), decoded for context and never handed out."""
        self._decoder = decoder
        self._upsample = int(upsample)
        self._codes: list[torch.Tensor] = []
        self._prefix = 0 if prefix is None else int(prefix.shape[0])
        if self._prefix:
            assert prefix is not None
            self._codes.append(prefix)
        self._frames = self._prefix
        self._emitted = self._prefix  # frames whose samples are out (the prefix's are never handed out)
        self._due = max(1, int(first_frames))  # generated frames at which the next audio is handed out

    @property
    def frames(self) -> int:
        """Generated frames pushed so far."""
        return self._frames - self._prefix

    def extend(self, frames: torch.Tensor) -> None:
        """Add generated frames (n, codebooks) without decoding anything."""
        if frames.shape[0]:
            self._codes.append(frames)
            self._frames += int(frames.shape[0])

    def push(self, frames: torch.Tensor) -> npt.NDArray[np.float32]:
        """Add generated frames (n, codebooks); returns the audio that is ready (possibly none)."""
        self.extend(frames)
        if self.frames < self._due:
            return np.zeros(0, dtype=np.float32)
        self._due = 2 * self.frames
        return self._decode_to(self._frames)

    def finish(self) -> npt.NDArray[np.float32]:
        """The audio of every frame not handed out yet."""
        return self._decode_to(self._frames)

    def _decode_to(self, end: int) -> npt.NDArray[np.float32]:
        if end <= self._emitted:
            return np.zeros(0, dtype=np.float32)
        codes = torch.cat(self._codes, dim=0) if len(self._codes) > 1 else self._codes[0]
        self._codes = [codes]
        pieces: list[npt.NDArray[np.float32]] = []
        start = self._emitted
        while start < end:
            first, kept = _window_start(start)
            stop = min(end, kept + WINDOW)
            wav = self._decoder(codes[first:stop].transpose(0, 1).unsqueeze(0))
            samples = wav.reshape(-1)[(start - first) * self._upsample : (stop - first) * self._upsample]
            pieces.append(samples.detach().to("cpu", torch.float32).numpy())
            start = stop
        self._emitted = end
        return np.concatenate(pieces).astype(np.float32, copy=False)


def decode_whole(
    decoder: Decoder, upsample: int, codes: torch.Tensor, prefix_frames: int
) -> npt.NDArray[np.float32]:
    """The audio of ``codes`` (frames, codebooks) as qwen-tts decodes it (windows of 300 frames with 25 of
    context), without the first ``prefix_frames`` frames' samples: one pass, no streaming."""
    stream = StreamDecoder(decoder, upsample, codes[:prefix_frames] if prefix_frames else None)
    stream.extend(codes[prefix_frames:])
    return stream.finish()
