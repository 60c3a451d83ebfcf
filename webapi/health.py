"""Liveness, readiness and the API description; none of them needs a key.

- ``/livez``: the process answers; it touches nothing else, so a slow database never gets a healthy API
  process restarted.
- ``/readyz``: the database answers, the broker answers, the storage answers (bucket or data directory)
  and the data directory is there and writable;
  503 naming what is down, so a load balancer sends no traffic to an API that cannot serve it.
- ``/healthz``: the process, its database and its storage, for existing probes.
"""

from __future__ import annotations

import os
import uuid

from flask import Blueprint, Response, current_app, jsonify
from sqlalchemy import text

from webapi.extensions import tome
from webapi.openapi import build_spec
from webapi.operations import Operation, operation
from webapi.schemas import Health, Liveness, Readiness
from worker import broker_probe
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
        tome().end_session()
        database = type(exc).__name__
    try:
        tome().storage.ping()
    except StorageError as exc:
        storage = f"{type(exc).__name__}: {exc}"
    healthy = database == "ok" and storage == "ok"
    answer = Health(status="ok" if healthy else "degraded", database=database, storage=storage)
    return jsonify(answer.model_dump()), 200 if healthy else 503


@bp.get("/livez")
@operation(Operation("Liveness: the process answers (no dependency is checked)", {200: Liveness}, auth=False,
                     tags=("health",)))  # fmt: skip
def livez() -> tuple[Response, int]:
    return jsonify(Liveness(status="ok").model_dump()), 200


@bp.get("/readyz")
@operation(
    Operation(
        "Readiness: database, broker and storage (data directory or bucket) reachable; 503 names what is"
        " down",
        {200: Readiness, 503: Readiness},
        auth=False,
        tags=("health",),
    )
)
def readyz() -> tuple[Response, int]:
    checks = {"database": _database(), "broker": _broker(), "storage": _storage()}
    down = [name for name, state in checks.items() if state != "ok"]
    body = Readiness(status="unavailable" if down else "ok", checks=checks, down=down)
    return jsonify(body.model_dump()), 503 if down else 200


def _database() -> str:
    try:
        tome().sessions.execute(text("SELECT 1"))
        return "ok"
    except Exception as exc:
        tome().end_session()
        return type(exc).__name__


def _broker() -> str:
    try:
        broker_probe.ping(tome().settings)
        return "ok"
    except broker_probe.BrokerDown as exc:
        return f"down: {exc}"


def _storage() -> str:
    """The storage answers (the data directory or the bucket: ``Storage.ping``), and the data directory,
    which is scratch space with a bucket, exists and a file can be made and removed in it."""
    try:
        tome().storage.ping()
    except StorageError as exc:
        return f"down: {type(exc).__name__}: {exc}"
    folder = tome().settings.storage.data_dir
    probe = folder / f".readyz-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
        return "ok"
    except OSError as exc:
        return f"down: {type(exc).__name__}"


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(build_spec(current_app))
