"""Rendering a batch of a job's chunks: claim them, synthesise them in one engine call, store each.

A chunk is claimed with a fresh attempt token and a lease (:func:`worker.jobs.state.claim_chunks`); only
that token can mark it done, so a redelivered or duplicated message never writes a second copy. The
prompts are loaded before the claim: a chunk whose voice is not ready is sent back to wait for its build
without using up an attempt.

On an engine that refills a running batch (TOME_QWEN3_PULL_CHUNKS, on by default for the Qwen3-TTS fast
runner: worker.engines.base.RefillingEngine), the task fills the engine's free slots with the next chunks
the fair scheduler gives (any job on that engine), each pulled batch claimed, checked and stored under its
own token as its own task would (:class:`_Puller`), every claim's lease kept up until it is stored
(:class:`_Leases`; docs/engines.md, "Across render tasks").
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import exists, select

from models import Chunk, Job, JobChapter, JobStatus, Voice, unit_of_work, utcnow
from worker import observe
from worker.audio import apply_fades, write_wav_atomic
from worker.audio.dsp import silence_bounds
from worker.audio.loudness import measure
from worker.audio.timings import stored_words
from worker.engines import Engine, EngineError, SynthesisRequest, release_memory
from worker.engines.base import RefillingEngine, refilling_engine, synthesize_timed
from worker.jobs import actions, quality, rerender, reuse, state
from worker.jobs.chapters import maybe_stitch_chapters
from worker.jobs.scheduler import schedule, sendable, take_next
from worker.jobs.stitch import maybe_begin_stitch
from worker.logs import log_context
from worker.qa.checks import policy_for
from worker.qa.whisper import RecogniserError
from worker.runtime import Runtime
from worker.task_names import Enqueue
from worker.voices.builds import request_builds
from worker.voices.prompts import (
    LoadedPrompt,
    VoiceCacheFailed,
    VoiceNotReady,
    ensure_ready,
    prompt_of_row,
    voice_rows,
)

log = logging.getLogger(__name__)


class EngineOutOfMemory(MemoryError):
    """One chunk alone did not fit the accelerator's memory. A MemoryError, so the render task retries it
    later with backoff (worker.tasks.TRANSIENT), when other work may have left the device."""


def render_chunks(rt: Runtime, job_id: uuid.UUID, seqs: list[int], enqueue: Enqueue) -> int:
    """Render the chunks of ``seqs`` that this call manages to claim; returns how many it completed.
    Whatever happened, the room this task held in the render queue goes to the next chunks."""
    done = _render(rt, job_id, seqs, enqueue)
    schedule(rt, enqueue)
    return done


@dataclass(frozen=True)
class _Batch:
    """A render task's claimed chunks and what rendering them needs: the steps of :func:`_render` share it."""

    rt: Runtime
    job_id: uuid.UUID
    enqueue: Enqueue
    running: _Running
    prompts: dict[uuid.UUID, LoadedPrompt]
    token: str
    claimed: list[state.Claimed]
    engine: Engine
    requests: dict[int, SynthesisRequest]  # by chunk id
    keys: dict[int, str]  # content keys, by chunk id
    take_keys: dict[int, str]  # take keys (the content key without the seed), by chunk id

    def release(self, chunks: Sequence[state.Claimed]) -> None:
        actions.release(self.rt, [c.id for c in chunks], self.token)


@dataclass
class _Pulled:
    """Chunks a render task claimed while its own batch rendered, to fill the engine's free slots: claimed,
    checked for reuse and later checked, stored and advanced exactly as a task of their own would."""

    batch: _Batch
    done: list[int]  # seqs completed from audio already rendered
    rest: list[state.Claimed]  # the chunks fed to the engine
    waves: list[Any] | None = None  # their renderings; None: render them on their own


