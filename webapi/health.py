"""Liveness and the API description; neither needs a key."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify
from sqlalchemy import text

from webapi.extensions import tome
from webapi.openapi import Operation, build_spec, operation
from webapi.schemas import Health
from worker.storage.backend import StorageError

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@operation(
    Operation(
        "Liveness: the API answers, its database and its storage (data directory or bucket) are reachable",
        {200: Health, 503: Health},
        auth=False,
        tags=("health",),
    )
)
def healthz() -> tuple[Response, int]:
    database = storage = "ok"
    try:
        tome().sessions.execute(text("SELECT 1"))
    except Exception as exc:
        tome().sessions.remove()
        database = type(exc).__name__
    try:
        tome().storage.ping()
    except StorageError as exc:
        storage = f"{type(exc).__name__}: {exc}"
    healthy = database == "ok" and storage == "ok"
    answer = Health(status="ok" if healthy else "degraded", database=database, storage=storage)
    return jsonify(answer.model_dump()), 200 if healthy else 503


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(build_spec(current_app))
