"""What gunicorn answers itself, before Flask sees the request (a request line or headers over its limits, a
malformed request), comes back in the API's JSON error shape with the security headers, as every error
the API answers does: a client parses one shape, and no HTML page is served."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.support.api_server import running_api
from webapi.headers import SECURITY_HEADERS
from worker.config import Settings
from worker.processes import api_command

pytestmark = pytest.mark.e2e

HOST = "Host: 127.0.0.1\r\n"
# (what is sent, the status and code expected); the limits are api_command's (request line 4,094 bytes,
# 50 header fields of at most 8,190 bytes).
CASES = [
    (f"GET /v1/jobs?q={'x' * 5000} HTTP/1.1\r\n{HOST}\r\n", 414, "uri_too_long"),
    (f"GET /{'a' * 4100} HTTP/1.1\r\n{HOST}\r\n", 414, "uri_too_long"),
    (f"GET /healthz HTTP/1.1\r\n{HOST}X-Big: {'b' * 9000}\r\n\r\n", 431, "headers_too_large"),
    (
        "GET /healthz HTTP/1.1\r\n" + HOST + "".join(f"X-H{i}: v\r\n" for i in range(60)) + "\r\n",
        431,
        "headers_too_large",
    ),
    ("BLAH\r\n\r\n", 400, "bad_request"),
    (f"GET /healthz HTTP/9.9\r\n{HOST}\r\n", 400, "bad_request"),
    (f"GET /healthz HTTP/1.1\r\n{HOST}Bad Header: x\r\n\r\n", 400, "bad_request"),
    (f"GET /\x1b[31m HTTP/1.1\r\n{HOST}\r\n", 400, "bad_request"),
    (
        f"POST /v1/jobs HTTP/1.1\r\n{HOST}Transfer-Encoding: bogus\r\n\r\n0\r\n\r\n",
        501,
        "not_implemented",
    ),
]


def _exchange(port: int, raw: str) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` on a fresh connection and read the whole answer (the server closes after an error)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw.encode("latin-1"))
        data = sock.makefile("rb").read()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def test_errors_gunicorn_answers_itself_are_json(settings: Settings, tmp_path: Path) -> None:
    with running_api(settings, tmp_path, lambda bind: api_command(bind, workers=1)) as server:
        for raw, status, code in CASES:
            got, headers, body = _exchange(server.port, raw)
            where = raw[:60]
            assert got == status, (where, got, body[:200])
            assert headers["content-type"] == "application/json", (where, headers)
            assert int(headers["content-length"]) == len(body), where
            error = json.loads(body)["error"]
            assert error["code"] == code, (where, error)
            assert error["message"], where
            assert "\x1b" not in body.decode("ascii"), where  # JSON escapes what the client sent
            for name, value in SECURITY_HEADERS.items():
                assert headers[name.lower()] == value, (where, name)
        # The server still serves, and its own answers are unchanged.
        status, _, body = _exchange(server.port, f"GET /nowhere HTTP/1.1\r\n{HOST}Connection: close\r\n\r\n")
        assert status == 404
        assert json.loads(body)["error"]["code"] == "not_found"
        assert "Invalid request from ip=127.0.0.1" in server.log()  # gunicorn still logs what it refused
