from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
from flask import Flask
from flask.testing import FlaskClient

from tests.support.apps import tome_of
from webapi.cli import mint_key
from webapi.openapi import EXAMPLES, REF


def test_spec_lists_every_endpoint_with_the_request_schemas(client: FlaskClient) -> None:
    spec = client.get("/openapi.json").json
    assert spec["openapi"].startswith("3.1")
    paths = spec["paths"]
    expected = {
        ("/healthz", "get"), ("/v1/voices", "post"), ("/v1/voices", "get"), ("/v1/voices/{voice_id}", "get"),
        ("/v1/voices/{voice_id}", "delete"), ("/v1/jobs", "post"), ("/v1/jobs", "get"),
        ("/v1/jobs/{job_id}", "get"), ("/v1/jobs/{job_id}/audio", "get"),
        ("/v1/jobs/{job_id}/cancel", "post"),
    }  # fmt: skip
    assert expected <= {(p, m) for p, ops in paths.items() for m in ops}
    job_create = spec["components"]["schemas"]["JobCreate"]
    assert set(job_create["required"]) == {"script", "voice"}  # the title may come from the script
    output = spec["components"]["schemas"]["OutputSpec"]
    assert output["properties"]["format"]["enum"] == ["wav", "mp3", "flac", "ogg", "m4a", "m4b"]
    upload = paths["/v1/voices"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert {"name", "ref_text", "audio"} <= set(upload["required"])
    assert "security" not in paths["/healthz"]["get"]
    assert paths["/v1/jobs"]["post"]["security"] == [{"bearer": []}]


def _spec(client: FlaskClient) -> dict[str, Any]:
    spec = client.get("/openapi.json").json
    assert isinstance(spec, dict)
    return spec


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, ops in spec["paths"].items() for method, op in ops.items()]


def test_every_operation_has_a_unique_operation_id_and_a_short_summary(client: FlaskClient) -> None:
    operations = _operations(_spec(client))
    ids = [op["operationId"] for _, _, op in operations]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", i) for i in ids), ids
    for path, method, op in operations:
        assert 0 < len(op["summary"]) <= 110, (path, method, op["summary"])
    assert ("/v1/jobs", "post") in {(p, m) for p, m, _ in operations}


def test_every_operation_documents_its_errors_with_the_shared_error_shape(client: FlaskClient) -> None:
    spec = _spec(client)
    error_ref = {"$ref": "#/components/schemas/ErrorOut"}
    for path, method, op in _operations(spec):
        responses = op["responses"]
        where = f"{method.upper()} {path}"
        if op.get("security"):
            assert {"401", "429", "503"} <= set(responses), where
            assert "Retry-After" in responses["429"]["headers"], where
            assert "Retry-After" in responses["503"]["headers"], where
        if "{" in path:  # an id in the path
            assert "404" in responses, where
        if "requestBody" in op or any(p["in"] == "query" for p in op.get("parameters", [])):
            assert "422" in responses, where
        if "requestBody" in op:
            assert "413" in responses, where
            if "application/json" in op["requestBody"]["content"]:
                assert "415" in responses, where
        if "admin" in op["tags"]:
            assert "403" in responses, where
        for status, response in responses.items():
            assert response["description"], (where, status)
            if int(status) >= 400 and path not in ("/healthz", "/readyz"):  # 503: the health body
                assert response["content"]["application/json"]["schema"] == error_ref, (where, status)


