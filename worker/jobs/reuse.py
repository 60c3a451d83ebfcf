"""Re-render only what changed: every rendered chunk is stored under a content key (engine and version,
the voice's prompt cache key, the text the engine reads, its language, rate and seed), and a chunk of a
later job of the same owner with the same key takes that audio instead of running the engine: a
hard link to the same file (byte-identical, no second copy on disk), with its duration, levels and word
times. An edited script, another output format or preset renders only the chunks whose text changed.

Seeds come from the text, not the chunk's position, so that a chunk moved by an edit elsewhere keeps
its key (and identical sentences in one book sound identical).

A take chosen on request (``POST .../chunks/{seq}/rerender``: a new seed) is also stored under its *take
key*, the content key without the seed, and a later job reading the same text with the same voice and
settings takes that chosen take before any other: a fix made once stays fixed in the next format or
edition, instead of the take its text's seed gives coming back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Row, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from models import Chunk, ChunkStatus, Job, unit_of_work
from worker.jobs import state
from worker.runtime import Runtime
from worker.storage.backend import StoredFileMissing

log = logging.getLogger(__name__)


def text_seed(text: str) -> int:
    """The synthesis seed of a chunk: from its text, so that it does not change when the chunk moves."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


def content_key(
    engine: str,
    version: str,
    voice_key: str,
    text: str,
    language: str,
    params: Mapping[str, float],
    seed: int,
) -> str:
    """Everything a chunk's audio depends on, hashed."""
    identity = [engine, version, voice_key, text, language, sorted(params.items()), seed]
    return hashlib.sha256(json.dumps(identity, ensure_ascii=False).encode("utf-8")).hexdigest()


def take_key(
    engine: str, version: str, voice_key: str, text: str, language: str, params: Mapping[str, float]
) -> str:
    """What a chunk's audio depends on but the seed, hashed: the key under which a take chosen on request
    is found by later jobs."""
    identity = ["take", engine, version, voice_key, text, language, sorted(params.items())]
    return hashlib.sha256(json.dumps(identity, ensure_ascii=False).encode("utf-8")).hexdigest()


def _checks_of(qa: object) -> frozenset[str]:
    """The names of the checks a stored QA record holds (none for a chunk rendered with QA off)."""
    checks = qa.get("checks") if isinstance(qa, Mapping) else None
    if not isinstance(checks, list):
        return frozenset()
    return frozenset(str(c.get("name")) for c in checks if isinstance(c, Mapping))


def _policy_of(qa: object, default: str) -> str:
    """The digest of the thresholds a stored QA record was held to (``default`` for a record without
    one: written before records carried it, under the engine's default thresholds)."""
    digest = qa.get("policy") if isinstance(qa, Mapping) else None
    return digest if isinstance(digest, str) else default


@dataclass(frozen=True)
class _Donor:
    key: str  # its content key
    path: str
    duration: float
    audio_bytes: int | None
    levels: dict[str, object] | None
    words: list[list[float]] | None
    qa: dict[str, object] | None

    def completion(self, chunk_id: int, path: Path, take_key: str | None) -> state.Completion:
        """The claimed chunk ``chunk_id`` done with this audio (linked or copied to ``path``)."""
        return state.Completion(
            chunk_id,
            str(path),
            self.duration,
            self.audio_bytes,
            dict(self.levels) if self.levels is not None else None,
            self.words,
            content_key=self.key,
            reused=True,
            qa=dict(self.qa) if self.qa is not None else None,
            take_key=take_key,
        )


def donor_rows(
    session: Session, owner: str, keys: Mapping[int, str], takes: Mapping[int, str] | None = None
) -> list[Row[Any]]:
    """The owner's done, unflagged chunks with audio under any of ``keys``' content keys, or chosen on
    request under any of ``takes``' take keys: the candidates :func:`take_rendered` takes audio from (read
    in the caller's transaction), latest first."""
    if not keys:
        return []
    wanted: ColumnElement[bool] = Chunk.content_key.in_(sorted(set(keys.values())))
    if takes:
        wanted = or_(wanted, Chunk.take_key.in_(sorted(set(takes.values()))))
    return list(
        session.execute(
            select(
                Chunk.content_key,
                Chunk.take_key,
                Chunk.audio_path,
                Chunk.duration,
                Chunk.audio_bytes,
                Chunk.levels,
                Chunk.words,
                Chunk.qa,
            )
            .join(Job, Job.id == Chunk.job_id)
            .where(
                Job.owner == owner,
                wanted,
                Chunk.status == ChunkStatus.DONE.value,
                Chunk.audio_path.is_not(None),
                Chunk.flagged.is_(False),
            )
            .order_by(Chunk.id.desc())
        ).all()
    )


