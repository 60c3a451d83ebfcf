# ruff: noqa: RUF001  (IPA letters are test data)
"""/v1/lexicons over the API: CRUD, PLS in and out, another owner's lexicons, jobs and voices that read
them (in the order named, then the voice's defaults), and the preview showing what fired."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from models import Chunk
from tests.api.helpers import submit_job, upload_voice
from tests.support.apps import tome_of
from worker.script.pls import PLS_NS

NAMES = {
    "name": "names",
    "language": "en",
    "entries": [
        {"grapheme": "Siobhan", "alias": "shiv-awn"},
        {"grapheme": "NASA", "alias": "nassa", "case_sensitive": True},
        {"grapheme": "tomato", "phoneme": "təˈmɑːtəʊ"},
    ],
}


def _create(client: FlaskClient, headers: dict[str, str], body: dict[str, Any] = NAMES) -> Any:
    return client.post("/v1/lexicons", json=body, headers=headers)


def _chunk_texts(app: Flask, job_id: str) -> list[str]:
    rows = tome_of(app).sessions.scalars(
        select(Chunk.text).where(Chunk.job_id == uuid.UUID(job_id)).order_by(Chunk.seq)
    )
    return list(rows)


def test_create_list_get_replace_delete(client: FlaskClient, user: dict[str, str]) -> None:
    created = _create(client, user)
    assert created.status_code == 201, created.json
    lexicon = created.json
    assert lexicon["entry_count"] == 3
    assert lexicon["entries"][1] == {
        "grapheme": "NASA",
        "alias": "nassa",
        "phoneme": None,
        "case_sensitive": True,
    }
    listed = client.get("/v1/lexicons", headers=user).json["lexicons"]
    assert [(x["id"], x["entry_count"]) for x in listed] == [(lexicon["id"], 3)]
    assert "entries" not in listed[0]
    assert client.get(f"/v1/lexicons/{lexicon['id']}", headers=user).json == lexicon
    again = _create(client, user)
    assert again.status_code == 409
    assert again.json["error"]["field"] == "name"
    replaced = client.put(
        f"/v1/lexicons/{lexicon['id']}",
        json={"name": "renamed", "entries": [{"grapheme": "Tome", "alias": "tohm"}]},
        headers=user,
    )
    assert replaced.status_code == 200, replaced.json
    assert replaced.json["name"] == "renamed"
    assert [e["grapheme"] for e in replaced.json["entries"]] == ["Tome"]
    assert client.delete(f"/v1/lexicons/{lexicon['id']}", headers=user).status_code == 204
    assert client.get(f"/v1/lexicons/{lexicon['id']}", headers=user).status_code == 404
    assert client.get("/v1/lexicons", headers=user).json["lexicons"] == []


def test_another_owners_lexicon_is_not_found_anywhere(
    client: FlaskClient,
    user: dict[str, str],
    other_user: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    lexicon = _create(client, user).json
    for method, path in [
        ("GET", f"/v1/lexicons/{lexicon['id']}"),
        ("GET", f"/v1/lexicons/{lexicon['id']}/pls"),
        ("PUT", f"/v1/lexicons/{lexicon['id']}"),
        ("DELETE", f"/v1/lexicons/{lexicon['id']}"),
    ]:
        response = client.open(path, method=method, json={"name": "x", "entries": []}, headers=other_user)
        assert response.status_code == 404, (method, path, response.status_code)
    # Nor can the other owner's jobs, previews or voices read it, by id or by name.
    theirs = upload_voice(client, other_user, reference_audio[0], name="thief", ref_text=reference_audio[1])
    assert theirs.status_code == 202
    for ref in (lexicon["id"], "names"):
        for path in ("/v1/jobs", "/v1/scripts/preview"):
            body = {"title": "t", "script": "Siobhan.", "voice": "thief", "lexicons": [ref]}
            response = client.post(path, json=body, headers=other_user)
            assert response.status_code == 422, response.json
            assert response.json["error"]["code"] == "lexicon_not_found"
        voice = client.put(
            f"/v1/voices/{theirs.json['id']}",
            data={"lexicons": ref},
            headers=other_user,
            content_type="multipart/form-data",
        )
        assert voice.status_code == 422
    mine = client.get(f"/v1/lexicons/{lexicon['id']}", headers=user).json
    assert mine["entry_count"] == 3


def test_a_job_reads_its_lexicons_in_order_then_the_voices_defaults(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    names = _create(client, user).json
    first = _create(
        client, user, {"name": "first", "entries": [{"grapheme": "Siobhan", "alias": "she-vaun"}]}
    ).json
    voice_default = _create(
        client, user, {"name": "voice", "entries": [{"grapheme": "Dublin", "alias": "dub-lin"}]}
    )
    voice = upload_voice(
        client, user, reference_audio[0], name="reader", ref_text=reference_audio[1], lexicons="voice"
    )
    assert voice.status_code == 202, voice.json
    assert voice.json["lexicons"] == [voice_default.json["id"]]
    script = "Siobhan flew from Dublin to NASA. Nasa is not NASA. A tomato."
    job = submit_job(client, user, "reader", script=script, lexicons=[first["id"], "names"])
    assert job.status_code == 202, job.json
    text = " ".join(_chunk_texts(app, job.json["id"]))
    assert "she-vaun" in text  # the first lexicon named wins
    assert "shiv-awn" not in text
    assert "dub-lin" in text  # then the voice's own
    assert text.count("nassa") == 2  # case-sensitive: "Nasa" stays
    assert "tomato" in text  # phoneme only: the engine cannot take it, read as written
    assert names["id"] != first["id"]
    # Deleting a lexicon takes it off the voice.
    assert client.delete(f"/v1/lexicons/{voice_default.json['id']}", headers=user).status_code == 204
    assert client.get(f"/v1/voices/{voice.json['id']}", headers=user).json["lexicons"] == []


def test_a_voices_default_lexicons_change_without_rebuilding_its_prompt(
    client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    lexicon = _create(client, user).json
    response = client.put(
        f"/v1/voices/{narrator}", data={"lexicons": "names"}, headers=user, content_type="multipart/form-data"
    )
    assert response.status_code == 200, response.json
    assert response.json["lexicons"] == [lexicon["id"]]
    assert response.json["cache_status"] in ("pending", "processing", "ready")
    cleared = client.put(
        f"/v1/voices/{narrator}", data={"lexicons": ""}, headers=user, content_type="multipart/form-data"
    )
    assert cleared.json["lexicons"] == []
    unknown = client.put(
        f"/v1/voices/{narrator}", data={"lexicons": "nope"}, headers=user, content_type="multipart/form-data"
    )
    assert unknown.status_code == 422
    assert unknown.json["error"]["code"] == "lexicon_not_found"


def test_the_preview_shows_which_entries_fired_and_warns_of_skipped_phonemes(
    client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    _create(client, user)
    body = {"script": "Siobhan saw a tomato.", "voice": narrator, "lexicons": ["names"]}
    preview = client.post("/v1/scripts/preview", json=body, headers=user)
    assert preview.status_code == 200, preview.json
    [chunk] = preview.json["chunks"]
    assert "shiv-awn" in chunk["text"]
    assert chunk["written"].startswith("Siobhan")
    assert any(f["rule"] == "lexicon:names" and f["written"] == "Siobhan" for f in chunk["fired"])
    assert preview.json["rules"].get("lexicon:names") == 1
    assert any("tomato" in w for w in preview.json["warnings"])


def test_pls_import_and_export_round_trip(client: FlaskClient, user: dict[str, str]) -> None:
    document = f"""<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" xmlns="{PLS_NS}" alphabet="ipa" xml:lang="en-GB">
  <lexeme><grapheme>W3C</grapheme><alias>World Wide Web Consortium</alias></lexeme>
  <lexeme><grapheme>Siobhan</grapheme><phoneme>ʃɪˈvɔːn</phoneme><alias>shiv-awn</alias></lexeme>
