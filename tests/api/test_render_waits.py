"""Rendering: chunks whose voice is not ready wait for its build without using an attempt, and a job
cancelled after its chunks were claimed never reaches the engine."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session, scoped_session

from models import Chunk, ChunkStatus, Voice, unit_of_work, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.support.inline import Inline
from worker.jobs import render, state
from worker.jobs.start import StartOutcome, start_job
from worker.runtime import Runtime
from worker.task_names import BUILD_VOICE, RENDER_CHUNKS
from worker.voices import prompts
from worker.voices.prompts import build_voice


@pytest.fixture
def voice_id(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], rt: Runtime
) -> str:
    uploaded = upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1])
    assert uploaded.status_code == 202
    vid: str = uploaded.json["id"]
    assert build_voice(rt, uuid.UUID(vid)).value == "built"
    return vid


def _running_job(client: FlaskClient, user: dict[str, str], rt: Runtime, inline: Inline) -> uuid.UUID:
    job = submit_job(client, user, "narrator", script="One sentence here. Another one there.")
    assert job.status_code == 202
    job_id = uuid.UUID(job.json["id"])
    assert start_job(rt, job_id, inline.enqueue) == StartOutcome.STARTED
    return job_id


def test_chunks_wait_for_a_rebuilt_prompt_without_using_attempts(
    client: FlaskClient,
    user: dict[str, str],
    rt: Runtime,
    db: scoped_session[Session],
    voice_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inline = Inline(rt)
    job_id = _running_job(client, user, rt, inline)
    voice = db.get(Voice, uuid.UUID(voice_id))
    assert voice is not None
    assert voice.cache_path
    Path(voice.cache_path).unlink()  # the prompt file is lost: the voice must be rebuilt mid-job
    monkeypatch.setattr(prompts, "_lru", None)  # and no earlier test left it in this process's LRU
    renders = [args for name, args in inline.queue if name == RENDER_CHUNKS]
    inline.queue.clear()
    for args in renders:
        assert render.render_chunks(rt, job_id, args[1], inline.enqueue) == 0
    db.remove()
    chunks = db.scalars(select(Chunk).where(Chunk.job_id == job_id)).all()
    assert {c.status for c in chunks} == {ChunkStatus.PENDING.value}
    assert {c.attempts for c in chunks} == {0}, "waiting for a voice costs no attempt"
    assert {c.enqueued_at for c in chunks} == {None}, "sent back: the build's end sends them again"
    assert [name for name, _ in inline.queue] == [BUILD_VOICE] * len(renders)
    inline.run()  # the build, then the chunks it wakes, then the stitch
    db.remove()
    body = client.get(f"/v1/jobs/{job_id}", headers=user).json
    assert body["status"] == "succeeded", body
    assert {c.attempts for c in db.scalars(select(Chunk).where(Chunk.job_id == job_id))} == {1}


def test_a_cancel_between_claim_and_synthesis_never_reaches_the_engine(
    client: FlaskClient,
    user: dict[str, str],
    rt: Runtime,
    db: scoped_session[Session],
    voice_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inline = Inline(rt)
    job_id = _running_job(client, user, rt, inline)
    real_claim = render._claim

    def claim_then_cancel(rt_: Runtime, jid: uuid.UUID, seqs: list[int]) -> Any:
        claimed = real_claim(rt_, jid, seqs)
        with unit_of_work(rt.sessions) as session:
            state.cancel_job(session, jid, utcnow())  # the owner cancels in that very moment
        return claimed

    engine_calls: list[int] = []
    real_synthesize = render.synthesize_in_halves

    def counting(engine: Any, requests: Any) -> Any:
        engine_calls.append(len(requests))
        return real_synthesize(engine, requests)

    monkeypatch.setattr(render, "_claim", claim_then_cancel)
    monkeypatch.setattr(render, "synthesize_in_halves", counting)
    [args] = [args for name, args in inline.queue if name == RENDER_CHUNKS]
    assert render.render_chunks(rt, job_id, args[1], inline.enqueue) == 0
    assert engine_calls == []
    db.remove()
    chunks = db.scalars(select(Chunk).where(Chunk.job_id == job_id)).all()
    assert {c.status for c in chunks} == {ChunkStatus.PENDING.value}, "claimed chunks are given back"
    assert client.get(f"/v1/jobs/{job_id}", headers=user).json["status"] == "cancelled"