def _render(rt: Runtime, job_id: uuid.UUID, seqs: list[int], enqueue: Enqueue) -> int:
    """The pipeline: claim, reuse, synthesise, check, store, advance; returns how many chunks it completed
    (of its own job: chunks pulled into its batch from the queue are completed too, but not counted)."""
    batch = _claim_batch(rt, job_id, seqs, enqueue)
    if batch is None:
        return 0
    done = _reuse(batch)
    if done is None:
        return 0
    rest = [c for c in batch.claimed if c.seq not in done]
    waves: list[Any] | None = None
    pulled: list[_Pulled] = []
    leases = _Leases(rt)
    leases.hold(batch.token, rest)
    if rest:
        waves, pulled = _synthesize_rest(batch, rest, leases)
    try:
        return _complete(batch, done, rest, waves, leases)
    finally:
        leases.drop(batch.token)
        for extra in pulled:
            _complete_pulled(extra, leases)


def _complete(
    batch: _Batch, done: list[int], rest: list[state.Claimed], waves: list[Any] | None, leases: _Leases
) -> int:
    """Check, store and advance a claimed batch whose ``rest`` was rendered as ``waves`` (None: a chunk
    failed the job) and whose ``done`` seqs were reused; returns how many chunks it completed. ``leases``
    (this batch's claim among them) are kept up while it is checked."""
    rt, job_id = batch.rt, batch.job_id
    left: int | None = None  # the job's chunks not done after this task's completion, if it knows
    if rest:
        reviewed = None if waves is None else _check(batch, rest, waves, leases)
        if reviewed is None:
            return len(done)
        asked = {c.id: batch.take_keys[c.id] for c in rest if c.seed is not None}  # takes chosen on request
        stored, left = _store(
            rt,
            job_id,
            batch.engine,
            rest,
            reviewed,
            batch.token,
            batch.keys,
            asked,
            batch.running.qa.policy_digest,
        )
        done += stored
    _advance(batch, done, left)
    return len(done)


def _claim_batch(rt: Runtime, job_id: uuid.UUID, seqs: list[int], enqueue: Enqueue) -> _Batch | None:
    """Claim what of ``seqs`` is claimable, once the job runs and its voices' prompts are loaded; None when
    there is nothing to render (the job ended, a prompt is not ready, nothing left to claim)."""
    running = _running_job(rt, job_id, seqs)
    if running is None:
        return None
    prompts = _load_prompts(rt, job_id, seqs, running.voices, running.voice_rows, enqueue)
    if prompts is None:
        return None
    token, claimed = _claim(rt, job_id, seqs)
    if not claimed:
        maybe_begin_stitch(rt, job_id, enqueue)
        return None
    try:
        engine = rt.engine(running.engine)
        requests = {
            c.id: SynthesisRequest(
                c.text,
                prompts[c.voice_id].prompt,
                prompts[c.voice_id].language,
                _rate_params(running.speed, c.rate),
                seed=reuse.text_seed(c.text) if c.seed is None else c.seed,
            )
            for c in claimed
        }
        keys, take_keys = _keys(engine, claimed, requests, {v: p.key for v, p in prompts.items()})
    except Exception:  # the claim is given back at once, not left to its lease
        actions.release(rt, [c.id for c in claimed], token)
        raise
    return _Batch(rt, job_id, enqueue, running, prompts, token, claimed, engine, requests, keys, take_keys)


def _reuse(batch: _Batch) -> list[int] | None:
    """The seqs completed from audio already rendered (this owner's same text, voice and settings); None
    when the job was cancelled since the claim (the claim is given back, the engine skipped)."""
    rt, qa, engine = batch.rt, batch.running.qa, batch.engine
    # a chunk whose seed was asked for renders that take; the others may take one chosen on request
    chosen = {c.id: batch.take_keys[c.id] for c in batch.claimed if c.seed is None}
    with rt.sessions() as session:  # one read: still running (not cancelled since the claim), and donors
        running_now = state.is_running(session, batch.job_id)
        found = reuse.donor_rows(session, batch.running.owner, batch.keys, chosen) if running_now else []
    if not running_now:
        batch.release(batch.claimed)
        return None
    return reuse.take_rendered(
        rt,
        batch.job_id,
        batch.claimed,
        batch.keys,
        batch.token,
        found,
        required=qa.required_checks,
        takes=chosen,
        policy=(qa.policy_digest, quality.policy_digest(policy_for(engine.name))) if qa.enabled else None,
    )


