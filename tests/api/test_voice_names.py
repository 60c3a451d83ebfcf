"""Voice names: stored normalised (NFC, trimmed, inner spaces as one), unique per owner without regard to
case (a database index, so that it holds under concurrent uploads), and one resolution rule wherever a
name is accepted: the job's ``voice``, script directives, SSML ``<voice>``, speech's ``voice``."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from models.names import voice_name, voice_name_key
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from webapi.cli import mint_key
from worker.jobs.plan import live_voices

PRECOMPOSED = "Zo\u00eb"  # ë as one code point
COMBINING = "Zoe\u0308"  # e + COMBINING DIAERESIS: the same name in NFD


def _upload(client: FlaskClient, user: dict[str, str], audio: bytes, name: str) -> Any:
    return upload_voice(client, user, audio, name=name)


def test_the_key_folds_case_normalisation_and_spaces() -> None:
    assert voice_name("  Mary   Ann ") == "Mary Ann"
    assert voice_name(COMBINING) == PRECOMPOSED
    same = ["Narrator", "narrator ", " NARRATOR", "nArRaToR"]
    assert {voice_name_key(name) for name in same} == {"narrator"}
    assert voice_name_key("Straße") == voice_name_key("STRASSE")
    assert voice_name_key(COMBINING.upper()) == voice_name_key(PRECOMPOSED)
    assert voice_name_key("Bob") != voice_name_key("Bob 2")


def test_names_are_stored_normalised(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    made = _upload(client, user, reference_audio[0], "  Mary    Ann  ")
    assert made.status_code == 202, made.json
    assert made.json["name"] == "Mary Ann"
    made = _upload(client, user, reference_audio[0], COMBINING)
    assert made.json["name"] == PRECOMPOSED
    assert [v["name"] for v in client.get("/v1/voices", headers=user).json["voices"]] == [
        PRECOMPOSED,
        "Mary Ann",
    ]


@pytest.mark.parametrize(
    ("first", "again"),
    [("Narrator", "narrator "), ("Narrator", "NARRATOR"), (PRECOMPOSED, COMBINING), ("Straße", "STRASSE")],
)
def test_a_name_that_differs_only_by_case_or_form_is_409_naming_the_voice(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], first: str, again: str
) -> None:
    made = _upload(client, user, reference_audio[0], first)
    assert made.status_code == 202, made.json
    clash = _upload(client, user, reference_audio[0], again)
    assert clash.status_code == 409, clash.json
    error = clash.json["error"]
    assert error["field"] == "name"
    assert error["voice_id"] == made.json["id"]
    assert repr(made.json["name"]) in error["message"]
    assert len(client.get("/v1/voices", headers=user).json["voices"]) == 1
    assert client.delete(f"/v1/voices/{made.json['id']}", headers=user).status_code == 204
    assert _upload(client, user, reference_audio[0], again).status_code == 202  # a deleted voice frees it


def test_owners_do_not_share_names(
    client: FlaskClient,
    user: dict[str, str],
    other_user: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    assert _upload(client, user, reference_audio[0], "Bob").status_code == 202
    other = _upload(client, other_user, reference_audio[0], "bob")
    assert other.status_code == 202, other.json  # and the 409 of one owner never names another's voice


@pytest.mark.parametrize(
    "name",
    [
        "Bob\u200b",  # ZERO WIDTH SPACE
        "B\u200dob",  # ZERO WIDTH JOINER
        "\ufeffBob",  # BYTE ORDER MARK
        "\u202eboB",  # RIGHT-TO-LEFT OVERRIDE: displays as "Bob"
        "Bo\u2066b\u2069",  # LEFT-TO-RIGHT ISOLATE ... POP DIRECTIONAL ISOLATE
        "Bob\u00ad",  # SOFT HYPHEN
        "Bob/..",
        "<script>",
        "\u0308Bob",  # a combining mark with nothing to combine with
        "   ",
        "x" * 65,
    ],
)
def test_invisible_formatting_and_other_characters_are_refused(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], name: str
) -> None:
    response = _upload(client, user, reference_audio[0], name)
    assert response.status_code == 422, (name, response.json)
    assert response.json["error"]["field"] == "name"
    assert client.get("/v1/voices", headers=user).json["voices"] == []


@pytest.mark.parametrize("name", ["Zoë", "北京の声", "Ольга", "محمد", "O'Brien", "Nar_rator-2.0"])
def test_names_in_any_script_are_welcome(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], name: str
) -> None:
    made = _upload(client, user, reference_audio[0], name)
    assert made.status_code == 202, made.json
    assert made.json["name"] == name


def test_every_place_a_name_is_accepted_resolves_it_alike(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    narrator = _upload(client, user, reference_audio[0], "Narrator").json["id"]
    zoe = _upload(client, user, reference_audio[0], PRECOMPOSED).json["id"]
    line = "A sentence long enough to outweigh the pause that follows its paragraph."
    script = f"{line}\n\n<!-- voice: NARRATOR -->\n{line}\n\n<!-- voice: {COMBINING.upper()} -->\n{line}"
    for voice in ("narrator ", "NARRATOR", " Narrator", narrator):
        job = submit_job(client, user, voice, script=script)
        assert job.status_code == 202, (voice, job.json)
        assert job.json["voice_id"] == narrator
        assert job.json["voice_ids"] == [narrator, zoe]
    preview = client.post(
        "/v1/scripts/preview",
        json={"voice": "narrator", "script": script, "title": "t"},
        headers=user,
    )
    assert [chunk["voice_id"] for chunk in preview.json["chunks"]] == [narrator, narrator, zoe]
    ssml = f'<speak><voice name="{COMBINING.lower()}">{line}</voice> {line}</speak>'
    preview = client.post(
        "/v1/scripts/preview",
        json={"voice": "NARRATOR", "script": ssml, "script_format": "ssml", "title": "t"},
        headers=user,
    )
    assert [chunk["voice_id"] for chunk in preview.json["chunks"]] == [zoe, narrator]
    # Speech resolves its ``voice`` through the same function (webapi.speech._voice).
    found = live_voices(tome_of(app).sessions(), "alice", ["narrator ", "NARRATOR", COMBINING, "nobody"])
    assert {ref: str(voice.id) for ref, voice in found.items()} == {
        "narrator ": narrator,
        "NARRATOR": narrator,
        COMBINING: zoe,
    }
    assert live_voices(tome_of(app).sessions(), "bob", ["narrator"]) == {}  # another owner's: none


def _race(app: Flask, user: dict[str, str], audio: bytes, names: tuple[str, ...]) -> list[Any]:
    """Upload a voice under each name at once (one thread each, released together); their answers."""
    barrier = threading.Barrier(len(names))
    answers: list[Any] = []

    def upload(name: str) -> None:
        client = app.test_client()
        barrier.wait()
        answers.append(_upload(client, user, audio, name))

    threads = [threading.Thread(target=upload, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return answers


def test_two_uploads_racing_for_one_name_make_one_voice(
    database_app: Flask, reference_audio: tuple[bytes, str]
) -> None:
    """Both pass the check before either inserts: the unique index on (owner, name key) decides, and the
    loser is the same 409 as a sequential clash (naming the winner), never a 500 or a second voice."""
    user = bearer(mint_key(database_app, owner="alice", name="t", admin=False))
    for first, second in (("Bob", "bob"), ("Ann", "ANN "), (PRECOMPOSED, COMBINING)):
        answers = _race(database_app, user, reference_audio[0], (first, second))
        statuses = sorted(answer.status_code for answer in answers)
        assert statuses == [202, 409], [answer.json for answer in answers]
        winner = next(answer for answer in answers if answer.status_code == 202)
        loser = next(answer for answer in answers if answer.status_code == 409)
        assert loser.json["error"]["voice_id"] == winner.json["id"]
    listed = database_app.test_client().get("/v1/voices", headers=user).json["voices"]
    assert len(listed) == 3
