"""Render tasks that pull the fair scheduler's next chunks into their running batch (worker.jobs.render,
``_Puller``), when something fails: a failed shared call renders each batch in it on its own; a pulled
batch that fails on its own, or a pull that fails after its claim, is given back to the scheduler at once
(claims released, marked unsent) and sent again; each job succeeds, and no chunk is counted twice.

The database (SQLite and PostgreSQL), the scheduler, the render and stitch task bodies and espeak are
real (tasks run in this process, tests/support/inline.py); the engine is espeak behind the refilling
protocol, with faults armed by the test (tests/support/refilling.py). One render task in flight, one chunk
a task: every other chunk waits in the database for a pull or the scheduler."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import select

from models import Chunk, ChunkStatus, Job
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import app_on, tome_of
from tests.support.inline import Inline
from tests.support.refilling import InjectedFault, RefillingEspeak, refilling_espeak
from webapi.cli import mint_key
from worker.config import Settings, load_settings
from worker.jobs import render, state
from worker.jobs.start import StartOutcome, start_job
from worker.runtime import Runtime
from worker.task_names import RENDER_CHUNKS
from worker.voices.prompts import build_voice

OWNERS = ("alice", "bob", "carol")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings({}, data_dir=tmp_path / "var", chunks_per_task=1, render_tasks_in_flight=1)


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Flask]:
    """The app on each database: the embedded SQLite one, then a fresh PostgreSQL one (whose row locks
    the scheduler's pulls skip), with the test's settings."""
    chosen = settings
    if request.param == "postgresql":
        chosen = request.getfixturevalue("pg_settings").with_overrides(
            chunks_per_task=1, render_tasks_in_flight=1
        )
    with app_on(chosen) as app:
        yield app


@pytest.fixture
def engine(settings: Settings) -> Iterator[RefillingEspeak]:
    with refilling_espeak(settings) as engine:
        yield engine


def _script(owner: str) -> str:
    """Three paragraphs (three chunks), none another owner's (no reuse between the jobs)."""
    return "\n\n".join(
        f"{owner.title()} walked down to the harbour for the {n} time, and waited there for the boat."
        for n in ("first", "second", "third")
    )


def _start_jobs(app: Flask, reference_audio: tuple[bytes, str], inline: Inline) -> dict[str, uuid.UUID]:
    """A started three-chunk job for each owner (alice's first, then bob's, then carol's), each in a voice
    of its own, built."""
    client, rt = app.test_client(), tome_of(app).runtime
    jobs: dict[str, uuid.UUID] = {}
    for owner in OWNERS:
        headers = bearer(mint_key(app, owner, "k", admin=False))
        voice = upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
        assert voice.status_code == 202, voice.json
        assert build_voice(rt, uuid.UUID(voice.json["id"])).value == "built"
        job = submit_job(client, headers, "narrator", title=owner, script=_script(owner))
        assert job.status_code == 202, job.json
        jobs[owner] = uuid.UUID(job.json["id"])
        assert start_job(rt, jobs[owner], inline.enqueue) == StartOutcome.STARTED
    return jobs


def _chunks(rt: Runtime, job_ids: Any) -> list[Chunk]:
    with rt.sessions() as session:
        return list(
            session.scalars(select(Chunk).where(Chunk.job_id.in_(list(job_ids))).order_by(Chunk.id)).all()
        )


def _first_task(inline: Inline) -> tuple[uuid.UUID, list[int]]:
    """The one render message the start sent (alice's first chunk), taken off the queue."""
    [args] = [args for name, args in inline.queue if name == RENDER_CHUNKS]
    inline.queue.clear()
    return uuid.UUID(args[0]), list(args[1])


def _assert_all_rendered_once(rt: Runtime, jobs: dict[str, uuid.UUID], again: set[str]) -> None:
    """Every job succeeded with every chunk done and counted once, its audio stored under the token of
    the attempt that completed it; the chunks whose texts are in ``again`` took two attempts, the others
    one."""
    with rt.sessions() as session:
        for job_id in jobs.values():
            job = session.get(Job, job_id)
            assert job is not None
            assert job.status == "succeeded", (job.status, job.error)
            assert job.chunks_done == job.chunks_total == 3
    layout = rt.settings.layout
    for chunk in _chunks(rt, jobs.values()):
        assert chunk.status == ChunkStatus.DONE.value
        assert chunk.attempts == (2 if chunk.text in again else 1), (chunk.text, chunk.attempts)
        assert chunk.attempt_token is not None
        assert chunk.audio_path is not None
        assert (
            Path(chunk.audio_path).name
            == layout.chunk_audio(chunk.job_id, chunk.seq, chunk.attempt_token).name
        )


def test_a_failed_shared_call_renders_each_batch_in_it_on_its_own(
    app: Flask, engine: RefillingEspeak, reference_audio: tuple[bytes, str]
) -> None:
    """The shared call fails with bob's pulled chunks in it: the task renders its own chunk alone, then
    bob's under the claim its pull made. No chunk spends a second attempt on a failure that was not its
    own (given back, the same chunks would be the next pull's and could fail again)."""
    rt = tome_of(app).runtime
    inline = Inline(rt)
    jobs = _start_jobs(app, reference_audio, inline)
    engine.fail_shared = 1
    job_id, seqs = _first_task(inline)
    assert job_id == jobs["alice"]
    assert render.render_chunks(rt, job_id, seqs, inline.enqueue) == 1  # its own chunk, alone
    assert engine.failed == ["shared"]
    pulled = set(engine.pulled[0])
    assert pulled, "the first shared call held pulled chunks when it failed"
    rendered = [c for c in _chunks(rt, jobs.values()) if c.text in pulled]
    assert {c.job_id for c in rendered} == {jobs["bob"]}
    for chunk in rendered:  # completed by the same task, at the attempt the pull claimed
        assert (chunk.status, chunk.attempts) == (ChunkStatus.DONE.value, 1), chunk.text
    inline.run()
    _assert_all_rendered_once(rt, jobs, again=set())


def test_a_failed_shared_call_whose_own_batch_fails_alone_gives_the_pulled_chunks_back(
    app: Flask, engine: RefillingEspeak, reference_audio: tuple[bytes, str]
) -> None:
    """The shared call fails, and the task's own chunk fails alone too (the task raises): bob's pulled
    chunks are given back (released, unsent) before the exception leaves, and both jobs succeed."""
    rt = tome_of(app).runtime
    inline = Inline(rt)
    jobs = _start_jobs(app, reference_audio, inline)
    [alice_first] = [c.text for c in _chunks(rt, [jobs["alice"]]) if c.seq == 0]
    engine.fail_shared = 1
    engine.fail_texts = {alice_first}
    job_id, seqs = _first_task(inline)
    with pytest.raises(InjectedFault, match="rendering"):
        render.render_chunks(rt, job_id, seqs, inline.enqueue)
    assert engine.failed == ["shared", alice_first]
    pulled = set(engine.pulled[0])
    bobs = _chunks(rt, [jobs["bob"]])
    assert pulled
    assert pulled <= {c.text for c in bobs}
    for chunk in bobs:
        if chunk.text in pulled:
            assert (chunk.status, chunk.lease_until, chunk.enqueued_at) == (
                ChunkStatus.PENDING.value,
                None,
                None,
            )
            assert chunk.attempts == 1
    # The task again (as the sweeper's re-send of its chunk runs it): its pull takes bob's chunks anew.
    assert render.render_chunks(rt, job_id, seqs, inline.enqueue) == 1
    inline.run()
    _assert_all_rendered_once(rt, jobs, again=pulled | {alice_first})


def test_a_pulled_batch_that_fails_on_its_own_is_sent_again_and_its_job_succeeds(
    app: Flask, engine: RefillingEspeak, reference_audio: tuple[bytes, str]
) -> None:
    """The shared call leaves the pulled chunks out (the caller renders them on its own after its own
    batch) and that rendering fails: the pulled batch is given back, and the scheduler sends it again."""
    rt = tome_of(app).runtime
    inline = Inline(rt)
    jobs = _start_jobs(app, reference_audio, inline)
    [bob_first] = [c.text for c in _chunks(rt, [jobs["bob"]]) if c.seq == 0]
    engine.leave_out = 1
    engine.fail_texts = {bob_first}
    job_id, seqs = _first_task(inline)
    assert render.render_chunks(rt, job_id, seqs, inline.enqueue) == 1
    assert engine.failed == [bob_first]
    pulled = set(engine.pulled[0])
    assert bob_first in pulled
    for chunk in _chunks(rt, jobs.values()):
        if chunk.text in pulled:
            assert (chunk.status, chunk.lease_until, chunk.attempts) == (ChunkStatus.PENDING.value, None, 1)
    inline.run()
    _assert_all_rendered_once(rt, jobs, again=pulled)


@pytest.mark.parametrize("where", ["_keys", "_reuse"])
def test_a_pull_that_fails_after_its_claim_releases_it_at_once(
    app: Flask,
    engine: RefillingEspeak,
    reference_audio: tuple[bytes, str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """A pull fails between claiming bob's chunks and recording them as pulled (in the claim's content
    keys, or in its reuse lookup): the claim is released and the chunks unsent at once, not when the
    lease runs out, the running batch renders its own chunk, and bob's job still succeeds."""
    rt = tome_of(app).runtime
    inline = Inline(rt)
    jobs = _start_jobs(app, reference_audio, inline)
    bob = {c.id for c in _chunks(rt, [jobs["bob"]])}
    real = getattr(render, where)
    fired: list[list[int]] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        claimed = args[1] if where == "_keys" else args[0].claimed
        ids = [c.id for c in claimed]
        if not fired and set(ids) <= bob:  # the first pull of bob's chunks
            fired.append(ids)
            raise InjectedFault(f"{where} failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(render, where, failing)
    job_id, seqs = _first_task(inline)
    assert render.render_chunks(rt, job_id, seqs, inline.enqueue) == 1
    assert fired, "a pull of bob's chunks was claimed"
    held = [c for c in _chunks(rt, [jobs["bob"]]) if c.id in fired[0]]
    for chunk in held:
        assert (chunk.status, chunk.lease_until, chunk.attempts) == (ChunkStatus.PENDING.value, None, 1)
    inline.run()
    _assert_all_rendered_once(rt, jobs, again={c.text for c in held})


def test_a_give_back_that_fails_leaves_the_other_pulled_batches_completed(
    app: Flask, engine: RefillingEspeak, reference_audio: tuple[bytes, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pulled batches (bob's and carol's chunks) are left out of the shared call and render on their
    own; bob's fails, and giving it back fails too (its transaction): carol's batch and the task's own
    chunk are still completed and the task ends normally; bob's chunks (released, still marked sent) are
    left to the sweeper, which sends chunks sent long ago and still pending again."""
    rt = tome_of(app).runtime
    inline = Inline(rt)
    jobs = _start_jobs(app, reference_audio, inline)
    [bob_first] = [c.text for c in _chunks(rt, [jobs["bob"]]) if c.seq == 0]
    engine.slots = 8  # room for bob's three chunks and carol's three beside alice's one
    engine.leave_out = 1
    engine.fail_texts = {bob_first}
    real_unsend = state.unsend
    fired: list[uuid.UUID] = []

    def failing_unsend(session: Any, job_id: uuid.UUID, seqs: list[int]) -> None:
        if job_id == jobs["bob"] and not fired:
            fired.append(job_id)
            raise InjectedFault("the give-back's transaction failed")
        real_unsend(session, job_id, seqs)

    monkeypatch.setattr(state, "unsend", failing_unsend)
    job_id, seqs = _first_task(inline)
    assert render.render_chunks(rt, job_id, seqs, inline.enqueue) == 1
    assert engine.failed == [bob_first]
    assert fired == [jobs["bob"]]
    pulled = set(engine.pulled[0])
    by_owner = {owner: _chunks(rt, [job]) for owner, job in jobs.items()}
    assert {c.text for c in by_owner["bob"] + by_owner["carol"]} <= pulled
    for chunk in by_owner["carol"]:
        assert (chunk.status, chunk.attempts) == (ChunkStatus.DONE.value, 1)
    for chunk in by_owner["bob"]:  # released when their rendering failed, but still marked sent
        assert (chunk.status, chunk.attempts) == (ChunkStatus.PENDING.value, 1)
        assert chunk.enqueued_at is not None
