"""A database restart between a request's last query and the end of the request (the session's closing
ROLLBACK on a connection the server has dropped) fails neither that request nor the next: found by the
chaos battery, where PostgreSQL restarts while clients poll their jobs."""

from __future__ import annotations

import pytest
from flask import Response
from sqlalchemy import text

from tests.conftest import bearer
from tests.support.apps import app_on
from tests.support.services import Services, terminate_backend
from webapi.cli import mint_key
from webapi.extensions import tome
from worker.config import Settings

pytestmark = pytest.mark.postgres


def test_a_connection_dropped_before_the_session_closes_fails_no_request(
    pg_settings: Settings, services: Services
) -> None:
    with app_on(pg_settings) as app:
        headers = bearer(mint_key(app, owner="alice", name="k", admin=False))
        killed: list[int] = []

        @app.after_request
        def _drop_the_connection(response: Response) -> Response:
            # The request has made its response; its session still holds a transaction. The server
            # drops that connection now, as a restart does.
            if not killed:
                pid = tome().sessions.execute(text("SELECT pg_backend_pid()")).scalar_one()
                terminate_backend(services.pg_url, pid)
                killed.append(pid)
            return response

        client = app.test_client()
        first = client.get("/v1/jobs", headers=headers)
        assert killed, "the hook did not run"
        assert first.status_code == 200, first.data
        second = client.get("/v1/jobs", headers=headers)
        assert second.status_code == 200, second.data
        with app.app_context():
            now = tome().sessions.execute(text("SELECT pg_backend_pid()")).scalar_one()
        assert now != killed[0]  # the dropped connection was not handed out again


def test_a_request_on_a_connection_dropped_between_requests_is_a_503_and_the_next_one_works(
    pg_settings: Settings, services: Services
) -> None:
    """The pool pings only connections idle for over a second (models/db.py): a connection dropped just
    before a request fails that request's first statement. It is answered 503 with Retry-After, not a
    500, and its session is let go so that the next request runs on a new connection."""
    with app_on(pg_settings) as app:
        headers = bearer(mint_key(app, owner="alice", name="k", admin=False))
        pids: list[int] = []

        @app.after_request
        def _note_the_connection(response: Response) -> Response:
            pids.append(int(tome().sessions.execute(text("SELECT pg_backend_pid()")).scalar_one()))
            return response

        client = app.test_client()
        assert client.get("/v1/jobs", headers=headers).status_code == 200
        terminate_backend(services.pg_url, pids[-1])  # back in the pool, now dead
        dropped = client.get("/v1/jobs", headers=headers)
        assert dropped.status_code == 503, dropped.data
        assert dropped.headers["Retry-After"]
        again = client.get("/v1/jobs", headers=headers)
        assert again.status_code == 200, again.data
        assert pids[-1] != pids[0]