def _synthesize_rest(
    batch: _Batch, rest: list[state.Claimed], leases: _Leases
) -> tuple[list[Any] | None, list[_Pulled]]:
    """The engine's waves for ``rest`` (None when a chunk failed the job, its claim given back), and the
    chunks pulled into the engine's free slots while it rendered them (an engine that refills its batch:
    worker.engines.base.RefillingEngine). If the shared call fails, ``rest`` renders on its own, and so
    does each pulled batch after it (:func:`_complete_pulled`), under the claim it holds: a failure that
    was not theirs (out of memory with every row in, say) costs the pulled chunks no attempt, and the same
    chunks are not pulled into the next task's batch to fail again. If ``rest`` then fails too, the
    pulled batches are given back. Each pulled batch's claim is added to ``leases``."""
    refilling = refilling_engine(batch.engine)
    if refilling is None:
        return _synthesize_alone(batch, rest), []
    puller = _Puller(batch, leases)
    try:
        return _synthesize_shared(batch, rest, refilling, puller), puller.pulled
    except Exception:
        log.warning("the shared batch failed; each batch in it renders on its own", exc_info=True)
    try:
        leases.keep()
        return _synthesize_alone(batch, rest), puller.pulled
    except Exception:
        for extra in puller.pulled:
            _give_back(extra, leases)
        raise


def _synthesize_shared(
    batch: _Batch, rest: list[state.Claimed], engine: RefillingEngine, puller: _Puller
) -> list[Any]:
    """``rest`` in one engine call whose free slots ``puller`` refills; each pulled batch gets its waves
    (None when the engine left one of them out: that batch renders on its own later). The engine is told
    how many chunks wait to be pulled now, so that it runs no more slots than the rows it can fill."""
    started = time.perf_counter()
    waiting = sendable(batch.rt, batch.running.engine, _Puller.MOST_WAITING)
    waves = engine.synthesize_refilling([batch.requests[c.id] for c in rest], puller, waiting)
    own = waves[: len(rest)]
    if any(w is None for w in own):
        raise EngineError("the shared batch left out one of its own chunks")
    at = len(rest)
    for extra in puller.pulled:
        mine = waves[at : at + len(extra.rest)]
        at += len(extra.rest)
        extra.waves = None if any(w is None for w in mine) else [(w, []) for w in mine]
    rate = batch.engine.sample_rate
    lengths = [len(w) / rate for w in waves if w is not None]
    observe.chunks_rendered(batch.rt, batch.engine.name, time.perf_counter() - started, lengths)
    return [(w, []) for w in own]


