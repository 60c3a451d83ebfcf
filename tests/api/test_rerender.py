"""Fixing one chunk of a finished job without a new job: POST /v1/jobs/{id}/chunks/{seq}/rerender renders
it again (a new take, or edited text), stitches its chapter and the book again, and counts a revision; the
previous book stays downloadable until the new one is published; nothing else is rendered again."""

from __future__ import annotations

import json
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from models import Chunk, Job, JobKind, unit_of_work, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.factories import job_chunks
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker import webhooks
from worker.engines import EngineError
from worker.engines.base import synthesize_timed
from worker.jobs import render, rerender
from worker.jobs.state import claim_chunks
from worker.sweeper import sweep
from worker.task_names import BUILD_VOICE, RENDER_CHUNKS, START_JOB

BOOK = (
    "# Harbour\n\nThe fog came in before dawn. Doctor Hale counted the boats on the quay.\n\n"
    "# Storm\n\nBy noon the wind had turned, and the gulls went quiet one after another.\n\n"
    "# Morning\n\nThe sea was calm again."
)


@pytest.fixture
def rendered_texts() -> Iterator[list[str]]:
    real = render.synthesize_in_halves
    texts: list[str] = []

    def counting(engine: Any, requests: Any) -> Any:
        texts.extend(r.text for r in requests)
        return real(engine, requests)

    render.synthesize_in_halves = counting
    yield texts
    render.synthesize_in_halves = real


def _finished(
    make_app: Callable[..., Flask],
    audio: tuple[bytes, str],
    qa: dict[str, Any] | None = None,
    script: tuple[str, str] = (BOOK, "markdown"),
    **output: Any,
) -> tuple[Flask, FlaskClient, dict[str, str], Inline, dict[str, Any]]:
    """A finished job (with ``qa``, its QA policy); from then on what the API sends runs in the returned
    Inline."""
    app = make_app()
    client = app.test_client()
    user = bearer(mint_key(app, "fixer", "k", admin=False))
    voice = upload_voice(client, user, audio[0], ref_text=audio[1])
    job = submit_job(
        client,
        user,
        "narrator",
        script=script[0],
        script_format=script[1],
        output=output,
        **({"qa": qa} if qa else {}),
    )
    assert job.status_code == 202, job.json
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    done = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert done["status"] == "succeeded"
    tome_of(app).enqueue = inline.enqueue  # type: ignore[method-assign]
    assert isinstance(done, dict)
    return app, client, user, inline, done


def _chunk(app: Flask, job_id: str, seq: int) -> Chunk:
    query = select(Chunk).where(Chunk.job_id == uuid.UUID(job_id), Chunk.seq == seq)
    chunk = tome_of(app).sessions.scalars(query).one()
    tome_of(app).sessions.refresh(chunk)
    return chunk


def _storm_seq(client: FlaskClient, user: dict[str, str], job: dict[str, Any]) -> int:
    report = client.get(job["qa"]["url"], headers=user).json
    return int(next(c["seq"] for c in report["chunks"] if c["text"].startswith("By noon")))


@pytest.mark.parametrize("fmt", ["mp3", "ogg"])
def test_an_edited_chunk_replaces_only_itself_and_the_old_book_stays_until_then(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], rendered_texts: list[str], fmt: str
) -> None:
    app, client, user, inline, job = _finished(make_app, reference_audio, format=fmt)
    seq = _storm_seq(client, user, job)
    before = client.get(job["output"]["url"], headers=user).data
    others = {c.seq: Path(str(c.audio_path)).read_bytes() for c in job_chunks(app, job["id"]) if c.seq != seq}
    rendered_texts.clear()

    response = client.post(
        f"/v1/jobs/{job['id']}/chunks/{seq}/rerender",
        json={"text": "By noon the wind had turned, and the gulls screamed one after another."},
        headers=user,
    )
    assert response.status_code == 202, response.json
    assert response.json["status"] == "running"
    assert response.headers["Location"] == f"/v1/jobs/{job['id']}"
    # the previous revision is still downloadable while the chunk renders
    assert client.get(job["output"]["url"], headers=user).data == before
    assert client.get(f"/v1/jobs/{job['id']}/files/book.srt", headers=user).status_code == 200
    inline.run()
    after = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert after["status"] == "succeeded"
    assert rendered_texts == ["By noon the wind had turned, and the gulls screamed one after another."]
    assert after["output"]["duration"] != job["output"]["duration"]
    new_book = client.get(after["output"]["url"], headers=user).data
    assert new_book != before
    manifest = client.get(f"/v1/jobs/{job['id']}/files/manifest.json", headers=user).json
    assert "screamed" in manifest["chunks"][seq]["text"]
    assert [c["title"] for c in manifest["chapters"]] == ["Harbour", "Storm", "Morning"]
    for other, data in others.items():  # every other chunk is the same audio
        assert Path(str(_chunk(app, job["id"], other).audio_path)).read_bytes() == data
    assert after["revision"] == 1
    assert _chunk(app, job["id"], seq).seed is not None  # a take of its own


