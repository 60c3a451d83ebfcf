"""Jobs whose script switches voices with ``<!-- voice: NAME -->`` lines: resolution, errors, chunks."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from models import CacheStatus, Chunk, Voice, unit_of_work, utcnow
from tests.support.apps import tome_of
from tests.support.factories import add_voice, builds_sent, chunk_voice_ids, submit_job
from tests.support.inline import Inline
from worker.jobs.start import StartOutcome, start_job
from worker.runtime import Runtime
from worker.sweeper import sweep
from worker.task_names import BUILD_VOICE, START_JOB
from worker.voices.prompts import build_voice

DIALOGUE = """# The Visit

The door opened slowly.

<!-- voice: bob -->
"Who is there?" asked Bob.

<!--  Voice: {ann}  -->
"Only me," said Ann.

<!-- voice: default -->
And that was that.
"""


@pytest.fixture
def cast(client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]) -> dict[str, str]:
    return {name: add_voice(client, user, reference_audio, name) for name in ("narrator", "bob", "ann")}


def test_each_chunk_gets_its_directive_voice_by_name_or_id(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str]
) -> None:
    script = DIALOGUE.format(ann=cast["ann"])  # Ann by id, Bob by name
    response = submit_job(client, user, "narrator", script=script, script_format="markdown")
    assert response.status_code == 202, response.json
    job = response.json
    narrator, bob, ann = cast["narrator"], cast["bob"], cast["ann"]
    assert job["voice_id"] == narrator
    assert job["voice_ids"] == [narrator, bob, ann]
    # heading, "The door...", Bob's line, Ann's line, "And that was that."
    assert chunk_voice_ids(app, job["id"]) == [narrator, narrator, bob, ann, narrator]
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["voice_ids"] == [narrator, bob, ann]
    assert client.get("/v1/jobs", headers=user).json["jobs"][0]["voice_ids"] == [narrator, bob, ann]


def test_plain_scripts_switch_voices_and_directives_are_not_spoken(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str]
) -> None:
    script = "Narration.\n<!-- voice: bob -->\nBob speaks.\n<!-- voice: narrator -->\nNarration again."
    job = submit_job(client, user, "narrator", script=script).json
    assert chunk_voice_ids(app, job["id"]) == [cast["narrator"], cast["bob"], cast["narrator"]]
    texts = tome_of(app).sessions.scalars(
        select(Chunk.text).where(Chunk.job_id == uuid.UUID(job["id"])).order_by(Chunk.seq)
    )
    assert list(texts) == ["Narration.", "Bob speaks.", "Narration again."]


def test_default_voice_listed_first_when_used_even_if_it_speaks_later(
    client: FlaskClient, user: dict[str, str], cast: dict[str, str]
) -> None:
    script = "<!-- voice: ann -->\nAnn first.\n\n<!-- voice: default -->\nThen the narrator.\n"
    assert submit_job(client, user, "narrator", script=script).json["voice_ids"] == [
        cast["narrator"],
        cast["ann"],
    ]
    only_bob = submit_job(client, user, "narrator", script="<!-- voice: bob -->\nJust Bob.").json
    assert only_bob["voice_id"] == cast["narrator"]
    assert only_bob["voice_ids"] == [cast["bob"]]


def test_single_voice_job_lists_its_voice(
    client: FlaskClient, user: dict[str, str], cast: dict[str, str]
) -> None:
    assert submit_job(client, user, "narrator").json["voice_ids"] == [cast["narrator"]]


@pytest.mark.parametrize("fmt", ["plain", "markdown"])
def test_unknown_voice_is_422_at_its_directive(
    client: FlaskClient, user: dict[str, str], cast: dict[str, str], fmt: str
) -> None:
    script = "Hello there.\n\n<!-- voice: bob -->\nHi.\n\n   <!-- voice: Nobody -->\nWho?\n"
    response = submit_job(client, user, "narrator", script=script, script_format=fmt)
    assert response.status_code == 422, response.json
    error = response.json["error"]
    assert error["code"] == "voice_not_found"
    assert error["field"] == "script"
    assert (error["line"], error["column"]) == (6, 4)
    assert "'Nobody'" in error["message"]


def test_an_unused_directive_is_still_resolved(
    client: FlaskClient, user: dict[str, str], cast: dict[str, str]
) -> None:
    script = "<!-- voice: bobb -->\n<!-- voice: bob -->\nHi."
    response = submit_job(client, user, "narrator", script=script)
    assert response.status_code == 422
    assert response.json["error"]["code"] == "voice_not_found"
    assert (response.json["error"]["line"], response.json["error"]["column"]) == (1, 1)


def test_names_match_case_aside_and_nothing_looser(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str]
) -> None:
    matched = submit_job(client, user, "narrator", script="<!-- voice: BOB -->\nHi.")
    assert matched.status_code == 202, matched.json
    assert chunk_voice_ids(app, matched.json["id"]) == [cast["bob"]]
    response = submit_job(client, user, "narrator", script="<!-- voice: B0B -->\nHi.")
    assert response.status_code == 422
    assert response.json["error"]["code"] == "voice_not_found"


def test_another_users_voice_is_not_found_by_name_or_id(
    client: FlaskClient,
    user: dict[str, str],
    other_user: dict[str, str],
    cast: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    theirs = add_voice(client, other_user, reference_audio, "carol")
    for ref in ("carol", theirs):
        response = submit_job(client, user, "narrator", script=f"Hi.\n<!-- voice: {ref} -->\nHello.")
        assert response.status_code == 422, ref
        assert response.json["error"]["code"] == "voice_not_found"
        assert (response.json["error"]["line"], response.json["error"]["column"]) == (2, 1)
    # ...while its owner may use it, and a name is resolved among the caller's own voices only
    add_voice(client, other_user, reference_audio, "bob")
    mine = submit_job(client, user, "narrator", script="<!-- voice: bob -->\nHi.").json
    assert mine["voice_ids"] == [cast["bob"]]


def test_a_deleted_voice_is_not_found(
    client: FlaskClient, user: dict[str, str], cast: dict[str, str]
) -> None:
    assert client.delete(f"/v1/voices/{cast['bob']}", headers=user).status_code in (200, 204)
    response = submit_job(client, user, "narrator", script="<!-- voice: bob -->\nHi.")
    assert response.status_code == 422
    assert response.json["error"]["code"] == "voice_not_found"


@pytest.mark.parametrize(
    ("directive", "column"),
    [("<!-- voice: -->", 1), ("<!-- voice: " + "x" * 65 + " -->", 1), ("Hi <!-- voice: bob --> there", 4)],
)
def test_malformed_directive_is_script_invalid_with_position(
    client: FlaskClient, user: dict[str, str], cast: dict[str, str], directive: str, column: int
) -> None:
    response = submit_job(client, user, "narrator", script=f"Hello.\n\n{directive}\nMore.")
    assert response.status_code == 422, response.json
    error = response.json["error"]
    assert (error["code"], error["field"], error["line"], error["column"]) == (
        "script_invalid",
        "script",
        3,
        column,
    )


def test_too_many_voices(client: FlaskClient, user: dict[str, str], cast: dict[str, str]) -> None:
    script = "\n".join(f"<!-- voice: v{i} -->\nLine {i}." for i in range(101))
    response = submit_job(client, user, "narrator", script=script)
    assert response.status_code == 422
    assert response.json["error"]["code"] == "too_many_voices"
    assert response.json["error"]["line"] == 201


@pytest.mark.parametrize(
    "script",
    [
        "<!-- voice: \u00e9\u00e9 -->\nHi.",
        "<!-- voice: '; drop table voices; -- -->\nHi.",
        "<!-- voice: 00000000-0000-0000-0000-000000000000 -->\nHi.",
        "<!-- voice: {00000000-0000-0000-0000-000000000000} -->\nHi.",
        "<!-- voice: %_ -->\nHi.",
        "<!-- voice: \U0001f600 -->\nHi.",
        "<!-- voice:\t-->\nHi.",
        "<!-- voice: -- -->\nHi.",
        "<!-- voice: a --><!-- voice: b -->\nHi.",
        "<!-- voice: default -->",
    ],
)
def test_odd_directives_are_4xx_never_500(
    client: FlaskClient, user: dict[str, str], cast: dict[str, str], script: str
) -> None:
    for fmt in ("plain", "markdown"):
        response = submit_job(client, user, "narrator", script=script, script_format=fmt)
        assert response.status_code == 422, (fmt, response.json)
        # A directive alone leaves nothing to read: empty_script.
        assert response.json["error"]["code"] in {"voice_not_found", "script_invalid", "empty_script"}


def test_openapi_documents_voice_ids(client: FlaskClient) -> None:
    schemas = client.get("/openapi.json").json["components"]["schemas"]
    job_out: dict[str, Any] = schemas["JobOut"]
    assert "voice_ids" in job_out["required"]
    assert job_out["properties"]["voice_ids"]["items"]["format"] == "uuid"


# --- the worker: a job starts once every voice its chunks use is ready --------------------------------


def _set_cache(app: Flask, voice_id: str, status: CacheStatus, error: str | None = None) -> None:
    with unit_of_work(tome_of(app).runtime.sessions) as session:
        session.execute(
            update(Voice)
            .where(Voice.id == uuid.UUID(voice_id))
            .values(cache_status=status, cache_error=error)
        )


def test_start_waits_for_every_used_voice_and_builds_each(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str], rt: Runtime
) -> None:
    job = submit_job(client, user, "narrator", script="Narration.\n<!-- voice: bob -->\nBob.").json
    job_id = uuid.UUID(job["id"])
    inline = Inline(rt)
    assert start_job(rt, job_id, inline.enqueue) == StartOutcome.WAITING
    # One build of an owner's at a time (worker.voices.builds): the narrator's, sent at its upload, is
    # sent again; Bob's waits for it to end. Not Ann's: unused.
    assert builds_sent(inline) == [cast["narrator"]]
    build_voice(rt, uuid.UUID(cast["narrator"]))
    inline.sent.clear()
    assert start_job(rt, job_id, inline.enqueue) == StartOutcome.WAITING  # one ready voice is not enough
    assert builds_sent(inline) == [cast["bob"]]
    assert [name for name, _ in inline.sent] == [BUILD_VOICE], "a waiting start sends nothing else"
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "queued"
    build_voice(rt, uuid.UUID(cast["bob"]))
    assert start_job(rt, job_id, inline.enqueue) == StartOutcome.STARTED
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "running"


def test_a_finished_build_wakes_the_jobs_that_wait_for_it(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str], rt: Runtime
) -> None:
    """No polling: the start of a waiting job is sent again by the end of its voice's build (the build
    task's handler), not by a retry loop."""
    build_voice(rt, uuid.UUID(cast["narrator"]))
    waiting = submit_job(client, user, "narrator", script="Narration.\n<!-- voice: bob -->\nBob.").json
    unrelated = submit_job(client, user, "narrator", script="Only the narrator.").json
    inline = Inline(rt)
    assert start_job(rt, uuid.UUID(waiting["id"]), inline.enqueue) == StartOutcome.WAITING
    inline.sent.clear()
    inline.queue.clear()
    inline.enqueue(BUILD_VOICE, [cast["bob"]])
    inline.run(max_messages=1)  # the build alone
    assert (START_JOB, [waiting["id"]]) in inline.sent
    assert (START_JOB, [unrelated["id"]]) not in inline.sent, "a job that does not use the voice sleeps"
    inline.run()
    assert client.get(f"/v1/jobs/{waiting['id']}", headers=user).json["status"] == "succeeded"


