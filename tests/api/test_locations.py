"""What a POST makes is named by its Location header (documented in the OpenAPI document), and that URL is
the resource: a GET of it with the same key answers it, another owner's key a 404."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from webapi.openapi import CREATES


def _get(client: FlaskClient, location: str, headers: dict[str, str]) -> dict[str, object]:
    assert location.startswith("/v1/"), location
    answer = client.get(location, headers=headers)
    assert answer.status_code == 200, answer.json
    body = answer.json
    assert isinstance(body, dict)
    return body


def test_created_voices_jobs_and_lexicons_are_named_by_their_location(
    client: FlaskClient,
    user: dict[str, str],
    other_user: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    voice = upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1])
    assert voice.status_code == 202
    assert _get(client, voice.headers["Location"], user)["id"] == voice.json["id"]

    job = submit_job(client, user, voice.json["id"])
    assert job.status_code == 202
    assert _get(client, job.headers["Location"], user)["id"] == job.json["id"]
    again = submit_job(client, {**user, "Idempotency-Key": "k1"}, voice.json["id"])
    replay = submit_job(client, {**user, "Idempotency-Key": "k1"}, voice.json["id"])
    assert replay.status_code == 202
    assert replay.headers["Location"] == again.headers["Location"] == f"/v1/jobs/{again.json['id']}"

    lexicon = client.post(
        "/v1/lexicons", json={"name": "names", "language": "en", "entries": []}, headers=user
    )
    assert lexicon.status_code == 201
    assert _get(client, lexicon.headers["Location"], user)["id"] == lexicon.json["id"]

    for made in (voice, job, lexicon):
        assert client.get(made.headers["Location"], headers=other_user).status_code == 404


def test_refusals_name_no_location(client: FlaskClient, user: dict[str, str]) -> None:
    refused = submit_job(client, user, "nobody")
    assert refused.status_code == 422
    assert "Location" not in refused.headers


def test_the_document_says_which_answers_carry_a_location(client: FlaskClient) -> None:
    paths = client.get("/openapi.json").json["paths"]
    for (method, rule), status in CREATES.items():
        path = rule.replace("<int:", "{").replace("<", "{").replace(">", "}")
        response = paths[path][method.lower()]["responses"][str(status)]
        assert response["headers"]["Location"]["schema"]["format"] == "uri-reference", (method, path)
    assert "Location" not in paths["/v1/jobs/{job_id}"]["get"]["responses"]["200"].get("headers", {})
