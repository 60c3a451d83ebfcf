"""OpenAPI 3.1 generated from the pydantic models the views validate with (one source of truth)."""

from __future__ import annotations

import json
import re
from typing import Any

from flask import Flask
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from webapi.openapi_examples import response_example
from webapi.operations import Operation
from webapi.schemas import ErrorOut

REF = "#/components/schemas/{model}"


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
        methods = sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})
        for method in methods:
            out = _operation(op, rule.arguments, schemas, EXTRA_ERRORS.get((method, rule.rule), frozenset()))
            out["operationId"] = rule.endpoint.replace(".", "_") + (
                f"_{method.lower()}" if len(methods) > 1 else ""
            )
            _streamed_audio(out, STREAMED_AUDIO.get((method, rule.rule)))
            if (method, rule.rule) in CREATES:
                made = out["responses"][str(CREATES[(method, rule.rule)])]
                made["headers"] = {**made.get("headers", {}), "Location": LOCATION}
            out["parameters"] = [
                *out.get("parameters", []),
                *REQUEST_HEADERS.get((method, rule.rule), []),
                REQUEST_ID_PARAMETER,
            ]
            for response in out["responses"].values():  # every answer echoes the request's id
                response["headers"] = {**response.get("headers", {}), "X-Request-ID": REQUEST_ID_ECHO}
            paths.setdefault(_path(rule.rule), {})[method.lower()] = out
    return {
        "openapi": "3.1.0",
        "info": {"title": "Tome", "version": "1", "description": "Long-form text to speech, asynchronously."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


# What each error status means here; every error body is ErrorOut: {"error": {"code", "message", "field"}}.
ERRORS: dict[int, tuple[str, str]] = {
    400: ("Malformed request: the body is not JSON, or not a JSON object", "invalid_json"),
    401: ("Missing, unknown or revoked API key", "unauthorized"),
    403: ("Not allowed: an admin key is needed, or a storage quota is full", "forbidden"),
    404: ("No such object among yours (ids of other owners are not found either)", "not_found"),
    409: ("Conflicts with the object's state, or with another object (a name already taken)", "conflict"),
    410: ("The audio or file was removed once its job expired", "expired"),
    413: ("The body or an uploaded file is larger than the server's limit", "too_large"),
    416: (
        "The Range starts past the end of the file; Content-Range (bytes */LENGTH) gives its length",
        "requested_range_not_satisfiable",
    ),
    415: ("Send a JSON body with Content-Type: application/json", "unsupported_media_type"),
    422: ("A field is invalid; `field` names it", "validation_error"),
    429: ("Too many requests with this key this minute, or a quota that frees up with time", "rate_limited"),
    503: ("The database is unavailable; retry after Retry-After seconds", "unavailable"),
}
RETRY_AFTER = {"description": "Seconds to wait before retrying", "schema": {"type": "integer", "minimum": 1}}
RESPONSE_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": 'Bearer realm="tome"', "schema": {"type": "string"}}},
    429: {"Retry-After": RETRY_AFTER},
    503: {"Retry-After": RETRY_AFTER},
    206: {
        "Content-Range": {
            "description": "The bytes sent, e.g. bytes 0-1023/4096",
            "schema": {"type": "string"},
        }
    },
    416: {
        "Content-Range": {
            "description": "The file's length, as bytes */LENGTH",
            "schema": {"type": "string"},
        }
    },
}
# Operations that make something (or start work on it) and name it in a Location header: (method, Flask
# rule) -> the status that carries it.
LOCATION = {
    "description": "Where the resource (or the job doing the work) is: GET it for its state",
    "schema": {"type": "string", "format": "uri-reference"},
}
CREATES: dict[tuple[str, str], int] = {
    ("POST", "/v1/jobs"): 202,
    ("POST", "/v1/voices"): 202,
    ("POST", "/v1/lexicons"): 201,
    ("POST", "/v1/jobs/<job_id>/chunks/<int:seq>/rerender"): 202,
}
# Every operation takes an X-Request-ID and answers with one (webapi.observe).
REQUEST_ID_PARAMETER: dict[str, Any] = {
    "name": "X-Request-ID",
    "in": "header",
    "required": False,
    "description": "Your id for this request (up to 128 letters, digits and ._:@+=/-), echoed in the answer "
    "and carried by the log lines of the request and of the work it starts; any other value is "
    "replaced by a fresh id",
    "schema": {"type": "string", "maxLength": 128},
    "example": "checkout-7f3a9c",
}
REQUEST_ID_ECHO: dict[str, Any] = {
    "description": "The request's id: yours if it was valid, else a fresh one",
    "schema": {"type": "string", "maxLength": 128},
}
# Request headers a view reads, by (method, Flask rule).
REQUEST_HEADERS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("POST", "/v1/jobs"): [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "A retry with the same key and body returns the job the first request made (202); "
            "the same key with another body is a 409",
            "schema": {"type": "string", "minLength": 1, "maxLength": 200},
            "example": "book-42-render-1",
        }
    ],
}
# Errors views raise without declaring them, by (method, Flask rule): the storage and job quotas (403; the
# quotas that free up with time are a 429). Better declared in the views' Operation, then dropped here.
EXTRA_ERRORS: dict[tuple[str, str], frozenset[int]] = {
    ("POST", "/v1/jobs"): frozenset({403}),
    ("POST", "/v1/voices"): frozenset({403}),
    ("PUT", "/v1/voices/<voice_id>"): frozenset({403}),
    ("POST", "/v1/audio/speech"): frozenset({403}),
}
# Operations whose 200 is audio streamed as it is made, in any of these media types (the request's
# response_format chooses), with the job it belongs to in a header.
STREAMED_AUDIO: dict[tuple[str, str], tuple[str, ...]] = {
    ("POST", "/v1/audio/speech"): (
        "audio/mpeg",
        "audio/ogg",
        "audio/aac",
        "audio/flac",
        "audio/wav",
        "audio/pcm",
    ),
}


