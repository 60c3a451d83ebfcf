"""A script written in another language than the job's: a warning in the preview and on the job, naming
both; none for a script in the job's language."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.unit.script.test_language_id import ENGLISH, GERMAN


def test_a_german_script_for_an_english_job_is_a_warning_in_the_preview_and_on_the_job(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    assert upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1]).status_code == 202
    body = {"voice": "narrator", "script": GERMAN}
    preview = client.post("/v1/scripts/preview", json=body, headers=user)
    assert preview.status_code == 200, preview.json
    [warning] = [w for w in preview.json["warnings"] if "reads as" in w]
    assert "German (de)" in warning
    assert "English (en)" in warning
    job = submit_job(client, user, "narrator", script=GERMAN)
    assert job.status_code == 202, job.json
    shown = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert warning in shown["warnings"]
    # said in German, nothing to warn about; in English for an English voice neither
    german = submit_job(client, user, "narrator", script=GERMAN, language="de")
    assert german.status_code == 202, german.json
    assert not [w for w in german.json["warnings"] if "reads as" in w]
    english = client.post("/v1/scripts/preview", json={**body, "script": ENGLISH}, headers=user)
    assert not [w for w in english.json["warnings"] if "reads as" in w]