def test_a_failed_build_wakes_its_jobs_to_fail_them(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str], rt: Runtime
) -> None:
    build_voice(rt, uuid.UUID(cast["narrator"]))  # its build was sent at upload: bob's is next
    job = submit_job(client, user, "bob", script="Bob speaks.").json
    inline = Inline(rt)
    assert start_job(rt, uuid.UUID(job["id"]), inline.enqueue) == StartOutcome.WAITING
    voice = tome_of(app).sessions.get(Voice, uuid.UUID(cast["bob"]))
    assert voice is not None
    Path(voice.audio_path).write_bytes(b"not audio")  # the build will fail on it
    inline.run()
    body = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert body["status"] == "failed"
    assert "bob" in body["error"]


def test_the_jobs_own_voice_is_not_needed_when_no_chunk_uses_it(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str], rt: Runtime
) -> None:
    _set_cache(app, cast["narrator"], CacheStatus.FAILED, "bad recording")
    build_voice(rt, uuid.UUID(cast["ann"]))
    job = submit_job(client, user, "narrator", script="<!-- voice: ann -->\nOnly Ann speaks.").json
    inline = Inline(rt)
    assert start_job(rt, uuid.UUID(job["id"]), inline.enqueue) == "started"
    assert builds_sent(inline) == []


