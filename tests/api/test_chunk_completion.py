"""A render task's batch is marked done in one statement executed for each chunk (worker.jobs.state.
complete_chunks): on SQLite and PostgreSQL alike, only the chunks the task's token still holds move, the
job's counters move by exactly those, and the JSON columns are stored as JSON."""

from __future__ import annotations

import uuid
from datetime import timedelta

from flask import Flask
from sqlalchemy import select

from models import Chunk, Job, unit_of_work, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker.jobs.start import start_job
from worker.jobs.state import Completed, Completion, claim_chunks, complete_chunks
from worker.runtime import Runtime
from worker.voices.prompts import build_voice

LEASE = timedelta(seconds=60)
SCRIPT = "\n\n".join(f"Paragraph {n} of a short book, long enough to outweigh its pauses." for n in range(3))


def _running_job(app: Flask, reference_audio: tuple[bytes, str]) -> tuple[Runtime, uuid.UUID, list[int]]:
    """A started job of three chunks (none claimed yet): its runtime, id and chunk ids by seq."""
    client = app.test_client()
    headers = bearer(mint_key(app, "cora", "k", admin=False))
    voice = upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1]).json
    answer = submit_job(client, headers, "narrator", script=SCRIPT)
    assert answer.status_code == 202, answer.json
    job = answer.json
    rt = tome_of(app).runtime
    build_voice(rt, uuid.UUID(voice["id"]))
    job_id = uuid.UUID(job["id"])
    start_job(rt, job_id, Inline(rt).enqueue)
    with rt.sessions() as session:
        ids = list(session.scalars(select(Chunk.id).where(Chunk.job_id == job_id).order_by(Chunk.seq)))
    assert len(ids) == 3
    return rt, job_id, ids


def _completion(chunk_id: int, n: int, *, flagged: bool = False) -> Completion:
    return Completion(
        chunk_id,
        f"/chunks/{n}.wav",
        1.5 + n,
        1000 + n,
        levels={"lufs": -20.0 - n, "peak": 0.5},
        words=[[0.0, 0.4 + n]],
        content_key=f"key-{n}",
        qa={"passed": not flagged, "renders": 1},
        flagged=flagged,
    )


def test_a_whole_batch_moves_with_its_counters_and_json(
    database_app: Flask, reference_audio: tuple[bytes, str]
) -> None:
    rt, job_id, ids = _running_job(database_app, reference_audio)
    now = utcnow()
    with unit_of_work(rt.sessions) as session:
        token, claimed = claim_chunks(session, job_id, [0, 1, 2], LEASE, 3, now)
    assert [c.id for c in claimed] == ids
    with unit_of_work(rt.sessions) as session:
        done = complete_chunks(
            session, job_id, token, [_completion(i, n, flagged=n == 2) for n, i in enumerate(ids)]
        )
    assert (done.ids, done.left) == (ids, 0)  # the job's last chunks: nothing left to render
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.chunks_done, job.chunks_flagged) == (3, 1)
        rows = session.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.seq)).all()
    for n, row in enumerate(rows):
        assert row.status == "done"
        assert row.lease_until is None
        assert (row.audio_path, row.duration, row.audio_bytes) == (f"/chunks/{n}.wav", 1.5 + n, 1000 + n)
        assert row.levels == {"lufs": -20.0 - n, "peak": 0.5}  # JSON, not a string of it
        assert row.words == [[0.0, 0.4 + n]]
        assert row.content_key == f"key-{n}"
        assert row.qa == {"passed": n != 2, "renders": 1}
        assert row.flagged is (n == 2)


def test_chunks_taken_over_by_another_attempt_are_left_to_it(
    database_app: Flask, reference_audio: tuple[bytes, str]
) -> None:
    rt, job_id, ids = _running_job(database_app, reference_audio)
    now = utcnow()
    with unit_of_work(rt.sessions) as session:
        token, _ = claim_chunks(session, job_id, [0, 1, 2], LEASE, 3, now)
    later = now + LEASE + timedelta(seconds=1)  # chunk 1's lease ran out: another worker takes it over
    with unit_of_work(rt.sessions) as session:
        other, taken = claim_chunks(session, job_id, [1], LEASE, 3, later)
    assert [c.id for c in taken] == [ids[1]]
    with unit_of_work(rt.sessions) as session:
        done = complete_chunks(session, job_id, token, [_completion(i, n) for n, i in enumerate(ids)])
    assert (done.ids, done.left) == ([ids[0], ids[2]], 1)
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.chunks_done == 2
        second = session.get(Chunk, ids[1])
        assert second is not None
        assert (second.status, second.attempt_token, second.audio_path) == ("running", other, None)
    with unit_of_work(rt.sessions) as session:  # the new holder completes it; the first token no more
        assert complete_chunks(session, job_id, token, [_completion(ids[1], 1)]) == Completed([], None)
        assert complete_chunks(session, job_id, other, [_completion(ids[1], 1)]) == Completed([ids[1]], 0)
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.chunks_done == 3
