"""Every request's id and latency.

The id: a client's ``X-Request-ID`` if it is safe (worker.logs.clean_request_id: at most 128 characters of
letters, digits and ``._:@+=/-``), else a fresh one. It is echoed in the response's ``X-Request-ID``,
carried by every log line written while the request is served (worker.logs) and by every task the request
sends (worker.celery_app), so the work it started logs under the same id.

The latency: ``tome_api_request_seconds`` by method, route template (the Flask rule, never the raw URL,
so the label's values are bounded by the app's routes) and status, recorded through worker.counters (so
every API process adds to the same figures). It is measured to the moment the response is returned to the
server: a streamed body's sending is not counted.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextvars import Token

from flask import Flask, Response, g, request

from webapi.extensions import tome
from worker import counters
from worker.logs import clean_request_id, log_context, reset_request_id, set_request_id

log = logging.getLogger(__name__)

HEADER = "X-Request-ID"
API_LATENCY = "tome_api_request_seconds"
API_LATENCY_HELP = "API requests, from the app receiving them to their response, by route template and status"
UNMATCHED = "unmatched"  # a URL that matches no route (its 404/405): one label value for all of them
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def register_request_observation(app: Flask) -> None:
    @app.before_request
    def _begin() -> None:
        g.tome_started = time.perf_counter()
        g.request_id = clean_request_id(request.headers.get(HEADER))
        g.tome_request_token = set_request_id(g.request_id)
        # a request about one job or voice: its log lines carry that id (only a well-formed one: the
        # path is the client's, and a log field must not carry whatever it typed)
        ids = {name: _uuid_or_none((request.view_args or {}).get(name)) for name in ("job_id", "voice_id")}
        g.tome_log_context = log_context(**ids)
        g.tome_log_context.__enter__()

    @app.after_request
    def _end(response: Response) -> Response:
        request_id = g.get("request_id") or clean_request_id(None)
        response.headers[HEADER] = request_id
        started = g.get("tome_started")
        if started is not None:
            _record(time.perf_counter() - started, response.status_code)
        return response

    @app.teardown_request
    def _forget(_exc: BaseException | None) -> None:
        context = g.pop("tome_log_context", None)
        if context is not None:
            context.__exit__(None, None, None)
        token: Token[str] | None = g.pop("tome_request_token", None)
        if token is not None:
            reset_request_id(token)


def _uuid_or_none(value: object) -> str | None:
    try:
        return str(uuid.UUID(str(value))) if value is not None else None
    except ValueError:
        return None


def route_label() -> str:
    rule = request.url_rule
    return rule.rule if rule is not None else UNMATCHED


def _record(seconds: float, status: int) -> None:
    method = request.method if request.method in _METHODS else "OTHER"
    labels = {"method": method, "route": route_label(), "status": str(status)}
    try:
        counters.observe(tome().sessions.session_factory, API_LATENCY, labels, seconds)
    except Exception:  # a figure never costs a request its answer (a write with no batching may fail)
        log.warning("could not record the request's latency", exc_info=True)
