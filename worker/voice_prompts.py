"""Building and loading a voice's speaker prompt, guarded by compare-and-set on the voice row.

Only one build per voice runs at a time across processes (pending|failed|stale, or processing on an expired
lease, -> processing). A build re-checks the voice before publishing: a voice deleted or re-uploaded
meanwhile keeps its new state and the stale result is thrown away. Loading goes through a per-process,
bytes-capped LRU keyed by the full cache key, so a hit reads no file; every hit, miss and build is counted
in the shared counters that ``GET /metrics`` reports.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

from sqlalchemy import and_, literal, or_, select, update
from sqlalchemy.engine import CursorResult

from models import CacheStatus, Voice, unit_of_work, utcnow
from worker import counters
from worker.audio import AudioError, read_wav
from worker.engines import Engine, EngineError
from worker.runtime import Runtime
from worker.voices.lru import PromptLru
from worker.voices.store import Prompt, PromptFileError, cache_key, load_prompt, prompt_path, save_prompt

log = logging.getLogger(__name__)


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
class BuildClaim:
    """What a build saw when it took the lease: the prompt it publishes must still match this."""

    voice_id: uuid.UUID
    token: str
    key: str
    audio_path: str
    audio_sha256: str
    ref_text: str


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
    """Take the voice's build lease by compare-and-set, or say why not."""
    engine = rt.engine()
    now = utcnow()
    lease = timedelta(seconds=rt.settings.voice_build_lease_seconds)
    token = uuid.uuid4().hex
    with unit_of_work(rt.sessions) as session:
        voice = session.get(Voice, voice_id)
        if voice is None or voice.deleted_at is not None:
            return BuildOutcome.GONE
        key = key_for(voice, engine)
        if not force and voice.cache_status == CacheStatus.READY and voice.cache_key == key:
            return BuildOutcome.ALREADY_READY
        claimable = or_(
            Voice.cache_status.in_([CacheStatus.PENDING, CacheStatus.FAILED, CacheStatus.STALE]),
            and_(Voice.cache_status == CacheStatus.PROCESSING, Voice.cache_lease_until < now),
            and_(Voice.cache_status == CacheStatus.READY, or_(Voice.cache_key != key, literal(force))),
        )
        result = session.execute(
            update(Voice)
            .where(
                Voice.id == voice_id,
                Voice.deleted_at.is_(None),
                Voice.audio_sha256 == voice.audio_sha256,
                Voice.ref_text == voice.ref_text,
                claimable,
            )
            .values(
                cache_status=CacheStatus.PROCESSING,
                cache_lease_until=now + lease,
                cache_build_token=token,
                cache_error=None,
            )
        )
        assert isinstance(result, CursorResult)
        if result.rowcount != 1:
            return BuildOutcome.BUSY
        return BuildClaim(voice_id, token, key, voice.audio_path, voice.audio_sha256, voice.ref_text)


def compute_prompt(rt: Runtime, claim: BuildClaim) -> Path:
    """Encode the reference and write the prompt file (atomically); raises on bad input."""
    engine = rt.engine()
    path = prompt_path(rt.settings.data_dir, claim.voice_id, claim.key, claim.token)
    started = time.perf_counter()
    samples, sample_rate = read_wav(claim.audio_path)
    tensors = engine.encode_speaker(samples, sample_rate, claim.ref_text)
    seconds = time.perf_counter() - started
    save_prompt(path, tensors, {"cache_key": claim.key, "voice_id": str(claim.voice_id)})
    counters.add(rt.sessions, engine.name, {counters.BUILDS: 1, counters.BUILD_SECONDS: seconds})
    return path


def fail_build(rt: Runtime, claim: BuildClaim, reason: str) -> None:
    with unit_of_work(rt.sessions) as session:
        session.execute(
            update(Voice)
            .where(
                Voice.id == claim.voice_id,
                Voice.cache_status == CacheStatus.PROCESSING,
                Voice.cache_build_token == claim.token,
            )
            .values(cache_status=CacheStatus.FAILED, cache_error=reason, cache_lease_until=None)
        )


def publish_build(rt: Runtime, claim: BuildClaim, path: Path) -> BuildOutcome:
    """ready, if the voice is still the one that was encoded; otherwise the file is thrown away."""
    engine = rt.engine()
    with unit_of_work(rt.sessions) as session:
        result = session.execute(
            update(Voice)
            .where(
                Voice.id == claim.voice_id,
                Voice.deleted_at.is_(None),
                Voice.cache_status == CacheStatus.PROCESSING,
                Voice.cache_build_token == claim.token,
                Voice.audio_sha256 == claim.audio_sha256,
                Voice.ref_text == claim.ref_text,
            )
            .values(
                cache_status=CacheStatus.READY,
                cache_key=claim.key,
                cache_engine=f"{engine.name} {engine.version}",
                cache_path=str(path),
                cache_error=None,
                cache_lease_until=None,
                cache_built_at=utcnow(),
            )
        )
        assert isinstance(result, CursorResult)
        published = result.rowcount == 1
    if not published:
        discard_file(rt, claim.voice_id, path)
        log.info("voice %s changed or was deleted during its build; result discarded", claim.voice_id)
        return BuildOutcome.DISCARDED
    for older in path.parent.glob("prompt-*.safetensors"):
        if older != path:
            older.unlink(missing_ok=True)  # the prompt of a replaced recording or an older engine
    log.info("voice %s: prompt built (%s)", claim.voice_id, claim.key)
    return BuildOutcome.BUILT