def _refusing_engine(what: str) -> Callable[[Any, Any], Any]:
    """The real engine's call (``render.synthesize_timed``), except that a request reading "gulls" gets
    ``what``: silence (no take passes QA) or an engine error (batch by batch and chunk by chunk)."""
    real = synthesize_timed

    def refusing(engine: Any, requests: Any) -> Any:
        if any("gulls" in r.text for r in requests):
            if what == "engine error":
                raise EngineError("the engine refused this text")
            return [(np.zeros(engine.sample_rate, dtype=np.float32), []) for _ in requests]
        return real(engine, requests)

    return refusing


@pytest.mark.parametrize("what", ["silence", "engine error"])
def test_a_refused_rerender_keeps_the_previous_take_and_the_job_succeeds(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    monkeypatch: pytest.MonkeyPatch,
    what: str,
) -> None:
    """A finished book is never lost to a failed fix: the new take that fails (under a policy that fails
    chunks, or an engine that refuses the edited text) leaves the chunk as it was, the book is
    published again from the same audio, and the job and the QA report say why."""
    app, client, user, inline, job = _finished(
        make_app, reference_audio, qa={"on_fail": "fail"}, format="wav"
    )
    seq = _storm_seq(client, user, job)
    before = _chunk(app, job["id"], seq)
    old_audio = Path(str(before.audio_path)).read_bytes()
    old_text, old_seed = before.text, before.seed
    old_book = client.get(job["output"]["url"], headers=user).data
    monkeypatch.setattr(render, "synthesize_timed", _refusing_engine(what))

    edited = "By noon the wind had turned, and the gulls screamed one after another."
    response = client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", json={"text": edited}, headers=user)
    assert response.status_code == 202, response.json
    assert response.json["rerender"] == {"seq": seq, "revision": 1, "state": "rendering", "error": None}
    inline.run()

    after = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert after["status"] == "succeeded", after["error"]
    assert after["error"] is None
    assert after["rerender"]["state"] == "refused"
    assert f"chunk {seq}" in after["rerender"]["error"]
    assert after["progress"]["chunks_done"] == after["progress"]["chunks_total"]
    kept = _chunk(app, job["id"], seq)
    assert (kept.status, kept.text, kept.seed, kept.previous) == ("done", old_text, old_seed, None)
    assert Path(str(kept.audio_path)).read_bytes() == old_audio
    # the book stitched again from the same chunks: the same audio (WAV: no encoder timestamps)
    new_book = client.get(after["output"]["url"], headers=user).data
    assert len(new_book) == len(old_book)
    assert new_book[-100_000:] == old_book[-100_000:]
    with tome_of(app).runtime.sessions() as session:  # the job's webhook event says so too
        row_job = session.get(Job, uuid.UUID(job["id"]))
        assert row_job is not None
        event = webhooks.payload(row_job)
    assert event["event"] == "job.succeeded"
    assert event["job"]["revision"] == 1
    assert event["job"]["rerender"]["error"] == after["rerender"]["error"]
    report = client.get(job["qa"]["url"], headers=user).json
    row = next(c for c in report["chunks"] if c["seq"] == seq)
    assert row["status"] == "done"
    assert row["error"] == after["rerender"]["error"]
    assert row["text"] == old_text
    # and the chunk can be rendered again: the refusal left nothing half-done
    monkeypatch.undo()
    again = client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", json={"text": edited}, headers=user)
    assert again.status_code == 202, again.json
    inline.run()
    fixed = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert fixed["status"] == "succeeded"
    assert fixed["rerender"] == {"seq": seq, "revision": 2, "state": "published", "error": None}
    assert "gulls screamed" in _chunk(app, job["id"], seq).text
    assert _chunk(app, job["id"], seq).error is None