def test_a_failed_voice_fails_the_job_naming_it(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str], rt: Runtime
) -> None:
    build_voice(rt, uuid.UUID(cast["narrator"]))
    _set_cache(app, cast["bob"], CacheStatus.FAILED, "AudioError: silent recording")
    job = submit_job(client, user, "narrator", script="Narration.\n<!-- voice: bob -->\nBob.").json
    assert start_job(rt, uuid.UUID(job["id"]), Inline(rt).enqueue) == "failed"
    failed = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert failed["status"] == "failed"
    assert "'bob'" in failed["error"]
    assert "silent recording" in failed["error"]


def test_a_voice_only_a_directive_uses_cannot_be_deleted_or_replaced_mid_job(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    cast: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    job = submit_job(client, user, "narrator", script="Narration.\n<!-- voice: bob -->\nBob.").json
    deleted = client.delete(f"/v1/voices/{cast['bob']}", headers=user)
    assert deleted.status_code == 409, deleted.json
    assert "1 unfinished job" in deleted.json["error"]["message"]
    replaced = client.put(
        f"/v1/voices/{cast['bob']}",
        data={"ref_text": "New words.", "audio": (io.BytesIO(reference_audio[0]), "new.wav")},
        headers=user,
        content_type="multipart/form-data",
    )
    assert replaced.status_code == 409, replaced.json
    assert client.delete(f"/v1/voices/{cast['ann']}", headers=user).status_code == 204  # not in the job
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=user).status_code == 200
    assert client.delete(f"/v1/voices/{cast['bob']}", headers=user).status_code == 204


