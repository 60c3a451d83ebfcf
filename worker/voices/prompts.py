"""Building and loading a voice's speaker prompt (the state changes themselves: :mod:`.state`).

A build claims the voice by compare-and-set, encodes the reference with the engine, writes the prompt
file atomically and publishes it only if the voice is still the one it encoded. Loading goes through a
per-process, bytes-capped LRU keyed by the full cache key, so a hit reads no file; every hit, miss and
build is counted in the shared counters that ``GET /metrics`` reports.
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from models import CacheStatus, Voice, VoiceBuild, unit_of_work, utcnow
from worker import counters, observe
from worker.audio import AudioError, read_wav
from worker.engines import Engine, EngineError
from worker.engines.base import embedding_engine
from worker.jobs.quality import recogniser
from worker.qa.reference import check_reference_transcript
from worker.qa.transcript import understands
from worker.runtime import Runtime
from worker.storage.backend import StoredFileMissing, folder_key, local_copy
from worker.voices import state
from worker.voices.embedding import EmbeddingError, is_embedding_reference, parse_embedding
from worker.voices.lru import PromptLru
from worker.voices.state import BuildClaim, BuildOutcome
from worker.voices.store import Prompt, PromptFileError, cache_key, load_prompt, save_prompt

__all__ = [
    "BuildClaim",
    "BuildOutcome",
    "LoadedPrompt",
    "VoiceCacheFailed",
    "VoiceNotReady",
    "build_voice",
    "claim_build",
    "compute_prompt",
    "ensure_ready",
    "fail_build",
    "key_for",
    "load_ready_prompt",
    "load_voice_prompt",
    "process_lru",
    "prompt_from_embedding_file",
    "prompt_of_row",
    "publish_build",
    "record_build",
    "request_build",
    "voice_rows",
]

log = logging.getLogger(__name__)


class VoiceNotReady(Exception):
    """The voice has no usable prompt yet (a build is queued or running)."""


class VoiceCacheFailed(Exception):
    """The voice's prompt could not be built; the message names the voice and the reason."""


def key_for(voice: Voice, engine: Engine) -> str:
    return cache_key(engine.name, engine.version, voice.audio_sha256, voice.ref_text)


_lru: tuple[int, PromptLru] | None = None


def process_lru(max_bytes: int) -> PromptLru:
    """This process's prompt LRU (a forked child starts with its own, empty one)."""
    global _lru  # noqa: PLW0603 - one cache per process, by design
    if _lru is None or _lru[0] != os.getpid():
        _lru = (os.getpid(), PromptLru(max_bytes))
    return _lru[1]


def claim_build(rt: Runtime, voice_id: uuid.UUID, force: bool = False) -> BuildClaim | BuildOutcome:
    """Take the voice's build lease, or say why not."""
    engine = rt.engine()
    lease = timedelta(seconds=rt.settings.voices.build_lease_seconds)
    with unit_of_work(rt.sessions) as session:
        voice = session.get(Voice, voice_id)
        if voice is None or voice.deleted_at is not None:
            return BuildOutcome.GONE
        return state.claim_build(
            session, voice, key_for(voice, engine), force=force, lease=lease, now=utcnow()
        )


def compute_prompt(rt: Runtime, claim: BuildClaim) -> Path:
    """Encode the reference and write the prompt file (atomically); raises on bad input."""
    engine = rt.engine()
    path = rt.layout.prompt(claim.voice_id, claim.key, claim.token)
    metadata = {"cache_key": claim.key, "voice_id": str(claim.voice_id)}
    if is_embedding_reference(claim.audio_path):  # nothing to encode: the embedding is the prompt
        with local_copy(rt.storage, claim.audio_path) as reference:
            save_prompt(path, prompt_from_embedding_file(engine, reference), metadata)
        rt.storage.publish(path)
        return path
    started = time.perf_counter()
    with local_copy(rt.storage, claim.audio_path) as reference:
        samples, sample_rate = read_wav(reference)
    tensors = engine.encode_speaker(samples, sample_rate, claim.ref_text)
    seconds = time.perf_counter() - started
    save_prompt(path, tensors, metadata)
    rt.storage.publish(path)  # in the store before the voice row names it
    counters.add(rt.sessions, engine.name, {counters.BUILDS: 1, counters.BUILD_SECONDS: seconds})
    observe.prompt_built(rt, engine.name, seconds)
    return path


