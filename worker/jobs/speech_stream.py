"""The API process's side of a speech request: the job's chunks read in order as they finish, fed to one
ffmpeg process, and its output handed to the client as it comes (no Flask, no Celery: the view returns a
:class:`SpeechStream` as a streaming response body).

A feeder thread (a greenlet under gevent) waits for each chunk by polling its row every
:data:`POLL_SECONDS`, reads its WAV, removes the file and writes its samples and the pause after it to
ffmpeg; the response iterates over ffmpeg's output. A chunk that does not come in time, or a failed job,
ends the stream: before the first byte with a status code, after it by breaking the response off, so a
client never takes a truncated file for a whole one. :meth:`SpeechStream.close` runs however the response
ends: ffmpeg is stopped, the job finished or cancelled and its chunk files removed. See
docs/how-it-works.md, "Speech requests"."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import select

from models import Chunk, ChunkStatus, Job, JobStatus, unit_of_work, utcnow
from worker.audio import Pauses, StitchError, read_wav
from worker.audio.stream import PcmStream
from worker.jobs import state
from worker.jobs.speech import SpeechError
from worker.runtime import Runtime
from worker.storage.backend import local_copy

log = logging.getLogger(__name__)

POLL_SECONDS = 0.01  # between two looks at the next chunk's row
PAUSES = Pauses()  # the pauses between chunks, as a book's defaults


class SpeechStream:
    """The encoded audio of a speech job, as an iterable of bytes with a ``close()`` (WSGI calls it)."""

    def __init__(
        self, rt: Runtime, job_id: uuid.UUID, chunks: int, encoder: PcmStream, wait_seconds: float
    ) -> None:
        self.rt = rt
        self.job_id = job_id
        self.chunks = chunks
        self.encoder = encoder
        self.wait_seconds = wait_seconds
        self.error: SpeechError | None = None
        self._first = threading.Event()  # the first chunk is read, or the feeder has given up
        self._stop = threading.Event()
        self._streamed_all = False
        self._closed = False
        self._lock = threading.Lock()
        self._feeder = threading.Thread(target=self._feed, name=f"speech-{job_id}", daemon=True)

    def start(self) -> None:
        self._feeder.start()

    def wait_first(self) -> None:
        """Return once the first chunk is rendered; raise the :class:`SpeechError` that ended the job (or
        the wait) before that."""
        self._first.wait(self.wait_seconds + 30.0)  # the feeder's own wait ends first
        if self.error is not None:
            raise self.error
        if not self._first.is_set():
            raise SpeechError("speech_timeout", "the first chunk was not rendered in time")

    def __iter__(self) -> Iterator[bytes]:
        return self._body()

    def _body(self) -> Iterator[bytes]:
        try:
            while data := self.encoder.read():
                yield data
            self._feeder.join()
            if self.error is not None:
                raise StreamBroken(self.error.message)
            self.encoder.finish()
        finally:
            self.close()

    def close(self) -> None:
        """Stop everything this stream started and end the job (idempotent, from any thread)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self.encoder.abort()
        self._feeder.join(timeout=10.0)
        try:
            _end_speech(self.rt, self.job_id, self._streamed_all and self.error is None)
        except Exception:  # the response is over either way; the job's rows say what happened
            log.exception("speech %s: could not end the job", self.job_id)

    def _feed(self) -> None:
        try:
            for seq in range(self.chunks):
                chunk = self._wait(seq)
                with local_copy(self.rt.storage, chunk.path) as local:
                    samples, rate = read_wav(local)
                self.rt.storage.remove(chunk.path)  # its audio lives in the stream from now on
                if rate != self.encoder.sample_rate:
                    expected = self.encoder.sample_rate
                    raise SpeechError("speech_failed", f"chunk {seq} is at {rate} Hz, not {expected}")
                self._first.set()  # before writing: ffmpeg may wait for the response to be read
                self.encoder.write(samples)
                if seq < self.chunks - 1:
                    self.encoder.write_silence(round(chunk.pause_seconds * rate))
            self.encoder.end()
            self._streamed_all = True
        except SpeechError as exc:
            self._give_up(exc)
        except StitchError as exc:  # ffmpeg is gone: killed by close(), or failed
            self._give_up(SpeechError("speech_failed", str(exc)))
        except Exception as exc:
            log.exception("speech %s: feeding the encoder failed", self.job_id)
            self._give_up(SpeechError("speech_failed", f"{type(exc).__name__}: {exc}"))
        finally:
            self._first.set()

    def _give_up(self, error: SpeechError) -> None:
        if not self._stop.is_set():
            log.warning("speech %s: %s", self.job_id, error.message)
        self.error = error
        self.encoder.abort()  # the response ends at once (broken off, if it has begun)

    def _wait(self, seq: int) -> _ReadyChunk:
        deadline = time.monotonic() + self.wait_seconds
        while True:
            if self._stop.is_set():
                raise SpeechError("cancelled", "the response was closed")
            chunk = _ready_chunk(self.rt, self.job_id, seq)
            if chunk is not None:
                return chunk
            if time.monotonic() > deadline:
                raise SpeechError(
                    "speech_timeout", f"chunk {seq} was not rendered within {self.wait_seconds:g} s"
                )
            self._stop.wait(POLL_SECONDS)


