"""Long scripts are planned by a worker: the request stays short whatever the script, and a script error
fails the job with the same code, line and column a short script gets at once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from models import Chunk
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.cost import CpuMeter
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker.jobs.intake import PlanOutcome, plan_job
from worker.sweeper import sweep
from worker.task_names import BUILD_VOICE, PLAN_JOB, START_JOB

BOOK = "# One\n\n" + "The tide came in over the flats. " * 10 + "\n\n# Two\n\nIt went out again."


def _setup(
    make_app: Callable[..., Flask], audio: bytes, **settings: Any
) -> tuple[Flask, FlaskClient, dict[str, str]]:
    app = make_app(inline_plan_max_chars=100, **settings)
    client, user = app.test_client(), bearer(mint_key(app, owner="alice", name="k", admin=False))
    voice = upload_voice(client, user, audio)
    assert voice.status_code == 202
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.run()
    return app, client, user


def _chunks(app: Flask, job_id: str) -> int:
    sessions = tome_of(app).sessions
    sessions.remove()
    return int(sessions.scalar(select(func.count()).where(Chunk.job_id == uuid.UUID(job_id))) or 0)


def test_a_long_script_is_accepted_at_once_and_planned_by_a_worker(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user = _setup(make_app, reference_audio[0])
    job = submit_job(
        client, user, "narrator", script=BOOK, script_format="markdown", output={"format": "wav"}
    )
    assert job.status_code == 202, job.json
    assert job.json["status"] == "queued"
    assert job.json["progress"]["chunks_total"] == 0  # not planned yet
    assert job.json["estimated_seconds"] > 0  # the speech estimate, before parsing
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(PLAN_JOB, [job.json["id"]])
    inline.enqueue(PLAN_JOB, [job.json["id"]])  # a duplicate message plans nothing twice
    inline.run()
    done = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert done["status"] == "succeeded", done
    assert [c["title"] for c in done["chapters"]] == ["One", "Two"]
    assert done["progress"]["chunks_total"] == _chunks(app, job.json["id"]) > 2
    assert (PLAN_JOB, [job.json["id"]]) in inline.sent
    rt = tome_of(app).runtime
    assert plan_job(rt, uuid.UUID(job.json["id"]), inline.enqueue) == PlanOutcome.SKIPPED


def test_a_script_error_fails_the_job_with_its_line_and_column(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user = _setup(make_app, reference_audio[0])
    script = BOOK + "\n\n<!-- voice: Kapitan -->\nAhoy."
    job = submit_job(client, user, "narrator", script=script, script_format="markdown")
    assert job.status_code == 202
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(PLAN_JOB, [job.json["id"]])
    inline.run()
    failed = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert failed["status"] == "failed"
    detail = failed["error_detail"]
    assert detail["code"] == "voice_not_found"
    assert (detail["line"], detail["column"]) == (script.splitlines().index("<!-- voice: Kapitan -->") + 1, 1)
    assert "Kapitan" in failed["error"]
    assert _chunks(app, job.json["id"]) == 0
    # The same script under the inline threshold is the same error, at once.
    short = make_app()
    short_client, short_user = short.test_client(), bearer(mint_key(short, owner="a", name="k", admin=False))
    assert upload_voice(short_client, short_user, reference_audio[0]).status_code == 202
    at_once = submit_job(short_client, short_user, "narrator", script=script, script_format="markdown")
    assert at_once.status_code == 422
    error = at_once.json["error"]
    assert {k: error[k] for k in ("code", "line", "column")} == {
        k: detail[k] for k in ("code", "line", "column")
    }


def test_a_lost_plan_message_is_sent_again_through_the_sweeper(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user = _setup(make_app, reference_audio[0], queued_grace_seconds=0)
    job = submit_job(client, user, "narrator", script=BOOK, script_format="markdown")
    assert job.status_code == 202
    inline = Inline(tome_of(app).runtime)  # the API's PLAN message is lost: this queue never saw it
    time.sleep(0.01)
    sweep(tome_of(app).runtime, inline.enqueue)
    assert (START_JOB, [job.json["id"]]) in inline.sent
    inline.run()
    assert client.get(f"/v1/jobs/{job.json['id']}", headers=user).json["status"] == "succeeded"


def test_a_pathological_two_megabyte_script_is_answered_within_a_second(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    """The hostile-tenant report: 66 KB requests held both API workers for about 60 s."""
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    script = ("Dr. Mr. St. e.g. i.e. 3.5 U.S.A. " * 60_000)[:1_990_000]
    meter = CpuMeter()
    response = submit_job(client, user, "narrator", script=script)
    elapsed = meter.seconds()
    assert response.status_code == 202, response.json
    assert elapsed < 1.0, elapsed


def test_a_split_asked_on_a_long_script_without_chapters_fails_the_job_naming_the_field(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app, client, user = _setup(make_app, reference_audio[0])
    script = " ".join(["A plain sentence without any heading."] * 10)
    job = submit_job(client, user, "narrator", title="Plain", script=script, output={"split": "chapter"})
    assert job.status_code == 202  # over the inline limit: planned by a worker
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(PLAN_JOB, [job.json["id"]])
    inline.run()
    failed = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert failed["status"] == "failed"
    assert failed["error_detail"]["field"] == "output.split"
    assert "no chapters" in failed["error_detail"]["message"]
