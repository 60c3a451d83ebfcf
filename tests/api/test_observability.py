"""Request ids, the API's metrics, /livez and /readyz, and the webhook secret rotation endpoint (issue 15,
Observability), through the Flask test client on a real database and broker."""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from models import ApiKey, unit_of_work, utcnow
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import closing, tome_of
from tests.support.inline import Inline
from tests.support.services import Services
from webapi import create_app
from webapi.cli import mint_key
from worker.celery_app import REQUEST_ID_HEADER
from worker.config import load_settings
from worker.task_names import BUILD_VOICE, START_JOB

HEX_ID = re.compile(r"[0-9a-f]{32}")


def _sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(3))
    return None


# --- X-Request-ID -----------------------------------------------------------------------------------


def test_a_safe_request_id_is_echoed_and_a_missing_one_generated(
    client: FlaskClient, user: dict[str, str]
) -> None:
    given = "checkout-7f3a9c:retry/2@edge+a=b.c_d"
    assert client.get("/livez", headers={"X-Request-ID": given}).headers["X-Request-ID"] == given
    first = client.get("/livez").headers["X-Request-ID"]
    second = client.get("/livez").headers["X-Request-ID"]
    assert HEX_ID.fullmatch(first)
    assert first != second
    # Every answer carries it: errors, unknown URLs, a wrong method, a refused body.
    for response in (
        client.get("/v1/jobs", headers={"X-Request-ID": given}),  # 401
        client.get("/nowhere", headers={"X-Request-ID": given}),  # 404, no route
        client.delete("/livez", headers={"X-Request-ID": given}),  # 405
        client.post("/v1/jobs", data="x", headers={**user, "X-Request-ID": given}),  # 415
    ):
        assert response.status_code >= 400
        assert response.headers["X-Request-ID"] == given, response.status_code


@pytest.mark.parametrize(
    "hostile",
    [
        "abc\r\nSet-Cookie: stolen=1",
        "abc\nfake log line",
        "a" * 129,
        "a" * 100_000,
        "",
        " padded ",
        "naïve",
        '{"json": "injection"}',
        "id\x00nul",
        "<script>",
    ],
)
def test_an_unsafe_request_id_is_replaced_never_echoed(client: FlaskClient, hostile: str) -> None:
    """Through the WSGI environ, as a raw server would pass it (the test client refuses newlines)."""
    response = client.get("/livez", environ_overrides={"HTTP_X_REQUEST_ID": hostile})
    assert response.status_code == 200
    echoed = response.headers["X-Request-ID"]
    assert HEX_ID.fullmatch(echoed), echoed
    assert "Set-Cookie" not in response.headers


