"""Where the ffmpeg executable is (the static binary bundled with ``imageio-ffmpeg``)."""

from __future__ import annotations

import functools

import imageio_ffmpeg


@functools.cache
def ffmpeg_exe() -> str:
    """Path of the ffmpeg executable (``IMAGEIO_FFMPEG_EXE`` overrides the bundled one)."""
    return str(imageio_ffmpeg.get_ffmpeg_exe())
