"""The bundled ffmpeg binary (from ``imageio-ffmpeg``): a streaming PCM encoder and a decoder helper."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import threading
from types import TracebackType
from typing import IO, Literal, Self, get_args

import imageio_ffmpeg
import numpy as np
import numpy.typing as npt

from worker.audio.errors import AudioError, StitchError
from worker.audio.pcm import Pcm16, Waveform, from_pcm16, to_pcm16

OutputFormat = Literal["wav", "mp3", "flac"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = get_args(OutputFormat)

STDERR_TAIL_BYTES = 4096
"""How much of ffmpeg's stderr is kept for error messages."""

_SILENCE = np.zeros(1 << 16, dtype="<i2")
_SILENCE.flags.writeable = False


@functools.cache
def ffmpeg_exe() -> str:
    """Path of the ffmpeg executable (``IMAGEIO_FFMPEG_EXE`` overrides the bundled one)."""
    return str(imageio_ffmpeg.get_ffmpeg_exe())


def _codec_args(fmt: OutputFormat, bitrate_kbps: int) -> list[str]:
    if fmt == "wav":
        # RF64 only if the output outgrows the 4 GiB limit of plain WAV.
        return ["-c:a", "pcm_s16le", "-rf64", "auto", "-f", "wav"]
    if fmt == "flac":
        return ["-c:a", "flac", "-f", "flac"]
    return ["-c:a", "libmp3lame", "-b:a", f"{bitrate_kbps}k", "-f", "mp3"]


class _TailDrainer(threading.Thread):
    """Reads a pipe to its end so the child never blocks on it, keeping only the last bytes."""

    def __init__(self, stream: IO[bytes], limit: int = STDERR_TAIL_BYTES) -> None:
        super().__init__(name="ffmpeg-stderr", daemon=True)
        self._stream = stream
        self._limit = limit
        self._tail = bytearray()

    def run(self) -> None:
        fd = self._stream.fileno()
        try:
            while chunk := os.read(fd, 65536):
                self._tail += chunk
                if len(self._tail) > self._limit:
                    del self._tail[: len(self._tail) - self._limit]
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        return bytes(self._tail).decode("utf-8", "replace").strip()


class FfmpegEncoder:
    """Encode a stream of mono PCM into ``out_path`` through an ffmpeg subprocess.

    ``write`` takes float samples in [-1, 1] (converted to int16) or int16 PCM; memory use does not depend
    on how much is written. ``close`` finishes the file and raises :class:`StitchError` if ffmpeg failed;
    used as a context manager, an exception in the body kills ffmpeg instead (the partial output is left
    for the caller to remove).
    """

    def __init__(
        self,
        out_path: str | os.PathLike[str],
        fmt: OutputFormat,
        sample_rate: int,
        bitrate_kbps: int = 128,
        timeout: float = 600.0,
    ) -> None:
        if fmt not in OUTPUT_FORMATS:
            raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(OUTPUT_FORMATS)}")
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        if not 8 <= bitrate_kbps <= 320:
            raise ValueError(f"bitrate_kbps must be between 8 and 320, got {bitrate_kbps}")
        self.fmt = fmt
        self.sample_rate = sample_rate
        self.samples_written = 0
        self._timeout = timeout
        self._closed = False
        cmd = [
            ffmpeg_exe(),
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "s16le",
            "-ar",
            str(sample_rate),
            "-ac",
            "1",
            "-i",
            "pipe:0",
            "-map_metadata",
            "-1",
            *_codec_args(fmt, bitrate_kbps),
            os.path.abspath(os.fspath(out_path)),
        ]
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        assert self._proc.stdin is not None
        assert self._proc.stderr is not None
        self._stdin = self._proc.stdin
        self._stderr = _TailDrainer(self._proc.stderr)
        self._stderr.start()

    def write(self, samples: npt.NDArray[np.floating] | Pcm16) -> None:
        """Append mono samples: a float array in [-1, 1] or int16 PCM."""
        data = np.asarray(samples)
        if data.ndim != 1:
            raise ValueError(f"samples must be a 1-D mono array, got shape {data.shape}")
        pcm = np.ascontiguousarray(data, dtype="<i2") if data.dtype == np.int16 else to_pcm16(data)
        self._send(pcm)

    def write_silence(self, count: int) -> None:
        """Append ``count`` samples of silence, in bounded blocks."""
        remaining = count
        while remaining > 0:
            n = min(remaining, _SILENCE.size)
            self._send(_SILENCE[:n])
            remaining -= n

    def _send(self, pcm: Pcm16) -> None:
        if self._closed:
            raise StitchError("the encoder is already closed")
        if pcm.size == 0:
            return
        try:
            self._stdin.write(pcm.data.cast("B"))
        except OSError as exc:  # BrokenPipeError: ffmpeg exited early
            raise self._failure(f"ffmpeg stopped accepting audio ({exc})") from exc
        self.samples_written += pcm.size

    def close(self) -> None:
        """Finish encoding and wait for ffmpeg; raises :class:`StitchError` if it failed."""
        if self._closed:
            return
        try:
            self._stdin.close()
        except OSError as exc:
            raise self._failure(f"ffmpeg stopped accepting audio ({exc})") from exc
        try:
            self._proc.wait(timeout=self._timeout)
        except subprocess.TimeoutExpired as exc:
            self.abort()
            raise StitchError(f"ffmpeg did not finish within {self._timeout:g} seconds") from exc
        self._closed = True
        self._stderr.join()
        _close_quietly(self._proc.stderr)
        if self._proc.returncode != 0:
            raise StitchError(f"ffmpeg failed (exit status {self._proc.returncode}): {self._stderr.text()}")

    def abort(self) -> None:
        """Kill ffmpeg and release its pipes (idempotent)."""
        self._closed = True
        if self._proc.poll() is None:
            self._proc.kill()
        _close_quietly(self._stdin)
        self._proc.wait()
        self._stderr.join()
        _close_quietly(self._proc.stderr)

    def _failure(self, what: str) -> StitchError:
        self._closed = True
        _close_quietly(self._stdin)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stderr.join()
        _close_quietly(self._proc.stderr)
        return StitchError(f"{what}; exit status {self._proc.returncode}: {self._stderr.text()}")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _close_quietly(stream: IO[bytes] | None) -> None:
    if stream is None:
        return
    with contextlib.suppress(OSError):
        stream.close()


def decode_to_pcm(path: str | os.PathLike[str], sample_rate: int, timeout: float = 600.0) -> Waveform:
    """Decode any audio file ffmpeg understands to float32 mono at ``sample_rate`` (resampling if needed).

    Raises ``FileNotFoundError`` if the file does not exist and :class:`AudioError`
    (``audio_undecodable``) if ffmpeg cannot decode it. The whole result is held in memory.
    """
    name = os.path.abspath(os.fspath(path))
    if not os.path.isfile(name):
        raise FileNotFoundError(name)
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    cmd = [
        ffmpeg_exe(),
        "-hide_banner",
        "-loglevel",
        "error",
        "-nostdin",
        "-i",
        name,
        "-vn",
        "-ac",
        "1",
        "-ar",
        str(sample_rate),
        "-c:a",
        "pcm_s16le",
        "-f",
        "s16le",
        "pipe:1",
    ]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = proc.stderr[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
        raise AudioError("audio_undecodable", f"ffmpeg could not decode {name}: {tail}")
    raw = proc.stdout[: len(proc.stdout) - len(proc.stdout) % 2]
    return from_pcm16(np.frombuffer(raw, dtype="<i2"))