def test_the_codes_documented_are_those_the_views_declare(client: FlaskClient) -> None:
    paths = client.get("/openapi.json").json["paths"]
    assert {"409", "410"} <= set(paths["/v1/jobs/{job_id}/files/{name}"]["get"]["responses"])
    assert "409" in paths["/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    assert "410" not in paths["/v1/jobs"]["get"]["responses"]
    assert "404" not in paths["/v1/jobs"]["get"]["responses"]  # no id, nothing to miss
    assert "401" not in paths["/healthz"]["get"]["responses"]  # public
    for path, method in (("/v1/jobs", "post"), ("/v1/voices", "post"), ("/v1/voices/{voice_id}", "put")):
        assert "403" in paths[path][method]["responses"], (method, path)  # a full storage quota
    assert "415" in paths["/v1/voices"]["post"]["responses"]  # not multipart/form-data
    assert "Content-Range" in paths["/v1/jobs/{job_id}/audio"]["get"]["responses"]["206"]["headers"]


def test_job_submission_documents_the_idempotency_key(client: FlaskClient) -> None:
    op = client.get("/openapi.json").json["paths"]["/v1/jobs"]["post"]
    headers = {p["name"]: p for p in op["parameters"] if p["in"] == "header"}
    assert headers["Idempotency-Key"]["schema"] == {"type": "string", "minLength": 1, "maxLength": 200}
    assert not headers["Idempotency-Key"]["required"]
    assert "409" in op["responses"]


def _validator(spec: dict[str, Any], schema: dict[str, Any]) -> jsonschema_rs.Draft202012Validator:
    return jsonschema_rs.Draft202012Validator({**schema, "components": spec["components"]})


def test_examples_match_their_schemas(client: FlaskClient) -> None:
    spec = _spec(client)
    for name, example in EXAMPLES.items():  # the request examples, wherever the document shows them
        errors = [e.message for e in _validator(spec, {"$ref": REF.format(model=name)}).iter_errors(example)]
        assert not errors, (name, errors)
    seen = 0
    for path, method, op in _operations(spec):
        media = [*op.get("requestBody", {}).get("content", {}).values()]
        media += [m for r in op["responses"].values() for m in r.get("content", {}).values()]
        for item in media:
            if "example" in item:
                seen += 1
                errors = [e.message for e in _validator(spec, item["schema"]).iter_errors(item["example"])]
                assert not errors, (method, path, errors)
    assert seen >= 20


def test_every_json_answer_and_every_request_body_has_an_example(client: FlaskClient) -> None:
    """Issue 14: request and response examples for every operation (a multipart form's in its description,
    as form fields; a JSON body that names the caller's own voice in its description)."""
    spec = _spec(client)
    missing = []
    for path, method, op in _operations(spec):
        for status, response in op["responses"].items():
            media = response.get("content", {}).get("application/json")
            if status.startswith("2") and media is not None and "example" not in media:
                missing.append(f"{method} {path} {status}")
        body = op.get("requestBody", {}).get("content", {})
        if "multipart/form-data" in body and "Example form fields" not in op.get("description", ""):
            missing.append(f"{method} {path} multipart body")
        json_body = body.get("application/json")
        if (
            json_body is not None
            and "example" not in json_body
            and "Example JSON body" not in op.get("description", "")
        ):
            missing.append(f"{method} {path} JSON body")
    assert not missing, missing
    assert "```json" in spec["paths"]["/v1/jobs"]["post"]["description"]
    assert "example" in spec["paths"]["/v1/lexicons"]["post"]["requestBody"]["content"]["application/json"]


def test_the_document_leaks_no_secret(make_app: Callable[..., Flask]) -> None:
    app = make_app(metrics_token="scrape-secret-0123456789")
    key = mint_key(app, owner="alice", name="t", admin=True)
    text = app.test_client().get("/openapi.json").get_data(as_text=True)
    settings = tome_of(app).settings
    for secret in (
        key,
        settings.security.metrics_token,
        settings.sqlalchemy_url,
        str(settings.storage.data_dir),
    ):
        assert secret not in text


def test_the_document_validates_against_the_openapi_schema(client: FlaskClient) -> None:
    spec = _spec(client)
    schemathesis.openapi.from_dict(spec).validate()  # the OpenAPI 3.1 meta-schema; raises if invalid
    broken = {**spec, "paths": {"/x": {"get": {"responses": {"200": {"content": 1}}}}}}
    with pytest.raises(jsonschema_rs.ValidationError):
        schemathesis.openapi.from_dict(broken).validate()  # the check can fail