def test_a_new_take_with_the_same_text_counts_a_revision_and_restitches_only_its_chapter(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], rendered_texts: list[str]
) -> None:
    _, client, user, inline, job = _finished(make_app, reference_audio, format="m4b", split="chapter")
    seq = _storm_seq(client, user, job)
    rendered_texts.clear()
    response = client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", headers=user)
    assert response.status_code == 202, response.json
    assert response.json["revision"] == 1
    assert [c["state"] for c in response.json["chapters"]] == ["ready", "pending", "ready"]
    inline.run()
    after = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert after["status"] == "succeeded"
    assert len(rendered_texts) == 1
    assert rendered_texts[0].startswith("By noon")
    assert [c["state"] for c in after["chapters"]] == ["ready"] * 3
    listed = client.get(f"/v1/jobs/{job['id']}/files", headers=user).json["files"]
    names = [f["name"] for f in listed]
    assert [n for n in names if n.startswith("chapter-")] == [f"chapter-{n:03d}.m4b" for n in (1, 2, 3)]
    statuses = {f["name"]: client.get(f["url"], headers=user).status_code for f in listed}
    assert set(statuses.values()) == {200}, statuses


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"text": ""}, 422, "text"),
        ({"text": "One sentence. " * 200}, 422, "text"),
        ({"seed": -1}, 422, "seed"),
        ({"seed": 2**40}, 422, "seed"),
        ({"text": "Fine.", "extra": 1}, 422, "extra"),
    ],
)
def test_bad_rerender_requests_are_a_4xx_naming_the_field(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    body: dict[str, Any],
    status: int,
    field: str,
) -> None:
    _, client, user, _, job = _finished(make_app, reference_audio)
    response = client.post(f"/v1/jobs/{job['id']}/chunks/1/rerender", json=body, headers=user)
    assert response.status_code == status, response.json
    assert field in json.dumps(response.json["error"])
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "succeeded"


