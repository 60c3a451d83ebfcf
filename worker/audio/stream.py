"""Encoding mono PCM as it is produced into a byte stream, through one ffmpeg process (pure: no Flask,
no Celery): what ``POST /v1/audio/speech`` sends while its chunks render.

PCM goes in on ffmpeg's stdin, encoded bytes come out on its stdout as soon as the encoder has a packet
(``-flush_packets 1``): MP3 frames, Ogg Opus pages (100 ms each, not ffmpeg's default second), AAC in
ADTS frames, FLAC frames, a WAV header whose sizes say "unknown" (0xFFFFFFFF, as a stream cannot go back
to fix them) then 16-bit PCM, or raw 16-bit little-endian PCM at 24 kHz (what OpenAI's ``pcm`` is).
``tempo`` speeds the audio up or down without changing its pitch (ffmpeg's ``atempo``). Every argument
is a constant or a number: nothing a client sent reaches the command line.

One thread (or greenlet) writes while another reads: the pipes are never both waited on by one caller.
Under gevent (the API's gunicorn workers) the pipes of ``subprocess`` are cooperative. ffmpeg's stderr
goes to an unnamed temp file, not a pipe, so nothing has to drain it.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Literal, Protocol, cast, get_args

import numpy as np
import numpy.typing as npt

from worker.audio.binary import ffmpeg_exe
from worker.audio.errors import StitchError
from worker.audio.pcm import to_pcm16

SpeechFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
SPEECH_FORMATS: tuple[SpeechFormat, ...] = get_args(SpeechFormat)

PCM_RATE = 24_000
"""The rate of ``pcm`` (and Opus, which has no 22.05 kHz): OpenAI's raw PCM is 24 kHz 16-bit mono."""

ATEMPO_RANGE = (0.5, 2.0)
"""What one ffmpeg ``atempo`` filter takes without skipping samples; others are chained."""

STDERR_TAIL_BYTES = 2048