def _streamed_audio(out: dict[str, Any], media_types: tuple[str, ...] | None) -> None:
    if not media_types:
        return
    ok = out["responses"]["200"]
    ok["description"] = "The audio, sent as it is encoded (chunked transfer encoding)"
    ok["content"] = {m: {"schema": {"type": "string", "contentMediaType": m}} for m in media_types}
    ok["headers"] = {
        "Tome-Job-Id": {
            "description": "The speech job (GET /v1/jobs/{job_id}): its progress, and why it failed",
            "schema": {"type": "string", "format": "uuid"},
        }
    }


# One request example per JSON body model; tests validate each against its schema. An example that names
# something the caller must own first (a voice) goes in the description rather than `example`: schemathesis
# mixes `example` values into the requests it generates, where that one would only ever be a 422.
IN_DESCRIPTION = {"JobCreate", "SpeechCreate"}
# What a multipart file field holds, where its name does not say it all.
FILE_DESCRIPTIONS = {
    "audio": "The reference recording (WAV, FLAC, OGG, MP3, M4A, WebM; 1-120 s)",
    "embedding": (
        "Instead of 'audio' (send one of the two): a safetensors file holding one float32 tensor "
        "'ref_spk_embedding' of the engine's hidden size (qwen3-tts x-vector-only mode), at most 256 KiB, "
        "as GET /v1/voices/{voice_id}/embedding exports it. Engines without embeddings answer 422"
    ),
}
# Multipart forms' examples, shown in the description as form fields (a file as @name): a file cannot be
# given as a JSON example.
FORM_EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "VoiceForm": [
        ("name", "narrator"),
        ("ref_text", "The old lighthouse keeper climbed the stairs every evening, counting each step."),
        ("language", "en"),
        ("audio", "@reference.wav"),
    ],
    "VoiceUpdate": [("ref_text", "The corrected transcript of the recording."), ("audio", "@new-take.wav")],
    "JobForm": [
        ("job", '{"title": "The Lighthouse", "voice": "narrator", "output": {"format": "m4b"}}'),
        ("script", "@book.epub"),
    ],
}
EXAMPLES: dict[str, dict[str, Any]] = {
    "JobCreate": {
        "title": "The Lighthouse",
        "script": "# Chapter one\n\nThe lamp was lit at dusk, as every night.",
        "script_format": "markdown",
        "voice": "narrator",
        "output": {"format": "m4b"},
    },
    "LexiconIn": {"name": "names", "language": "en", "entries": [{"grapheme": "Tome", "alias": "tohm"}]},
    "RerenderIn": {"text": "The lamp was lit at dusk.", "seed": 42},
    "SpeechCreate": {
        "model": "tts-1",
        "voice": "narrator",
        "input": "The lamp was lit at dusk, as every night.",
        "response_format": "mp3",
        "speed": 1.0,
    },
    "CacheRebuild": {"force": True},
    "CacheRebuildMany": {"status": ["failed"]},
    "SecretRotation": {"overlap_seconds": 86400},
    "AudiobookshelfIn": {"url": "https://abs.example.com", "token": "eyJhbGciOiJIUzI1NiJ9.your-token"},
}


def _error_statuses(
    op: Operation, arguments: set[str] | frozenset[str], extra: frozenset[int] = frozenset()
) -> list[int]:
    """The errors an operation can answer, from what it takes: a key (401, 429, 503), admin (403), ids in
    the path (404), a body (400, 413, 415), any input (422); plus those the view declares."""
    takes_body = op.body is not None or op.form is not None
    found = {s for s, model in op.responses.items() if s >= 400 and model is None} | extra
    if op.auth:
        found |= {401, 429, 503}
    if "admin" in op.tags:
        found.add(403)
    if arguments:
        found.add(404)
    if takes_body:
        found |= {400, 413}
    if takes_body:
        found.add(415)  # JSON views want application/json; form views want multipart/form-data
    if takes_body or op.query is not None:
        found.add(422)
    return sorted(found)


