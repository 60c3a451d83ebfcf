"""A fake Audiobookshelf for tests: a real HTTP server on 127.0.0.1 speaking the two endpoints Tome calls,
as Audiobookshelf's API documents them, and recording what it is sent.

- ``POST /api/upload``: bearer token; multipart/form-data with the fields ``title``, ``author``,
  ``series``, ``library``, ``folder`` and any number of files (their part names are ignored, their file
  names kept). 401 for an unknown token, 404 for an unknown library or folder, 500 when no files or no
  title came, or when the folder ``<author>/<series>/<title>`` exists already (as the real server does).
- ``POST /api/libraries/{id}/scan``: bearer token; 200, or 404 for an unknown library.

``upload_statuses`` makes the next uploads answer those statuses instead (a 503, say); ``stall`` makes
an upload read nothing and answer nothing until the server closes.
"""

from __future__ import annotations

import email.parser
import email.policy
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The API tokens the ``abs_server`` fixture (tests/conftest.py) accepts: one owner's, and another's.
ABS_TOKEN = "abs-token-ALICE-7f3a9c"
OTHER_ABS_TOKEN = "abs-token-BOB-19be44"


@dataclass
class Upload:
    token: str | None
    fields: dict[str, str]
    files: dict[str, bytes]
    part_names: list[str]
    status: int


@dataclass
class FakeAudiobookshelf:
    tokens: set[str]
    libraries: dict[str, set[str]] = field(default_factory=lambda: {"lib_main": {"fol_books"}})
    uploads: list[Upload] = field(default_factory=list)
    scans: list[tuple[str | None, str]] = field(default_factory=list)
    upload_statuses: list[int] = field(default_factory=list)
    stall: bool = False
    folders: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                token = _bearer(self.headers.get("Authorization"))
                if self.path == "/api/upload":
                    server._upload(self, token)
                elif self.path.startswith("/api/libraries/") and self.path.endswith("/scan"):
                    server._scan(self, token, self.path.split("/")[3])
                else:
                    self._answer(404)

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            def log_message(self, *_: Any) -> None:
                pass

        self.handler = Handler
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _upload(self, request: Any, token: str | None) -> None:
        if self.stall:
            self.closing.wait(60)
            return
        length = int(request.headers.get("Content-Length", "0"))
        body = request.rfile.read(length)
        status, fields, files, names = self._accept(token, request.headers.get("Content-Type", ""), body)
        with self.lock:
            if self.upload_statuses and status == 200:
                status = self.upload_statuses.pop(0)
            if status == 200:
                folder = "/".join(
                    p for p in (fields.get("author"), fields.get("series"), fields["title"]) if p
                )
                if folder in self.folders:
                    status = 500
                self.folders.add(folder)
            self.uploads.append(Upload(token, fields, files, names, status))
        request._answer(status)

    def _accept(
        self, token: str | None, content_type: str, body: bytes
    ) -> tuple[int, dict[str, str], dict[str, bytes], list[str]]:
        fields: dict[str, str] = {}
        files: dict[str, bytes] = {}
        names: list[str] = []
        if token not in self.tokens:
            return 401, fields, files, names
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
        )
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            filename = part.get_filename()
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            if filename is None:
                fields[str(name)] = payload.decode()
            else:
                names.append(str(name))
                files[filename] = payload
        folders = self.libraries.get(fields.get("library", ""))
        if folders is None or fields.get("folder") not in folders:
            return 404, fields, files, names
        if not files or not fields.get("title"):
            return 500, fields, files, names
        return 200, fields, files, names

    def _scan(self, request: Any, token: str | None, library_id: str) -> None:
        if token not in self.tokens:
            request._answer(401)
            return
        with self.lock:
            self.scans.append((token, library_id))
        request._answer(200 if library_id in self.libraries else 404)

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


def _bearer(header: str | None) -> str | None:
    if header and header.startswith("Bearer "):
        return header[len("Bearer ") :]
    return None
