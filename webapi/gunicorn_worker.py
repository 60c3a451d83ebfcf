"""The API's gunicorn worker: gunicorn's gevent worker, answering the errors gunicorn finds itself, before
Flask sees the request, in the API's JSON error shape rather than gunicorn's HTML page.

Those are a request line over ``--limit-request-line`` (414), too many or too large header fields (431),
a malformed request line, method, version, header or chunked body (400), an unsupported transfer coding
(501), an ``Expect`` it cannot meet (417), and an error of gunicorn itself (500). gunicorn decides the
status, logs the error and writes the access-log line in ``Worker.handle_error``, and then writes the
answer through ``gunicorn.util.write_error``; this worker replaces that one writer, in its own process
once the worker starts, so every status and log line stays gunicorn's and only the body changes.

Serve with ``--worker-class webapi.gunicorn_worker.JsonErrorWorker`` (worker.processes.api_command and
docker-compose.yml do).
"""

from __future__ import annotations

import json
import socket
from http import HTTPStatus

from gunicorn import util
from gunicorn.workers.ggevent import GeventWorker

from webapi.headers import SECURITY_HEADERS

# The error codes of webapi.errors for the statuses gunicorn answers; others are named after their phrase.
_CODES = {500: "internal", 414: "uri_too_long", 431: "headers_too_large"}


def json_error(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 answer: the status, the security headers every answer carries, and the body
    ``{"error": {"code", "message"}}``; the connection is closed after it, as gunicorn's own. The reason
    phrase is the status's own (gunicorn passes "Bad Request" with its 501)."""
    phrase = HTTPStatus(status).phrase
    code = _CODES.get(status) or "_".join(phrase.lower().replace("-", " ").split())
    body = json.dumps({"error": {"code": code, "message": message or phrase}}).encode("ascii")
    head = [
        f"HTTP/1.1 {status} {phrase}",
        "Connection: close",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in SECURITY_HEADERS.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """``gunicorn.util.write_error``'s signature, writing :func:`json_error`."""
    util.write_nonblock(sock, json_error(status_int, mesg))


class JsonErrorWorker(GeventWorker):  # type: ignore[misc]  # gunicorn ships no type hints
    def init_process(self) -> None:
        util.write_error = write_json_error
        super().init_process()
