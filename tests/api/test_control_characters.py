"""Control characters (C0, DEL, C1) in any text field but a script body: 422 naming the field, nothing
stored; ordinary Unicode (accents, CJK, emoji) in the same fields goes through."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from tests.api.helpers import submit_job, upload_voice

CONTROLS = ["\x1b]0;owned\x07", "a\x00b", "a\x85b", "a\u009b31mb", "a\x7fb"]

IPA = "\u02c8\u0254\u014bstr\u00f8m"  # IPA for "Ångström", written escaped
Send = Callable[[FlaskClient, dict[str, str], str], TestResponse]


def _job(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"title": "Test", "script": "Hello world.", "voice": "narrator"}
    for path, value in fields.items():
        *parents, leaf = path.split("__")
        node = body
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return body


def _post_job(path: str) -> Send:
    return lambda client, user, bad: client.post("/v1/jobs", json=_job(**{path: bad}), headers=user)


def _post_voice(field: str) -> Send:
    def send(client: FlaskClient, user: dict[str, str], bad: str) -> TestResponse:
        data: dict[str, Any] = {"name": "narrator", "ref_text": "hello there", field: bad}
        data["audio"] = (io.BytesIO(b"RIFF"), "reference.wav")
        return client.post("/v1/voices", data=data, headers=user, content_type="multipart/form-data")

    return send


def _put_voice(field: str) -> Send:
    def send(client: FlaskClient, user: dict[str, str], bad: str) -> TestResponse:
        return client.put(
            f"/v1/voices/{uuid.uuid4()}", data={field: bad}, headers=user, content_type="multipart/form-data"
        )

    return send


def _multipart_job(client: FlaskClient, user: dict[str, str], bad: str) -> TestResponse:
    data = {
        "job": json.dumps({"title": bad, "voice": "narrator"}),
        "script": (io.BytesIO(b"Hello world."), "book.txt"),
    }
    return client.post("/v1/jobs", data=data, headers=user, content_type="multipart/form-data")


def _preview(client: FlaskClient, user: dict[str, str], bad: str) -> TestResponse:
    return client.post("/v1/scripts/preview", json=_job(metadata__author=bad), headers=user)


def _lexicon(field: str) -> Send:
    def send(client: FlaskClient, user: dict[str, str], bad: str) -> TestResponse:
        entry = {"grapheme": "Tome", "alias": "tohm", field: bad}
        return client.post("/v1/lexicons", json={"name": "names", "entries": [entry]}, headers=user)

    return send


def _speech(field: str) -> Send:
    def send(client: FlaskClient, user: dict[str, str], bad: str) -> TestResponse:
        body = {"input": "Hello.", "voice": "narrator", field: bad}
        return client.post("/v1/audio/speech", json=body, headers=user)

    return send


def _idempotency_key(client: FlaskClient, user: dict[str, str], bad: str) -> TestResponse:
    return client.post("/v1/jobs", json=_job(), headers={**user, "Idempotency-Key": bad})


FIELDS: list[tuple[str, Send]] = [
    ("title", _post_job("title")),
    ("voice", _post_job("voice")),
    ("webhook_url", _post_job("webhook_url")),
    ("lexicons.0", _post_job("lexicons")),
    ("metadata.author", _post_job("metadata__author")),
    ("metadata.narrator", _post_job("metadata__narrator")),
    ("metadata.publisher", _post_job("metadata__publisher")),
    ("metadata.language", _post_job("metadata__language")),
    ("metadata.description", _post_job("metadata__description")),
    ("job.title", _multipart_job),
    ("metadata.author", _preview),
    ("name", _post_voice("name")),
    ("ref_text", _post_voice("ref_text")),
    ("lexicons.0", _post_voice("lexicons")),
    ("ref_text", _put_voice("ref_text")),
    ("lexicons.0", _put_voice("lexicons")),
    ("entries.0.grapheme", _lexicon("grapheme")),
    ("entries.0.alias", _lexicon("alias")),
    ("entries.0.phoneme", _lexicon("phoneme")),
    ("voice", _speech("voice")),
    ("model", _speech("model")),
    ("instructions", _speech("instructions")),
    ("Idempotency-Key", _idempotency_key),
]


def _wrap_lists(field: str, send: Send) -> Send:
    """List fields take the bad value as their one item."""
    if not field.endswith(".0") or field.startswith("entries"):
        return send
    return lambda client, user, bad: send(client, user, [bad])  # type: ignore[arg-type]


CASES = [
    pytest.param(field, send, bad, id=f"{field}-{i}-{name}")
    for i, (field, send) in enumerate(FIELDS)
    for name, bad in zip(["osc", "nul", "nel", "csi", "del"], CONTROLS, strict=True)
    if not (field == "Idempotency-Key" and "\x00" in bad)  # no HTTP client sends NUL in a header
]


@pytest.mark.parametrize(("field", "send", "bad"), CASES)
def test_a_control_character_is_a_422_naming_the_field(
    client: FlaskClient, user: dict[str, str], field: str, send: Send, bad: str
) -> None:
    response = _wrap_lists(field, send)(client, user, bad)
    assert response.status_code == 422, (field, response.json)
    error = response.json["error"]
    assert error["field"] == field
    assert "control character" in error["message"]
    assert f"U+{ord(next(c for c in bad if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F)):04X}" in error["message"]
    assert client.get("/v1/jobs", headers=user).json["jobs"] == []
    assert client.get("/v1/voices", headers=user).json["voices"] == []
    assert client.get("/v1/lexicons", headers=user).json["lexicons"] == []


def test_a_key_of_a_map_is_named_without_its_control_characters(
    client: FlaskClient, user: dict[str, str]
) -> None:
    response = client.post("/v1/jobs", json=_job(qa__thresholds={"max\x1bwer": 0.5}), headers=user)
    assert response.status_code == 422
    assert response.json["error"]["field"] == "qa.thresholds.max\\x1bwer.[key]"
    assert "\x1b" not in response.get_data(as_text=True).encode().decode("unicode_escape")


@pytest.mark.parametrize("field", ["title", "metadata__author", "voice", "webhook_url"])
@pytest.mark.parametrize("bad", ["two\nlines", "a\tb", "a\rb"])
def test_one_line_fields_refuse_line_breaks_and_tabs(
    client: FlaskClient, user: dict[str, str], field: str, bad: str
) -> None:
    response = client.post("/v1/jobs", json=_job(**{field: bad}), headers=user)
    assert response.status_code == 422
    assert response.json["error"]["field"] == field.replace("__", ".")


def test_unicode_text_goes_through_every_field(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    audio, _ = reference_audio
    text = "Zoë Ångström — 北京の夜 🎧 ﷺ"
    voice = upload_voice(client, user, audio, name="Zoë 北京", ref_text=f"{text}\nsecond line\tend")
    assert voice.status_code == 202, voice.json
    assert voice.json["name"] == "Zoë 北京"
    lexicon = client.post(
        "/v1/lexicons",
        json={
            "name": "names",
            "entries": [{"grapheme": "Ångström", "alias": "ong strum", "phoneme": IPA}],
        },
        headers=user,
    )
    assert lexicon.status_code == 201, lexicon.json
    metadata = dict.fromkeys(("author", "narrator", "publisher"), text)
    metadata["description"] = f"{text}\n\nA second paragraph,\tindented."
    job = submit_job(
        client,
        user,
        "Zoë 北京",
        title=text,
        metadata=metadata,
        lexicons=["names"],
        qa={"thresholds": {"max_wer": 0.5}},
    )
    assert job.status_code == 202, job.json
    shown = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert shown["title"] == text
    speech = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "Zoë 北京 nobody"}, headers=user)
    assert speech.status_code == 404  # past validation: that voice does not exist


def test_a_script_body_is_refused_by_its_own_reader_with_line_and_column(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    """The script (and a speech input, read the same way) is checked by the script reader, which names
    the line and column rather than only the field."""
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    response = client.post("/v1/scripts/preview", json=_job(script="Hello.\nA\x1b world."), headers=user)
    assert response.status_code == 422
    error = response.json["error"]
    assert (error["field"], error["line"], error["column"]) == ("script", 2, 2)
    assert "U+001B" in error["message"]


@pytest.mark.parametrize("option", ["--owner", "--name"])
def test_key_owner_and_name_refuse_them_too(app: Flask, option: str) -> None:
    result = app.test_cli_runner().invoke(args=["tome-keys", "create", option, "x\x1b]0;y"])
    assert result.exit_code != 0
    assert "control character U+001B" in result.output
    listed = app.test_cli_runner().invoke(args=["tome-keys", "list"])
    assert "\x1b" not in listed.output
