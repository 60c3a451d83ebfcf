"""Render tasks that pull the fair scheduler's next chunks into their running batch (worker.jobs.render,
``_Puller``): when something fails, a failed shared call renders each batch in it on its own; a pulled
batch that fails on its own, or a pull that fails after its claim, is given back to the scheduler at once
(claims released, marked unsent) and sent again; each job succeeds, and no chunk is counted twice. The
engine is told how many chunks wait (it sizes its slots to them), and every claim the task holds keeps
its lease while earlier batches are checked and stored.

The database (SQLite and PostgreSQL), the scheduler, the render and stitch task bodies and espeak are
real (tasks run in this process, tests/support/inline.py); the engine is espeak behind the refilling
protocol, with faults armed by the test (tests/support/refilling.py). One render task in flight, one chunk
a task: every other chunk waits in the database for a pull or the scheduler."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from models import ChunkStatus, Job, utcnow
from tests.support.apps import app_on
from tests.support.refilling import (
    InjectedFault,
    PullJobs,
    RefillingEspeak,
    refilling_espeak,
    start_pull_jobs,
)
from worker.config import Settings, load_settings
from worker.jobs import render, state


@pytest.fixture
def lease_seconds() -> int:
    """``TOME_CHUNK_LEASE_SECONDS`` (a test parametrises it to make leases short)."""
    return 300


@pytest.fixture
def settings(tmp_path: Path, lease_seconds: int) -> Settings:
    return load_settings(
        {},
        data_dir=tmp_path / "var",
        chunks_per_task=1,
        render_tasks_in_flight=1,
        chunk_lease_seconds=lease_seconds,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, settings: Settings, lease_seconds: int) -> Iterator[Flask]:
    """The app on each database: the embedded SQLite one, then a fresh PostgreSQL one (whose row locks
    the scheduler's pulls skip), with the test's settings."""
    chosen = settings
    if request.param == "postgresql":
        chosen = request.getfixturevalue("pg_settings").with_overrides(
            chunks_per_task=1, render_tasks_in_flight=1, chunk_lease_seconds=lease_seconds
        )
    with app_on(chosen) as app:
        yield app


@pytest.fixture
def engine(settings: Settings) -> Iterator[RefillingEspeak]:
    with refilling_espeak(settings) as engine:
        yield engine


@pytest.fixture
def scene(app: Flask, reference_audio: tuple[bytes, str]) -> PullJobs:
    return start_pull_jobs(app, reference_audio)


def _render_first(scene: PullJobs) -> int:
    """The render task the start sent (alice's first chunk), run in this process."""
    job_id, seqs = scene.task
    return render.render_chunks(scene.rt, job_id, seqs, scene.inline.enqueue)


def _assert_all_rendered_once(scene: PullJobs, again: set[str]) -> None:
    """Every job succeeded with every chunk done and counted once, its audio stored under the token of
    the attempt that completed it; the chunks whose texts are in ``again`` took two attempts, the others
    one."""
    rt = scene.rt
    with rt.sessions() as session:
        for job_id in scene.jobs.values():
            job = session.get(Job, job_id)
            assert job is not None
            assert job.status == "succeeded", (job.status, job.error)
            assert job.chunks_done == job.chunks_total == 3
    layout = rt.settings.layout
    for chunk in scene.chunks():
        assert chunk.status == ChunkStatus.DONE.value
        assert chunk.attempts == (2 if chunk.text in again else 1), (chunk.text, chunk.attempts)
        assert chunk.attempt_token is not None
        assert chunk.audio_path is not None
        assert (
            Path(chunk.audio_path).name
            == layout.chunk_audio(chunk.job_id, chunk.seq, chunk.attempt_token).name
        )


def test_a_failed_shared_call_renders_each_batch_in_it_on_its_own(
    scene: PullJobs, engine: RefillingEspeak
) -> None:
    """The shared call fails with bob's pulled chunks in it: the task renders its own chunk alone, then
    bob's under the claim its pull made. No chunk spends a second attempt on a failure that was not its
    own (given back, the same chunks would be the next pull's and could fail again)."""
    engine.fail_shared = 1
    assert scene.task[0] == scene.jobs["alice"]
    assert _render_first(scene) == 1  # its own chunk, alone
    assert engine.failed == ["shared"]
    pulled = set(engine.pulled[0])
    assert pulled, "the first shared call held pulled chunks when it failed"
    rendered = [c for c in scene.chunks() if c.text in pulled]
    assert {c.job_id for c in rendered} == {scene.jobs["bob"]}
    for chunk in rendered:  # completed by the same task, at the attempt the pull claimed
        assert (chunk.status, chunk.attempts) == (ChunkStatus.DONE.value, 1), chunk.text
    scene.inline.run()
    _assert_all_rendered_once(scene, again=set())


def test_a_failed_shared_call_whose_own_batch_fails_alone_gives_the_pulled_chunks_back(
    scene: PullJobs, engine: RefillingEspeak
) -> None:
    """The shared call fails, and the task's own chunk fails alone too (the task raises): bob's pulled
    chunks are given back (released, unsent) before the exception leaves, and both jobs succeed."""
    alice_first = scene.first_text("alice")
    engine.fail_shared = 1
    engine.fail_texts = {alice_first}
    with pytest.raises(InjectedFault, match="rendering"):
        _render_first(scene)
    assert engine.failed == ["shared", alice_first]
    pulled = set(engine.pulled[0])
    bobs = scene.chunks(["bob"])
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
    assert _render_first(scene) == 1
    scene.inline.run()
    _assert_all_rendered_once(scene, again=pulled | {alice_first})


def test_a_pulled_batch_that_fails_on_its_own_is_sent_again_and_its_job_succeeds(
    scene: PullJobs, engine: RefillingEspeak
) -> None:
    """The shared call leaves the pulled chunks out (the caller renders them on its own after its own
    batch) and that rendering fails: the pulled batch is given back, and the scheduler sends it again."""
    bob_first = scene.first_text("bob")
    engine.leave_out = 1
    engine.fail_texts = {bob_first}
    assert _render_first(scene) == 1
    assert engine.failed == [bob_first]
    pulled = set(engine.pulled[0])
    assert bob_first in pulled
    for chunk in scene.chunks():
        if chunk.text in pulled:
            assert (chunk.status, chunk.lease_until, chunk.attempts) == (ChunkStatus.PENDING.value, None, 1)
    scene.inline.run()
    _assert_all_rendered_once(scene, again=pulled)


@pytest.mark.parametrize("where", ["_keys", "_reuse"])
def test_a_pull_that_fails_after_its_claim_releases_it_at_once(
    scene: PullJobs, engine: RefillingEspeak, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A pull fails between claiming bob's chunks and recording them as pulled (in the claim's content
    keys, or in its reuse lookup): the claim is released and the chunks unsent at once, not when the
    lease runs out, the running batch renders its own chunk, and bob's job still succeeds."""
    bob = {c.id for c in scene.chunks(["bob"])}
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
    assert _render_first(scene) == 1
    assert fired, "a pull of bob's chunks was claimed"
    held = [c for c in scene.chunks(["bob"]) if c.id in fired[0]]
    for chunk in held:
        assert (chunk.status, chunk.lease_until, chunk.attempts) == (ChunkStatus.PENDING.value, None, 1)
    scene.inline.run()
    _assert_all_rendered_once(scene, again={c.text for c in held})


def test_a_give_back_that_fails_leaves_the_other_pulled_batches_completed(
    scene: PullJobs, engine: RefillingEspeak, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pulled batches (bob's and carol's chunks) are left out of the shared call and render on their
    own; bob's fails, and giving it back fails too (its transaction): carol's batch and the task's own
    chunk are still completed and the task ends normally; bob's chunks (released, still marked sent) are
    left to the sweeper, which sends chunks sent long ago and still pending again."""
    bob_first = scene.first_text("bob")
    engine.slots = 8  # room for bob's three chunks and carol's three beside alice's one
    engine.leave_out = 1
    engine.fail_texts = {bob_first}
    real_unsend = state.unsend
    fired: list[uuid.UUID] = []

    def failing_unsend(session: Any, job_id: uuid.UUID, seqs: list[int]) -> None:
        if job_id == scene.jobs["bob"] and not fired:
            fired.append(job_id)
            raise InjectedFault("the give-back's transaction failed")
        real_unsend(session, job_id, seqs)

    monkeypatch.setattr(state, "unsend", failing_unsend)
    assert _render_first(scene) == 1
    assert engine.failed == [bob_first]
    assert fired == [scene.jobs["bob"]]
    pulled = set(engine.pulled[0])
    assert {c.text for c in scene.chunks(["bob", "carol"])} <= pulled
    for chunk in scene.chunks(["carol"]):
        assert (chunk.status, chunk.attempts) == (ChunkStatus.DONE.value, 1)
    for chunk in scene.chunks(["bob"]):  # released when their rendering failed, but still marked sent
        assert (chunk.status, chunk.attempts) == (ChunkStatus.PENDING.value, 1)
        assert chunk.enqueued_at is not None


def test_the_engine_is_told_how_many_chunks_wait_to_be_pulled(
    scene: PullJobs, engine: RefillingEspeak
) -> None:
    """The shared call is told how many chunks could be pulled when it begins (the engine sizes its slots
    to them): the eight of the nine not sent yet; each later task is told fewer, and none once nothing
    waits. Every job succeeds."""
    assert _render_first(scene) == 1
    assert engine.waiting[0] == 8
    scene.inline.run()
    _assert_all_rendered_once(scene, again=set())
    told = [w for w in engine.waiting if w is not None]
    assert told == engine.waiting
    assert told == sorted(told, reverse=True)


def test_a_task_pulls_only_in_the_first_part_of_its_time_limit(
    scene: PullJobs, engine: RefillingEspeak, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a task pulls is checked and stored after its call, within the same soft time limit, so it
    pulls only in the first part of it: with that part spent, the shared call runs its own chunk alone
    and the others are sent as tasks of their own."""
    monkeypatch.setattr(render._Puller, "PULL_SHARE_OF_TIME_LIMIT", 0.0)
    assert _render_first(scene) == 1
    assert engine.pulled == [[]]
    scene.inline.run()
    _assert_all_rendered_once(scene, again=set())


@pytest.mark.serial
@pytest.mark.parametrize("lease_seconds", [4])
def test_pulled_batches_keep_their_leases_while_earlier_ones_are_stored(
    scene: PullJobs, engine: RefillingEspeak, monkeypatch: pytest.MonkeyPatch, lease_seconds: int
) -> None:
    """Leases of 4 s; the task's own batch takes 2.8 s to check and store (a slow recogniser, say) while
    three pulled batches wait their turn. When each batch's turn comes, every claim the task still holds
    has more than a quarter of its lease left (renewed every third of it: two thirds at worst, less the
    queries since): the waiting ones were renewed meanwhile, so none lapses and is sent again by the
    sweeper while it waits to be stored. Without the renewals they would be 0.4 s or more past it."""
    engine.slots = 8  # alice's own chunk and seven pulled: bob's three, carol's three, alice's next
    real = render._complete
    slow = 0.7 * lease_seconds
    left: list[float] = []  # the shortest lease left on a held claim, as each batch's turn comes

    def timed(batch: Any, *args: Any) -> int:
        now = utcnow()
        held = [c.lease_until for c in scene.chunks() if c.status == ChunkStatus.RUNNING.value]
        left.append(min((u - now for u in held if u is not None), default=timedelta(0)).total_seconds())
        if not left[1:]:  # the task's own batch: slow
            time.sleep(slow)
        return int(real(batch, *args))

    monkeypatch.setattr(render, "_complete", timed)
    assert _render_first(scene) == 1
    assert [len(texts) for texts in engine.pulled] == [7]
    assert len(left) == 4
    assert all(seconds > lease_seconds / 4 for seconds in left), left
    scene.inline.run()
    _assert_all_rendered_once(scene, again=set())
