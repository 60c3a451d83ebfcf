"""Exceptions of the audio package."""

from __future__ import annotations


class AudioError(ValueError):
    """Input audio was refused: empty, undecodable, too long, too large or of an unsupported shape.

    ``code`` is a stable machine-readable identifier (``audio_empty``, ``audio_undecodable``,
    ``audio_too_long``, ``audio_too_short``, ``audio_too_large``, ``audio_bad_format``); ``message``
    is a human-readable sentence naming the problem and, where there is one, the limit.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class StitchError(RuntimeError):
    """Assembling or encoding an output failed (ffmpeg failed, a chunk file is missing or unreadable)."""
