"""The bundled ffmpeg binary (from ``imageio-ffmpeg``): a streaming PCM encoder and a decoder helper."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import IO, Self

import numpy as np
import numpy.typing as npt

from worker.audio import ffmetadata
from worker.audio.binary import ffmpeg_exe
from worker.audio.chapters import ChapterMark
from worker.audio.cover import Cover
from worker.audio.errors import AudioError, StitchError
from worker.audio.formats import OUTPUT_FORMATS, OutputFormat, chapter_family, check_format, codec_args
from worker.audio.pcm import Pcm16, Waveform, from_pcm16, to_pcm16
from worker.audio.tags import BookTags
from worker.storage.atomic import discard, make_temp

__all__ = [
    "OUTPUT_FORMATS",
    "FfmpegEncoder",
    "OutputFormat",
    "decode_command",
    "decode_to_pcm",
    "encoder_command",
    "ffmpeg_exe",
    "mux_command",
]

STDERR_TAIL_BYTES = 4096
"""How much of ffmpeg's stderr is kept for error messages."""

_SILENCE = np.zeros(1 << 16, dtype="<i2")
_SILENCE.flags.writeable = False


def encoder_command(
    out_path: str,
    fmt: OutputFormat,
    sample_rate: int,
    bitrate_kbps: int,
    metadata_path: str | None = None,
    cover: Cover | None = None,
    cover_path: str | None = None,
    output_rate: int | None = None,
) -> list[str]:
    """The ffmpeg command that encodes mono s16le PCM from stdin into ``out_path``.

    Inputs, in order: the ffmetadata file (tags and chapters, if any), the cover image (if any, for the
    formats that take it as a picture stream: MP3 APIC, MP4 covr, FLAC PICTURE), then the PCM pipe, last
    so that ffmpeg has opened the files before it waits for audio. Every value the user chose is inside
    those files: the command holds only paths Tome made, numbers and constants.
    """
    return mux_command(
        out_path,
        fmt,
        ["-f", "s16le", "-ar", str(sample_rate), "-ac", "1", "-i", "pipe:0"],
        [
            *([] if output_rate in (None, sample_rate) else ["-ar", str(output_rate)]),
            *codec_args(fmt, output_rate or sample_rate, bitrate_kbps),
        ],
        metadata_path,
        cover,
        cover_path,
    )


def mux_command(
    out_path: str,
    fmt: OutputFormat,
    audio_input: Sequence[str],
    audio_output: Sequence[str],
    metadata_path: str | None = None,
    cover: Cover | None = None,
    cover_path: str | None = None,
) -> list[str]:
    """The ffmpeg command that writes the audio of ``audio_input`` (its input options and ``-i``) into
    ``out_path`` with ``audio_output`` (codec and container options), tags and chapters from the
    ffmetadata file and the cover, as :func:`encoder_command` describes."""
    inputs: list[str] = []
    maps: list[str] = []
    n = 0
    if metadata_path is not None:
        inputs += ["-f", "ffmetadata", "-i", metadata_path]
        chapters = "0" if chapter_family(fmt) == "ffmpeg" else "-1"
        maps += ["-map_metadata", "0", "-map_chapters", chapters]
        if fmt == "ogg":  # the Ogg muxer writes the stream's comments, not the file's
            maps += ["-map_metadata:s:a:0", "0:g"]
        n += 1
    else:
        maps += ["-map_metadata", "-1", "-map_chapters", "-1"]
    if cover is not None and cover_path is not None:
        inputs += ["-f", cover.ffmpeg_format, "-i", cover_path]
        maps += ["-map", f"{n}:v", "-c:v", "copy", "-disposition:v:0", "attached_pic"]
        if fmt in ("mp3", "flac"):  # picture type 3, "Cover (front)", rather than 0, "Other"
            maps += ["-metadata:s:v:0", "comment=Cover (front)"]
        n += 1
    return [
        ffmpeg_exe(),
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        *inputs,
        *audio_input,
        "-map",
        f"{n}:a:0",
        *maps,
        *audio_output,
        out_path,
    ]