class _Puller:
    """The refill of a render task's shared engine call: asked before every step for up to ``wanted``
    requests, it takes the next sendable chunks on the same engine from the fair scheduler
    (worker.jobs.scheduler.take_next), claims them under a token of their own and serves what it can from
    audio already rendered, as a render task of their own would, and returns the rest's requests. Each
    pulled claim joins ``leases``, which it keeps up while the call runs."""

    PULLS_PER_STEP = 3  # tries a step (a pulled batch may be all reused, or wait for its voice)
    IDLE_SECONDS = 2.0  # after finding nothing to send, look again this much later (not every frame)
    MOST_WAITING = 1024  # waiting chunks counted at most when the engine sizes its slots
    # Pull only in the first part of the task's soft time limit: what it pulled is checked and stored
    # after the call, within the same limit.
    PULL_SHARE_OF_TIME_LIMIT = 1 / 3

    def __init__(self, batch: _Batch, leases: _Leases) -> None:
        self.batch = batch
        self.leases = leases
        self.pulled: list[_Pulled] = []
        self.idle_until = 0.0  # nothing was sendable: no query before then
        self.stopped = False  # pull no more in this call
        limit = batch.rt.settings.tasks.task_soft_time_limit
        self.pull_until = time.monotonic() + limit * self.PULL_SHARE_OF_TIME_LIMIT

    def __call__(self, wanted: int) -> list[SynthesisRequest]:
        self.leases.keep()
        if time.monotonic() >= self.pull_until:
            self.stopped = True
        requests: list[SynthesisRequest] = []
        for _ in range(self.PULLS_PER_STEP):
            if len(requests) >= wanted or self.stopped or time.monotonic() < self.idle_until:
                break
            requests.extend(self._pull(wanted - len(requests)))
        return requests

    def _pull(self, wanted: int) -> list[SynthesisRequest]:
        own = self.batch
        taken = take_next(own.rt, wanted, own.running.engine)
        if taken is None:
            self.idle_until = time.monotonic() + self.IDLE_SECONDS
            return []
        job_id, seqs = taken
        with log_context(job_id=job_id):
            try:
                return self._claim_pulled(job_id, seqs)
            except Exception:
                # No task message holds these chunks: they go back to the scheduler now (not when a
                # lease or the sweeper's wait for sent chunks runs out), and this call pulls no more.
                log.exception("pulling chunks %s of job %s failed; given back", seqs, job_id)
                self.stopped = True
                _unsend(own.rt, job_id, seqs)
                return []

    def _claim_pulled(self, job_id: uuid.UUID, seqs: list[int]) -> list[SynthesisRequest]:
        """Claim the chunks ``seqs`` of ``job_id`` that :func:`take_next` marked sent, complete those
        already rendered, and record the rest as pulled; their requests. A claim made here is released
        before an exception leaves (its chunks still marked sent: the caller unsends them)."""
        own = self.batch
        batch = _claim_batch(own.rt, job_id, seqs, own.enqueue)
        if batch is None:
            return []
        try:
            if batch.engine is not own.engine:  # another instance (settings differ): not this loop's
                _give_back(_Pulled(batch, [], list(batch.claimed)), self.leases)
                self.stopped = True
                return []
            done = _reuse(batch)
        except Exception:
            batch.release(batch.claimed)
            raise
        if done is None:
            return []
        rest = [c for c in batch.claimed if c.seq not in done]
        self.pulled.append(_Pulled(batch, done, rest))
        self.leases.hold(batch.token, rest)
        log.info("chunks %s of job %s pulled into the running batch", [c.seq for c in rest], job_id)
        return [batch.requests[c.id] for c in rest]


