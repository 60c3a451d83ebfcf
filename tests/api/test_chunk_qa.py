"""Chunk QA in jobs: a chunk that fails its checks is rendered again with a new seed and the best take
kept; one that never passes is flagged (or fails the job, as asked); audio with nothing in it never
counts as done. Faults are injected into the real engine's output on chosen chunks (the render step's
synthesize function wrapped), as a broken checkpoint or a bad GPU take would produce them."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from models import Chunk, Job
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.inline import Inline
from tests.support.receiver import Receiver
from tests.support.whisper import tiny_whisper
from webapi.cli import mint_key
from worker import webhooks
from worker.jobs import render
from worker.task_names import BUILD_VOICE, START_JOB

BOOK = (
    "# Harbour\n\nThe fog came in before dawn. Doctor Hale counted the boats on the quay.\n\n"
    "# Storm\n\nBy noon the wind had turned, and the gulls went quiet one after another.\n\n"
    "The harbour master called every boat back to the shelter of the wall."
)
TARGET = "The harbour master called every boat back to the shelter of the wall."

Fault = Callable[[np.ndarray, int], np.ndarray]
Injector = Callable[[Fault, int], list[int]]


def silence(wave: np.ndarray, take: int) -> np.ndarray:
    return np.zeros_like(wave)


def truncate(wave: np.ndarray, take: int) -> np.ndarray:
    return wave[: wave.size // 3].copy()


@pytest.fixture
def inject() -> Iterator[Callable[[Fault, int], list[int]]]:
    """``inject(fault, takes)``: the chunk reading TARGET gets ``fault`` on its first ``takes`` renders;
    returns the list of takes seen (grows as the job runs)."""
    real = render.synthesize_in_halves
    seen: list[int] = []

    def arm(fault: Fault, takes: int) -> list[int]:
        def faulty(engine: Any, requests: Any) -> Any:
            out = real(engine, requests)
            result = []
            for request, (wave, marks) in zip(requests, out, strict=True):
                faulted = TARGET in request.text and len(seen) < takes
                if TARGET in request.text:
                    seen.append(len(seen) + 1)
                result.append((fault(wave, len(seen)), []) if faulted else (wave, marks))
            return result

        render.synthesize_in_halves = faulty
        return seen

    yield arm
    render.synthesize_in_halves = real


def _app(
    make_app: Callable[..., Flask], audio: tuple[bytes, str], **settings: Any
) -> tuple[Flask, FlaskClient, dict[str, str]]:
    app = make_app(**settings)
    client = app.test_client()
    user = bearer(mint_key(app, "producer", "k", admin=False))
    voice = upload_voice(client, user, audio[0], ref_text=audio[1])
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.run()
    return app, client, user


def _run(app: Flask, client: FlaskClient, user: dict[str, str], **body: Any) -> dict[str, Any]:
    job = submit_job(client, user, "narrator", script=BOOK, script_format="markdown", **body)
    assert job.status_code == 202, job.json
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    return dict(client.get(f"/v1/jobs/{job.json['id']}", headers=user).json or {})


def test_a_silent_take_is_rendered_again_and_the_good_one_kept(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    inject: Callable[[Fault, int], list[int]],
) -> None:
    app, client, user = _app(make_app, reference_audio)
    seen = inject(silence, 1)
    job = _run(app, client, user)
    assert job["status"] == "succeeded", job["error"]
    assert seen == [1, 2]
    assert job["qa"] == {"chunks_flagged": 0, "chunks_rerendered": 1, "url": f"/v1/jobs/{job['id']}/qa"}
    report = client.get(job["qa"]["url"], headers=user).json
    (target,) = [c for c in report["chunks"] if TARGET in c["text"]]
    assert target["renders"] == 2
    assert target["passed"] is True
    assert target["flagged"] is False
    others = [c for c in report["chunks"] if TARGET not in c["text"]]
    assert others
    assert all(c["passed"] and c["renders"] == 1 for c in others)
    assert all(c["checks"] for c in report["chunks"])
    # the kept take is the real one: the chunk's audio is speech, not the silent take
    audio = client.get(target["audio_url"], headers=user)
    assert audio.status_code == 200
    assert audio.mimetype == "audio/wav"
    pcm = np.frombuffer(audio.data[44:], dtype="<i2")
    assert np.abs(pcm).max() > 3000


def test_audio_with_nothing_in_it_never_counts_as_done(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    inject: Callable[[Fault, int], list[int]],
) -> None:
    app, client, user = _app(make_app, reference_audio)
    seen = inject(silence, 99)
    job = _run(app, client, user, qa={"on_fail": "flag", "max_rerenders": 1})
    assert job["status"] == "failed"
    assert "failed its quality checks in 2 renders" in job["error"]
    assert "silen" in job["error"] or "speech" in job["error"]
    assert seen == [1, 2]
    assert job["output"]["url"] is None


def test_a_take_that_never_passes_is_flagged_or_fails_the_job_as_asked(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    inject: Callable[[Fault, int], list[int]],
) -> None:
    app, client, user = _app(make_app, reference_audio, webhook_allow_private=True)
    inject(truncate, 99)
    hook = Receiver()
    try:
        flagged = _run(app, client, user, qa={"transcript": True, "max_rerenders": 1}, webhook_url=hook.url)
    finally:
        hook.close()
    assert flagged["status"] == "succeeded", flagged["error"]
    assert flagged["qa"]["chunks_flagged"] == 1
    assert flagged["qa"]["chunks_rerendered"] == 1
    # the receiver hears that the job succeeded, then that it ended with a flagged chunk to listen to
    sent = [(headers, json.loads(body)) for headers, body in hook.requests]
    sent = [(headers, e) for headers, e in sent if e["event"] != "job.chapter_ready"]
    events = [e for _, e in sent]
    assert [e["event"] for e in events] == ["job.succeeded", "job.flagged"]
    assert events[0]["job"]["qa"] == {"chunks_flagged": 1, "chunks_rerendered": 1}
    (named,) = events[1]["qa"]["chunks"]
    assert events[1]["qa"]["chunks_flagged"] == 1
    assert events[1]["job"]["id"] == flagged["id"]
    assert named["reasons"]
    assert client.get(named["audio_url"], headers=user).status_code == 200
    assert client.get(events[1]["qa"]["url"], headers=user).json["chunks"][0]["seq"] == named["seq"]
    ids = [headers["webhook-id"] for headers, _ in sent]
    assert len(set(ids)) == 2, "two events, two ids"
    with tome_of(app).runtime.sessions() as session:  # delivered once each: nothing left due
        row = session.get(Job, uuid.UUID(flagged["id"]))
        assert row is not None
        assert row.flags_webhook_delivered_at is not None
        assert row.flags_webhook_attempts == 1
    assert webhooks.deliver_flags(tome_of(app).runtime, uuid.UUID(flagged["id"])) == "not_due"
    report = client.get(f"{flagged['qa']['url']}?flagged=true", headers=user).json
    (chunk,) = report["chunks"]
    assert TARGET in chunk["text"]
    assert chunk["flagged"] is True
    assert chunk["renders"] == 2
    assert chunk["reasons"]
    assert chunk["missing_words"], chunk  # the words cut off, named
    assert set(chunk["missing_words"]) <= set(TARGET.lower().rstrip(".").split())
    # another owner sees none of it
    other = bearer(mint_key(app, "stranger", "k", admin=False))
    assert client.get(flagged["qa"]["url"], headers=other).status_code == 404
    assert client.get(chunk["audio_url"], headers=other).status_code == 404

    failed = _run(app, client, user, qa={"transcript": True, "max_rerenders": 0, "on_fail": "fail"})
    assert failed["status"] == "failed"
    assert "failed its quality checks in 1 renders" in failed["error"]


def test_qa_off_checks_nothing(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    inject: Callable[[Fault, int], list[int]],
) -> None:
    app, client, user = _app(make_app, reference_audio)
    seen = inject(truncate, 99)
    job = _run(app, client, user, qa={"enabled": False})
    assert job["status"] == "succeeded"
    assert seen == [1]
    report = client.get(job["qa"]["url"], headers=user).json
    assert all(c["passed"] is None and c["renders"] is None for c in report["chunks"])


@pytest.mark.parametrize(
    ("qa", "field"),
    [
        ({"thresholds": {"no_such_threshold": 1}}, "qa.thresholds"),
        ({"max_rerenders": 99}, "qa.max_rerenders"),
        ({"on_fail": "explode"}, "qa.on_fail"),
        ({"thresholds": {f"t{n}": 1 for n in range(40)}}, "qa.thresholds"),
        ({"enabled": "yes please"}, "qa.enabled"),
        ({"thresholds": {"min_errors": 2.5}}, "qa.thresholds"),
        ({"thresholds": {"plausible_chars_per_second": 3}}, "qa.thresholds"),
        ({"thresholds": {"max_wer": 1e300}}, "qa.thresholds"),
        ({"thresholds": {"min_speaker_similarity": 1.5}}, "qa.thresholds"),  # no chunk could pass
        ({"thresholds": {"min_speaker_similarity": -0.2}}, "qa.thresholds"),
    ],
)
def test_bad_qa_options_are_a_422_naming_the_field(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], qa: Any, field: str
) -> None:
    upload_voice(client, user, reference_audio[0])
    response = submit_job(client, user, "narrator", qa=qa)
    assert response.status_code == 422, response.json
    error = response.json["error"]
    assert field in json.dumps(error), error


def test_non_finite_thresholds_are_refused(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    upload_voice(client, user, reference_audio[0])
    body = '{"voice": "narrator", "title": "T", "script": "Hi.", "qa": {"thresholds": {"max_wer": NaN}}}'
    response = client.post("/v1/jobs", data=body, headers={**user, "Content-Type": "application/json"})
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"] == "qa.thresholds"


def test_a_take_much_quieter_than_the_voices_other_chunks_is_rendered_again(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    inject: Callable[[Fault, int], list[int]],
) -> None:
    """Loudness outliers against the job: once three chunks of the voice passed, a take 20 dB under their
    speech level fails ``level`` (the render step levels chunks afterwards, but a whispering or distant
    take is a fault a listener hears)."""
    app = make_app(chunks_per_task=1)
    _, client, user = _app(lambda **_: app, reference_audio)
    seen = inject(lambda wave, take: (wave * 0.1).astype(wave.dtype), 1)
    script = "\n\n".join(
        [
            "The fog came in before dawn.",
            "Doctor Hale counted the boats on the quay.",
            "By noon the wind had turned, and the gulls went quiet.",
            "The lamps were lit along the sea wall.",
            TARGET,
        ]
    )
    job = submit_job(client, user, "narrator", script=script, script_format="markdown")
    assert job.status_code == 202, job.json
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    done = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert done["status"] == "succeeded", done["error"]
    assert seen == [1, 2]
    assert done["qa"]["chunks_rerendered"] == 1
    report = client.get(done["qa"]["url"], headers=user).json
    (target,) = [c for c in report["chunks"] if TARGET in c["text"]]
    assert target["renders"] == 2
    level = next(c for c in target["checks"] if c["name"] == "level")
    assert level["passed"] is True
    assert abs(level["score"]) < 3


def test_a_deployment_set_to_whisper_checks_every_transcript_with_it(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], tmp_path: Path
) -> None:
    """TOME_QA_RECOGNISER=whisper: the transcript check of every chunk runs on the local Whisper model
    instead of pocketsphinx (a tiny random one here: it hears nonsense, so every chunk is flagged, where
    the embedded recogniser passes the same book)."""
    model = tiny_whisper(tmp_path / "whisper")
    app, client, user = _app(make_app, reference_audio, qa_recogniser="whisper", qa_whisper_dir=str(model))
    job = _run(app, client, user, qa={"transcript": True, "max_rerenders": 0})
    assert job["status"] == "succeeded", job["error"]
    with tome_of(app).runtime.sessions() as session:
        records = session.scalars(select(Chunk.qa).where(Chunk.job_id == uuid.UUID(job["id"]))).all()
    assert records
    assert {r["details"]["transcript"]["recogniser"] for r in records} == {"whisper"}
    assert job["qa"]["chunks_flagged"] == len(records)
    report = client.get(job["qa"]["url"], headers=user).json
    assert all(
        any(c["name"] == "words" and not c["passed"] for c in row["checks"]) for row in report["chunks"]
    )

    embedded, eclient, euser = _app(make_app, reference_audio)
    same = _run(embedded, eclient, euser, qa={"transcript": True, "max_rerenders": 0})
    assert same["status"] == "succeeded"
    assert same["qa"]["chunks_flagged"] == 0


def test_a_whisper_model_that_cannot_load_fails_the_job_saying_so(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], tmp_path: Path
) -> None:
    """The layout passes the start-up check, the weights are corrupt: no take can be judged, so the job
    fails at once with the reason, not after its chunks were retried as if their worker were lost."""
    model = tiny_whisper(tmp_path / "whisper")
    next(model.glob("*.safetensors")).write_bytes(b"\x00" * 64)
    app, client, user = _app(make_app, reference_audio, qa_recogniser="whisper", qa_whisper_dir=str(model))
    job = _run(app, client, user, qa={"transcript": True})
    assert job["status"] == "failed"
    assert job["error"].startswith("the transcript check could not run: the worker's recogniser failed")
    assert str(tmp_path) not in job["error"], "the server's paths stay in the worker log"


def test_each_new_take_renews_the_chunks_lease(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Takes can outlast one lease (three takes of a batch on a slow GPU): before each new take the
    worker pushes its chunks' lease again, so the sweeper does not take it for dead and render them twice."""
    app, client, user = _app(make_app, reference_audio)
    real = render.synthesize_in_halves
    leases: list[Any] = []

    def silent_target(engine: Any, requests: Any) -> Any:
        out = real(engine, requests)
        if any(TARGET in r.text for r in requests):
            with tome_of(app).runtime.sessions() as session:
                leases.append(
                    session.scalar(
                        select(Chunk.lease_until).where(
                            Chunk.text.contains(TARGET), Chunk.status == "running"
                        )
                    )
                )
            time.sleep(0.05)  # the clock moves between takes
            return [
                (np.zeros_like(w), []) if TARGET in r.text else (w, m)
                for r, (w, m) in zip(requests, out, strict=True)
            ]
        return out

    monkeypatch.setattr(render, "synthesize_in_halves", silent_target)
    job = _run(app, client, user, qa={"max_rerenders": 2})
    assert job["status"] == "failed"  # silence never counts as done
    assert len(leases) == 3, leases
    assert all(lease is not None for lease in leases), leases
    assert leases[0] < leases[1] < leases[2], "renewed before each new take"


