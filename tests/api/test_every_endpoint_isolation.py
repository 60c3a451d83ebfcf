"""Walk every endpoint the app has with a second user's key: never another owner's data.

The list of endpoints comes from the app's own URL map, so an endpoint added later is walked too (the
test fails if it does not know how to call it)."""

from __future__ import annotations

import io
import uuid
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from models import ApiKey
from tests.api.helpers import submit_job, upload_voice
from tests.support.apps import tome_of
from tests.support.audio import REFERENCE_TEXT

# /v1/links/...: authorised by its signature, not a key (tests/api/test_file_links.py walks another
# owner's attempts at it).
PUBLIC = {
    "/healthz",
    "/livez",
    "/readyz",
    "/openapi.json",
    "/static/<path:filename>",
    "/v1/links/<job_id>/<name>",
}
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/jobs"): {"json": {"title": "t", "script": "Hello.", "voice": "{voice_id}"}},
    ("POST", "/v1/voices"): {"data": {"name": "n", "ref_text": "t"}},
    ("PUT", "/v1/voices/<voice_id>"): {"data": {"ref_text": "stolen"}},
    ("POST", "/v1/admin/voices/<voice_id>/cache"): {"json": {"force": True}},
    ("POST", "/v1/admin/voice-caches/rebuild"): {"json": {"all": True}},
    ("POST", "/v1/jobs/<job_id>/cancel"): {},
    ("POST", "/v1/scripts/preview"): {"json": {"script": "Hello.", "voice": "{voice_id}"}},
    ("POST", "/v1/lexicons"): {"json": {"name": "mine", "entries": [{"grapheme": "Tome", "alias": "tohm"}]}},
    ("PUT", "/v1/lexicons/<lexicon_id>"): {"json": {"name": "stolen", "entries": []}},
    ("POST", "/v1/audio/speech"): {"json": {"input": "Hello.", "voice": "{voice_id}"}},
    ("POST", "/v1/keys/<key_id>/webhook-secret"): {"json": {"overlap_seconds": 60}},
    ("PUT", "/v1/integrations/audiobookshelf"): {"json": {"url": "http://93.184.216.34", "token": "t"}},
}
# The caller's own settings, no id in the path: answered for the caller alone (two owners' servers are
# walked in tests/api/test_audiobookshelf.py); 204 for a DELETE, 409 for a PUT without TOME_SECRET_KEY.
OWN_SETTINGS = {"/v1/integrations/audiobookshelf"}


def test_second_user_gets_404_or_403_on_every_endpoint_for_the_first_users_objects(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    other_user: dict[str, str],
    reference_audio: tuple[bytes, str],
) -> None:
    voice = upload_voice(client, user, reference_audio[0]).json
    job = submit_job(client, user, voice["id"]).json
    lexicon = client.post(
        "/v1/lexicons",
        json={"name": "names", "entries": [{"grapheme": "Tome", "alias": "tohm"}]},
        headers=user,
    ).json
    rotated = client.post("/v1/keys/current/webhook-secret", json={}, headers=user).json
    long_script = "Hello there. " * (tome_of(app).settings.limits.inline_plan_max_chars // 13 + 1)
    preview = client.post(
        "/v1/scripts/preview", json={"script": long_script, "voice": voice["id"]}, headers=user
    )
    assert preview.status_code == 202, preview.json
    ids = {
        "preview_id": preview.json["preview"],
        "key_id": rotated["key_id"],
        "voice_id": voice["id"],
        "job_id": job["id"],
        "lexicon_id": lexicon["id"],
        "name": "book.srt",
        "int:seq": "0",
    }
    walked = 0
    for rule in app.url_map.iter_rules():
        if rule.rule in PUBLIC:
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            url = rule.rule
            for name, value in ids.items():
                url = url.replace(f"<{name}>", value)
            assert "<" not in url, f"the walk does not know how to call {method} {rule.rule}"
            spec = BODIES.get((method, rule.rule), {})
            kwargs: dict[str, Any] = {"headers": other_user}
            if "json" in spec:
                kwargs["json"] = {
                    k: v.format(**ids) if isinstance(v, str) else v for k, v in spec["json"].items()
                }
            if "data" in spec:
                kwargs["data"] = {**spec["data"], "audio": (io.BytesIO(reference_audio[0]), "r.wav")}
                kwargs["content_type"] = "multipart/form-data"
            response = client.open(url, method=method, **kwargs)
            walked += 1
            takes_id = "<" in rule.rule
            if rule.rule.startswith("/v1/admin") or rule.rule == "/metrics":  # every tenant's figures
                assert response.status_code == 403, (method, url, response.status_code)
            elif takes_id:
                assert response.status_code == 404, (method, url, response.status_code)
            elif method == "POST" and rule.rule == "/v1/audio/speech":  # OpenAI's shape: unknown voice, 404
                assert response.status_code == 404, "another user's voice id is unknown to this user"
            elif method == "POST" and rule.rule in ("/v1/jobs", "/v1/scripts/preview"):
                assert response.status_code == 422, "another user's voice id is unknown to this user"
            elif rule.rule in OWN_SETTINGS:
                assert response.status_code in (200, 204, 409), (method, url, response.status_code)
            else:
                assert response.status_code in (200, 201, 202), (method, url, response.status_code)
                body = response.get_data(as_text=True)
                assert voice["id"] not in body
                assert job["id"] not in body
                assert lexicon["id"] not in body
    assert walked >= 12
    # The first user's objects are untouched.
    assert client.get(f"/v1/voices/{voice['id']}", headers=user).json["ref_text"] == REFERENCE_TEXT
    assert client.get(f"/v1/jobs/{job['id']}", headers=user).json["status"] == "queued"
    assert client.get(f"/v1/lexicons/{lexicon['id']}", headers=user).json["entries"][0]["alias"] == "tohm"
    with app.app_context():
        key = tome_of(app).sessions.get(ApiKey, uuid.UUID(rotated["key_id"]))
        assert key is not None
        assert key.webhook_secret == rotated["secret"], "the first user's secret stays"