def takes_cover_stream(fmt: OutputFormat) -> bool:
    """Whether ``fmt`` embeds a cover as a picture stream (Ogg carries it in its comments, WAV not at all)."""
    return fmt in ("mp3", "flac", "m4a", "m4b")


class TailDrainer(threading.Thread):
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
    on how much is written. ``tags``, ``chapters`` (positions in samples at ``sample_rate``) and ``cover``
    are written into the file as far as ``fmt`` carries them (:data:`~worker.audio.formats.FORMATS`);
    they go to ffmpeg through temp files next to ``out_path``, removed when ffmpeg has finished.
    ``close`` finishes the file and raises :class:`StitchError` if ffmpeg failed; used as a context
    manager, an exception in the body kills ffmpeg instead (the partial output is left for the caller
    to remove).
    """

    def __init__(
        self,
        out_path: str | os.PathLike[str],
        fmt: OutputFormat,
        sample_rate: int,
        bitrate_kbps: int = 128,
        timeout: float = 600.0,
        *,
        tags: BookTags | None = None,
        chapters: Sequence[ChapterMark] = (),
        cover: Cover | None = None,
        output_rate: int | None = None,
    ) -> None:
        fmt = check_format(fmt)
        if output_rate is not None and not 8_000 <= output_rate <= 192_000:
            raise ValueError(f"output_rate must be between 8000 and 192000 Hz, got {output_rate}")
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        if not 8 <= bitrate_kbps <= 320:
            raise ValueError(f"bitrate_kbps must be between 8 and 320, got {bitrate_kbps}")
        if tags is not None and not isinstance(tags, BookTags):
            raise TypeError(f"tags must be BookTags, got {type(tags).__name__}")
        if cover is not None and not isinstance(cover, Cover):
            raise TypeError(f"cover must be a Cover (see load_cover), got {type(cover).__name__}")
        self.fmt = fmt
        self.sample_rate = sample_rate
        self.samples_written = 0
        self._timeout = timeout
        self._closed = False
        self._sidecars: list[str] = []
        out = os.path.abspath(os.fspath(out_path))
        try:
            text = ffmetadata.render(fmt, sample_rate, tags, chapters, cover)
            meta = self._sidecar(out, text.encode("utf-8")) if text is not None else None
            picture = cover if cover is not None and takes_cover_stream(fmt) else None
            picture_path = self._sidecar(out, picture.data) if picture is not None else None
            cmd = encoder_command(
                out, fmt, sample_rate, bitrate_kbps, meta, picture, picture_path, output_rate
            )
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        except BaseException:
            self._remove_sidecars()
            raise
        assert self._proc.stdin is not None
        assert self._proc.stderr is not None
        self._stdin = self._proc.stdin
        self._stderr = TailDrainer(self._proc.stderr)
        self._stderr.start()

    def _sidecar(self, out: str, data: bytes) -> str:
        fd, path = make_temp(out)
        self._sidecars.append(path)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path

    def _remove_sidecars(self) -> None:
        for path in self._sidecars:
            discard(path)
        self._sidecars.clear()

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
        self._remove_sidecars()
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
        self._remove_sidecars()

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
        self._remove_sidecars()
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


def decode_command(path: str, selection: Sequence[str]) -> list[str]:
    """ffmpeg decoding ``path`` (a path Tome made) to s16le PCM on stdout; ``selection``: the stream,
    channel and rate options between input and output (constants and numbers only)."""
    return [
        ffmpeg_exe(),
        "-hide_banner",
        "-loglevel",
        "error",
        "-nostdin",
        "-i",
        path,
        *selection,
        "-c:a",
        "pcm_s16le",
        "-f",
        "s16le",
        "pipe:1",
    ]


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
    cmd = decode_command(name, ["-vn", "-ac", "1", "-ar", str(sample_rate)])
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = proc.stderr[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
        raise AudioError("audio_undecodable", f"ffmpeg could not decode {name}: {tail}")
    raw = proc.stdout[: len(proc.stdout) - len(proc.stdout) % 2]
    return from_pcm16(np.frombuffer(raw, dtype="<i2"))