def take_rendered(
    rt: Runtime,
    job_id: uuid.UUID,
    claimed: Sequence[state.Claimed],
    keys: Mapping[int, str],
    token: str,
    found: Sequence[Row[Any]],
    *,
    required: frozenset[str] = frozenset(),
    takes: Mapping[int, str] | None = None,
    policy: tuple[str, str] | None = None,
) -> list[int]:
    """Complete every claimed chunk (id -> key in ``keys``) whose audio one of ``found``
    (:func:`donor_rows`) holds: the latest take chosen on request under its take key (``takes``, for
    chunks whose seed comes from their text), else the audio under the same content key; returns their
    seqs. Only audio that passed QA is taken (not a flagged take its owner accepted), and only audio
    whose QA record holds every check named in ``required`` (the checks this job runs: audio an earlier
    job checked without the transcript does not stand for a job that asks for it), and, with ``policy``
    (the job's thresholds' digest, and the engine's defaults' for records written before digests were),
    only audio passed under the same thresholds; a donor whose file is gone is skipped (the chunk
    renders)."""
    donors, chosen = _usable_donors(rt, found, required, policy)
    linked: dict[int, tuple[state.Claimed, Path]] = {}
    completions = []
    for chunk in claimed:
        take = (takes or {}).get(chunk.id)
        found_donor = chosen.get(take) if take is not None else None
        donor = found_donor if found_donor is not None else donors.get(keys[chunk.id])
        if donor is None:
            continue
        path = rt.layout.chunk_audio(job_id, chunk.seq, token)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not _reuse(rt, donor.path, path):
            continue
        linked[chunk.id] = (chunk, path)
        completions.append(donor.completion(chunk.id, path, take if donor.key != keys[chunk.id] else None))
    if not completions:
        return []
    # One transaction for the batch, as for rendered chunks (one a chunk made a re-render of an edited
    # book cost a transaction per reused chunk).
    with unit_of_work(rt.sessions) as session:
        completed = set(state.complete_chunks(session, job_id, token, completions).ids)
    done = []
    for chunk_id, (chunk, path) in linked.items():
        if chunk_id in completed:
            done.append(chunk.seq)
        else:
            rt.storage.remove(path)
    if done:
        log.info("%d chunks reused from earlier renders (seqs %s)", len(done), done)
    return done


def _usable_donors(
    rt: Runtime, found: Sequence[Row[Any]], required: frozenset[str], policy: tuple[str, str] | None
) -> tuple[dict[str, _Donor], dict[str, _Donor]]:
    """The first usable donor of ``found`` for each content key, and for each take key."""
    donors: dict[str, _Donor] = {}
    chosen: dict[str, _Donor] = {}
    for r in found:
        new_key = r.content_key not in donors
        new_take = r.take_key is not None and r.take_key not in chosen
        if not (new_key or new_take) or not _passed_under(r.qa, required, policy):
            continue
        if r.duration is None or not _kept(rt, str(r.audio_path)):
            continue
        candidate = _Donor(
            str(r.content_key), str(r.audio_path), r.duration, r.audio_bytes, r.levels, r.words, r.qa
        )
        donors.setdefault(r.content_key, candidate)
        if r.take_key is not None:
            chosen.setdefault(r.take_key, candidate)
    return donors, chosen


def _passed_under(qa: Any, required: frozenset[str], policy: tuple[str, str] | None) -> bool:
    """A donor's QA record holds every required check, under the job's thresholds, and passed (a flagged
    take its owner accepted was kept on their word, not passed)."""
    if required and not required <= _checks_of(qa):
        return False
    if policy is not None and _policy_of(qa, policy[1]) != policy[0]:
        return False
    return not (isinstance(qa, Mapping) and qa.get("accepted_at"))


def _kept(rt: Runtime, stored: str) -> bool:
    """Whether a donor's audio is still stored (swept chunks have no path, but a bucket may lose one)."""
    if rt.storage.kind == "local":
        return Path(stored).is_file()
    return rt.storage.exists(stored)


def _reuse(rt: Runtime, stored: str, target: Path) -> bool:
    """``target`` holds the donor's audio: a hard link on one disk, a server-side copy in a bucket."""
    if rt.storage.kind == "local":
        return _link(Path(stored), target)
    try:
        rt.storage.copy(stored, target)
    except StoredFileMissing:
        return False
    return True


def _link(source: Path, target: Path) -> bool:
    """``target`` as the same file as ``source`` (a hard link; a copy across file systems)."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except FileNotFoundError:
        return False
    except OSError:
        try:
            shutil.copyfile(source, target)
        except FileNotFoundError:
            return False
    return True