</lexicon>""".encode()
    created = client.post(
        "/v1/lexicons?name=imported&case_sensitive=true",
        data=document,
        headers=user,
        content_type="application/pls+xml",
    )
    assert created.status_code == 201, created.json
    assert created.json["language"] == "en-gb"
    assert [(e["grapheme"], e["alias"], e["case_sensitive"]) for e in created.json["entries"]] == [
        ("W3C", "World Wide Web Consortium", True),
        ("Siobhan", "shiv-awn", True),
    ]
    exported = client.get(f"/v1/lexicons/{created.json['id']}/pls", headers=user)
    assert exported.status_code == 200
    assert exported.mimetype == "application/pls+xml"
    again = client.post(
        "/v1/lexicons?name=again&case_sensitive=true",
        data=exported.get_data(),
        headers=user,
        content_type="application/pls+xml",
    )
    assert again.status_code == 201, again.json
    assert again.json["entries"] == created.json["entries"]
    # Replacing from PLS keeps the name.
    replaced = client.put(
        f"/v1/lexicons/{again.json['id']}", data=document, headers=user, content_type="application/pls+xml"
    )
    assert replaced.status_code == 200, replaced.json
    assert replaced.json["name"] == "again"


@pytest.mark.parametrize(
    ("body", "status", "field", "words"),
    [
        (
            {"name": "x", "entries": [{"grapheme": "a.*b", "alias": "x"}]},
            422,
            "entries[0].grapheme",
            "pattern",
        ),
        (
            {
                "name": "x",
                "entries": [{"grapheme": "ok", "alias": "y"}, {"grapheme": "(x|y)+", "alias": "z"}],
            },
            422,
            "entries[1].grapheme",
            "pattern",
        ),
        ({"name": "x", "entries": [{"grapheme": "word"}]}, 422, "entries[0].alias", "alias or a phoneme"),
        ({"name": "x", "entries": [{"grapheme": "w", "alias": "a"}] * 5000}, 422, "entries", "1000"),
        (
            {"name": "x", "entries": [{"grapheme": "w" * 10_000, "alias": "a"}]},
            422,
            "entries.0.grapheme",
            "100",
        ),
        ({"name": "../etc", "entries": []}, 422, "name", ""),
        (
            {"name": "x", "entries": [{"grapheme": "w", "alias": "a", "regex": True}]},
            422,
            "entries.0.regex",
            "",
        ),
    ],
)
def test_bad_lexicons_are_422_naming_the_field(
    client: FlaskClient, user: dict[str, str], body: dict[str, Any], status: int, field: str, words: str
) -> None:
    response = _create(client, user, body)
    assert response.status_code == status, response.json
    error = response.json["error"]
    text = str(error)
    assert field in text, error
    assert words in text, error


@pytest.mark.parametrize(
    ("document", "query", "status", "words"),
    [
        (
            b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaa"><!ENTITY b "&a;&a;">]>'
            b"<lexicon>&b;</lexicon>",
            "?name=x",
            422,
            "DTD",
        ),
        (
            b'<!DOCTYPE l [<!ENTITY e SYSTEM "file:///etc/passwd">]><lexicon>&e;</lexicon>',
            "?name=x",
            422,
            "DTD",
        ),
        (f"<lexicon xmlns='{PLS_NS}'/>".encode(), "", 422, "name"),
        (b"<lexicon", "?name=x", 422, "well-formed"),
        (b"<a>" + b"x" * 600_000 + b"</a>", "?name=x", 413, "larger"),
    ],
)
def test_bad_pls_documents_are_refused_naming_the_problem(
    client: FlaskClient, user: dict[str, str], document: bytes, query: str, status: int, words: str
) -> None:
    response = client.post(
        f"/v1/lexicons{query}", data=document, headers=user, content_type="application/pls+xml"
    )
    assert response.status_code == status, response.json
    assert words in response.json["error"]["message"]


def test_a_job_naming_an_unknown_lexicon_is_422(
    client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    response = submit_job(client, user, narrator, lexicons=["missing"])
    assert response.status_code == 422
    assert response.json["error"]["code"] == "lexicon_not_found"
    assert response.json["error"]["field"] == "lexicons"
