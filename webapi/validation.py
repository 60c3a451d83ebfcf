"""Turn request bodies, forms and query strings into validated models, or a 4xx naming the field."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from flask import request
from pydantic import BaseModel, ValidationError

from webapi.errors import ApiError, NotFound, UnsupportedMediaType, from_validation_error

M = TypeVar("M", bound=BaseModel)


def json_body(model: type[M]) -> M:
    if not request.is_json:
        raise UnsupportedMediaType("send a JSON body with 'Content-Type: application/json'")
    try:
        data = request.get_json(silent=True)
    except RecursionError:  # json.loads on absurdly deep nesting
        raise ApiError("the request body nests too deeply", code="invalid_json") from None
    if data is None:
        raise ApiError("the request body is not valid JSON", code="invalid_json")
    if not isinstance(data, dict):
        raise ApiError("the request body must be a JSON object", code="invalid_json")
    return validate(model, data)


def validate(model: type[M], data: dict[str, Any], prefix: str = "") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, prefix) from exc


def query(model: type[M]) -> M:
    return validate(model, request.args.to_dict(), prefix="query.")


def parse_id(value: str, what: str) -> uuid.UUID:
    """Path ids that are not UUIDs are simply not found (no 500, no hint about other owners)."""
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise NotFound(f"{what} {value!r} not found") from exc