def discard_file(rt: Runtime, voice_id: uuid.UUID, path: Path) -> None:
    """Remove a prompt nobody will use; if the voice is gone, its (re-created) folder goes too."""
    with rt.sessions() as session:
        current = session.scalar(select(Voice.cache_path).where(Voice.id == voice_id))
        deleted = session.scalar(select(Voice.deleted_at).where(Voice.id == voice_id)) is not None
    if deleted or current != str(path):
        path.unlink(missing_ok=True)
    if deleted:
        folder = path.parent
        if folder.is_dir() and not any(p for p in folder.iterdir() if not p.name.startswith(".prompt-")):
            for leftover in folder.iterdir():
                leftover.unlink(missing_ok=True)
            folder.rmdir()


def build_voice(rt: Runtime, voice_id: uuid.UUID, force: bool = False) -> BuildOutcome:
    """Build (or rebuild) one voice's prompt if nobody else is; safe to call any number of times."""
    claim = claim_build(rt, voice_id, force)
    if isinstance(claim, BuildOutcome):
        return claim
    try:
        path = compute_prompt(rt, claim)
    except (EngineError, AudioError, PromptFileError, FileNotFoundError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        log.warning("voice %s: prompt build failed: %s", voice_id, reason)
        fail_build(rt, claim, reason)
        return BuildOutcome.FAILED
    return publish_build(rt, claim, path)


def request_build(rt: Runtime, voice_id: uuid.UUID, force: bool) -> bool:
    """Mark a voice as wanting a build (ready|failed|stale -> pending). True if this call changed it;
    False if a build is already pending or running, or its ready prompt is current and not forced."""
    engine = rt.engine()
    with unit_of_work(rt.sessions) as session:
        voice = session.get(Voice, voice_id)
        if voice is None or voice.deleted_at is not None:
            return False
        current = voice.cache_status == CacheStatus.READY and voice.cache_key == key_for(voice, engine)
        if current and not force:
            return False
        result = session.execute(
            update(Voice)
            .where(
                Voice.id == voice_id,
                Voice.deleted_at.is_(None),
                Voice.cache_status.in_([CacheStatus.READY, CacheStatus.FAILED, CacheStatus.STALE]),
            )
            .values(cache_status=CacheStatus.PENDING, cache_error=None)
        )
        assert isinstance(result, CursorResult)
        return result.rowcount == 1


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
    """The current prompt of a ready voice and its language: from this process's LRU when it is there
    (no file read), else from its file, checked against the engine's shapes. VoiceNotReady otherwise."""
    engine = rt.engine()
    with rt.sessions() as session:
        row = session.execute(
            select(Voice.cache_status, Voice.cache_key, Voice.cache_path, Voice.language, Voice.audio_sha256)
            .add_columns(Voice.ref_text, Voice.deleted_at, Voice.name)
            .where(Voice.id == voice_id)
        ).one_or_none()
    if row is None:
        raise VoiceCacheFailed(f"voice {voice_id} does not exist")
    if row.deleted_at is not None:
        raise VoiceCacheFailed(f"voice {row.name!r} ({voice_id}) was deleted")
    key = cache_key(engine.name, engine.version, row.audio_sha256, row.ref_text)
    if row.cache_status != CacheStatus.READY or row.cache_key != key or not row.cache_path:
        raise VoiceNotReady(str(voice_id))
    lru = process_lru(rt.settings.voice_cache_max_bytes)
    prompt = lru.get(key)
    if prompt is not None:
        counters.add(rt.sessions, engine.name, {counters.HITS: 1})
        return prompt, row.language
    counters.add(rt.sessions, engine.name, {counters.MISSES: 1})
    try:
        prompt = load_prompt(Path(row.cache_path), engine.prompt_shapes)
    except PromptFileError as exc:
        # A missing or damaged file: mark the voice for a rebuild rather than render with a bad prompt.
        with unit_of_work(rt.sessions) as session:
            session.execute(
                update(Voice)
                .where(Voice.id == voice_id, Voice.cache_key == key, Voice.cache_status == CacheStatus.READY)
                .values(cache_status=CacheStatus.STALE, cache_error=str(exc))
            )
        raise VoiceNotReady(f"{voice_id}: {exc}") from exc
    lru.put(key, prompt)
    return prompt, row.language