def _split_summary(text: str) -> tuple[str, str | None]:
    """A short summary and, when it had to be cut, the whole text as the description: cut at the first
    ':', ';' or '.' outside parentheses, else before a parenthesis."""
    if len(text) <= 80:
        return text, None
    depth, cut = 0, len(text)
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and char in ":;." and text[i + 1 : i + 2] in (" ", ""):
            cut = i
            break
    if cut > 80 and " (" in text[:cut]:
        cut = text.index(" (")
    return text[:cut], text


def _operation(
    op: Operation, arguments: set[str] | frozenset[str], schemas: dict[str, Any], extra: frozenset[int]
) -> dict[str, Any]:
    summary, description = _split_summary(op.summary)
    out: dict[str, Any] = {"summary": summary, "tags": list(op.tags), "responses": {}}
    if description:
        out["description"] = description
    params = _parameters(op, arguments, schemas)
    if params:
        out["parameters"] = params
    content = {**_json_body(op, out), **_form_body(op, out, schemas)}
    if content:
        out["requestBody"] = {"required": True, "content": content}
    for status, model in op.responses.items():
        if status >= 400 and model is None:
            continue  # an error: documented below with the shared error shape
        out["responses"][str(status)] = _response(op, status, model)
    for status in _error_statuses(op, arguments, extra):
        out["responses"].setdefault(str(status), _error_response(status))
    if op.auth:
        out["security"] = [{"bearer": []}]
    return out


def _parameters(
    op: Operation, arguments: set[str] | frozenset[str], schemas: dict[str, Any]
) -> list[dict[str, Any]]:
    params = [
        {"name": a, "in": "path", "required": True, "schema": {"type": "string"}} for a in sorted(arguments)
    ]
    if op.query is not None:
        for name, schema in schemas[op.query.__name__]["properties"].items():
            params.append({"name": name, "in": "query", "required": False, "schema": schema})
    return params


def _json_body(op: Operation, out: dict[str, Any]) -> dict[str, Any]:
    """The JSON request body's content entry; a long example goes into the description instead."""
    if op.body is None:
        return {}
    media: dict[str, Any] = {"schema": {"$ref": REF.format(model=op.body.__name__)}}
    example = EXAMPLES.get(op.body.__name__)
    if example is not None and op.body.__name__ in IN_DESCRIPTION:
        text = json.dumps(example, indent=2)
        out["description"] = (
            f"{out.get('description', op.summary)}\n\nExample JSON body:\n\n```json\n{text}\n```"
        )
    elif example is not None:
        media["example"] = example
    return {"application/json": media}


def _form_body(op: Operation, out: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    """The multipart request body's content entry: the form model's text fields plus its file fields."""
    if op.form is None:
        return {}
    form = dict(schemas[op.form.__name__])
    properties = dict(form.get("properties", {}))
    for name in (*op.files, *op.optional_files):
        properties[name] = {"type": "string", "contentMediaType": "application/octet-stream"}
        if name in FILE_DESCRIPTIONS:
            properties[name]["description"] = FILE_DESCRIPTIONS[name]
    form["properties"] = properties
    form["required"] = sorted({*form.get("required", []), *op.files})
    fields = FORM_EXAMPLES.get(op.form.__name__)
    if fields:
        lines = "\n".join(f"{name}={value}" for name, value in fields)
        out["description"] = (
            f"{out.get('description', op.summary)}\n\nExample form fields (a file as @name):"
            f"\n\n```\n{lines}\n```"
        )
    return {"multipart/form-data": {"schema": form}}


def _response(op: Operation, status: int, model: type[BaseModel] | None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": _SUCCESS.get(status, str(status))}
    if model is not None:
        media: dict[str, Any] = {"schema": {"$ref": REF.format(model=model.__name__)}}
        example = response_example(model, status)
        if example is not None:
            media["example"] = example
        response["content"] = {"application/json": media}
    elif status in (200, 206) and op.binary:
        response["content"] = {op.binary: {"schema": {"type": "string", "contentMediaType": op.binary}}}
    if status in RESPONSE_HEADERS:
        response["headers"] = RESPONSE_HEADERS[status]
    return response


_SUCCESS = {
    200: "OK",
    201: "Created",
    202: "Accepted: the work goes on asynchronously",
    204: "Deleted",
    206: "Partial content, for a Range request",
}


def _error_response(status: int) -> dict[str, Any]:
    description, code = ERRORS.get(status, (str(status), "error"))
    example = {"error": {"code": code, "message": description}}
    if status == 422:
        example["error"]["field"] = "title"
    response: dict[str, Any] = {
        "description": description,
        "content": {
            "application/json": {"schema": {"$ref": REF.format(model="ErrorOut")}, "example": example}
        },
    }
    if status in RESPONSE_HEADERS:
        response["headers"] = RESPONSE_HEADERS[status]
    return response