def test_the_request_id_is_on_the_requests_log_lines_and_on_the_tasks_it_sends(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    given = f"req-{uuid.uuid4().hex[:10]}"
    voice = upload_voice(client, {**user, "X-Request-ID": given}, reference_audio[0])
    assert voice.status_code == 202
    # The build task the upload sent waits in the filesystem broker: its message carries the id.
    folder = tome_of(app).settings.broker_folder / "queue"
    messages = [json.loads(p.read_text()) for p in folder.glob("*.msg")]
    carried = [m["headers"].get(REQUEST_ID_HEADER) for m in messages if m["headers"]["task"] == BUILD_VOICE]
    assert carried == [given]
    # A task sent outside any request carries none.
    with app.app_context():
        tome_of(app).enqueue(START_JOB, ["00000000-0000-0000-0000-000000000000"])
    messages = [json.loads(p.read_text()) for p in folder.glob("*.msg")]
    starts = [m["headers"] for m in messages if m["headers"]["task"] == START_JOB]
    assert len(starts) == 1
    assert REQUEST_ID_HEADER not in starts[0]


def test_a_log_line_made_while_serving_carries_the_request_id(
    app: Flask, client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A view that logs (the app's own /readyz when its broker is down would; a tiny one here so the test
    does not depend on which views log)."""

    def logs() -> str:
        logging.getLogger("webapi.test").warning("inside")
        return "ok"

    app.add_url_rule("/_test_logs", view_func=logs)
    with caplog.at_level(logging.WARNING, logger="webapi.test"):
        client.get("/_test_logs", headers={"X-Request-ID": "trace-42"})
        client.get("/_test_logs")
    ids = [r.__dict__["request_id"] for r in caplog.records if r.name == "webapi.test"]
    assert ids[0] == "trace-42"
    assert HEX_ID.fullmatch(ids[1])


def test_a_request_about_one_job_or_voice_logs_with_its_id_and_a_malformed_id_is_not_logged(
    app: Flask, client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    def logs(job_id: str) -> str:
        logging.getLogger("webapi.test").warning("about a job")
        return "ok"

    def voice_logs(voice_id: str) -> str:
        logging.getLogger("webapi.test").warning("about a voice")
        return "ok"

    app.add_url_rule("/_test_jobs/<job_id>", view_func=logs)
    app.add_url_rule("/_test_voices/<voice_id>", view_func=voice_logs)
    job, voice = uuid.uuid4(), uuid.uuid4()
    with caplog.at_level(logging.WARNING, logger="webapi.test"):
        client.get(f"/_test_jobs/{str(job).upper()}")
        client.get(f"/_test_voices/{voice}")
        client.get("/_test_jobs/x%0Ainjected%20line")
    records = [r.__dict__ for r in caplog.records if r.name == "webapi.test"]
    assert records[0]["job_id"] == str(job)  # one spelling, whatever the URL's
    assert records[1]["voice_id"] == str(voice)
    assert "injected" not in str(records[2]["job_id"])
    assert "injected" not in str(records[2]["voice_id"])
    # and outside the request, no id lingers
    logging.getLogger("webapi.test").warning("after")
    assert str(job) not in str(caplog.records[-1].__dict__["job_id"])


def test_a_new_job_logs_with_its_own_id_and_its_voices(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    reference_audio: tuple[bytes, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    voice = upload_voice(client, user, reference_audio[0])
    assert voice.status_code == 202
    with caplog.at_level(logging.INFO, logger="webapi.jobs"):
        job = submit_job(client, user, "narrator", script="The fog came in before dawn.")
    assert job.status_code == 202, job.json
    accepted = [
        r.__dict__ for r in caplog.records if r.name == "webapi.jobs" and "accepted" in r.getMessage()
    ]
    assert accepted[0]["job_id"] == job.json["id"]
    assert accepted[0]["voice_id"] == voice.json["id"]


# --- /metrics ------------------------------------------------------------------------------------------


def test_api_latency_is_labelled_by_route_template_never_by_url(
    client: FlaskClient, user: dict[str, str], admin: dict[str, str]
) -> None:
    for _ in range(3):
        client.get(f"/v1/jobs/{uuid.uuid4()}", headers=user)  # three URLs, one route
    for n in range(5):
        client.get(f"/no/such/{n}/{'x' * 500}")
    text = client.get("/metrics", headers=admin).get_data(as_text=True)
    labels = {"method": "GET", "route": "/v1/jobs/<job_id>", "status": "404"}
    assert _sample(text, "tome_api_request_seconds_count", **labels) == 3
    assert _sample(text, "tome_api_request_seconds_bucket", **labels, le="+Inf") == 3
    assert _sample(text, "tome_api_request_seconds_count", method="GET", route="unmatched", status="404") == 5
    assert "xxxxx" not in text
    assert "/no/such" not in text
    routes = set(re.findall(r'route="([^"]*)"', text))
    assert routes <= {r.rule for r in client.application.url_map.iter_rules()} | {"unmatched"}


def test_metrics_show_build_info_and_queue_depth_of_the_broker(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    admin: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    settings = tome_of(app).settings
    before = client.get("/metrics", headers=admin).get_data(as_text=True)
    for queue in (settings.broker.queue, settings.broker.control_queue_name):
        assert _sample(before, "tome_queue_depth", queue=queue) == 0
    assert _sample(before, "tome_build_info", engine="espeak") == 1
    upload_voice(client, user, reference_audio[0])
    submit_job(client, user, "narrator")
    after = client.get("/metrics", headers=admin).get_data(as_text=True)
    folder = settings.broker_folder / "queue"
    # the build on the work queue, the job's start on the control queue
    for queue in (settings.broker.queue, settings.broker.control_queue_name):
        waiting = len(list(folder.glob(f"*.{queue}.msg")))
        assert waiting >= 1, queue
        assert _sample(after, "tome_queue_depth", queue=queue) == waiting


def test_work_done_in_this_process_shows_in_the_histograms(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(metrics_flush_seconds=3600)  # batched: /metrics writes this process's batch first
    client = app.test_client()
    user = bearer(mint_key(app, owner="alice", name="t", admin=False))
    admin = bearer(mint_key(app, owner="root", name="t", admin=True))
    voice = upload_voice(client, user, reference_audio[0])
    job = submit_job(client, user, "narrator", script="One line. Two lines.\n\nThree lines here.")
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    done = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert done["status"] == "succeeded", done
    chunks = done["progress"]["chunks_total"]
    text = client.get("/metrics", headers=admin).get_data(as_text=True)
    assert _sample(text, "tome_chunk_render_seconds_count", engine="espeak") == chunks
    assert _sample(text, "tome_job_duration_seconds_count", status="succeeded", engine="espeak") == 1
    assert _sample(text, "tome_job_queue_wait_seconds_count", engine="espeak") == 1
    assert _sample(text, "tome_stitch_seconds_count", what="book") == 1
    assert _sample(text, "tome_voice_prompt_build_seconds_count", engine="espeak") == 1
    rtf = _sample(text, "tome_chunk_real_time_factor_sum", engine="espeak")
    assert rtf is not None
    assert rtf > 0


# --- /livez and /readyz ------------------------------------------------------------------------------


def test_livez_and_readyz_answer_without_a_key(client: FlaskClient) -> None:
    assert client.get("/livez").json == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json == {
        "status": "ok",
        "checks": {"database": "ok", "broker": "ok", "storage": "ok"},
        "down": [],
    }
    assert client.get("/healthz").json == {"status": "ok", "database": "ok", "storage": "ok"}


def test_readyz_names_the_broker_when_it_is_down(make_app: Callable[..., Flask]) -> None:
    app = make_app(broker_url="redis://127.0.0.1:1/0")  # nothing listens on port 1
    response = app.test_client().get("/readyz")
    assert response.status_code == 503
    assert response.json["down"] == ["broker"]
    assert response.json["checks"]["broker"].startswith("down: ")
    assert "127.0.0.1" not in response.get_data(as_text=True)
    assert app.test_client().get("/livez").status_code == 200  # the process still answers


def test_readyz_names_the_storage_when_the_data_directory_is_gone(
    tmp_path: Path, make_app: Callable[..., Flask]
) -> None:
    database = tmp_path / "elsewhere.db"
    app = make_app(database_url=f"sqlite:///{database}")
    shutil.rmtree(tome_of(app).settings.storage.data_dir)
    response = app.test_client().get("/readyz")
    assert response.status_code == 503
    assert "storage" in response.json["down"]
    assert response.json["checks"]["database"] == "ok"


def test_readyz_names_the_database_when_it_is_down(tmp_path: Path) -> None:
    down = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2"  # nothing listens on port 1
    settings = load_settings({}, data_dir=tmp_path / "var", database_url=down)
    # The requests' latency figures can never be written: dropped when the app is closed, not left for
    # this process's exit flush to fail on.
    with closing(create_app({"settings": settings}), write_metrics=False) as app:
        response = app.test_client().get("/readyz")
        assert response.status_code == 503
        assert response.json["down"] == ["database"]
        assert "nobody" not in response.get_data(as_text=True)
        assert app.test_client().get("/healthz").status_code == 503  # as before


def test_readyz_on_redis(services: Services, make_app: Callable[..., Flask]) -> None:
    app = make_app(broker_url=services.redis_url)
    assert app.test_client().get("/readyz").json["checks"]["broker"] == "ok"


# --- POST /v1/keys/{key_id}/webhook-secret -------------------------------------------------------------


def _key(app: Flask, key_id: str) -> ApiKey:
    with app.app_context():
        key = tome_of(app).sessions.get(ApiKey, uuid.UUID(key_id))
        assert key is not None
        tome_of(app).sessions.expunge(key)
        return key


def test_rotation_keeps_the_old_secret_signing_for_the_overlap(
    app: Flask, client: FlaskClient, user: dict[str, str]
) -> None:
    first = client.post("/v1/keys/current/webhook-secret", json={"overlap_seconds": 0}, headers=user)
    assert first.status_code == 200, first.json
    assert first.json["previous_valid_until"] is None
    old = first.json["secret"]
    second = client.post(f"/v1/keys/{first.json['key_id']}/webhook-secret", json={}, headers=user)
    assert second.status_code == 200
    body = second.json
    assert body["key_id"] == first.json["key_id"]
    assert re.fullmatch(r"[0-9a-f]{64}", body["secret"])
    assert body["secret"] != old
    assert body["standard_secret"].startswith("whsec_")
    key = _key(app, body["key_id"])
    assert (key.webhook_secret, key.webhook_secret_previous) == (body["secret"], old)
    assert key.webhook_secret_previous_until is not None
    assert 86_000 < (key.webhook_secret_previous_until - utcnow()).total_seconds() <= 86_400


def test_rotation_refuses_other_owners_keys_revoked_keys_and_bad_input(
    app: Flask, client: FlaskClient, user: dict[str, str], other_user: dict[str, str]
) -> None:
    mine = client.post("/v1/keys/current/webhook-secret", json={"overlap_seconds": 0}, headers=user).json
    before = _key(app, mine["key_id"]).webhook_secret
    for key_id in (mine["key_id"], str(uuid.uuid4()), "not-a-uuid", "../current", "x" * 5000):
        response = client.post(f"/v1/keys/{key_id}/webhook-secret", json={}, headers=other_user)
        assert response.status_code == 404, (key_id, response.status_code)
        assert response.json["error"]["code"] == "not_found"
    assert _key(app, mine["key_id"]).webhook_secret == before, "another owner changed nothing"
    url = f"/v1/keys/{mine['key_id']}/webhook-secret"
    for bad in ({"overlap_seconds": -1}, {"overlap_seconds": 10**12}, {"overlap_seconds": "soon"},
                {"overlap_seconds": 60, "secret": "mine"}, {"overlap_seconds": None}):  # fmt: skip
        response = client.post(url, json=bad, headers=user)
        assert response.status_code == 422, (bad, response.status_code)
    assert client.post(url, data="overlap=1", headers=user).status_code == 415
    assert client.post(url, json={}).status_code == 401
    assert _key(app, mine["key_id"]).webhook_secret == before
    with app.app_context(), unit_of_work(tome_of(app).sessions.session_factory) as session:
        row = session.get(ApiKey, uuid.UUID(mine["key_id"]))
        assert row is not None
        row.revoked_at = utcnow()
    assert client.post(url, json={}, headers=other_user).status_code == 404