def prompt_from_embedding_file(engine: Engine, path: Path) -> Prompt:
    """The prompt of an embedding voice (its file checked again: the engine's checkpoint may differ from
    the one it was uploaded for). EngineError when the engine has no embeddings or the file does not fit."""
    speaker = embedding_engine(engine)
    if speaker is None:
        raise EngineError(
            f"engine {engine.name} has no speaker embeddings; upload a recording for this voice"
        )
    try:
        embedding = parse_embedding(path.read_bytes(), speaker.embedding_spec)
    except EmbeddingError as exc:
        raise EngineError(f"the voice's embedding does not fit engine {engine.name}: {exc}") from exc
    return speaker.prompt_from_embedding(embedding)


def fail_build(rt: Runtime, claim: BuildClaim, reason: str) -> None:
    with unit_of_work(rt.sessions) as session:
        state.fail_build(session, claim, reason)


def check_transcript_of(rt: Runtime, claim: BuildClaim) -> list[dict[str, Any]] | None:
    """The warnings of the transcript check of the claimed reference against its ``ref_text`` (empty
    for a voice that is not English: the embedded recogniser knows English only), or None when the
    check could not run. It only ever warns: it never fails a build."""
    with rt.sessions() as session:
        language = session.scalar(select(Voice.language).where(Voice.id == claim.voice_id))
    hearing = recogniser(rt.settings)
    if language is None or not understands(hearing, language) or is_embedding_reference(claim.audio_path):
        return []
    started = time.perf_counter()
    try:
        with local_copy(rt.storage, claim.audio_path) as reference:
            samples, sample_rate = read_wav(reference)
        findings = check_reference_transcript(hearing, samples, sample_rate, claim.ref_text)
    except Exception:  # advisory: a recogniser failure must not cost the voice its prompt
        log.exception("voice %s: the transcript check of its reference failed", claim.voice_id)
        return None
    log.info(
        "voice %s: transcript check in %.1f s: %s",
        claim.voice_id,
        time.perf_counter() - started,
        ", ".join(f.message for f in findings) or "ok",
    )
    return [finding.to_json() for finding in findings]


def publish_build(
    rt: Runtime, claim: BuildClaim, path: Path, transcript_warnings: list[dict[str, Any]] | None = None
) -> BuildOutcome:
    """ready, if the voice is still the one that was encoded; otherwise the file is thrown away.
    ``transcript_warnings`` (see :func:`check_transcript_of`) are published with it."""
    engine = rt.engine()
    with unit_of_work(rt.sessions) as session:
        label = f"{engine.name} {engine.version}"
        published = state.publish_build(session, claim, label, str(path), transcript_warnings)
    if not published:
        discard_file(rt, claim.voice_id, path)
        log.info("voice %s changed or was deleted during its build; result discarded", claim.voice_id)
        return BuildOutcome.DISCARDED
    for stored in rt.storage.list_objects(folder_key(path.parent)):
        name = stored.key.rsplit("/", 1)[-1]
        if name.startswith("prompt-") and name.endswith(".safetensors") and name != path.name:
            # the prompt of a replaced recording or an older engine
            rt.storage.remove(rt.layout.root / stored.key)
    log.info("voice %s: prompt built (%s)", claim.voice_id, claim.key)
    return BuildOutcome.BUILT


