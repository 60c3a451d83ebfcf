"""An owner accepts a flagged chunk: POST /v1/jobs/{id}/chunks/{seq}/accept. The chunk stays in the QA
report, accepted (its checks and reasons as they were), the job's flagged count drops, webhooks are not
touched; any re-render judges the new take afresh. Refused (409 ``not_flagged``) for a chunk with no
flag to accept, 404 for another owner's job or a chunk the job does not have; an accept racing a
re-render on PostgreSQL never counts a flag twice."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from models import Chunk, Job, unit_of_work, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker.engines import EngineError
from worker.jobs import render, state
from worker.task_names import BUILD_VOICE, START_JOB

BOOK = (
    "# Harbour\n\nThe fog came in before dawn. Doctor Hale counted the boats on the quay.\n\n"
    "# Storm\n\nBy noon the wind had turned, and the gulls went quiet one after another.\n\n"
    "The harbour master called every boat back to the shelter of the wall."
)
TARGET = "The harbour master called every boat back to the shelter of the wall."
FIXED = "The harbour master called the boats back."


@pytest.fixture
def cut_target() -> Iterator[None]:
    """Every take of the chunk reading TARGET is cut to a third (QA flags it: words cut off)."""
    real = render.synthesize_in_halves

    def cutting(engine: Any, requests: Any) -> Any:
        out = real(engine, requests)
        return [
            ((wave[: wave.size // 3].copy(), []) if TARGET in request.text else (wave, marks))
            for request, (wave, marks) in zip(requests, out, strict=True)
        ]

    render.synthesize_in_halves = cutting
    yield
    render.synthesize_in_halves = real


def _flagged_job(app: Flask, audio: tuple[bytes, str]) -> tuple[FlaskClient, dict[str, str], Inline, str]:
    """A finished job whose TARGET chunk is flagged; from then on what the API sends runs in the Inline."""
    client = app.test_client()
    user = bearer(mint_key(app, "producer", "k", admin=False))
    voice = upload_voice(client, user, audio[0], ref_text=audio[1])
    job = submit_job(client, user, "narrator", script=BOOK, script_format="markdown", qa={"max_rerenders": 0})
    assert job.status_code == 202, job.json
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    tome_of(app).enqueue = inline.enqueue  # type: ignore[method-assign]
    done = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert (done["status"], done["qa"]["chunks_flagged"]) == ("succeeded", 1)
    return client, user, inline, str(done["id"])


def _report(client: FlaskClient, user: dict[str, str], job_id: str) -> dict[int, dict[str, Any]]:
    return {c["seq"]: c for c in client.get(f"/v1/jobs/{job_id}/qa", headers=user).json["chunks"]}


def _flagged_count(client: FlaskClient, user: dict[str, str], job_id: str) -> int:
    return int(client.get(f"/v1/jobs/{job_id}", headers=user).json["qa"]["chunks_flagged"])


def test_an_owner_accepts_a_flag_and_every_rerender_judges_the_new_take(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], cut_target: None
) -> None:
    app = make_app()
    client, user, inline, job_id = _flagged_job(app, reference_audio)
    before = _report(client, user, job_id)
    seq = next(s for s, c in before.items() if c["flagged"])
    passed = next(s for s, c in before.items() if c["passed"])
    assert before[seq]["reasons"]
    assert before[seq]["accepted_at"] is None
    row_before = tome_of(app).sessions.get(Job, uuid.UUID(job_id))
    assert row_before is not None
    hooks_before = (row_before.flags_webhook_attempts, row_before.flags_webhook_delivered_at)

    accepted = client.post(f"/v1/jobs/{job_id}/chunks/{seq}/accept", headers=user)
    assert accepted.status_code == 200, accepted.json
    chunk = accepted.json
    assert (chunk["seq"], chunk["flagged"], chunk["passed"]) == (seq, False, False)
    assert chunk["accepted_at"] is not None
    assert chunk["reasons"] == before[seq]["reasons"]  # the record stays as it was, accepted
    assert [c["name"] for c in chunk["checks"]] == [c["name"] for c in before[seq]["checks"]]
    assert _flagged_count(client, user, job_id) == 0
    assert client.get(f"/v1/jobs/{job_id}/qa?flagged=true", headers=user).json["chunks"] == []
    assert _report(client, user, job_id)[seq]["accepted_at"] == chunk["accepted_at"]
    tome_of(app).sessions.expire_all()
    row = tome_of(app).sessions.get(Job, uuid.UUID(job_id))
    assert row is not None
    assert (row.flags_webhook_attempts, row.flags_webhook_delivered_at) == hooks_before

    again = client.post(f"/v1/jobs/{job_id}/chunks/{seq}/accept", headers=user)
    assert (again.status_code, again.json["error"]["code"]) == (409, "not_flagged")
    assert "accepted already" in again.json["error"]["message"]
    clean = client.post(f"/v1/jobs/{job_id}/chunks/{passed}/accept", headers=user)
    assert (clean.status_code, clean.json["error"]["code"]) == (409, "not_flagged")
    assert "passed its checks" in clean.json["error"]["message"]
    assert _flagged_count(client, user, job_id) == 0

    # a new take of the same text (still cut): judged afresh, flagged again
    assert client.post(f"/v1/jobs/{job_id}/chunks/{seq}/rerender", json={}, headers=user).status_code == 202
    inline.run()
    retaken = _report(client, user, job_id)[seq]
    assert (retaken["flagged"], retaken["accepted_at"]) == (True, None)
    assert _flagged_count(client, user, job_id) == 1

    # accepted again, then new text that passes: the flag and the acceptance are gone
    assert client.post(f"/v1/jobs/{job_id}/chunks/{seq}/accept", headers=user).status_code == 200
    edited = client.post(f"/v1/jobs/{job_id}/chunks/{seq}/rerender", json={"text": FIXED}, headers=user)
    assert edited.status_code == 202, edited.json
    inline.run()
    fixed = _report(client, user, job_id)[seq]
    assert (fixed["passed"], fixed["flagged"], fixed["accepted_at"]) == (True, False, None)
    assert _flagged_count(client, user, job_id) == 0


def test_a_refused_rerender_puts_the_accepted_take_back_as_it_was(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    cut_target: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = make_app()
    client, user, inline, job_id = _flagged_job(app, reference_audio)
    seq = next(s for s, c in _report(client, user, job_id).items() if c["flagged"])
    accepted = client.post(f"/v1/jobs/{job_id}/chunks/{seq}/accept", headers=user).json

    def refusing(engine: Any, requests: Any) -> Any:
        raise EngineError("the engine refused this text")

    monkeypatch.setattr(render, "synthesize_timed", refusing)
    assert client.post(f"/v1/jobs/{job_id}/chunks/{seq}/rerender", json={}, headers=user).status_code == 202
    inline.run()
    job = client.get(f"/v1/jobs/{job_id}", headers=user).json
    assert (job["status"], job["rerender"]["state"], job["qa"]["chunks_flagged"]) == (
        "succeeded",
        "refused",
        0,
    )
    kept = _report(client, user, job_id)[seq]
    assert (kept["flagged"], kept["accepted_at"], kept["reasons"]) == (
        False,
        accepted["accepted_at"],
        accepted["reasons"],
    )


def test_accept_refuses_what_it_cannot_apply(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], cut_target: None
) -> None:
    app = make_app()
    client, user, _, job_id = _flagged_job(app, reference_audio)
    seq = next(s for s, c in _report(client, user, job_id).items() if c["flagged"])
    other = bearer(mint_key(app, "intruder", "k", admin=False))
    for url, who, status in [
        (f"/v1/jobs/{job_id}/chunks/{seq}/accept", other, 404),  # another owner's job
        (f"/v1/jobs/{uuid.uuid4()}/chunks/{seq}/accept", user, 404),
        (f"/v1/jobs/not-an-id/chunks/{seq}/accept", user, 404),
        (f"/v1/jobs/{job_id}/chunks/999/accept", user, 404),
        (f"/v1/jobs/{job_id}/chunks/{2**40}/accept", user, 404),  # beyond the column: never a 500
        (f"/v1/jobs/{job_id}/chunks/-1/accept", user, 404),
    ]:
        response = client.post(url, headers=who)
        assert response.status_code == status, (url, response.json)
        assert "error" in (response.json or {})
    assert _flagged_count(client, user, job_id) == 1  # nothing was accepted
    assert _report(client, user, job_id)[seq]["flagged"] is True


def _waiting_on_a_lock(session: Session, pid: int) -> bool:
    waiting = session.scalar(
        text("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
    )
    return bool(waiting)


def _race(app: Flask, first: Callable[[Session], Any], second: Callable[[Session], Any]) -> Any:
    """``first`` in one transaction, held open until ``second`` (in another) is seen waiting on its
    lock; then ``first`` commits and ``second`` finishes. What ``second`` returned."""
    sessions = tome_of(app).runtime.sessions
    holder = sessions()
    first(holder)
    outcome: list[Any] = []
    ready = threading.Event()
    pid: list[int] = []

    def run_second() -> None:
        with unit_of_work(sessions) as session:
            pid.append(int(session.scalar(text("SELECT pg_backend_pid()")) or 0))
            ready.set()
            outcome.append(second(session))

    worker = threading.Thread(target=run_second)
    worker.start()
    ready.wait()
    with unit_of_work(sessions) as watcher:
        while not _waiting_on_a_lock(watcher, pid[0]):
            watcher.rollback()
    holder.commit()
    holder.close()
    worker.join()
    return outcome[0]


def test_an_accept_racing_a_rerender_never_counts_the_flag_twice(
    pg_app: Flask, reference_audio: tuple[bytes, str], cut_target: None
) -> None:
    client, user, _, job_id = _flagged_job(pg_app, reference_audio)
    job = uuid.UUID(job_id)
    seq = next(s for s, c in _report(client, user, job_id).items() if c["flagged"])

    def accept(session: Session) -> bool:
        return state.accept_flag(session, job, seq, utcnow())

    def rerender(session: Session) -> bool:
        return state.rerender_chunk(session, job, seq, edit=None, seed=7, stale_chapters=[], now=utcnow())

    # the accept first: the re-render waits for it, then counts no flag to take back
    assert _race(pg_app, accept, rerender) is True
    assert _counted(pg_app, job) == (0, "running")

    # put the job back as it was (done, flagged), then the re-render first: the accept finds no flag
    with unit_of_work(tome_of(pg_app).runtime.sessions) as session:
        chunk = session.scalars(select(Chunk).where(Chunk.job_id == job, Chunk.seq == seq)).one()
        assert chunk.previous is not None
        chunk.status, chunk.flagged, chunk.qa = "done", True, {**chunk.previous["qa"], "accepted_at": None}
        chunk.previous = None
        found = session.get(Job, job)
        assert found is not None
        found.status, found.chunks_flagged, found.chunks_done = "succeeded", 1, found.chunks_total
    assert _race(pg_app, rerender, accept) is False
    assert _counted(pg_app, job) == (0, "running")  # taken back once, by the re-render


def _counted(app: Flask, job_id: uuid.UUID) -> tuple[int, str]:
    with unit_of_work(tome_of(app).runtime.sessions) as session:
        row = session.get(Job, job_id)
        assert row is not None
        return row.chunks_flagged, row.status
