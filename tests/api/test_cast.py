"""Full-cast reading through the API: the preview's cast and lines, a job's ``cast`` (voices by character,
a default, corrections by line), and hostile casts (another owner's voices, unknown characters, huge maps)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.factories import add_voice, chunk_voice_ids, preview_of, submit_job
from webapi.cli import mint_key
from worker.jobs.intake import PlanOutcome, plan_job

CHAPTER = """\
The kitchen was cold when Margaret Ellis came down. Tom Hale was already at the table.

“You’re late,” said Tom.

“I was up half the night,” Margaret replied. “The gulls again.”

“Again?”

She sighed. “Again.”
"""


@pytest.fixture
def voices(client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]) -> dict[str, str]:
    return {name: add_voice(client, user, reference_audio, name) for name in ("narrator", "tom", "maggie")}


def _preview(client: FlaskClient, headers: dict[str, str], **body: Any) -> Any:
    payload = {"title": "Cast", "script": CHAPTER, "voice": "narrator", **body}
    return client.post("/v1/scripts/preview", json=payload, headers=headers)


def test_the_preview_always_attributes(
    client: FlaskClient, user: dict[str, str], voices: dict[str, str]
) -> None:
    response = _preview(client, user)
    assert response.status_code == 200, response.json
    preview = response.json
    names = {c["name"]: c for c in preview["cast"]["characters"]}
    assert set(names) == {"Margaret Ellis", "Tom Hale"}
    assert names["Tom Hale"]["aliases"] == ["Tom"]
    assert names["Margaret Ellis"]["lines"] == 2
    lines = preview["lines"]
    assert [(line["index"], line["speaker"], line["attribution"]) for line in lines] == [
        (0, "Tom Hale", "explicit"),
        (1, "Margaret Ellis", "explicit"),
        (2, "Tom Hale", "alternation"),
        (3, "Margaret Ellis", "pronoun"),
    ]
    assert lines[1]["text"] == "I was up half the night, The gulls again."
    # Without a cast the chunks are the job's as it would render today: no speaker, paragraphs whole.
    assert all(chunk["speaker"] is None for chunk in preview["chunks"])
    chunk_of = {chunk["seq"]: chunk["written"] for chunk in preview["chunks"]}
    assert "said Tom" in chunk_of[lines[0]["chunk"]]


def test_with_a_cast_each_line_is_its_own_chunk_read_by_its_character(
    app: Flask, client: FlaskClient, user: dict[str, str], voices: dict[str, str]
) -> None:
    cast = {"voices": {"tom": "tom", "MARGARET": voices["maggie"]}}
    response = _preview(client, user, cast=cast)
    assert response.status_code == 200, response.json
    chunks = response.json["chunks"]
    spoken = [(chunk["written"], chunk["speaker"], chunk["voice_id"]) for chunk in chunks]
    assert ("“You’re late,”", "Tom Hale", voices["tom"]) in spoken
    assert ("said Tom.", "narrator", voices["narrator"]) in spoken
    assert ("“The gulls again.”", "Margaret Ellis", voices["maggie"]) in spoken
    assert ("Margaret replied.", "narrator", voices["narrator"]) in spoken
    for line in response.json["lines"]:
        assert chunks[line["chunk"]]["speaker"] == line["speaker"]

    job = submit_job(client, user, "narrator", script=CHAPTER, cast=cast)
    assert job.status_code == 202, job.json
    used = chunk_voice_ids(app, job.json["id"])
    assert used == [chunk["voice_id"] for chunk in chunks]


def test_a_correction_and_a_default_voice(
    client: FlaskClient, user: dict[str, str], voices: dict[str, str]
) -> None:
    cast = {"voices": {"Tom Hale": "tom"}, "default": "maggie", "lines": {"2": "Margaret", "3": "narrator"}}
    response = _preview(client, user, cast=cast)
    assert response.status_code == 200, response.json
    lines = response.json["lines"]
    assert (lines[2]["speaker"], lines[2]["attribution"]) == ("Margaret Ellis", "corrected")
    assert lines[3]["speaker"] == "narrator"
    chunks = response.json["chunks"]
    assert chunks[lines[2]["chunk"]]["voice_id"] == voices["maggie"]  # the default reads Margaret
    assert chunks[lines[3]["chunk"]]["voice_id"] == voices["narrator"]
    assert chunks[lines[0]["chunk"]]["voice_id"] == voices["tom"]


def test_another_owners_voice_is_no_voice_of_yours(
    client: FlaskClient,
    user: dict[str, str],
    other_user: dict[str, str],
    voices: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    theirs = add_voice(client, other_user, reference_audio, "theirs")
    for cast in ({"voices": {"Tom": theirs}}, {"default": theirs}):
        for response in (
            _preview(client, user, cast=cast),
            submit_job(client, user, "narrator", script=CHAPTER, cast=cast),
        ):
            assert response.status_code == 422, response.json
            assert response.json["error"]["code"] == "voice_not_found"
            assert theirs in response.json["error"]["message"]


def test_unknown_characters_are_named(
    client: FlaskClient, user: dict[str, str], voices: dict[str, str]
) -> None:
    response = _preview(client, user, cast={"voices": {"Tom": "tom", "Gandalf": "tom", "Zed": "tom"}})
    assert response.status_code == 422, response.json
    error = response.json["error"]
    assert (error["code"], error["field"]) == ("cast_invalid", "cast.voices")
    assert "'Gandalf'" in error["message"]
    assert "'Zed'" in error["message"]
    nobody = _preview(client, user, cast={"lines": {"1": "Gandalf"}})
    assert nobody.status_code == 422
    assert "'Gandalf'" in nobody.json["error"]["message"]
    beyond = _preview(client, user, cast={"lines": {"99": "Tom"}})
    assert beyond.status_code == 422
    assert "no line 99" in beyond.json["error"]["message"]
    # A character the rules missed, given a voice, is accepted.
    missed = _preview(client, user, cast={"voices": {"Stranger": "tom"}, "lines": {"2": "Stranger"}})
    assert missed.status_code == 200, missed.json
    assert missed.json["lines"][2]["speaker"] == "Stranger"


@pytest.mark.parametrize(
    "cast",
    [
        {"voices": {f"c{i}": "tom" for i in range(201)}},
        {"lines": {str(i): "Tom" for i in range(10_001)}},
        {"lines": {"-1": "Tom"}},
        {"lines": {"1": ""}},
        {"voices": {"Tom": "x" * 65}},
        {"voices": {"x" * 201: "tom"}},
        {"actors": {}},
    ],
)
def test_oversized_and_malformed_casts_are_refused(
    client: FlaskClient, user: dict[str, str], voices: dict[str, str], cast: dict[str, Any]
) -> None:
    response = _preview(client, user, cast=cast)
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"].startswith("cast")


def test_a_long_script_with_a_cast_is_planned_by_a_worker_with_the_same_chunks(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(inline_plan_max_chars=100)
    client, user = app.test_client(), bearer(mint_key(app, owner="alice", name="k", admin=False))
    voices = {name: add_voice(client, user, reference_audio, name) for name in ("narrator", "tom", "maggie")}
    cast = {"voices": {"Tom": "tom"}, "default": "maggie", "lines": {"2": "Margaret"}}
    accepted = _preview(client, user, cast=cast)
    assert accepted.status_code == 202, accepted.json  # over the inline cap: a worker plans it
    preview = preview_of(app, accepted)
    assert preview.status_code == 200, preview.json
    job = submit_job(client, user, "narrator", script=CHAPTER, cast=cast, output={"format": "wav"})
    assert job.status_code == 202, job.json
    assert job.json["progress"]["chunks_total"] == 0  # planned later, from what the job recorded
    sent: list[tuple[str, list[Any]]] = []
    planned = plan_job(tome_of(app).runtime, uuid.UUID(job.json["id"]), lambda *m: sent.append(m))
    assert planned == PlanOutcome.PLANNED
    assert chunk_voice_ids(app, job.json["id"]) == [c["voice_id"] for c in preview.json["chunks"]]
    assert voices["tom"] in chunk_voice_ids(app, job.json["id"])


def test_a_speaker_line_overrides_the_rules(
    client: FlaskClient, user: dict[str, str], voices: dict[str, str]
) -> None:
    script = CHAPTER.replace("“Again?”", "<!-- speaker: Margaret -->\n“Again?”")
    response = _preview(client, user, script=script)
    assert response.status_code == 200, response.json
    line = response.json["lines"][2]
    assert (line["speaker"], line["attribution"]) == ("Margaret Ellis", "corrected")
    cast = {"voices": {"Tom": "tom", "Margaret": "maggie"}}
    with_cast = _preview(client, user, script=script, cast=cast)
    line = with_cast.json["lines"][2]
    assert with_cast.json["chunks"][line["chunk"]]["voice_id"] == voices["maggie"]
    # The job's own correction wins over the script's line.
    wins = _preview(client, user, script=script, cast={**cast, "lines": {"2": "Tom"}})
    assert wins.json["lines"][2]["speaker"] == "Tom Hale"
    misplaced = _preview(client, user, script="Text <!-- speaker: Tom --> here.")
    assert misplaced.status_code == 422
    assert misplaced.json["error"]["code"] == "script_invalid"
