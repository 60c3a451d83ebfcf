"""The API's error hierarchy and the one JSON error shape: ``{"error": {"code", "message", ...}}``."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, current_app, jsonify
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as SqlTimeoutError
from werkzeug.exceptions import HTTPException

from webapi.controls import escape_controls

log = logging.getLogger(__name__)


class ApiError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, field: str | None = None, **extra: Any):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.field = field
        self.extra = extra

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field:
            error["field"] = self.field
        error.update({k: v for k, v in self.extra.items() if v is not None})
        return {"error": error}


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class Conflict(ApiError):
    status, code = 409, "conflict"


class TooLarge(ApiError):
    status, code = 413, "too_large"


class UnsupportedMediaType(ApiError):
    status, code = 415, "unsupported_media_type"


class Invalid(ApiError):
    status, code = 422, "invalid"


class Gone(ApiError):
    status, code = 410, "gone"


class Unavailable(ApiError):
    status, code = 503, "unavailable"


def from_validation_error(exc: ValidationError, prefix: str = "") -> Invalid:
    details = []
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        field = ".".join(escape_controls(str(p)) for p in err["loc"])  # a dict key is the client's text
        details.append({"field": prefix + field, "message": err["msg"]})
    first = details[0] if details else {"field": prefix.rstrip(".") or None, "message": "invalid request"}
    message = f"{first['field']}: {first['message']}" if first["field"] else str(first["message"])
    return Invalid(message, code="validation_error", field=first["field"], details=details)


def _respond(error: ApiError) -> tuple[Response, int]:
    response = jsonify(error.body())
    if isinstance(error, Unauthorized):
        response.headers["WWW-Authenticate"] = 'Bearer realm="tome"'
    if "retry_after" in error.extra:
        response.headers["Retry-After"] = str(error.extra["retry_after"])
    return response, error.status


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(error: ApiError) -> tuple[Response, int]:
        return _respond(error)

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException) -> tuple[Response, int]:
        status = error.code or 500
        code = (error.name or "error").lower().replace(" ", "_")
        message = error.description or error.name
        if status == 413:
            # Werkzeug refuses a body over MAX_CONTENT_LENGTH before reading it (or as soon as a chunked
            # one passes it): the answer names the limit.
            code = "too_large"
            limit = current_app.config["MAX_CONTENT_LENGTH"]
            message = f"the request body is larger than the limit of {limit} bytes"
        response = jsonify({"error": {"code": code, "message": message}})
        # The exception's own headers carry meaning: Content-Range on a 416, Allow on a 405, ...
        for name, value in error.get_headers():
            if name.lower() not in ("content-type", "content-length"):
                response.headers[name] = value
        return response, status

    @app.errorhandler(OperationalError)
    @app.errorhandler(SqlTimeoutError)
    def _database_unavailable(error: Exception) -> tuple[Response, int]:
        # The database restarting or overloaded is not the caller's fault and not a bug: 503, try again.
        from webapi.extensions import tome

        tome().end_session()
        log.warning("database unavailable: %s", error)
        response = jsonify(
            {"error": {"code": "unavailable", "message": "the database is unavailable; retry"}}
        )
        response.headers["Retry-After"] = "5"
        return response, 503

    @app.errorhandler(Exception)
    def _unexpected(error: Exception) -> tuple[Response, int]:
        from webapi.extensions import tome

        tome().end_session()
        log.exception("unhandled error: %s", error)
        return jsonify({"error": {"code": "internal", "message": "internal server error"}}), 500