class _Leases:
    """The claims a render task holds (its own batch's, each pulled batch's) until each is stored or given
    back, renewed together once a third of ``TOME_CHUNK_LEASE_SECONDS`` has passed since they last were.
    :meth:`keep` runs before every frame of a shared call, before each chunk's check and before each
    pulled batch's turn, so a claim waiting while earlier batches are checked and stored keeps its lease
    (past it, the sweeper would send its chunks again: the same work twice)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.held: dict[str, list[int]] = {}  # chunk ids, by the claim's attempt token
        self.renewed = time.monotonic()

    def hold(self, token: str, chunks: Sequence[state.Claimed]) -> None:
        if chunks:
            self.held[token] = [c.id for c in chunks]

    def drop(self, token: str) -> None:
        self.held.pop(token, None)

    def keep(self, force: bool = False) -> None:
        """Renew every held claim's lease, if a third of the lease has passed since the last renewal (or
        ``force``: before a chunk's check or new take, each of which may outlast a lease on a slow GPU).
        Never raises: a renewal that fails (the database unreachable) is logged and tried again a third
        of a lease later; a claim whose lease runs out meanwhile is sent again by the sweeper, and this task's
        store of it is then refused (its token lost)."""
        seconds = self.rt.settings.tasks.chunk_lease_seconds
        if not self.held or (not force and time.monotonic() - self.renewed < seconds / 3):
            return
        self.renewed = time.monotonic()  # a failed renewal too waits its turn (no query every frame)
        try:
            with unit_of_work(self.rt.sessions) as session:
                for token, ids in self.held.items():
                    state.renew_leases(session, ids, token, timedelta(seconds=seconds), utcnow())
        except Exception:
            log.warning("renewing the leases of held chunks failed; tried again later", exc_info=True)


def _complete_pulled(extra: _Pulled, leases: _Leases) -> None:
    """Check, store and advance a pulled batch (rendered on its own first if the shared call left it
    out); on failure its chunks are given back to the scheduler, as no task message holds them. The
    claims still waiting in ``leases`` are kept up meanwhile; this one is dropped from them after."""
    batch = extra.batch
    with log_context(job_id=batch.job_id):
        try:
            leases.keep()
            # Renewed first whatever the time (a chunk another attempt took over meanwhile is then not
            # stored: its token lost).
            if extra.rest:
                _renew_leases(batch.rt, [c.id for c in extra.rest], batch.token)
            waves = extra.waves
            if waves is None and extra.rest:
                waves = _synthesize_alone(batch, extra.rest)
            _complete(batch, extra.done, extra.rest, waves, leases)
        except Exception:
            log.exception("pulled chunks %s failed; given back", [c.seq for c in extra.rest])
            _give_back(extra, leases)
        finally:
            leases.drop(batch.token)


def _give_back(extra: _Pulled, leases: _Leases) -> None:
    """Release a pulled batch's claims and mark its chunks unsent, so the scheduler sends them again.
    Never raises: a give-back that fails (the database unreachable) is logged, and its chunks go back
    when their leases run out (the sweeper sends them again), while the task's other batches, its own
    and the other pulled ones, are still completed or given back."""
    batch = extra.batch
    leases.drop(batch.token)
    try:
        with unit_of_work(batch.rt.sessions) as session:
            for chunk in extra.rest:
                state.release_chunk(session, chunk.id, batch.token)
            state.unsend(session, batch.job_id, [c.seq for c in extra.rest])
    except Exception:
        log.exception(
            "giving back pulled chunks %s failed; left to their leases", [c.seq for c in extra.rest]
        )


def _unsend(rt: Runtime, job_id: uuid.UUID, seqs: list[int]) -> None:
    """Mark chunks sent to a pull that did not record them unsent, so the scheduler sends them again."""
    with unit_of_work(rt.sessions) as session:
        state.unsend(session, job_id, seqs)


def _synthesize_alone(batch: _Batch, rest: list[state.Claimed]) -> list[Any] | None:
    """The engine's waves for ``rest`` in calls of their own; None when a chunk failed the job (its claim
    given back)."""
    try:
        return _synthesize(
            batch.rt,
            batch.job_id,
            batch.engine,
            rest,
            [batch.requests[c.id] for c in rest],
            batch.token,
            batch.enqueue,
        )
    except Exception:
        batch.release(rest)
        raise


def _check(
    batch: _Batch, rest: list[state.Claimed], waves: list[Any], leases: _Leases
) -> list[quality.Take] | None:
    """Each chunk's take after QA (re-rendered where a check failed; ``leases`` kept up before each check
    and take); None when the batch may not be stored: a take refused under the job's policy failed its
    chunk, or the recogniser could not run."""
    rt, qa, engine, job_id = batch.rt, batch.running.qa, batch.engine, batch.job_id
    with rt.sessions() as session:
        learnt = quality.learnt(session, job_id, {c.voice_id for c in rest}) if qa.enabled else {}
    expected = [learnt.get((c.voice_id, c.rate), quality.Expected()) for c in rest]
    if qa.enabled:  # the voice's floor, and its calibrated pitch until the job has learnt its own
        expected = [
            quality.with_calibration(e, engine, batch.requests[c.id], batch.prompts[c.voice_id].key)
            for c, e in zip(rest, expected, strict=True)
        ]
    try:
        reviewed = quality.review(
            engine,
            [batch.requests[c.id] for c in rest],
            waves,
            qa,
            synthesize_in_halves,
            expected,
            renew=lambda: leases.keep(force=True),
        )
    except RecogniserError:  # a deployment's recogniser that cannot load: no take can be judged
        log.exception("the transcript check's recogniser failed")  # its paths stay in the worker log
        error = "the transcript check could not run: the worker's recogniser failed to load (see its log)"
        batch.release(rest)
        rerender.fail_job(rt, job_id, error, batch.enqueue)
        return None
    refused = next(((c, t) for c, t in zip(rest, reviewed, strict=True) if _refused(t, qa)), None)
    if refused is None:
        return reviewed
    chunk, take = refused
    assert take.result is not None
    reasons = "; ".join(take.result.reasons)
    error = f"chunk {chunk.seq} failed its quality checks in {take.renders} renders: {reasons}"
    rerender.fail_chunk(rt, job_id, (chunk.id, batch.token), error, batch.enqueue)
    batch.release(rest)
    return None


def _advance(batch: _Batch, done: list[int], left: int | None) -> None:
    """Stitch the chapters these chunks completed, and the book once none are left."""
    if batch.running.chapters:
        maybe_stitch_chapters(batch.rt, batch.job_id, done, batch.enqueue)
    # Chunks still left after this task's own completion: a later completion will see none left and
    # begin the stitch (the job row orders them), so trying here would be a wasted transaction.
    if left is None or left <= 0:
        maybe_begin_stitch(batch.rt, batch.job_id, batch.enqueue)


def _renew_leases(rt: Runtime, chunk_ids: list[int], token: str) -> int:
    lease = timedelta(seconds=rt.settings.tasks.chunk_lease_seconds)
    with unit_of_work(rt.sessions) as session:
        return state.renew_leases(session, chunk_ids, token, lease, utcnow())


def _keys(
    engine: Engine,
    claimed: Sequence[state.Claimed],
    requests: dict[int, SynthesisRequest],
    voices: dict[uuid.UUID, str],
) -> tuple[dict[int, str], dict[int, str]]:
    """Each claimed chunk's content key and take key (the content key without the seed), by chunk id
    (worker.jobs.reuse); ``voices``: each voice's prompt cache key."""
    content: dict[int, str] = {}
    takes: dict[int, str] = {}
    for c in claimed:
        request = requests[c.id]
        said = (
            engine.name,
            engine.version,
            voices.get(c.voice_id, str(c.voice_id)),
            c.text,
            request.language,
        )
        content[c.id] = reuse.content_key(*said, request.params, request.seed)
        takes[c.id] = reuse.take_key(*said, request.params)
    return content, takes