def test_rerender_is_refused_where_it_cannot_apply(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user, _, job = _finished(make_app, reference_audio)
    url = f"/v1/jobs/{job['id']}/chunks/1/rerender"
    assert client.post(f"/v1/jobs/{job['id']}/chunks/999/rerender", headers=user).status_code == 404
    other = bearer(mint_key(app, "someone", "k", admin=False))
    assert client.post(url, headers=other).status_code == 404
    assert client.post(url, headers=user).status_code == 202
    second = client.post(url, headers=user)  # the job is running again: one revision at a time
    assert second.status_code == 409
    assert second.json["error"]["code"] == "not_ready"


def test_numbers_too_large_for_the_database_are_a_4xx_never_a_500(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    _, client, user, _, job = _finished(make_app, reference_audio)
    base = f"/v1/jobs/{job['id']}"
    for huge in (2**31, 2**63, 10**30):
        answer = client.post(f"{base}/chunks/{huge}/rerender", headers=user)
        assert answer.status_code == 404, answer.json
        assert "no chunk" in answer.json["error"]["message"]
        assert len(answer.json["error"]["message"]) < 200
        assert client.get(f"{base}/chunks/{huge}/audio", headers=user).status_code == 404
    for offset in (2**63, 10**30):
        answer = client.get(f"{base}/qa?offset={offset}", headers=user)
        assert answer.status_code == 422, answer.json
        assert "offset" in json.dumps(answer.json["error"])
    assert client.get(f"{base}/qa?offset={2**63 - 1}", headers=user).json["chunks"] == []
    assert client.get(f"{base}/chunks/{2**31 - 1}/audio", headers=user).status_code == 404
    assert client.get(f"{base}", headers=user).json["status"] == "succeeded"


def test_a_speech_requests_chunks_cannot_be_rendered_again(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """Its audio was streamed and not kept: a re-render would stitch a book it never had (the job then
    failed with "stitching started before every chunk was done")."""
    app, client, user, _, job = _finished(make_app, reference_audio)
    with tome_of(app).sessions.begin():
        tome_of(app).sessions.execute(
            update(Job).where(Job.id == uuid.UUID(job["id"])).values(kind=JobKind.SPEECH.value)
        )
    answer = client.post(f"/v1/jobs/{job['id']}/chunks/1/rerender", headers=user)
    assert answer.status_code == 409, answer.json
    assert answer.json["error"]["code"] == "not_rerenderable"
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "succeeded"


SSML_BOOK = (
    "<speak><p>The fog came in before dawn.</p>"
    '<p><prosody rate="slow">The boats were late that morning.</prosody></p>'
    "<p>By noon the wind had turned.</p></speak>"
)


def _seq_reading(app: Flask, job_id: str, words: str) -> int:
    return next(c.seq for c in job_chunks(app, job_id) if words in c.text)


def test_an_ssml_jobs_edit_is_read_as_ssml_and_plain_text_keeps_the_chunks_rate(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], rendered_texts: list[str]
) -> None:
    app, client, user, inline, job = _finished(make_app, reference_audio, script=(SSML_BOOK, "ssml"))
    noon = _seq_reading(app, job["id"], "By noon")
    url = f"/v1/jobs/{job['id']}/chunks/{noon}/rerender"
    edited = "By noon the <emphasis>wind</emphasis> had turned &amp; died."
    answer = client.post(url, json={"text": edited}, headers=user)
    assert answer.status_code == 202, answer.json
    chunk = _chunk(app, job["id"], noon)
    for markup in ("<", "emphasis", "&amp;"):
        assert markup not in chunk.text
    assert "wind" in chunk.text
    inline.run()
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "succeeded"
    assert rendered_texts[-1] == chunk.text  # what the engine read: no markup

    slow = _seq_reading(app, job["id"], "boats")
    before = _chunk(app, job["id"], slow).rate
    assert before is not None
    assert before < 1
    url = f"/v1/jobs/{job['id']}/chunks/{slow}/rerender"
    assert client.post(url, json={"text": "The boats were very late."}, headers=user).status_code == 202
    assert _chunk(app, job["id"], slow).rate == before, "plain text inside a <prosody> keeps its rate"
    inline.run()
    faster = '<prosody rate="fast">The boats were very late.</prosody>'
    assert client.post(url, json={"text": faster}, headers=user).status_code == 202
    assert (_chunk(app, job["id"], slow).rate or 1) > 1, "an SSML edit sets its own rate"
    inline.run()


@pytest.mark.parametrize(
    "text",
    [
        "By noon <emphasis>the wind",  # not well-formed
        '<!DOCTYPE s [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]><speak>&b;</speak>',
        '<!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]><speak>&x;</speak>',
        "</speak><speak>Two.</speak><speak>Three.",
        "<speak>One.<break time='5s'/>Two.</speak>",
    ],
)
def test_hostile_ssml_in_an_edit_is_a_4xx_naming_text(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], text: str
) -> None:
    app, client, user, _, job = _finished(make_app, reference_audio, script=(SSML_BOOK, "ssml"))
    noon = _seq_reading(app, job["id"], "By noon")
    answer = client.post(f"/v1/jobs/{job['id']}/chunks/{noon}/rerender", json={"text": text}, headers=user)
    assert answer.status_code == 422, answer.json
    assert answer.json["error"]["field"] == "text"
    assert "root:" not in json.dumps(answer.json)
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "succeeded"
    assert _chunk(app, job["id"], noon).text.startswith("By noon the wind had turned")


def test_a_markdown_jobs_edit_is_read_as_markdown(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user, inline, job = _finished(make_app, reference_audio)
    seq = _storm_seq(client, user, job)
    url = f"/v1/jobs/{job['id']}/chunks/{seq}/rerender"
    answer = client.post(
        url, json={"text": "By noon the *wind* had turned, and the __gulls__ went quiet."}, headers=user
    )
    assert answer.status_code == 202, answer.json
    chunk = _chunk(app, job["id"], seq)
    for markup in ("*", "_"):
        assert markup not in chunk.text
    for word in ("wind", "gulls"):
        assert word in chunk.text
    inline.run()
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "succeeded"


def test_a_rerender_whose_worker_is_lost_every_time_keeps_the_previous_take(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """The sweeper's path: the chunk used every attempt (its worker killed each time); the finished book
    is not failed for it."""
    app, client, user, inline, job = _finished(make_app, reference_audio, format="wav")
    rt = tome_of(app).runtime
    seq = _storm_seq(client, user, job)
    old = _chunk(app, job["id"], seq)
    old_text, old_audio = old.text, Path(str(old.audio_path)).read_bytes()
    edited = "By noon the wind had turned, and the gulls screamed one after another."
    answer = client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", json={"text": edited}, headers=user)
    assert answer.status_code == 202, answer.json
    job_id = uuid.UUID(job["id"])
    clock = utcnow()
    for attempt in range(1, rt.settings.tasks.max_chunk_attempts + 1):
        clock += timedelta(seconds=rt.settings.tasks.chunk_lease_seconds + 100)
        lost = [m for m in inline.queue if m[0] == RENDER_CHUNKS]  # lost with the worker that took it
        inline.queue = deque(m for m in inline.queue if m not in lost)
        with unit_of_work(rt.sessions) as session:  # a worker takes the chunk ... and is killed
            _, claimed = claim_chunks(
                session, job_id, [seq], timedelta(seconds=60), rt.settings.tasks.max_chunk_attempts, clock
            )
            assert [c.seq for c in claimed] == [seq], f"attempt {attempt} could not claim"
        report = sweep(rt, inline.enqueue, now=clock + timedelta(seconds=61))
    assert report.chunks_failed == 0
    assert report.failed_jobs == []
    inline.run()  # the chapter and the book stitched again from the previous take
    after = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert after["status"] == "succeeded", after["error"]
    assert after["rerender"]["state"] == "refused"
    assert f"chunk {seq} failed after" in after["rerender"]["error"]
    kept = _chunk(app, job["id"], seq)
    assert kept.text == old_text
    assert Path(str(kept.audio_path)).read_bytes() == old_audio


def test_a_rerender_cancelled_by_its_owner_keeps_the_book_and_the_previous_take(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user, inline, job = _finished(make_app, reference_audio, format="wav")
    seq = _storm_seq(client, user, job)
    old = _chunk(app, job["id"], seq)
    old_text, old_audio = old.text, Path(str(old.audio_path)).read_bytes()
    edited = "By noon the wind had turned, and the gulls screamed one after another."
    assert (
        client.post(
            f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", json={"text": edited}, headers=user
        ).status_code
        == 202
    )
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel", headers=user)
    assert cancelled.status_code == 200, cancelled.json
    assert cancelled.json["status"] == "running"  # the book is published again from the previous take
    assert cancelled.json["rerender"]["state"] == "cancelled"
    inline.run()  # the render message that was sent finds nothing to render
    after = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert after["status"] == "succeeded", after["error"]
    assert after["rerender"]["state"] == "cancelled"
    assert after["progress"]["chunks_done"] == after["progress"]["chunks_total"]
    kept = _chunk(app, job["id"], seq)
    assert kept.text == old_text
    assert Path(str(kept.audio_path)).read_bytes() == old_audio
    # a finished book cannot be cancelled; it can be rendered again
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=user).status_code == 409
    assert client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", headers=user).status_code == 202


def test_a_rerender_whose_job_cannot_go_on_keeps_the_previous_take(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """What the render step does when a job cannot go on (its voice's prompt failed, the recogniser
    cannot load): a finished book's re-render is given up, the book is not failed."""
    app, client, user, inline, job = _finished(make_app, reference_audio, format="wav")
    seq = _storm_seq(client, user, job)
    assert client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", headers=user).status_code == 202
    inline.queue = deque(m for m in inline.queue if m[0] != RENDER_CHUNKS)  # not rendered yet
    assert (
        rerender.fail_job(tome_of(app).runtime, uuid.UUID(job["id"]), "the prompt failed", inline.enqueue)
        is False
    )
    inline.run()
    after = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert after["status"] == "succeeded", after["error"]
    assert after["rerender"] == {"seq": seq, "revision": 1, "state": "refused", "error": "the prompt failed"}
    # a job rendering no chunk again is failed as before
    assert (
        rerender.fail_job(tome_of(app).runtime, uuid.UUID(job["id"]), "x", inline.enqueue) is False
    )  # finished
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "succeeded"


def test_a_chunk_whose_voice_was_deleted_cannot_be_rendered_again(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    _, client, user, _, job = _finished(make_app, reference_audio)
    assert client.delete(f"/v1/voices/{job['voice_id']}", headers=user).status_code == 204
    answer = client.post(f"/v1/jobs/{job['id']}/chunks/1/rerender", headers=user)
    assert answer.status_code == 409, answer.json
    assert answer.json["error"]["code"] == "voice_deleted"
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "succeeded"
    assert client.get(job["output"]["url"], headers=user).status_code == 200


def test_a_take_chosen_by_a_rerender_is_what_the_next_job_of_the_book_takes(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], rendered_texts: list[str]
) -> None:
    """Fix a chunk, then order the book in another format: the fixed take comes back byte for byte, not
    the take the text's own seed gives (which the producer rejected), and nothing is rendered again.
    (espeak renders the same audio whatever the seed, so the take is told by its key and by the engine
    not being asked: without the chosen take, the chunk's own seed has no audio yet and renders.)"""
    app, client, user, inline, job = _finished(make_app, reference_audio, format="wav")
    seq = _storm_seq(client, user, job)
    rejected = _chunk(app, job["id"], seq).content_key
    assert (
        client.post(
            f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", json={"seed": 12345}, headers=user
        ).status_code
        == 202
    )
    inline.run()
    chosen = _chunk(app, job["id"], seq)
    fixed = Path(str(chosen.audio_path)).read_bytes()
    assert chosen.content_key != rejected
    assert chosen.take_key is not None
    rendered_texts.clear()

    again = submit_job(
        client, user, "narrator", script=BOOK, script_format="markdown", output={"format": "mp3"}
    )
    assert again.status_code == 202, again.json
    inline.enqueue(START_JOB, [again.json["id"]])
    inline.run()
    done = client.get(f"/v1/jobs/{again.json['id']}", headers=user).json
    assert done["status"] == "succeeded", done["error"]
    assert rendered_texts == [], "every chunk reused"
    assert done["progress"]["chunks_reused"] == done["progress"]["chunks_total"]
    took = _chunk(app, again.json["id"], seq)
    assert (took.content_key, took.take_key) == (chosen.content_key, chosen.take_key)
    assert Path(str(took.audio_path)).read_bytes() == fixed
    # and a third order, from the second job's chunks, still has the fixed take
    third = submit_job(
        client, user, "narrator", script=BOOK, script_format="markdown", output={"format": "ogg"}
    )
    inline.enqueue(START_JOB, [third.json["id"]])
    inline.run()
    assert Path(str(_chunk(app, third.json["id"], seq).audio_path)).read_bytes() == fixed
    # another owner's book of the same text never takes it
    other = bearer(mint_key(app, "someone", "k", admin=False))
    upload_voice(client, other, reference_audio[0], ref_text=reference_audio[1])
    theirs = submit_job(
        client, other, "narrator", script=BOOK, script_format="markdown", output={"format": "wav"}
    )
    voice_id = theirs.json["voice_id"]
    inline.enqueue(BUILD_VOICE, [voice_id])
    inline.enqueue(START_JOB, [theirs.json["id"]])
    inline.run()
    assert client.get(f"/v1/jobs/{theirs.json['id']}", headers=other).json["progress"]["chunks_reused"] == 0