def test_with_qa_off_audio_with_nothing_in_it_still_never_counts_as_done(
    make_app: Callable[..., Flask],
    reference_audio: tuple[bytes, str],
    inject: Callable[[Fault, int], list[int]],
) -> None:
    """A broken checkpoint renders silence: even a job that turned QA off fails rather than succeeding
    with a silent book (and is not rendered again: QA is off)."""
    app, client, user = _app(make_app, reference_audio)
    seen = inject(silence, 99)
    job = _run(app, client, user, qa={"enabled": False})
    assert job["status"] == "failed"
    assert "the audio is silent" in job["error"]
    assert seen == [1]
    assert job["output"]["url"] is None


def test_another_voice_is_caught_from_a_short_jobs_first_chunk(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job too short to learn its voice's pitch from its own chunks (fewer than three passed when the
    batch is checked): the pitch its prompt is read with stands in, so a chunk read in another voice
    (an octave up) is caught on the first take; the others pass."""
    app, client, user = _app(make_app, reference_audio)
    real = render.synthesize_in_halves
    takes = [0]  # renders of the target so far

    def other_voice_first(engine: Any, requests: Any) -> Any:
        higher = {
            **requests[0].prompt,
            "f0_median_hz": np.array([float(requests[0].prompt["f0_median_hz"][0]) * 2], np.float32),
        }
        swapped = [
            dataclasses.replace(r, prompt=higher) if TARGET in r.text and takes[0] == 0 else r
            for r in requests
        ]
        if any(TARGET in r.text for r in requests):
            takes[0] += 1
        return real(engine, swapped)

    monkeypatch.setattr(render, "synthesize_in_halves", other_voice_first)
    job = _run(app, client, user, qa={"max_rerenders": 1})
    assert job["status"] == "succeeded", job["error"]
    report = client.get(job["qa"]["url"], headers=user).json
    (target,) = [c for c in report["chunks"] if TARGET in c["text"]]
    assert target["renders"] == 2, target
    assert target["passed"] is True
    assert target["flagged"] is False
    assert job["qa"]["chunks_rerendered"] == 1
    others = [c for c in report["chunks"] if TARGET not in c["text"]]
    assert all(c["passed"] and c["renders"] == 1 for c in others), others
    pitch = [c for c in target["checks"] if c["name"] == "pitch"]
    assert pitch
    assert pitch[0]["passed"]