def discard_file(rt: Runtime, voice_id: uuid.UUID, path: Path) -> None:
    """Remove a prompt nobody will use; if the voice is gone, its (re-created) folder goes too."""
    with rt.sessions() as session:
        current = session.scalar(select(Voice.cache_path).where(Voice.id == voice_id))
        deleted = session.scalar(select(Voice.deleted_at).where(Voice.id == voice_id)) is not None
    if deleted or current != str(path):
        rt.storage.remove(path)
    if deleted and rt.storage.kind != "local":
        rt.storage.remove_folder(path.parent)
    if deleted:
        folder = path.parent
        if folder.is_dir() and not any(p for p in folder.iterdir() if not p.name.startswith(".prompt-")):
            for leftover in folder.iterdir():
                leftover.unlink(missing_ok=True)
            folder.rmdir()


def build_voice(rt: Runtime, voice_id: uuid.UUID, force: bool = False) -> BuildOutcome:
    """Build (or rebuild) one voice's prompt if nobody else is; safe to call any number of times. The
    reference's transcript is checked on the way (warnings on the voice, never a failure)."""
    claim = claim_build(rt, voice_id, force)
    if isinstance(claim, BuildOutcome):
        return claim
    started = time.perf_counter()
    try:
        path = compute_prompt(rt, claim)
    except Exception as exc:  # whatever the engine raises: the claim is given up now, not at lease expiry
        reason = failure_reason(exc)
        expected = isinstance(
            exc, (EngineError, AudioError, PromptFileError, FileNotFoundError, StoredFileMissing)
        )
        log.warning("voice %s: prompt build failed: %s", voice_id, exc, exc_info=not expected)
        fail_build(rt, claim, reason)
        record_build(rt, claim, BuildOutcome.FAILED, time.perf_counter() - started)
        return BuildOutcome.FAILED
    except BaseException:  # the worker is stopping: another one builds it without waiting for the lease
        with unit_of_work(rt.sessions) as session:
            state.release_build(session, claim)
        raise
    outcome = publish_build(rt, claim, path, check_transcript_of(rt, claim))
    record_build(rt, claim, outcome, time.perf_counter() - started)
    return outcome


def record_build(rt: Runtime, claim: BuildClaim, outcome: BuildOutcome, seconds: float) -> None:
    """Count a build that ran in its owner's usage: the worker seconds it took (its transcript check
    included) and the seconds of reference audio it encoded, whatever became of its result."""
    with unit_of_work(rt.sessions) as session:
        row = session.execute(
            select(Voice.owner, Voice.audio_duration).where(Voice.id == claim.voice_id)
        ).first()
        if row is None:
            return
        session.add(
            VoiceBuild(
                voice_id=claim.voice_id,
                owner=row.owner,
                seconds=round(seconds, 3),
                audio_seconds=float(row.audio_duration or 0.0),
                outcome=outcome.value,
            )
        )


