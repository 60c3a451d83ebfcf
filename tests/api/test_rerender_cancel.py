"""Cancelling a finished book's re-render (POST /v1/jobs/{id}/cancel) at any point before its new book is
published: while the new take renders, while its chapter is stitched, while the book is; once, or twice at
the same time. The re-render is cancelled, never the book: the job ends succeeded at its revision with the
previous take, and its progress never counts a chunk twice.

The cancel is sent from inside the task at the point it names (the real task bodies run in-process,
worker.dispatch), so the task in flight goes on after the cancel and must lose its claim."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from models import Chunk
from tests.api.helpers import submit_job
from tests.api.test_rerender import BOOK, _chunk, _finished, _storm_seq
from tests.support.apps import tome_of
from tests.support.services import Services, postgres_database
from worker.jobs import deliver, render

EDIT = "By noon the wind had turned, and the gulls screamed one after another."
# where the cancel lands: the function of the re-render's task that is running then
DURING = {
    "render": (render, "synthesize_in_halves"),
    "chapter stitch": (deliver, "build_chapter"),
    "book stitch": (deliver, "build_from_chapters"),
    "one-chapter book stitch": (deliver, "build"),  # a book without chapter rows is stitched whole
}
ONE_CHAPTER = (
    "The fog came in before dawn. Doctor Hale counted the boats on the quay.\n\n"
    "By noon the wind had turned, and the gulls went quiet one after another.",
    "plain",
)


def _cancel_during(monkeypatch: pytest.MonkeyPatch, where: str, cancel: Callable[[], list[Any]]) -> list[Any]:
    """Run ``cancel`` once, inside the first call of the function ``where`` names; its answers."""
    module, name = DURING[where]
    real = getattr(module, name)
    answers: list[Any] = []

    def cancelling(*args: Any, **kwargs: Any) -> Any:
        if not answers:
            answers.extend(cancel())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, cancelling)
    return answers


def _cancels(client: FlaskClient, user: dict[str, str], job_id: str, n: int) -> Callable[[], list[Any]]:
    """``n`` cancels of the job sent at once (one thread each), their answers as (status, body)."""

    def send() -> list[Any]:
        barrier = threading.Barrier(n)
        answers: list[Any] = [None] * n

        def one(i: int) -> None:
            barrier.wait()
            answer = client.post(f"/v1/jobs/{job_id}/cancel", headers=user)
            answers[i] = (answer.status_code, answer.json)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return answers

    return send


def _cancelled_rerender_keeps_the_book(
    make: Callable[..., Flask],
    audio: tuple[bytes, str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    cancels: int,
) -> None:
    script = ONE_CHAPTER if where.startswith("one-chapter") else (BOOK, "markdown")
    app, client, user, inline, job = _finished(make, audio, script=script, format="wav")
    seq = _storm_seq(client, user, job)
    old = _chunk(app, job["id"], seq)
    old_text, old_audio = old.text, Path(str(old.audio_path)).read_bytes()
    book = client.get(job["output"]["url"], headers=user).data
    answers = _cancel_during(monkeypatch, where, _cancels(client, user, job["id"], cancels))
    started = client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", json={"text": EDIT}, headers=user)
    assert started.status_code == 202, started.json

    inline.run()  # the re-render's tasks; the cancels land inside the one ``where`` names

    assert len(answers) == cancels
    for status, body in answers:  # every cancel: the re-render cancelled, the book stitched again
        assert status == 200, body
        assert body["status"] in ("running", "stitching")  # the book, again from the previous take
        assert body["rerender"]["state"] == "cancelled"
        assert body["progress"]["chunks_done"] <= body["progress"]["chunks_total"]
    after = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert after["status"] == "succeeded", after["error"]
    assert after["revision"] == 1
    assert after["rerender"] == {
        "seq": seq,
        "revision": 1,
        "state": "cancelled",
        "error": "cancelled by its owner",
    }
    assert after["progress"]["chunks_done"] == after["progress"]["chunks_total"]
    kept = _chunk(app, job["id"], seq)
    assert kept.text == old_text
    unpublished = select(func.count()).where(Chunk.job_id == kept.job_id, Chunk.previous.is_not(None))
    assert tome_of(app).sessions.scalar(unpublished) == 0  # SQL NULL: no chunk left as a re-render
    assert Path(str(kept.audio_path)).read_bytes() == old_audio
    assert client.get(after["output"]["url"], headers=user).data == book  # the same takes, the same book
    # nothing left to cancel; the book can be rendered again
    again = client.post(f"/v1/jobs/{job['id']}/cancel", headers=user)
    assert again.status_code == 409, again.json
    assert again.json["error"]["code"] == "not_cancellable"
    assert client.post(f"/v1/jobs/{job['id']}/chunks/{seq}/rerender", headers=user).status_code == 202


@pytest.mark.parametrize("where", list(DURING))
def test_a_cancel_while_the_rerender_renders_or_stitches_cancels_only_the_rerender(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    _cancelled_rerender_keeps_the_book(make_app, reference_audio, monkeypatch, where, cancels=1)


@pytest.fixture
def pg_url(services: Services) -> Iterator[str]:
    """A fresh PostgreSQL database (set up before, so dropped after, the apps made on it)."""
    with postgres_database(services.pg_url) as url:
        yield url


@pytest.mark.postgres
@pytest.mark.parametrize("where", list(DURING))
def test_two_cancels_at_once_are_one_cancel(
    pg_url: str,
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """On PostgreSQL (row locks, concurrent transactions): both cancels answer the cancelled re-render,
    and the render or stitch in flight counts nothing twice."""

    def make(**overrides: Any) -> Flask:
        return make_app(database_url=pg_url, **overrides)

    _cancelled_rerender_keeps_the_book(make, reference_audio, monkeypatch, where, cancels=2)


def test_a_job_being_rendered_for_the_first_time_is_still_cancelled(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    _, client, user, _, job = _finished(make_app, reference_audio, format="wav")
    resubmitted = submit_job(client, user, "narrator", script="One more line.")
    assert resubmitted.status_code == 202, resubmitted.json
    cancelled = client.post(f"/v1/jobs/{resubmitted.json['id']}/cancel", headers=user)
    assert cancelled.status_code == 200, cancelled.json
    assert cancelled.json["status"] == "cancelled"
    assert client.get(f"/v1/jobs/{uuid.UUID(job['id'])}", headers=user).json["status"] == "succeeded"
