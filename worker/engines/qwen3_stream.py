"""Streamed codec decoding for Qwen3-TTS: audio for frames as they arrive (pure: torch and numpy only).

qwen-tts decodes a row's codes (the reference's codes, then the generated ones) in windows of 300 frames,
each with 25 frames of left context before it, every window with a fresh decoder. The codec decoder is
causal to the sample, so a window's samples can be made piece by piece: :class:`StreamDecoder` keeps the
window's decoder state (:class:`~worker.engines.qwen3_codec.CodecState`) and decodes only the frames that
are new each time; a new window starts a fresh state on its 25 context frames, as qwen-tts does.

Audio is handed out once ``first_frames`` generated frames exist, then each time the generated frames
have doubled, but at least every ``every`` frames (a decode call has a fixed cost; docs/engines.md). The
samples of the reference's own codes are never handed out, as qwen-tts cuts them.

The decoder's state after the reference's codes is the same for every chunk of a voice:
:class:`PrefixStates` keeps it (with its window) for the last prompts decoded, and a stream given one
starts from a copy of it, decoding only its generated frames.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from worker.engines.qwen3_codec import CodecState

__all__ = ["PrefixStates", "StreamDecoder", "decode_whole"]

WINDOW = 300  # frames qwen-tts decodes at once
LEFT_CONTEXT = 25  # frames of context before each window but the first
FIRST_FRAMES = 4  # the first audio is handed out after this many generated frames
EVERY_FRAMES = 32  # then when the frames have doubled, at most this many frames apart
PREFIX_STATES = 32  # prompts whose decoder state after the reference's codes is kept


def _window_start(frame: int) -> tuple[int, int]:
    """(first frame decoded, first frame kept) of the window holding ``frame``."""
    kept = (frame // WINDOW) * WINDOW
    context = LEFT_CONTEXT if kept - LEFT_CONTEXT > 0 else kept
    return kept - context, kept


def _prefix_key(prefix: torch.Tensor) -> tuple[str, tuple[int, ...], str, str]:
    """What identifies a prefix: a digest of its codes' bytes, its shape, dtype and device."""
    data = prefix.detach().to("cpu").contiguous().numpy().tobytes()
    digest = hashlib.sha256(data).hexdigest()
    return digest, tuple(prefix.shape), str(prefix.dtype), str(prefix.device)


class PrefixStates:
    """The decoder's state after a prompt's reference codes, for the last ``size`` prompts (least recently
    used dropped first), keyed by the codes' content. Bound to one decoder. Safe across threads: a lock
    guards the table; a prefix missing is decoded outside it (two threads may both decode one)."""

    def __init__(self, decoder: Any, size: int = PREFIX_STATES) -> None:
        if size < 1:
            raise ValueError(f"size must be positive, got {size}")
        self.decoder = decoder
        self.size = int(size)
        self.decodes = 0  # prefixes decoded (misses); tests and benchmarks read it
        self._lock = threading.Lock()
        self._states: OrderedDict[tuple[Any, ...], tuple[CodecState, int, int]] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._states)

    def after(self, prefix: torch.Tensor) -> tuple[CodecState, int, int]:
        """(a copy of the state after ``prefix`` (frames, codebooks), the first kept frame of its window,
        the frames fed): the state of the window holding the first generated frame, as
        :class:`StreamDecoder` would have it after decoding the prefix's frames of that window."""
        key = _prefix_key(prefix)
        with self._lock:
            kept = self._states.get(key)
            if kept is not None:
                self._states.move_to_end(key)
        if kept is None:
            frames = int(prefix.shape[0])
            first, window = _window_start(frames)
            state = CodecState(self.decoder)
            state.decode(prefix[first:frames].transpose(0, 1).unsqueeze(0))
            kept = (state, window, frames)
            with self._lock:
                self.decodes += 1
                self._states[key] = kept
                self._states.move_to_end(key)
                while len(self._states) > self.size:
                    self._states.popitem(last=False)
        state, window, fed = kept
        return state.copy(), window, fed


class StreamDecoder:
    """Audio of one row, handed out as its frames are generated (see the module docstring)."""

    def __init__(
        self,
        decoder: Any,
        upsample: int,
        prefix: torch.Tensor | None = None,
        *,
        first_frames: int = FIRST_FRAMES,
        every: int = EVERY_FRAMES,
        states: PrefixStates | None = None,
    ) -> None:
        """``decoder``: qwen-tts's 12 Hz codec decoder module; ``upsample``: samples per frame; ``prefix``:
        the reference's codes (frames, codebooks), decoded for context and never handed out; ``states``:
        decoder states after prefixes, kept across streams (bound to ``decoder``)."""
        if states is not None and states.decoder is not decoder:
            raise ValueError("the prefix states belong to another decoder")
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
        self._every = max(1, int(every))
        self._state: CodecState | None = None
        self._window = -1  # first kept frame of the window ``_state`` decodes
        self._fed = 0  # frames ``_state`` has decoded
        if self._prefix and states is not None:
            assert prefix is not None
            self._state, self._window, self._fed = states.after(prefix)

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
        self._due = self.frames + min(self.frames, self._every)
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
            if self._state is None or self._window != kept:
                self._state, self._window, self._fed = CodecState(self._decoder), kept, first
            fed = self._fed
            wav = self._state.decode(codes[fed:stop].transpose(0, 1).unsqueeze(0))
            self._fed = stop
            samples = wav.reshape(-1)[(start - fed) * self._upsample :]
            pieces.append(samples.detach().to("cpu", torch.float32).numpy())
            start = stop
        self._emitted = end
        return np.concatenate(pieces).astype(np.float32, copy=False)


def decode_whole(
    decoder: Any,
    upsample: int,
    codes: torch.Tensor,
    prefix_frames: int,
    states: PrefixStates | None = None,
) -> npt.NDArray[np.float32]:
    """The audio of ``codes`` (frames, codebooks) as qwen-tts decodes it (windows of 300 frames with 25 of
    context), without the first ``prefix_frames`` frames' samples: one pass, no streaming (``states``: as
    for :class:`StreamDecoder`)."""
    prefix = codes[:prefix_frames] if prefix_frames else None
    stream = StreamDecoder(decoder, upsample, prefix, states=states)
    stream.extend(codes[prefix_frames:])
    return stream.finish()
