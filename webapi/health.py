"""Liveness and the API description; neither needs a key."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify
from sqlalchemy import text

from webapi.extensions import tome
from webapi.openapi import Operation, build_spec, operation
from webapi.schemas import Health

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@operation(
    Operation(
        "Liveness: the API answers and its database is reachable",
        {200: Health, 503: Health},
        auth=False,
        tags=("health",),
    )
)
def healthz() -> tuple[Response, int]:
    try:
        tome().sessions.execute(text("SELECT 1"))
        return jsonify(Health(status="ok", database="ok").model_dump()), 200
    except Exception as exc:
        tome().sessions.remove()
        return jsonify(Health(status="degraded", database=type(exc).__name__).model_dump()), 503


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(build_spec(current_app))
