"""Re-render only what changed: a job whose chunks an earlier job of the same owner already rendered (same
voice, text and settings) takes their audio, byte for byte, and renders only the rest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.factories import job_chunks, render_inline
from tests.support.inline import Inline
from tests.support.s3 import both_backends
from webapi.cli import mint_key
from worker.jobs import render
from worker.storage.backend import read_stored
from worker.task_names import BUILD_VOICE

storage_overrides = both_backends  # every test here runs on the local directory and on S3


CHAPTERS = [
    ("Harbour", "The fog came in before dawn. Dr. Hale counted the boats on the quay."),
    ("Storm", "By noon the wind had turned. The gulls went quiet, one after another."),
    ("Morning", "The sea was calm again. Nobody spoke of the night."),
]


def _book(chapters: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"# {title}\n\n{text}" for title, text in chapters)


class _Counted:
    """Counts the chunk texts the engine is asked to render (the real engine renders them)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __enter__(self) -> _Counted:
        self.real = render.synthesize_in_halves

        def counting(engine: Any, requests: Any) -> Any:
            self.texts += [r.text for r in requests]
            return self.real(engine, requests)

        render.synthesize_in_halves = counting
        return self

    def __exit__(self, *_: object) -> None:
        render.synthesize_in_halves = self.real


def _run(app: Flask, client: FlaskClient, user: dict[str, str], script: str, **body: Any) -> dict[str, Any]:
    job = submit_job(client, user, "narrator", script=script, script_format="markdown", **body)
    assert job.status_code == 202, job.json
    return render_inline(app, client, user, job.json["id"])


def _setup(
    make_app: Callable[..., Flask], audio: bytes, owner: str
) -> tuple[Flask, FlaskClient, dict[str, str]]:
    app = make_app()
    client = app.test_client()
    user = bearer(mint_key(app, owner, "k", admin=False))
    voice = upload_voice(client, user, audio)
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.run()
    return app, client, user


def test_an_edited_paragraph_is_the_only_thing_rendered_again(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user = _setup(make_app, reference_audio[0], "editor")
    with _Counted() as first_engine:
        first = _run(app, client, user, _book(CHAPTERS), output={"format": "mp3"})
    assert first["progress"]["chunks_reused"] == 0
    assert len(first_engine.texts) == first["progress"]["chunks_total"]

    edited = [*CHAPTERS]
    edited[1] = ("Storm", "By noon the wind had turned. The gulls screamed, one after another.")
    with _Counted() as second_engine:
        second = _run(app, client, user, _book(edited), output={"format": "m4b"})  # another format too
    total = second["progress"]["chunks_total"]
    assert second_engine.texts == ["The gulls screamed, one after another."] or (
        len(second_engine.texts) == 1 and "screamed" in second_engine.texts[0]
    ), second_engine.texts
    assert second["progress"]["chunks_reused"] == total - 1
    before = {c.text: c for c in job_chunks(app, first["id"])}
    store = tome_of(app).storage
    for chunk in job_chunks(app, second["id"]):
        if "screamed" in chunk.text:
            assert chunk.text not in before
            continue
        old = before[chunk.text]
        # the same audio, byte for byte: the earlier render's file, linked
        assert read_stored(store, str(chunk.audio_path)) == read_stored(store, str(old.audio_path))
        assert chunk.content_key == old.content_key
        assert chunk.levels == old.levels
        assert chunk.words == old.words


def test_nothing_is_reused_across_owners_or_across_settings(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user = _setup(make_app, reference_audio[0], "first-owner")
    first = _run(app, client, user, _book(CHAPTERS))
    # the same book at another speed: other audio, nothing reused
    faster = _run(app, client, user, _book(CHAPTERS), speed=1.25)
    assert faster["progress"]["chunks_reused"] == 0
    keys = {c.content_key for c in job_chunks(app, first["id"])}
    assert keys.isdisjoint(c.content_key for c in job_chunks(app, faster["id"]))
    # another owner with the same reference and book: renders its own
    other = bearer(mint_key(app, "second-owner", "k", admin=False))
    voice = upload_voice(client, other, reference_audio[0])
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.run()
    theirs = _run(app, client, other, _book(CHAPTERS))
    assert theirs["progress"]["chunks_reused"] == 0


def test_a_donor_whose_audio_is_gone_is_rendered_again(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user = _setup(make_app, reference_audio[0], "forgetful")
    first = _run(app, client, user, _book(CHAPTERS))
    for chunk in job_chunks(app, first["id"]):
        tome_of(app).storage.remove(str(chunk.audio_path))
    with _Counted() as engine:
        again = _run(app, client, user, _book(CHAPTERS))
    assert again["progress"]["chunks_reused"] == 0
    assert len(engine.texts) == again["progress"]["chunks_total"]


def test_audio_checked_less_than_a_job_asks_is_rendered_again(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """espeak's jobs skip the transcript check by default: their chunks do not stand for a job that asks
    for it (a doubled or dropped phrase would pass unheard), while a job that asks no more reuses them."""
    app, client, user = _setup(make_app, reference_audio[0], "careful")
    cheap = _run(app, client, user, _book(CHAPTERS))
    assert cheap["progress"]["chunks_reused"] == 0
    with _Counted() as engine:
        heard = _run(app, client, user, _book(CHAPTERS), qa={"transcript": True})
    assert heard["progress"]["chunks_reused"] == 0
    assert len(engine.texts) == heard["progress"]["chunks_total"]
    checks = {c["name"] for c in job_chunks(app, heard["id"])[1].qa["checks"]}
    assert "words" in checks
    # now checked with the transcript: a job with or without it reuses that audio
    again = _run(app, client, user, _book(CHAPTERS), qa={"transcript": True})
    assert again["progress"]["chunks_reused"] == again["progress"]["chunks_total"]
    last = _run(app, client, user, _book(CHAPTERS))
    assert last["progress"]["chunks_reused"] == cheap["progress"]["chunks_total"]


def test_audio_passed_under_other_thresholds_is_rendered_again(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """A job with its own QA thresholds does not take audio that passed under others (the earlier job's
    could be looser); the next job with the same thresholds reuses its audio. Records written before they
    named their thresholds stand for the engine's defaults."""
    app, client, user = _setup(make_app, reference_audio[0], "strict")
    default = _run(app, client, user, _book(CHAPTERS))
    total = default["progress"]["chunks_total"]
    strict = {"thresholds": {"max_pause_s": 1.1, "max_edge_s": 0.45}}
    with _Counted() as engine:
        first = _run(app, client, user, _book(CHAPTERS), qa=strict)
    assert first["progress"]["chunks_reused"] == 0
    assert len(engine.texts) == total
    again = _run(app, client, user, _book(CHAPTERS), qa=strict, output={"format": "ogg"})
    assert again["progress"]["chunks_reused"] == total
    # the default job's records without their thresholds' digest (as written before): still the defaults'
    with tome_of(app).sessions.begin():
        for chunk in job_chunks(app, default["id"]):
            chunk.qa = {k: v for k, v in (chunk.qa or {}).items() if k != "policy"}
    for chunk in job_chunks(app, first["id"]) + job_chunks(
        app, again["id"]
    ):  # only the default job's are left
        tome_of(app).sessions.delete(chunk)
    tome_of(app).sessions.commit()
    with _Counted() as engine:
        later = _run(app, client, user, _book(CHAPTERS), output={"format": "wav"})
    assert engine.texts == []
    assert later["progress"]["chunks_reused"] == total