def _with_policy(record: dict[str, Any] | None, policy: str) -> dict[str, Any] | None:
    """A chunk's QA record, with the digest of the thresholds it was held to (none when QA was off)."""
    return None if record is None else {**record, "policy": policy}


@dataclass(frozen=True)
class _Running:
    """What a render task needs of its running job, read in one transaction."""

    engine: str
    speed: float
    qa: quality.QaSettings
    owner: str
    voices: frozenset[uuid.UUID]  # the voices of the task's chunks that may still be claimed
    voice_rows: dict[uuid.UUID, Any]  # what loading their prompts needs of them (worker.voices.prompts)
    chapters: bool  # the job stitches chapters one by one (it has chapter rows)


def _running_job(rt: Runtime, job_id: uuid.UUID, seqs: list[int]) -> _Running | None:
    """The job's engine, speed, QA settings and owner, and the voices its claimable chunks of ``seqs``
    use, if it is running."""
    with rt.sessions() as session:
        found = session.execute(
            select(Job, exists().where(JobChapter.job_id == Job.id)).where(Job.id == job_id)
        ).one_or_none()
        if found is None or found[0].status != JobStatus.RUNNING:
            return None
        job, chapters = found
        options = dict(job.options)
        voices = frozenset(
            session.scalars(
                select(Chunk.voice_id)
                .where(Chunk.job_id == job_id, Chunk.seq.in_(seqs), state.claimable(utcnow()))
                .distinct()
            )
        )
        rows = voice_rows(session, voices)
        language = options.get("language") or session.scalar(
            select(Voice.language).where(Voice.id == job.voice_id)
        )
        return _Running(
            job.engine,
            float(options.get("speed", 1.0)),
            quality.QaSettings.of(options, job.engine, quality.recogniser(rt.settings), language),
            job.owner,
            voices,
            rows,
            bool(chapters),
        )


