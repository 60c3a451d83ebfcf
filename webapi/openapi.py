"""OpenAPI 3.1 generated from the pydantic models the views validate with (one source of truth)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flask import Flask
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from webapi.schemas import ErrorOut

F = TypeVar("F", bound=Callable[..., Any])
REF = "#/components/schemas/{model}"


@dataclass(frozen=True)
class Operation:
    summary: str
    responses: dict[int, type[BaseModel] | None]
    body: type[BaseModel] | None = None
    form: type[BaseModel] | None = None  # multipart: text fields from the model plus file fields
    files: tuple[str, ...] = ()
    optional_files: tuple[str, ...] = ()
    query: type[BaseModel] | None = None
    auth: bool = True
    tags: tuple[str, ...] = field(default_factory=tuple)
    binary: str | None = None  # media type of a binary 200 response


def operation(op: Operation) -> Callable[[F], F]:
    def mark(view: F) -> F:
        view.__dict__["openapi"] = op
        return view

    return mark


def _models(app: Flask) -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {"ErrorOut": ErrorOut}
    for view in app.view_functions.values():
        op: Operation | None = getattr(view, "openapi", None)
        if op is None:
            continue
        for model in (op.body, op.form, op.query, *op.responses.values()):
            if model is not None:
                found[model.__name__] = model
    return list(found.values())


def _path(rule: str) -> str:
    return re.sub(r"<(?:[a-z_]+:)?([a-z_]+)>", r"{\1}", rule)


def build_spec(app: Flask) -> dict[str, Any]:
    models = _models(app)
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    paths: dict[str, dict[str, Any]] = {}
    for rule in app.url_map.iter_rules():
        view = app.view_functions.get(rule.endpoint)
        op: Operation | None = getattr(view, "openapi", None)
        if op is None:
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            paths.setdefault(_path(rule.rule), {})[method.lower()] = _operation(op, rule.arguments, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Tome", "version": "1", "description": "Long-form text to speech, asynchronously."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation(
    op: Operation, arguments: set[str] | frozenset[str], schemas: dict[str, Any]
) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": op.summary, "tags": list(op.tags), "responses": {}}
    params = [
        {"name": a, "in": "path", "required": True, "schema": {"type": "string"}} for a in sorted(arguments)
    ]
    if op.query is not None:
        for name, schema in schemas[op.query.__name__]["properties"].items():
            params.append({"name": name, "in": "query", "required": False, "schema": schema})
    if params:
        out["parameters"] = params
    content: dict[str, Any] = {}
    if op.body is not None:
        content["application/json"] = {"schema": {"$ref": REF.format(model=op.body.__name__)}}
    if op.form is not None:
        form = dict(schemas[op.form.__name__])
        properties = dict(form.get("properties", {}))
        for name in (*op.files, *op.optional_files):
            properties[name] = {"type": "string", "contentMediaType": "application/octet-stream"}
        form["properties"] = properties
        form["required"] = sorted({*form.get("required", []), *op.files})
        content["multipart/form-data"] = {"schema": form}
    if content:
        out["requestBody"] = {"required": True, "content": content}
    for status, model in op.responses.items():
        response: dict[str, Any] = {"description": str(status)}
        if model is not None:
            response["content"] = {"application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}}
        elif status == 200 and op.binary:
            response["content"] = {op.binary: {"schema": {"type": "string", "contentMediaType": op.binary}}}
        out["responses"][str(status)] = response
    error = {"content": {"application/json": {"schema": {"$ref": REF.format(model="ErrorOut")}}}}
    codes = [400, 404, 422] + ([401] if op.auth else [])
    for status in codes:
        out["responses"].setdefault(str(status), {"description": str(status), **error})
    if op.auth:
        out["security"] = [{"bearer": []}]
    return out
