"""LLM attribution through the API, against a fake OpenAI-compatible chat server on 127.0.0.1: asked for by
``cast.llm`` only; the preview's lines labelled ``llm``; the engine's text byte for byte the rules' own;
a job that asks is planned by a worker with the same labels; a failing model is a warning, never an error."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import chunk_voice_ids, submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.chat_server import ChatServer
from webapi.cli import mint_key
from worker.jobs.intake import PlanOutcome, plan_job

CHAPTER = """\
Anna Price came in with the rain. Tom Hale and Mrs. Bell looked up.

“You are late,” said Tom.

“The bus broke down,” Anna replied.

“Again?” asked Mrs. Bell.

“Again.”

“Well, sit down.”

“I would rather stand.”
"""


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer()
    server.speakers = {"Again.": "Tom", "sit down": "narrator", "rather stand": "Mrs. Bell"}
    yield server
    server.close()


@pytest.fixture
def llm_app(make_app: Callable[..., Flask], chat: ChatServer) -> Flask:
    return make_app(
        cast_llm_url=chat.url, cast_llm_model="tiny", cast_llm_allow_private=True, cast_llm_threshold=0.8
    )


def _setup(
    app: Flask, reference_audio: tuple[bytes, str]
) -> tuple[FlaskClient, dict[str, str], dict[str, str]]:
    client, user = app.test_client(), bearer(mint_key(app, owner="alice", name="k", admin=False))
    voices = {}
    for name in ("narrator", "tom", "bell"):
        response = upload_voice(client, user, reference_audio[0], name=name, ref_text=reference_audio[1])
        assert response.status_code == 202, response.json
        voices[name] = response.json["id"]
    return client, user, voices


def _preview(client: FlaskClient, headers: dict[str, str], **body: Any) -> Any:
    payload = {"title": "Cast", "script": CHAPTER, "voice": "narrator", **body}
    response = client.post("/v1/scripts/preview", json=payload, headers=headers)
    assert response.status_code == 200, response.json
    return response.json


CAST = {"voices": {"Tom": "tom", "Mrs. Bell": "bell"}}


def test_the_preview_asks_the_model_only_when_the_cast_says_so_and_keeps_the_text(
    llm_app: Flask, chat: ChatServer, reference_audio: tuple[bytes, str]
) -> None:
    client, user, voices = _setup(llm_app, reference_audio)
    rules = _preview(client, user, cast=CAST)
    _preview(client, user)
    assert chat.requests == []  # configured, but not asked for: no request
    assert [line["attribution"] for line in rules["lines"][3:]] == ["alternation"] * 3
    labelled = _preview(client, user, cast={**CAST, "llm": True})
    assert [line["id"] for line in chat.asked()] == [3, 4, 5]
    said = [(line["speaker"], line["attribution"]) for line in labelled["lines"]]
    assert said[3:] == [("Tom Hale", "llm"), ("narrator", "llm"), ("Mrs. Bell", "llm")]
    assert said[:3] == [(line["speaker"], line["attribution"]) for line in rules["lines"][:3]]
    by_seq = {chunk["seq"]: chunk for chunk in labelled["chunks"]}
    assert by_seq[labelled["lines"][3]["chunk"]]["voice_id"] == voices["tom"]
    assert by_seq[labelled["lines"][5]["chunk"]]["voice_id"] == voices["bell"]
    # The model only labels: what the engine reads is, byte for byte, what the rules alone give it.
    assert "".join(c["text"] for c in labelled["chunks"]) == "".join(c["text"] for c in rules["chunks"])
    assert "".join(c["written"] for c in labelled["chunks"]) == "".join(c["written"] for c in rules["chunks"])
    members = {member["name"]: member["lines"] for member in labelled["cast"]["characters"]}
    assert members == {"Tom Hale": 2, "Mrs. Bell": 2, "Anna Price": 1}


def test_a_failing_model_is_a_warning_in_the_preview(
    llm_app: Flask, chat: ChatServer, reference_audio: tuple[bytes, str]
) -> None:
    client, user, _ = _setup(llm_app, reference_audio)
    chat.status = 503
    preview = _preview(client, user, cast={**CAST, "llm": True})
    assert [line["attribution"] for line in preview["lines"][3:]] == ["alternation"] * 3
    assert any("attribution model failed (HTTP 503)" in warning for warning in preview["warnings"])
    assert not any("not loaded" in warning for warning in preview["warnings"])  # the remote's words: log only


def test_asking_a_server_without_a_model_is_a_warning(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], app: Flask
) -> None:
    _setup(app, reference_audio)
    preview = _preview(client, user, cast={"llm": True})
    assert any("TOME_CAST_LLM_URL" in warning for warning in preview["warnings"])
    assert "llm" not in {line["attribution"] for line in preview["lines"]}


@pytest.mark.parametrize("llm", ["maybe", 2, None, {"url": "http://169.254.169.254/"}])
def test_cast_llm_is_a_boolean(client: FlaskClient, user: dict[str, str], llm: object) -> None:
    payload = {"title": "Cast", "script": CHAPTER, "voice": "narrator", "cast": {"llm": llm}}
    response = client.post("/v1/scripts/preview", json=payload, headers=user)
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"] == "cast.llm"


def test_a_job_that_asks_is_planned_by_a_worker_with_the_model_s_labels(
    llm_app: Flask, chat: ChatServer, reference_audio: tuple[bytes, str]
) -> None:
    client, user, _ = _setup(llm_app, reference_audio)
    cast = {**CAST, "llm": True}
    preview = _preview(client, user, cast=cast)
    asked = len(chat.requests)
    job = submit_job(client, user, "narrator", script=CHAPTER, cast=cast, output={"format": "wav"})
    assert job.status_code == 202, job.json
    assert job.json["progress"]["chunks_total"] == 0  # short, but not planned while the request waited
    assert len(chat.requests) == asked
    sent: list[tuple[str, list[Any]]] = []
    planned = plan_job(tome_of(llm_app).runtime, uuid.UUID(job.json["id"]), lambda *m: sent.append(m))
    assert planned == PlanOutcome.PLANNED
    assert len(chat.requests) == asked + 1
    assert chunk_voice_ids(llm_app, job.json["id"]) == [c["voice_id"] for c in preview["chunks"]]


def test_corrected_lines_are_not_sent_and_the_correction_wins(
    llm_app: Flask, chat: ChatServer, reference_audio: tuple[bytes, str]
) -> None:
    client, user, _ = _setup(llm_app, reference_audio)
    script = CHAPTER.replace("“Well, sit down.”", "<!-- speaker: Tom -->\n“Well, sit down.”")
    preview = _preview(client, user, script=script, cast={**CAST, "llm": True, "lines": {"3": "Anna"}})
    assert [line["id"] for line in chat.asked()] == [5]
    said = [(line["speaker"], line["attribution"]) for line in preview["lines"][3:]]
    assert said == [("Anna Price", "corrected"), ("Tom Hale", "corrected"), ("Mrs. Bell", "llm")]