class StreamBroken(RuntimeError):
    """Raised inside a response that has begun: the server breaks the connection off."""


def _end_speech(rt: Runtime, job_id: uuid.UUID, streamed_all: bool) -> None:
    """The API is done with the job: finished if every chunk was streamed, else cancelled (its task stops
    before the next batch); the chunks' audio is forgotten and their files removed."""
    now = utcnow()
    with unit_of_work(rt.sessions) as session:
        if not streamed_all:
            state.cancel_job(session, job_id, now)
        else:
            state.finish_speech(session, job_id, now)
    with unit_of_work(rt.sessions) as session:
        state.forget_audio(session, job_id)
    rt.storage.remove_folder(rt.layout.job_dir(job_id))


@dataclass(frozen=True)
class _ReadyChunk:
    seq: int
    path: str
    pause_seconds: float  # the silence after it, at the engine's rate of speech


def _ready_chunk(rt: Runtime, job_id: uuid.UUID, seq: int) -> _ReadyChunk | None:
    """Chunk ``seq`` once it is done; None while it renders; :class:`SpeechError` once the job has ended
    without it (failed: with the job's ``error_detail``; cancelled)."""
    with rt.sessions() as session:
        row = session.execute(
            select(
                Chunk.status,
                Chunk.audio_path,
                Chunk.pause_after,
                Chunk.pause_seconds,
                Job.status.label("job_status"),
                Job.error,
                Job.options,
            )
            .join(Job, Job.id == Chunk.job_id)
            .where(Chunk.job_id == job_id, Chunk.seq == seq)
        ).one_or_none()
    if row is None:
        raise SpeechError("speech_failed", f"the speech job has no chunk {seq}")
    if row.status == ChunkStatus.DONE.value and row.audio_path:
        pause = PAUSES.seconds(row.pause_after if row.pause_seconds is None else row.pause_seconds)
        scale = float(row.options.get("rate_scale", 1.0)) if isinstance(row.options, dict) else 1.0
        return _ReadyChunk(seq, str(row.audio_path), pause / scale)
    if row.job_status in (JobStatus.RUNNING.value, JobStatus.SUCCEEDED.value):
        return None
    detail = row.options.get("error_detail") if isinstance(row.options, dict) else None
    if isinstance(detail, dict):
        raise SpeechError(str(detail.get("code")), str(detail.get("message")), detail.get("field"))
    raise SpeechError("speech_failed", row.error or f"the speech job was {row.job_status}")