class _Pipe(Protocol):
    """ffmpeg's stdout: a buffered reader (under gevent, its cooperative file object)."""

    def read1(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StreamKind:
    mime_type: str
    codec: list[str]  # ffmpeg output options: codec, bitrate, container
    rate: int | None = None  # the output's sample rate; None: the input's


def stream_kinds(bitrate_kbps: int) -> dict[SpeechFormat, StreamKind]:
    kbps = f"{bitrate_kbps}k"
    return {
        "mp3": StreamKind(
            "audio/mpeg",
            # no ID3 tag and no Xing header: a stream cannot go back to fill in the frame count
            ["-c:a", "libmp3lame", "-b:a", kbps, "-id3v2_version", "0", "-write_xing", "0", "-f", "mp3"],
        ),
        "opus": StreamKind(
            "audio/ogg",
            ["-c:a", "libopus", "-b:a", "64k", "-page_duration", "100000", "-f", "ogg"],
            PCM_RATE,
        ),
        "aac": StreamKind("audio/aac", ["-c:a", "aac", "-b:a", kbps, "-f", "adts"]),
        "flac": StreamKind("audio/flac", ["-c:a", "flac", "-f", "flac"]),
        "wav": StreamKind("audio/wav", ["-c:a", "pcm_s16le", "-f", "wav"]),
        "pcm": StreamKind("audio/pcm", ["-c:a", "pcm_s16le", "-f", "s16le"], PCM_RATE),
    }


def atempo_chain(tempo: float) -> list[float]:
    """Factors of ``atempo`` filters, each within :data:`ATEMPO_RANGE`, whose product is ``tempo``; [] for
    1. ``ValueError`` unless ``tempo`` is a positive finite number."""
    if not (math.isfinite(tempo) and tempo > 0):
        raise ValueError(f"tempo must be a positive number, got {tempo!r}")
    low, high = ATEMPO_RANGE
    factors: list[float] = []
    rest = tempo
    while rest > high:
        factors.append(high)
        rest /= high
    while rest < low:
        factors.append(low)
        rest /= low
    if abs(rest - 1.0) > 1e-6:
        factors.append(round(rest, 6))
    return factors


def stream_command(
    fmt: SpeechFormat, sample_rate: int, tempo: float = 1.0, bitrate_kbps: int = 128
) -> list[str]:
    """ffmpeg reading mono s16le at ``sample_rate`` on stdin and writing ``fmt`` to stdout."""
    kind = stream_kinds(bitrate_kbps)[fmt]
    filters = ",".join(f"atempo={factor:g}" for factor in atempo_chain(tempo))
    return [
        ffmpeg_exe(),
        "-hide_banner",
        "-loglevel",
        "error",
        "-f",
        "s16le",
        "-ar",
        str(int(sample_rate)),
        "-ac",
        "1",
        "-i",
        "pipe:0",
        "-map_metadata",
        "-1",
        "-fflags",
        "+bitexact",  # no encoder version in the headers
        *(["-af", filters] if filters else []),
        *(["-ar", str(kind.rate)] if kind.rate and kind.rate != sample_rate else []),
        *kind.codec,
        "-flush_packets",
        "1",
        "pipe:1",
    ]


class PcmStream:
    """One ffmpeg process: :meth:`write` mono samples, :meth:`end` the input, :meth:`read` the encoded
    bytes until it returns ``b""``, then :meth:`finish`. :meth:`abort` kills ffmpeg at any time (from any
    thread); it is idempotent, and :meth:`finish` and :meth:`abort` both wait for the process to exit."""

    def __init__(
        self, fmt: SpeechFormat, sample_rate: int, tempo: float = 1.0, bitrate_kbps: int = 128
    ) -> None:
        if fmt not in SPEECH_FORMATS:
            raise ValueError(f"unknown stream format {fmt!r}; expected one of {', '.join(SPEECH_FORMATS)}")
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        self.fmt = fmt
        self.sample_rate = sample_rate
        self.mime_type = stream_kinds(bitrate_kbps)[fmt].mime_type
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in _reap
        self._proc = subprocess.Popen(
            stream_command(fmt, sample_rate, tempo, bitrate_kbps),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._stdin = self._proc.stdin
        self._stdout = cast(_Pipe, self._proc.stdout)
        self._ended = False

    @property
    def pid(self) -> int:
        return self._proc.pid

    def write(self, samples: npt.NDArray[np.floating]) -> None:
        """Append float mono samples in [-1, 1]; :class:`StitchError` if ffmpeg no longer takes them."""
        self._send(to_pcm16(samples).tobytes())

    def write_silence(self, count: int) -> None:
        if count > 0:
            self._send(bytes(2 * count))

    def _send(self, data: bytes) -> None:
        if self._ended:
            raise StitchError("the stream's input has ended")
        try:
            self._stdin.write(data)
            self._stdin.flush()
        except (OSError, ValueError) as exc:  # a broken pipe, or closed by abort()
            raise StitchError(f"ffmpeg stopped taking audio ({exc})") from exc

    def end(self) -> None:
        """No more input: ffmpeg flushes its encoder and writes the stream's end."""
        if not self._ended:
            self._ended = True
            with contextlib.suppress(OSError, ValueError):
                self._stdin.close()

    def read(self, size: int = 65536) -> bytes:
        """The next encoded bytes as soon as there are any (at most ``size``); ``b""`` at the end."""
        try:
            return bytes(self._stdout.read1(size))
        except (OSError, ValueError):  # closed by abort()
            return b""

    def finish(self, timeout: float = 30.0) -> None:
        """Wait for ffmpeg to exit after :meth:`end`; :class:`StitchError` if it failed."""
        try:
            code = self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.abort()
            raise StitchError(f"ffmpeg did not finish within {timeout:g} s") from exc
        tail = self._reap()
        if code != 0:
            raise StitchError(f"ffmpeg failed (exit status {code}): {tail}")

    def abort(self) -> None:
        """Kill ffmpeg (if it still runs) and release its pipes and temp file."""
        self._ended = True
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        self._proc.wait()
        self._reap()

    def _reap(self) -> str:
        for stream in (self._stdin, self._stdout):
            with contextlib.suppress(OSError, ValueError):
                stream.close()
        tail = ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0, 2)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - STDERR_TAIL_BYTES))
            tail = self._stderr.read().decode("utf-8", "replace").strip()
        with contextlib.suppress(OSError):
            self._stderr.close()
        return tail
