"""What the benchmark renders: a fresh embedded database in a temp dir, one voice and one long job.

The voice and the job are created the way the API creates them (``webapi/voices.py`` and
``webapi/jobs.py``): a mono WAV reference with its SHA-256, the script parsed and split by
``make_chunks``, the job and all its chunks inserted in one transaction, and the same two messages the
API sends (``tome.build_voice`` on upload, ``tome.start_job`` on submit).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models import Job, Voice, unit_of_work
from models.migrate import upgrade_head
from worker.audio import write_wav_atomic
from worker.config import Settings, load_settings
from worker.engines import SynthesisRequest
from worker.jobs.state import insert_job
from worker.runtime import Runtime
from worker.script import make_chunks, parse_script
from worker.task_names import BUILD_VOICE, START_JOB

OWNER = "bench"
TRANSCRIPT = (
    "The old lighthouse keeper climbed the stairs every evening, counting each step, "
    "and watched the ships pass slowly beyond the harbour wall."
)
CHUNKS_PER_CHAPTER = 50

_SUBJECTS = ("The keeper", "A fisherman", "The harbour master", "Old Mrs. Hale", "The ferry pilot")
_ACTIONS = (
    "walked along the quay before the tide turned",
    "counted the boats that came home after dark",
    "mended a net by the light of a small lamp",
    "listened to the gulls arguing over the pier",
    "watched the fog roll in across the grey water",
)


def book(chunks: int) -> str:
    """A Markdown script that makes exactly ``chunks`` chunks: chapters of 50 (a heading is read out as a
    chunk of its own, then 49 one-sentence paragraphs)."""
    lines: list[str] = []
    for n in range(chunks):
        if n % CHUNKS_PER_CHAPTER == 0:
            lines += [f"# Part {n // CHUNKS_PER_CHAPTER + 1}", ""]
            continue
        subject = _SUBJECTS[n % len(_SUBJECTS)]
        action = _ACTIONS[(n // len(_SUBJECTS)) % len(_ACTIONS)]
        lines += [f"{subject} {action} on day {n}, and wrote it down in the log.", ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Scene:
    settings: Settings
    rt: Runtime
    voice_id: uuid.UUID
    job_id: uuid.UUID
    chunks: int
    # The messages the API would have sent, in its order: build the voice, start the job.
    messages: tuple[tuple[str, list[Any]], ...]


def make_settings(data_dir: Path) -> Settings:
    """Embedded defaults (SQLite, filesystem broker) in ``data_dir``; TOME_* variables are ignored.
    Cache counters are written as they happen (no batching), so that the counts read while the bench's
    worker processes still run are complete."""
    settings = load_settings({}, data_dir=data_dir, metrics_flush_seconds=0)
    data_dir.mkdir(parents=True, exist_ok=True)
    upgrade_head(settings.sqlalchemy_url)
    return settings


def _reference(rt: Runtime, folder: Path) -> tuple[Path, float, int]:
    """A spoken reference recording, made with the embedded engine (as ``tests/support/audio.py`` does)."""
    engine = rt.engine()
    [wave] = engine.synthesize([SynthesisRequest(TRANSCRIPT, {})])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"reference-{uuid.uuid4().hex[:12]}.wav"
    write_wav_atomic(path, wave, engine.sample_rate)
    return path, round(len(wave) / engine.sample_rate, 3), engine.sample_rate


def create_scene(data_dir: Path, chunks: int) -> Scene:
    settings = make_settings(data_dir)
    rt = Runtime(settings)
    engine = rt.engine()
    voice_id = uuid.uuid4()
    path, duration, rate = _reference(rt, settings.storage.data_dir.resolve() / "voices" / str(voice_id))
    chapters = parse_script(book(chunks), "markdown")
    specs = make_chunks(chapters, engine.max_chunk_chars)
    if len(specs) != chunks:
        raise RuntimeError(f"the bench script made {len(specs)} chunks, not {chunks}")
    with unit_of_work(rt.sessions) as session:
        session.add(
            Voice(
                id=voice_id,
                owner=OWNER,
                name="Keeper",
                language="en",
                ref_text=TRANSCRIPT,
                audio_path=str(path),
                audio_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                audio_duration=duration,
                audio_sample_rate=rate,
            )
        )
    with unit_of_work(rt.sessions) as session:
        job = Job(
            owner=OWNER,
            title="Bench",
            script_format="markdown",
            voice_id=voice_id,
            engine=engine.name,
            options={"bitrate_kbps": 128, "pauses": {"sentence": 0.35, "paragraph": 0.8, "chapter": 2.0}},
            chapters=[{"index": i, "title": c.title} for i, c in enumerate(chapters)],
            chunks_total=len(specs),
            output_format="mp3",
        )
        insert_job(session, job, specs, [voice_id] * len(specs))
        job_id = job.id
    messages = ((BUILD_VOICE, [str(voice_id)]), (START_JOB, [str(job_id)]))
    return Scene(settings, rt, voice_id, job_id, len(specs), messages)
