"""Time to first chapter: a long multi-chapter book rendered to MP3 by real Celery worker processes, each
chapter stitched as soon as its chunks are rendered (worker/jobs/chapters.py) and the book joined from
the chapter files without encoding again (worker/audio/join.py).

A generated book (``--chapters-words``, default 20,000 words in chapters of about 1,700: 12) is submitted
through the API (``POST /v1/voices``, ``POST /v1/jobs``: a script this long is planned by a worker) on
the embedded stack (SQLite, the filesystem broker), its workers started and ready before the clock.
Twice:

- ``espeak`` on one ``celery worker`` with 2 pool processes on every queue, as ``make run`` starts it.
  espeak is CPU-bound and fast, so the chapters' mastering and MP3 encoding are most of the work, in the
  same pool and on the same cores as the render.
- ``espeak-paced`` (espeak's audio at ``paced_seconds_per_chunk``, 0.25 s a chunk by default: the pace
  of a neural engine on a GPU) as docker-compose.yml's GPU deployment runs: a render worker of one
  process on the GPU queue, and a CPU worker of 2 that plans, starts and stitches. On at most
  :data:`PACED_MAX_WORDS` words (about 190 chunks), so that it stays near a minute.

Every time is read from the database rows, from the job's ``started_at``: the first chapter's
``ready_at`` (time to first chapter), the book's ``finished_at`` (its wall time), and the render's end,
which no row records (chunks have no done-at column): this process polls the job's ``chunks_done`` every
:data:`POLL_SECONDS` and takes the first time it sees ``chunks_total`` (so the render time is late by at
most that, and the ratio wall / render low by as much). Issue 12's target: the book's wall time within
1.2x its render time.

Problems (``make bench`` exits 1): a job that did not succeed, a chapter not ready, or no chapter ready
before the book was.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from flask.testing import FlaskClient
from sqlalchemy import select

from bench.engines import MODULE as ENGINE_MODULE
from models import TERMINAL, Job, JobChapter, utcnow
from tests.support.apps import app_on, tome_of
from tests.support.audio import reference_wav
from webapi.cli import mint_key
from worker.config import Settings, load_settings
from worker.processes import WorkerProcess, all_queues

WORDS = 20_000
WORDS_PER_CHAPTER = 1_700
PACED_MAX_WORDS = 15_000  # the paced case renders at most this much (about 190 chunks, 50 s of render)
ENGINES = ("espeak", "espeak-paced")
GPU_QUEUE = "tome-gpu"  # the paced case's render worker consumes only this (TOME_GPU_QUEUE)
CONCURRENCY = 2
POLL_SECONDS = 0.2
JOB_TIMEOUT = 600.0
TARGET = 1.2  # issue 12: the book's wall time within 1.2x its render time
SEED = 12

_WHO = ("The keeper", "Mrs. Avery", "The harbour master", "Old Tom", "The ferry pilot", "Captain Ross")
_DID = (
    "walked along the quay before the tide turned",
    "counted the boats that came home after dark",
    "mended a net by the light of a small lamp",
    "listened to the gulls arguing over the pier",
    "watched the fog roll in across the grey water",
    "wrote a long letter to a sister in the north",
    "carried a basket of bread up the narrow steps",
)
_WHEN = ("that morning", "in the evening", "after the storm", "while the bell rang", "before anyone woke")


def book(words: int, chapters: int, seed: int = SEED) -> str:
    """A Markdown book of about ``words`` words in ``chapters`` chapters (headings ``# Chapter N``), in
    paragraphs of about 75 words: one chunk each at espeak's 600-character limit."""
    if words < 1 or chapters < 1:
        raise ValueError(f"need at least one word and one chapter, got {words} words, {chapters} chapters")
    rng = random.Random(seed)
    parts: list[str] = []
    for n in range(chapters):
        parts.append(f"# Chapter {n + 1}")
        budget = words * (n + 1) // chapters - words * n // chapters
        while budget > 0:
            sentences: list[str] = []
            length = 0
            while length < min(75, budget):
                sentence = f"{rng.choice(_WHO)} {rng.choice(_DID)} {rng.choice(_WHEN)}."
                sentences.append(sentence)
                length += len(sentence.split())
            parts.append(" ".join(sentences))
            budget -= length
    return "\n\n".join(parts) + "\n"


def chapters_for(words: int) -> int:
    """How many chapters a book of ``words`` has here: about 1,700 words each, at least 2."""
    return max(2, round(words / WORDS_PER_CHAPTER))


@dataclass(frozen=True)
class ChapterRun:
    """One book's figures; times in seconds from the job's ``started_at`` (None: never happened)."""

    engine: str
    workers: str  # topology()
    words: int
    chapters: int  # chapter rows of the job
    chunks: int
    audio_seconds: float
    status: str
    error: str | None
    queued_s: float | None  # created_at -> started_at: planning and the voice build, not counted
    first_chapter_s: float | None  # the first chapter's ready_at
    last_chapter_s: float | None  # the last chapter's ready_at
    rendered_s: float | None  # chunks_done first seen at chunks_total (polled), capped at wall_s
    wall_s: float | None  # finished_at
    ready_before_book: int  # chapters whose ready_at is before the book's finished_at

    @property
    def ratio(self) -> float | None:
        if self.wall_s is None or not self.rendered_s:
            return None
        return self.wall_s / self.rendered_s

    @property
    def tail_s(self) -> float | None:
        """From the last chunk to the book."""
        if self.wall_s is None or self.rendered_s is None:
            return None
        return self.wall_s - self.rendered_s


def problems_of(run: ChapterRun) -> list[str]:
    label = f"chapters ({run.engine})"
    if run.status != "succeeded":
        return [f"{label}: the job ended {run.status or 'unfinished'}: {run.error}"]
    problems = []
    if run.chapters < 2:
        problems.append(
            f"{label}: the job has {run.chapters} chapter rows, expected a chapter-by-chapter book"
        )
    elif run.ready_before_book < run.chapters:
        problems.append(f"{label}: {run.ready_before_book} of {run.chapters} chapters ready before the book")
    if run.first_chapter_s is None or run.wall_s is None or not run.first_chapter_s < run.wall_s:
        problems.append(
            f"{label}: no chapter was ready before the book (first chapter {run.first_chapter_s} s, "
            f"book {run.wall_s} s)"
        )
    if run.rendered_s is None:
        problems.append(f"{label}: the render's end was never seen")
    return problems


def _seconds(since: datetime | None, at: datetime | None) -> float | None:
    return None if since is None or at is None else (at - since).total_seconds()


def _submit(client: FlaskClient, headers: dict[str, str], folder: Path, script: str) -> uuid.UUID:
    wav, text = reference_wav(folder)
    voice = client.post(
        "/v1/voices",
        data={"name": "narrator", "ref_text": text, "audio": (io.BytesIO(wav), "ref.wav")},
        headers=headers,
        content_type="multipart/form-data",
    )
    if voice.status_code != 202:
        raise RuntimeError(f"the voice upload answered {voice.status_code}: {voice.json}")
    body = {
        "title": "Chapters",
        "voice": "narrator",
        "script": script,
        "script_format": "markdown",
        "output": {"format": "mp3"},
    }
    job = client.post("/v1/jobs", json=body, headers=headers)
    if job.status_code != 202 or not job.json:
        raise RuntimeError(f"the job answered {job.status_code}: {job.json}")
    return uuid.UUID(job.json["id"])


def _workers(settings: Settings, concurrency: int) -> list[tuple[list[str], int]]:
    """The queues and pool processes of each worker: one worker on every queue, as ``make run`` starts it;
    with a ``gpu_queue``, the GPU deployment of docker-compose.yml: a render worker of one process (one
    GPU) on that queue, and a CPU worker that plans, starts and stitches, so no stitch takes a render slot."""
    if not settings.broker.gpu_queue:
        return [(all_queues(settings), concurrency)]
    return [
        ([settings.broker.gpu_queue], 1),
        ([q for q in all_queues(settings) if q != settings.broker.gpu_queue], concurrency),
    ]


def topology(gpu_queue: str, concurrency: int = CONCURRENCY) -> str:
    return f"render 1 + CPU {concurrency}" if gpu_queue else f"1 worker x {concurrency}"


def run_case(
    folder: Path,
    engine: str,
    words: int,
    chapters: int,
    concurrency: int = CONCURRENCY,
    gpu_queue: str = "",
    **overrides: float,
) -> ChapterRun:
    """Render a book of ``words`` in ``chapters`` with ``engine`` on a fresh embedded stack in ``folder``
    (workers as :func:`_workers` says); ``overrides`` are Settings (``paced_seconds_per_chunk``)."""
    settings = load_settings(
        {},
        data_dir=folder / "var",
        engine=engine,
        engine_modules=ENGINE_MODULE,
        gpu_queue=gpu_queue,
        **overrides,
    )
    script = book(words, chapters)
    with app_on(settings) as app:
        headers = {"Authorization": f"Bearer {mint_key(app, owner='bench', name='bench', admin=False)}"}
        sessions = tome_of(app).runtime.sessions
        workers: list[WorkerProcess] = []
        rendered_at: datetime | None = None
        try:
            for queues, processes in _workers(settings, concurrency):
                workers.append(WorkerProcess(settings, folder, concurrency=processes, queues=queues))
            for worker in workers:
                worker.wait_ready()
            job_id = _submit(app.test_client(), headers, folder, script)
            deadline = time.monotonic() + JOB_TIMEOUT
            while time.monotonic() < deadline:
                with sessions() as session:
                    status, done, total = session.execute(
                        select(Job.status, Job.chunks_done, Job.chunks_total).where(Job.id == job_id)
                    ).one()
                if rendered_at is None and 0 < total <= done:
                    rendered_at = utcnow()
                if status in TERMINAL:
                    break
                time.sleep(POLL_SECONDS)
        finally:
            for worker in workers:
                worker.stop()
        with sessions() as session:
            job = session.get(Job, job_id)
            assert job is not None
            rows = list(session.scalars(select(JobChapter).where(JobChapter.job_id == job_id)))
        start, finished = job.started_at, job.finished_at
        error = job.error
        if job.status not in TERMINAL:
            logs = ", ".join(str(w.log_path) for w in workers)
            error = f"not finished after {JOB_TIMEOUT:.0f} s; worker logs: {logs}"
        ready = sorted(r.ready_at for r in rows if r.ready_at is not None)
        wall = _seconds(start, finished)
        rendered = _seconds(start, rendered_at)
        if rendered is not None and wall is not None:
            rendered = min(rendered, wall)  # the last chunk and the book within one poll
        return ChapterRun(
            engine=engine,
            workers=topology(gpu_queue, concurrency),
            words=len(script.split()) - 3 * chapters,  # less the headings: "# Chapter N"
            chapters=len(rows),
            chunks=job.chunks_total,
            audio_seconds=job.output_duration or 0.0,
            status=job.status,
            error=error,
            queued_s=_seconds(job.created_at, start),
            first_chapter_s=_seconds(start, ready[0]) if ready else None,
            last_chapter_s=_seconds(start, ready[-1]) if ready else None,
            rendered_s=rendered,
            wall_s=wall,
            ready_before_book=sum(1 for at in ready if finished is not None and at < finished),
        )


def _f(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def row(run: ChapterRun, paced_s: float) -> str:
    engine = f"{run.engine} ({paced_s:g} s/chunk)" if run.engine == "espeak-paced" else run.engine
    share = None
    if run.first_chapter_s is not None and run.wall_s:
        share = 100 * run.first_chapter_s / run.wall_s
    ratio = run.ratio
    verdict = "-" if ratio is None else ("yes" if ratio <= TARGET else "no")
    cells = [
        engine,
        run.workers,
        f"{run.words:,}",
        str(run.chapters),
        str(run.chunks),
        f"{run.audio_seconds / 3600:.2f}",
        _f(run.first_chapter_s),
        _f(share, ".0f"),
        _f(run.rendered_s),
        _f(run.wall_s),
        _f(ratio, ".2f"),
        _f(run.tail_s),
        verdict,
    ]
    return "| " + " | ".join(cells) + " |"


COLUMNS = (
    "engine",
    "workers (pool processes)",
    "words",
    "chapters",
    "chunks",
    "audio h",
    "first chapter s",
    "% of wall",
    "render s",
    "book wall s",
    "wall / render",
    "last chunk -> book s",
    f"within {TARGET:g}x",
)


def _notes(run: ChapterRun) -> list[str]:
    if run.rendered_s is None or run.wall_s is None:
        return [f"{run.engine}: {run.status}: {run.error}"]
    audio_rtf = run.audio_seconds / run.rendered_s if run.rendered_s else 0.0
    join = None if run.last_chapter_s is None else run.wall_s - run.last_chapter_s
    last = None if run.last_chapter_s is None else run.last_chapter_s - run.rendered_s
    return [
        f"{run.engine}: rendered at {audio_rtf:.0f}x real time; the last chapter ready {_f(last)} s after "
        f"the last chunk, the book joined {_f(join, '.2f')} s after that; submitted -> started "
        f"{_f(run.queued_s)} s (planning on a worker, voice build: not counted)"
    ]


def _espeak_note(run: ChapterRun) -> str:
    """What the espeak row means: its render is slowed by the encoding it shares the CPU with."""
    met = run.ratio is not None and run.ratio <= TARGET
    verdict = "within" if met else "not within"
    return (
        f"espeak is {verdict} {TARGET:g}x here, but that says little about overlap: alone it renders "
        f"about 1000x real time, so on these {_cores()} cores the chapters' mastering and MP3 encoding, in "
        "the same pool processes, are most of the work and set its render time; the paced row is the one "
        "the target is about."
    )


def run_chapters_bench(
    base: Path,
    words: int = WORDS,
    chapters: int | None = None,
    engines: Sequence[str] = ENGINES,
    paced_seconds_per_chunk: float = 0.25,
) -> tuple[list[str], list[str], str]:
    """Render the book with each of ``engines`` (``espeak-paced`` on at most :data:`PACED_MAX_WORDS`, on a
    render worker and a CPU worker as a GPU deployment runs); the problems found, the report (a markdown
    table and a few lines) and a summary for the bench's last line."""
    if words < 1:
        raise ValueError(f"words must be positive, got {words!r}")
    started = time.perf_counter()
    runs: list[ChapterRun] = []
    for engine in engines:
        paced = engine == "espeak-paced"
        n = min(words, PACED_MAX_WORDS) if paced else words
        count = chapters if chapters is not None else chapters_for(n)
        if paced:
            run = run_case(
                base / engine,
                engine,
                n,
                count,
                gpu_queue=GPU_QUEUE,
                paced_seconds_per_chunk=paced_seconds_per_chunk,
            )
        else:
            run = run_case(base / engine, engine, n, count)
        runs.append(run)
    problems = [p for run in runs for p in problems_of(run)]
    lines = [
        "Celery workers (prefork) on the filesystem broker and SQLite, MP3; each chapter stitched when its "
        "chunks are done, the book joined from the chapter files.",
        "Seconds from the job's started_at (database rows); render = chunks_done polled every "
        f"{POLL_SECONDS:g} s (late by at most that). This machine: {_cores()} cores, shared with other work.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *(row(run, paced_seconds_per_chunk) for run in runs),
        "",
        *(note for run in runs for note in _notes(run)),
    ]
    lines += [_espeak_note(run) for run in runs if run.engine == "espeak" and run.ratio is not None]
    lines.append(f"Section wall time {time.perf_counter() - started:.0f} s.")
    summary = "chapters: " + " ".join(
        f"{run.engine} first={_f(run.first_chapter_s)}s wall/render={_f(run.ratio, '.2f')}x" for run in runs
    )
    return problems, lines, summary


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def non_negative(text: str) -> int:
    """``--chapters-words``: a whole number, 0 or more (argparse's ``type``)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 or more, got {text!r}")
    return value