def _refused(take: quality.Take, qa: quality.QaSettings) -> bool:
    """A take that may not count as done: no usable audio, or failing QA under a policy that fails."""
    return take.fatal or (not take.passed and qa.on_fail == "fail")


def _rate_params(speed: float, rate: float | None) -> dict[str, float]:
    """The engine's ``rate_scale``: the job's speed times the chunk's own rate (SSML prosody); none at 1,
    so that engines without a rate control still take ordinary jobs."""
    scale = round(speed * (rate if rate is not None else 1.0), 4)
    return {} if scale == 1.0 else {"rate_scale": scale}


def _load_prompts(
    rt: Runtime,
    job_id: uuid.UUID,
    seqs: list[int],
    voices: frozenset[uuid.UUID],
    rows: dict[uuid.UUID, Any],
    enqueue: Enqueue,
) -> dict[uuid.UUID, LoadedPrompt] | None:
    """The prompt, language and cache key of every voice in ``voices`` (those the unfinished chunks of
    ``seqs`` use). None if the job failed (a voice's build failed) or the chunks were sent back to wait
    for a build."""
    prompts: dict[uuid.UUID, LoadedPrompt] = {}
    not_ready: list[uuid.UUID] = []
    for voice_id in sorted(voices):
        try:
            prompts[voice_id] = prompt_of_row(rt, voice_id, rows.get(voice_id))
        except VoiceCacheFailed as exc:
            rerender.fail_job(rt, job_id, str(exc), enqueue)
            return None
        except VoiceNotReady:
            not_ready.append(voice_id)
    if not not_ready:
        return prompts
    with unit_of_work(rt.sessions) as session:
        state.unsend(session, job_id, seqs)
    # A build that ended between the load and the unsend above found nothing to wake: the schedule run
    # at the end of this task sends the chunks again if their voices are ready now. A voice still marked
    # ready for another engine version is marked stale here, so that it is not scheduled again unbuilt.
    for voice_id in not_ready:
        with contextlib.suppress(VoiceCacheFailed):
            ensure_ready(rt, voice_id)
    request_builds(rt, not_ready, enqueue)  # sent when there is room; none twice
    log.info("chunks %s wait for the prompts of %s", seqs, ", ".join(map(str, not_ready)))
    return None


def _claim(rt: Runtime, job_id: uuid.UUID, seqs: list[int]) -> tuple[str, list[state.Claimed]]:
    settings = rt.settings
    with unit_of_work(rt.sessions) as session:
        return state.claim_chunks(
            session,
            job_id,
            seqs,
            timedelta(seconds=settings.tasks.chunk_lease_seconds),
            settings.tasks.max_chunk_attempts,
            utcnow(),
        )


def _synthesize(
    rt: Runtime,
    job_id: uuid.UUID,
    engine: Engine,
    claimed: Sequence[state.Claimed],
    requests: Sequence[SynthesisRequest],
    token: str,
    enqueue: Enqueue,
) -> list[Any] | None:
    """The batch in one engine call; on bad input, chunk by chunk to name the chunk that fails the job."""
    try:
        started = time.perf_counter()
        waves = synthesize_in_halves(engine, requests)
        lengths = [len(wave) / engine.sample_rate for wave, _ in waves]
        observe.chunks_rendered(rt, engine.name, time.perf_counter() - started, lengths)
        return waves
    except EngineError:
        waves = []
        for chunk, request in zip(claimed, requests, strict=True):
            try:
                waves.extend(synthesize_timed(engine, [request]))
            except EngineError as exc:
                error = f"chunk {chunk.seq} could not be rendered: {exc}"
                rerender.fail_chunk(rt, job_id, (chunk.id, token), error, enqueue)
                actions.release(rt, [c.id for c in claimed], token)
                return None
        return waves


