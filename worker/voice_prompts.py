"""Building and loading a voice's speaker prompt, guarded by compare-and-set on the voice row.

Only one build per voice runs at a time across processes (pending|failed|stale, or processing on an expired
lease, -> processing). A build re-checks the voice before publishing: a voice deleted or re-uploaded
meanwhile keeps its new state and the stale result is thrown away.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

from sqlalchemy import and_, literal, or_, select, update
from sqlalchemy.engine import CursorResult

from models import CacheStatus, Voice, unit_of_work, utcnow
from worker.audio import read_wav
from worker.engines import Engine, EngineError
from worker.runtime import Runtime
from worker.voices.store import Prompt, PromptFileError, cache_key, load_prompt, prompt_path, save_prompt

log = logging.getLogger(__name__)

BUILD_LEASE = timedelta(minutes=10)


class BuildOutcome(StrEnum):
    BUILT = "built"
    ALREADY_READY = "already_ready"
    BUSY = "busy"  # another process holds the build lease
    GONE = "gone"  # the voice was deleted
    DISCARDED = "discarded"  # the voice changed during the build; the result was thrown away
    FAILED = "failed"


class VoiceNotReady(Exception):
    """The voice has no usable prompt yet (a build is queued or running)."""


class VoiceCacheFailed(Exception):
    """The voice's prompt could not be built; the message names the voice and the reason."""


@dataclass(frozen=True)
class _Snapshot:
    audio_path: str
    audio_sha256: str
    ref_text: str


def key_for(voice: Voice, engine: Engine) -> str:
    return cache_key(engine.name, engine.version, voice.audio_sha256, voice.ref_text)


def _claim(rt: Runtime, voice_id: uuid.UUID, key: str, force: bool) -> _Snapshot | BuildOutcome:
    now = utcnow()
    with unit_of_work(rt.sessions) as session:
        voice = session.get(Voice, voice_id)
        if voice is None or voice.deleted_at is not None:
            return BuildOutcome.GONE
        if not force and voice.cache_status == CacheStatus.READY and voice.cache_key == key:
            return BuildOutcome.ALREADY_READY
        claimable = or_(
            Voice.cache_status.in_([CacheStatus.PENDING, CacheStatus.FAILED, CacheStatus.STALE]),
            and_(Voice.cache_status == CacheStatus.PROCESSING, Voice.cache_lease_until < now),
            and_(Voice.cache_status == CacheStatus.READY, or_(Voice.cache_key != key, literal(force))),
        )
        result = session.execute(
            update(Voice)
            .where(Voice.id == voice_id, Voice.deleted_at.is_(None), claimable)
            .values(
                cache_status=CacheStatus.PROCESSING, cache_lease_until=now + BUILD_LEASE, cache_error=None
            )
        )
        assert isinstance(result, CursorResult)
        if result.rowcount != 1:
            return BuildOutcome.BUSY
        return _Snapshot(voice.audio_path, voice.audio_sha256, voice.ref_text)


def build_voice(rt: Runtime, voice_id: uuid.UUID, force: bool = False) -> BuildOutcome:
    """Build (or rebuild) one voice's prompt if nobody else is; safe to call any number of times."""
    engine = rt.engine()
    with unit_of_work(rt.sessions) as session:
        voice = session.get(Voice, voice_id)
        if voice is None:
            return BuildOutcome.GONE
        key = key_for(voice, engine)
    claimed = _claim(rt, voice_id, key, force)
    if isinstance(claimed, BuildOutcome):
        return claimed
    snapshot = claimed
    path = prompt_path(rt.settings.data_dir, voice_id, key)
    try:
        samples, sample_rate = read_wav(snapshot.audio_path)
        tensors = engine.encode_speaker(samples, sample_rate, snapshot.ref_text)
        save_prompt(path, tensors, {"cache_key": key, "voice_id": str(voice_id)})
    except (EngineError, OSError, ValueError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        log.warning("voice %s: prompt build failed: %s", voice_id, reason)
        with unit_of_work(rt.sessions) as session:
            session.execute(
                update(Voice)
                .where(Voice.id == voice_id, Voice.cache_status == CacheStatus.PROCESSING)
                .values(cache_status=CacheStatus.FAILED, cache_error=reason, cache_lease_until=None)
            )
        return BuildOutcome.FAILED
    now = utcnow()
    with unit_of_work(rt.sessions) as session:
        result = session.execute(
            update(Voice)
            .where(
                Voice.id == voice_id,
                Voice.deleted_at.is_(None),
                Voice.cache_status == CacheStatus.PROCESSING,
                Voice.audio_sha256 == snapshot.audio_sha256,
                Voice.ref_text == snapshot.ref_text,
            )
            .values(
                cache_status=CacheStatus.READY,
                cache_key=key,
                cache_engine=f"{engine.name} {engine.version}",
                cache_path=str(path),
                cache_error=None,
                cache_lease_until=None,
                cache_built_at=now,
            )
        )
        assert isinstance(result, CursorResult)
        published = result.rowcount == 1
    if not published:
        path.unlink(missing_ok=True)
        log.info("voice %s changed or was deleted during its build; result discarded", voice_id)
        return BuildOutcome.DISCARDED
    log.info("voice %s: prompt built (%s)", voice_id, key)
    return BuildOutcome.BUILT


def ensure_ready(rt: Runtime, voice_id: uuid.UUID) -> bool:
    """True if the voice's prompt is ready and current; otherwise marks it stale if the engine changed.

    Raises VoiceCacheFailed when its build failed (the caller fails the job with that message).
    """
    engine = rt.engine()
    with unit_of_work(rt.sessions) as session:
        voice = session.get(Voice, voice_id)
        if voice is None or voice.deleted_at is not None:
            raise VoiceCacheFailed(f"voice {voice_id} was deleted")
        key = key_for(voice, engine)
        if voice.cache_status == CacheStatus.READY and voice.cache_key == key:
            return True
        if voice.cache_status == CacheStatus.FAILED:
            raise VoiceCacheFailed(
                f"voice {voice.name!r} ({voice.id}) has no speaker prompt: {voice.cache_error}"
            )
        if voice.cache_status == CacheStatus.READY:
            session.execute(
                update(Voice)
                .where(Voice.id == voice_id, Voice.cache_key == voice.cache_key)
                .values(cache_status=CacheStatus.STALE)
            )
        return False


def load_voice_prompt(rt: Runtime, voice_id: uuid.UUID) -> tuple[Prompt, str]:
    """The current prompt of a ready voice and its language; VoiceNotReady if it is not ready (any more)."""
    engine = rt.engine()
    with rt.sessions() as session:
        row = session.execute(
            select(Voice.cache_status, Voice.cache_key, Voice.cache_path, Voice.language, Voice.audio_sha256)
            .add_columns(Voice.ref_text, Voice.deleted_at)
            .where(Voice.id == voice_id)
        ).one_or_none()
    if row is None or row.deleted_at is not None:
        raise VoiceCacheFailed(f"voice {voice_id} was deleted")
    key = cache_key(engine.name, engine.version, row.audio_sha256, row.ref_text)
    if row.cache_status != CacheStatus.READY or row.cache_key != key or not row.cache_path:
        raise VoiceNotReady(str(voice_id))
    try:
        return load_prompt(Path(row.cache_path)), row.language
    except PromptFileError as exc:
        raise VoiceNotReady(f"{voice_id}: {exc}") from exc
