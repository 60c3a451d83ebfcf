from __future__ import annotations

from flask.testing import FlaskClient


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