def _store(
    rt: Runtime,
    job_id: uuid.UUID,
    engine: Engine,
    claimed: Sequence[state.Claimed],
    takes: Sequence[quality.Take],
    token: str,
    keys: dict[int, str],
    chosen: dict[int, str],
    policy: str,
) -> tuple[list[int], int | None]:
    """Write each chunk's audio (one file per attempt), then mark the batch done under the claim's token in
    one transaction, unless the job is no longer running (the batch is then given back). Returns the
    seqs it completed and how many of the job's chunks were left after (None: it completed none).

    The job's state is read once for the batch, in the transaction that completes it, not before every
    chunk, and its counters move once (worker.jobs.state.complete_chunks): no database round trip or
    update of the job's one row per chunk."""
    rate = engine.sample_rate
    completions: list[state.Completion] = []
    paths: dict[int, Path] = {}
    for chunk, take in zip(claimed, takes, strict=True):
        wave, marks = take.wave, take.marks
        start, stop = silence_bounds(wave, rate)
        samples = apply_fades(wave[start:stop], rate)
        words = stored_words(marks, rate, offset=start, length=stop - start) if marks else None
        path = rt.layout.chunk_audio(job_id, chunk.seq, token)
        path.parent.mkdir(parents=True, exist_ok=True)
        size = write_wav_atomic(path, samples, rate, durable=False)  # made durable with the batch
        paths[chunk.id] = path
        completions.append(
            state.Completion(
                chunk.id,
                str(path),
                len(samples) / rate,
                size,
                measure(samples, rate).to_json(),
                words,
                content_key=keys.get(chunk.id),
                take_key=chosen.get(chunk.id),
                qa=_with_policy(take.to_json(), policy),
                flagged=not take.passed,
                rerendered=take.renders > 1,
            )
        )
    # In the store (durable, or uploaded) before the row says done: a stitcher anywhere finds it.
    rt.storage.publish_batch(list(paths.values()))
    with unit_of_work(rt.sessions) as session:
        if state.is_running(session, job_id):
            result = state.complete_chunks(session, job_id, token, completions)
        else:
            result = state.Completed([], None)
            for chunk in claimed:
                state.release_chunk(session, chunk.id, token)
            log.info("no longer running; stored none of %d chunks", len(claimed))
    completed = set(result.ids)
    for chunk in claimed:
        with log_context(chunk_seq=chunk.seq, voice_id=chunk.voice_id):
            if chunk.id in completed:
                log.info("chunk %d stored", chunk.seq)
            else:  # another attempt owns this chunk now, or the job ended
                rt.storage.remove(paths[chunk.id])
                log.info("chunk %d not stored (taken over, or the job ended); this copy removed", chunk.seq)
    done = [c.seq for c in claimed if c.id in completed]
    if done:
        log.info("%d chunks rendered (seqs %s..%s)", len(done), done[0], done[-1])
    return done, result.left


def is_out_of_memory(exc: BaseException) -> bool:
    """MemoryError, or an accelerator's out-of-memory error (torch.cuda.OutOfMemoryError and kin)."""
    return isinstance(exc, MemoryError) or "OutOfMemory" in type(exc).__name__


def synthesize_in_halves(engine: Engine, requests: Sequence[SynthesisRequest]) -> list[Any]:
    """One engine call for the batch (each wave with the word marks the engine reports, if any); if it
    runs out of memory, the two halves separately, and so on. A single chunk that still does not fit
    raises :class:`EngineOutOfMemory`."""
    try:
        return synthesize_timed(engine, requests)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        if len(requests) < 2:
            raise EngineOutOfMemory(f"one chunk does not fit: {exc}") from exc
    # Split outside the except block: there the failed call's traceback, and the tensors its frames hold,
    # would stay alive while the halves run, and release_memory could give little back.
    release_memory(engine)  # e.g. torch's cached CUDA blocks, before the smaller tries
    half = len(requests) // 2
    log.warning("engine out of memory on a batch of %d; retrying as %d + %d", len(requests), half,
                len(requests) - half)  # fmt: skip
    return synthesize_in_halves(engine, requests[:half]) + synthesize_in_halves(engine, requests[half:])