# An absolute path in an error message (a server file the voice's owner must not learn of).
_SERVER_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?[/\\](?:[^\s'\"/\\:]+[/\\])+[^\s'\",:;)]*")
_MAX_REASON = 500


def failure_reason(exc: BaseException) -> str:
    """What a failed build tells the voice's owner (``cache_error``, and the jobs failed for it): the kind
    of error and its message, without server paths, at most 500 characters."""
    message = _SERVER_PATH.sub("<file>", str(exc)).strip() or "no message"
    reason = f"{type(exc).__name__}: {message}"
    return reason if len(reason) <= _MAX_REASON else reason[: _MAX_REASON - 3] + "..."


def request_build(rt: Runtime, voice_id: uuid.UUID, force: bool) -> bool:
    """Mark a voice as wanting a build (see :func:`worker.voices.state.request_build`)."""
    engine = rt.engine()
    with unit_of_work(rt.sessions) as session:
        voice = session.get(Voice, voice_id)
        if voice is None or voice.deleted_at is not None:
            return False
        return state.request_build(session, voice, key_for(voice, engine), force=force)


def ensure_ready(rt: Runtime, voice_id: uuid.UUID) -> bool:
    """True if the voice's prompt is ready and current; otherwise marks it stale if the engine changed.

    Raises VoiceCacheFailed when its build failed (the caller fails the job with that message).
    """
    engine = rt.engine()
    with unit_of_work(rt.sessions) as session:
        voice = session.get(Voice, voice_id)
        if voice is None:
            raise VoiceCacheFailed(f"voice {voice_id} does not exist")
        if voice.deleted_at is not None:
            raise VoiceCacheFailed(f"voice {voice.name!r} ({voice.id}) was deleted")
        key = key_for(voice, engine)
        if state.is_current(voice, key):
            return True
        if voice.cache_status == CacheStatus.FAILED:
            raise VoiceCacheFailed(
                f"voice {voice.name!r} ({voice.id}) has no speaker prompt: {voice.cache_error}"
            )
        if voice.cache_status == CacheStatus.READY:
            # Ready for another engine. Only then: a voice read while its build runs keeps the key it
            # will be published with, so marking "ready with that key" stale here could undo a build
            # published a moment after this read (a request polling for it would then wait forever).
            state.mark_stale(session, voice_id, voice.cache_key)
        return False


@dataclass(frozen=True)
class LoadedPrompt:
    prompt: Prompt
    language: str
    key: str  # the prompt's cache key (what a chunk's content key names the voice by)


def load_voice_prompt(rt: Runtime, voice_id: uuid.UUID) -> tuple[Prompt, str]:
    """The current prompt of a ready voice and its language (:func:`load_ready_prompt`)."""
    loaded = load_ready_prompt(rt, voice_id)
    return loaded.prompt, loaded.language


def load_ready_prompt(rt: Runtime, voice_id: uuid.UUID) -> LoadedPrompt:
    """The current prompt of a ready voice, its language and cache key: from this process's LRU when it
    is there (no file read), else from its file, checked against the engine's shapes. VoiceNotReady
    otherwise."""
    with rt.sessions() as session:
        row = voice_rows(session, [voice_id]).get(voice_id)
    return prompt_of_row(rt, voice_id, row)


def voice_rows(session: Session, voice_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Row[Any]]:
    """What :func:`prompt_of_row` needs of each voice, by id, in one query (in the caller's transaction)."""
    wanted = sorted(set(voice_ids))
    if not wanted:
        return {}
    rows = session.execute(
        select(Voice.id, Voice.cache_status, Voice.cache_key, Voice.cache_path, Voice.language)
        .add_columns(Voice.audio_sha256, Voice.ref_text, Voice.deleted_at, Voice.name)
        .where(Voice.id.in_(wanted))
    ).all()
    return {row.id: row for row in rows}


def prompt_of_row(rt: Runtime, voice_id: uuid.UUID, row: Row[Any] | None) -> LoadedPrompt:
    """:func:`load_ready_prompt` for a voice whose row (:func:`voice_rows`; None: no such voice) is read."""
    engine = rt.engine()
    if row is None:
        raise VoiceCacheFailed(f"voice {voice_id} does not exist")
    if row.deleted_at is not None:
        raise VoiceCacheFailed(f"voice {row.name!r} ({voice_id}) was deleted")
    key = cache_key(engine.name, engine.version, row.audio_sha256, row.ref_text)
    if row.cache_status != CacheStatus.READY or row.cache_key != key or not row.cache_path:
        raise VoiceNotReady(str(voice_id))
    lru = process_lru(rt.settings.voices.cache_max_bytes)
    prompt = lru.get(key)
    if prompt is not None:
        counters.add_batched(rt.sessions, engine.name, {counters.HITS: 1})  # no write per hit
        return LoadedPrompt(prompt, row.language, key)
    counters.add_batched(rt.sessions, engine.name, {counters.MISSES: 1})
    try:
        with local_copy(rt.storage, row.cache_path) as stored:
            prompt = load_prompt(stored, engine.prompt_shapes)
    except (PromptFileError, StoredFileMissing) as exc:
        # A missing or damaged file: mark the voice for a rebuild rather than render with a bad prompt.
        with unit_of_work(rt.sessions) as session:
            state.mark_stale(session, voice_id, key, str(exc))
        raise VoiceNotReady(f"{voice_id}: {exc}") from exc
    lru.put(key, prompt)
    return LoadedPrompt(prompt, row.language, key)
