"""POST /v1/jobs refuses every webhook URL Tome would not call, at once, with a 422 naming the field."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from webapi.cli import mint_key
from worker.config import ConfigError, load_settings

# A documentation-free public address: only resolved (an IP literal resolves to itself), never called.
PUBLIC = "93.184.216.34"


@pytest.mark.parametrize(
    "url",
    [
        "http://[::127.0.0.1]/hook",  # IPv4-compatible IPv6
        "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped
        "http://[64:ff9b::7f00:1]/hook",  # NAT64 of 127.0.0.1
        "http://[2002:7f00:1::1]/hook",  # 6to4 of 127.0.0.1
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",  # Teredo of 127.0.0.1
        "http://[ff02::1]/hook",  # multicast
        "http://192.0.2.10/hook",  # documentation
        "http://100.64.0.1/hook",  # shared address space
        "http://127.0.0.1/hook",
        "http://10.0.0.1/hook",
        f"http://{PUBLIC}:22/hook",  # a port probe
        f"http://{PUBLIC}/ho\tok",  # urlsplit drops the tab; delivery used to raise InvalidURL forever
        f"http://{PUBLIC}/hook\n",
        f"http://{PUBLIC}/a b",
        "ftp://example.com/hook",
        "http://user:pw@example.com/hook",
    ],
)
def test_webhook_urls_tome_would_not_call_are_refused_at_submission(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], url: str
) -> None:
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    response = submit_job(client, user, "narrator", webhook_url=url)
    assert response.status_code == 422, (url, response.json)
    # Control characters (the tab, the newline) are refused by the field's own validation first.
    assert response.json["error"]["code"] in {"webhook_refused", "validation_error"}
    assert response.json["error"]["field"] == "webhook_url"


def test_a_public_url_on_a_standard_port_is_accepted(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    for url in (f"http://{PUBLIC}/hook", f"https://{PUBLIC}:443/hook", f"http://{PUBLIC}:443/hook"):
        response = submit_job(client, user, "narrator", webhook_url=url)
        assert response.status_code == 202, (url, response.json)


def test_tome_webhook_ports_widens_the_ports(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(webhook_ports="8443, 9000")
    client, user = app.test_client(), bearer(mint_key(app, owner="alice", name="t", admin=False))
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    assert submit_job(client, user, "narrator", webhook_url=f"https://{PUBLIC}:8443/h").status_code == 202
    assert submit_job(client, user, "narrator", webhook_url=f"https://{PUBLIC}:8080/h").status_code == 422


@pytest.mark.parametrize("bad", ["80,x", "0", "70000", "80;443"])
def test_a_bad_webhook_ports_setting_names_the_variable(bad: str) -> None:
    with pytest.raises(ConfigError, match="TOME_WEBHOOK_PORTS"):
        load_settings({"TOME_WEBHOOK_PORTS": bad})