def test_a_voice_deleted_in_a_race_with_submission_fails_the_job_naming_it(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str], rt: Runtime
) -> None:
    """The API refuses to delete a voice an unfinished job uses; a delete that committed between the
    job's voice check and its insert is caught when the job starts."""
    build_voice(rt, uuid.UUID(cast["narrator"]))
    job = submit_job(client, user, "narrator", script="Narration.\n<!-- voice: bob -->\nBob.").json
    with unit_of_work(rt.sessions) as session:
        session.execute(update(Voice).where(Voice.id == uuid.UUID(cast["bob"])).values(deleted_at=utcnow()))
    assert start_job(rt, uuid.UUID(job["id"]), Inline(rt).enqueue) == "failed"
    failed = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert failed["status"] == "failed"
    assert f"voice 'bob' ({cast['bob']}) was deleted" in failed["error"]


def test_sweeper_rebuilds_a_stale_voice_that_only_a_directive_uses(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str], rt: Runtime
) -> None:
    submit_job(client, user, "narrator", script="Narration.\n<!-- voice: bob -->\nBob.")
    _set_cache(app, cast["bob"], CacheStatus.STALE)
    _set_cache(app, cast["ann"], CacheStatus.STALE)  # not used by any job: left alone
    sweep(rt, Inline(rt).enqueue)
    statuses = {v["name"]: v["cache_status"] for v in client.get("/v1/voices", headers=user).json["voices"]}
    assert statuses["bob"] == "pending"
    assert statuses["ann"] == "stale"


def test_a_two_voice_job_renders_inline_with_each_chunk_in_its_voice(
    app: Flask, client: FlaskClient, user: dict[str, str], cast: dict[str, str], rt: Runtime
) -> None:
    job = submit_job(
        client, user, "narrator", script="Narration.\n<!-- voice: bob -->\nBob.", output={"format": "wav"}
    ).json
    inline = Inline(rt)
    inline.enqueue(START_JOB, [job["id"]])
    inline.run()
    finished = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert finished["status"] == "succeeded", finished
    assert chunk_voice_ids(app, job["id"]) == [cast["narrator"], cast["bob"]]
